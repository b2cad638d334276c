/* ratelimit.c - the shared rate limiter: a GCRA per limit, kept in Redis and timed by TIME. */
#include "ratelimit.h"

#include "eval.h"
#include "../core/clock.h"
#include "../core/hash.h"
#include "../json/numfmt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RATE_PAUSE_FIRST_MS 1000
#define RATE_PAUSE_MAX_MS   60000
#define BOARD_CHANNEL       "ratepauses" /* after the prefix: where every pause is announced */
#define BOARD_SLOTS         1024         /* a board's slots (8 KiB); power of 2 */
/* A contact read with the slots ahead is handed over up to this long, its NUL included (a
 * wa_id is a phone number): a longer one the delivery reads itself, as without. */
#define AHEAD_CONTACT_MAX 48

/* The only copy of the limiter script: tests/integration/test_ratelimit.py reads the C strings
 * between the two marker comments and runs them against a real redis-server.
 *
 * Times are microseconds of Redis's TIME (never a worker's clock). A limit of interval I and
 * burst B keeps its theoretical arrival time (TAT) in its key: a call may go at
 * max(now, TAT - (B-1)*I), and moves the TAT to max(TAT, that time) + I. A pause (a hash:
 * "until", and "next", the next pause's length in ms) holds the limit's clock until "until".
 *
 * take: KEYS sender TAT, sender pause[, pair TAT, pair pause];
 *       ARGV 'take', sender I, sender B, pair I, pair B, max wait ms[, lag ms]
 *       -> {0 go | 1 wait | 2 too late | 3 retake, wait us}. With a lag (a broadcast's
 *       message), the sender's slot is taken only when it is due: a later one is not taken
 *       (2, as too late, with its distance), so that no slot waits reserved ahead of the
 *       conversational calls that come meanwhile; a slot that passed at most lag ms ago is
 *       still taken at its own time (the next one stays an interval after it), so that an
 *       ask that comes late loses no pace (its TAT key is kept that much longer for the next
 *       one). A pair's later slot is taken as without.
 * ahead: KEYS sender TAT, sender pause, member[, the channel's fence][, member's turn queue];
 *       ARGV as take, with 'ahead'[, the pair's TAT key and pause key without the address, '1'
 *       when the address is a phone number, the longest externalId]: with them (and the
 *       fence), the pair's slot too, of the member's address, which the script reads (its
 *       record's externalId, a phone number normalised as request_normalize_phone does: the
 *       five characters "+-() " go) and makes the pair's keys of. Those keys (and the
 *       contact's) are not among KEYS: they are known only once the record is read, and share
 *       the channel's hash tag (one slot). The fence, a key never written, is: while the slot
 *       migrates, a Redis Cluster refuses a script with a key missing (TRYAGAIN, as it refuses
 *       most takes then: their pause keys rarely exist), so that the script never reads a key
 *       of the address on a node that does not hold it yet (it would find it empty, and take
 *       a slot already taken). -> {4} (no member, no usable address, or the queue is not
 *       empty: nothing taken), else as take with the new TATs of the sender and of the pair
 *       (integers; nil where none was taken) a third and fourth: the give-back's tokens, and
 *       the address fifth.
 * contact: as ahead with the pair's, then the contact's key without the address (whatsapp: a
 *       number's wa_id, cached once /v1/contacts saw it valid): its value comes sixth, and the
 *       slots are taken only when it is the address itself. A number not cached takes nothing
 *       (it is checked first), one known by another wa_id neither (its pair is the wa_id's):
 *       {4, 0, nil, nil, the address, the value}.
 * back: KEYS TAT[, TAT]; ARGV 'back', then for each key the TAT a take set and the limit's I:
 *       a slot goes back when nobody took one after it (its TAT is still that one).
 * pause: KEYS pause; ARGV 'pause', retry-after ms (0: the doubling one), first ms, max ms
 *       [, board channel] -> pause left in ms. A given Retry-After counts up to max ms. With a
 *       board channel, "<pause key> <ms left>" is published there (store_rate_board_new). */
static const char RATE_SCRIPT[] =
    /* BEGIN RATE_SCRIPT */
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local function us(x) return string.format('%.0f', x) end\n"
    "local function ms(x) return math.ceil(x / 1000) end\n"
    "if ARGV[1] == 'pause' then\n"
    "  local till = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')\n"
    "  local nxt = tonumber(redis.call('HGET', KEYS[1], 'next') or ARGV[3])\n"
    "  local d = math.min(tonumber(ARGV[2]), tonumber(ARGV[4]))\n"
    "  if d <= 0 then\n"
    "    if now < till then d = 0 else d = nxt; nxt = math.min(nxt * 2, tonumber(ARGV[4])) end\n"
    "  end\n"
    "  if now + d * 1000 > till then till = now + d * 1000 end\n"
    "  redis.call('HSET', KEYS[1], 'until', us(till), 'next', nxt)\n"
    "  redis.call('PEXPIRE', KEYS[1], ms(till - now) + nxt)\n"
    "  if ARGV[5] then redis.call('PUBLISH', ARGV[5], KEYS[1] .. ' ' .. ms(till - now)) end\n"
    "  return ms(till - now)\n"
    "end\n"
    "if ARGV[1] == 'back' then\n"
    "  for i, k in ipairs(KEYS) do\n"
    "    if redis.call('GET', k) == ARGV[2 * i] then\n"
    "      local tat = tonumber(ARGV[2 * i]) - tonumber(ARGV[2 * i + 1])\n"
    "      if tat > now then redis.call('SET', k, us(tat), 'PX', ms(tat - now) + 1)\n"
    "      else redis.call('DEL', k) end\n"
    "    end\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local wa = ARGV[1] == 'contact' or nil\n"
    "local ahead = wa or ARGV[1] == 'ahead'\n"
    /* the pair's keys: 3 and 4 for a take, made of the member's address for an ahead */
    "local p_key, p_pause, pair, addr = KEYS[3], KEYS[4], #KEYS >= 4, false\n"
    "if ahead then\n"
    "  local q = KEYS[ARGV[7] and 5 or 4]\n"
    "  local m = ARGV[7] and redis.call('GET', KEYS[3]) or redis.call('EXISTS', KEYS[3]) == 1\n"
    "  if not m or (q and redis.call('LLEN', q) > 0) then return {4, 0} end\n"
    "  pair = ARGV[7] ~= nil\n"
    /* the member's address, as op.c's member_address makes the delivery's of it */
    "  if pair then\n"
    "    local ok, rec = pcall(cjson.decode, m)\n"
    "    addr = ok and type(rec) == 'table' and rec.externalId\n"
    "    if type(addr) ~= 'string' or #addr > tonumber(ARGV[10]) then return {4, 0} end\n"
    "    if ARGV[9] == '1' then addr = string.gsub(addr, '[%+%-%(%) ]', '') end\n"
    "    if addr == '' then return {4, 0} end\n"
    "    p_key, p_pause = ARGV[7] .. addr, ARGV[8] .. addr\n"
    "  end\n"
    /* the number's contact, as deliver.c's check reads it: seen valid (cached) or not */
    "  if wa then\n"
    "    wa = redis.call('GET', ARGV[11] .. addr)\n"
    "    if wa ~= addr then return {4, 0, false, false, addr, wa} end\n"
    "  end\n"
    "end\n"
    "local function limit(tat_key, pause_key, interval, burst, lag)\n"
    "  local t0 = now\n"
    "  local p = tonumber(redis.call('HGET', pause_key, 'until') or '0')\n"
    "  if p > t0 then t0 = p end\n"
    "  if interval <= 0 then return t0, nil end\n"
    "  local tat = tonumber(redis.call('GET', tat_key) or '0')\n"
    "  if tat < t0 - lag then tat = t0 end\n"
    "  return math.max(t0, tat - (burst - 1) * interval), tat\n"
    "end\n"
    "local function take(tat_key, tat, interval, at, lag)\n"
    "  if tat == nil then return end\n"
    "  local next_tat = math.max(tat, at) + interval\n"
    "  redis.call('SET', tat_key, us(next_tat), 'PX', math.max(ms(next_tat - now + lag), 0) + 1)\n"
    "  return next_tat\n"
    "end\n"
    "local s_int, p_int = tonumber(ARGV[2]), tonumber(ARGV[4])\n"
    "local bulk = not ahead and ARGV[7]\n"
    "local lag = bulk and tonumber(bulk) * 1000 or 0\n"
    "local s_at, s_tat = limit(KEYS[1], KEYS[2], s_int, tonumber(ARGV[3]), lag)\n"
    "local p_at, p_tat = now, nil\n"
    "if pair then p_at, p_tat = limit(p_key, p_pause, p_int, tonumber(ARGV[5]), 0) end\n"
    "local at = math.max(s_at, p_at)\n"
    "local wait = at - now\n"
    "if wait > tonumber(ARGV[6]) * 1000 then\n"
    "  if ahead then return {2, wait, false, false, addr, wa} end\n"
    "  return {2, wait}\n"
    "end\n"
    "if bulk and p_at <= s_at and wait > 0 then return {2, wait} end\n"
    "local p_token = false\n"
    "if pair then p_token = take(p_key, p_tat, p_int, at, 0) or false end\n"
    "local v, s_token = wait > 0 and 1 or 0, false\n"
    "if p_at > s_at and s_tat ~= nil then v = 3\n"
    "else s_token = take(KEYS[1], s_tat, s_int, s_tat ~= nil and s_tat < at and s_tat or at, lag)\n"
    "  or false end\n"
    "if ahead then return {v, wait, s_token, p_token, addr, wa} end\n"
    "return {v, wait}\n"
    /* END RATE_SCRIPT */
    ;

static _Thread_local store_script_t rate_script = STORE_SCRIPT(RATE_SCRIPT);

#define BOARD_CHANNEL_MAX (STORE_PREFIX_MAX + sizeof(BOARD_CHANNEL))

/* The channel on which every pause is announced (store_rate_board_new). */
static const char *board_channel(const store_t *st, char buf[BOARD_CHANNEL_MAX])
{
    snprintf(buf, BOARD_CHANNEL_MAX, "%s" BOARD_CHANNEL, store_prefix(st));
    return buf;
}

typedef enum { RATE_TAKE, RATE_PAUSE, RATE_AHEAD, RATE_BACK } rate_kind_t;

/* Owned by the store's caller from creation until its callback has run or it is cancelled. A
 * slot taken ahead keeps its answer until it is used (store_rate_ahead_use) or let go; let go
 * before its answer came, it waits for that answer to give the slot back (orphan). */
struct store_rate_call {
    store_rate_cb *cb;
    void *arg;
    store_eval_t *ev;
    rate_kind_t kind; /* RATE_PAUSE: the reply is one integer */
    /* RATE_AHEAD: */
    store_t *st;
    unsigned in : 1, orphan : 1;
    store_status_t got;
    store_rate_verdict_t verdict;
    int64_t wait_us, in_us; /* in_us: when the answer came (monotonic) */
    int64_t interval_us[2]; /* of the sender's limit and the pair's */
    int64_t tat_us[2];      /* the TATs the slots set: 0 where none was taken */
    /* the pair's TAT key without its address (in keys), NULL when no pair's slot was asked for */
    const char *pair_base;
    /* the member's address the script read (STORE_RATE_ADDRESS_MAX bytes in keys), "" until
     * it came; used before it came (expect), the message's, which the answer's must be */
    char *recipient;
    unsigned expect : 1;
    /* the address's contact read with the slots (AHEAD_CONTACT_MAX bytes in keys), NULL when
     * not asked for; "" until one came */
    char *contact;
    char keys[]; /* the sender's TAT key, the pair's base, its address and the contact */
};

static store_rate_call_t *rate_eval(store_t *st, rate_kind_t kind, const char *const *keys,
                                    int nkeys, const char *const *args, int nargs,
                                    store_rate_cb *cb, void *arg, size_t extra,
                                    store_status_t *status);

/* The slots taken ahead go back (those taken: the sender's, the pair's), and the call with
 * them. A pair's slot lost would hold its user a whole pair interval (6 s on WhatsApp). */
static void ahead_give_back(store_rate_call_t *c)
{
    char nums[4][NUMFMT_DEC_SIZE], pair_key[STORE_KEY_MAX];
    const char *kv[2], *args[5] = {"back"}, *tat_keys[2] = {c->keys, NULL};
    int n = 0;

    if (c->pair_base != NULL && c->recipient[0] != '\0' &&
        snprintf(pair_key, sizeof(pair_key), "%s%s", c->pair_base, c->recipient) <
            (int)sizeof(pair_key))
        tat_keys[1] = pair_key;
    for (int i = 0; c->got == STORE_OK && i < 2; i++) {
        if (c->tat_us[i] <= 0 || tat_keys[i] == NULL)
            continue;
        kv[n] = tat_keys[i];
        args[1 + 2 * n] = numfmt_dec(nums[2 * n], c->tat_us[i]);
        args[2 + 2 * n] = numfmt_dec(nums[2 * n + 1], c->interval_us[i]);
        n++;
    }
    if (n > 0) {
        store_status_t ignored;
        rate_eval(c->st, RATE_BACK, kv, n, args, 1 + 2 * n, NULL, NULL, 0, &ignored);
    }
    free(c);
}

/* An ahead's answer past its verdict: the tokens of the slots taken, the address they were
 * taken for and the contact read. 0 when that address is not the one expected (expect): the
 * slots are not the message's. */
static int ahead_read(store_rate_call_t *c, const redisReply *reply)
{
    const redisReply *addr = reply->elements > 4 ? reply->element[4] : NULL;
    const redisReply *contact = reply->elements > 5 ? reply->element[5] : NULL;
    int same = 1;

    for (size_t i = 2; i < reply->elements && i < 4; i++)
        if (reply->element[i]->type == REDIS_REPLY_INTEGER) /* else nil: none taken */
            c->tat_us[i - 2] = reply->element[i]->integer;
    if (c->pair_base != NULL && addr != NULL && addr->type == REDIS_REPLY_STRING &&
        addr->len < STORE_RATE_ADDRESS_MAX) {
        same = !c->expect || (strlen(c->recipient) == addr->len &&
                              memcmp(c->recipient, addr->str, addr->len) == 0);
        memcpy(c->recipient, addr->str, addr->len); /* what the give-back's key is made of */
        c->recipient[addr->len] = '\0';
    }
    if (c->contact != NULL && contact != NULL && contact->type == REDIS_REPLY_STRING &&
        contact->len < AHEAD_CONTACT_MAX) {
        memcpy(c->contact, contact->str, contact->len);
        c->contact[contact->len] = '\0';
    }
    return same;
}

static void rate_reply(redisReply *reply, void *arg)
{
    store_rate_call_t *c = arg;
    store_status_t st = STORE_UNAVAILABLE;
    store_rate_verdict_t verdict = STORE_RATE_TOO_LATE;
    int64_t wait_us = 0;
    int same = 1;

    c->ev = NULL;
    if (reply != NULL && c->kind == RATE_PAUSE && reply->type == REDIS_REPLY_INTEGER) {
        st = STORE_OK;
        wait_us = reply->integer * 1000; /* the pause's length, in ms */
    } else if (reply != NULL && c->kind != RATE_PAUSE && reply->type == REDIS_REPLY_ARRAY &&
               reply->elements >= 2 && reply->elements <= 6 &&
               reply->element[0]->type == REDIS_REPLY_INTEGER &&
               reply->element[1]->type == REDIS_REPLY_INTEGER &&
               reply->element[0]->integer >= STORE_RATE_GO &&
               reply->element[0]->integer <= STORE_RATE_SKIP) {
        st = STORE_OK;
        verdict = (store_rate_verdict_t)reply->element[0]->integer;
        wait_us = reply->element[1]->integer;
        if (c->kind == RATE_AHEAD)
            same = ahead_read(c, reply);
    }
    if (c->kind == RATE_AHEAD && (c->cb == NULL || !same)) {
        store_rate_cb *cb = c->cb;
        void *cb_arg = c->arg;
        c->got = st;
        if (c->orphan || !same) {
            ahead_give_back(c);
            if (cb != NULL) /* used before it came, for another address: none taken for it */
                cb(cb_arg, STORE_OK, STORE_RATE_SKIP, 0);
            return;
        }
        c->in = 1; /* kept for store_rate_ahead_use */
        c->verdict = verdict;
        c->wait_us = wait_us;
        c->in_us = clock_mono_us();
        return;
    }
    if (c->cb != NULL)
        c->cb(c->arg, st, verdict, wait_us);
    free(c);
}

/* Sends the script with keys and args; NULL with *status when nothing was sent. Every key
 * shares the channel's hash tag: one slot in a cluster. extra: bytes after the call (its key). */
static store_rate_call_t *rate_eval(store_t *st, rate_kind_t kind, const char *const *keys,
                                    int nkeys, const char *const *args, int nargs,
                                    store_rate_cb *cb, void *arg, size_t extra,
                                    store_status_t *status)
{
    const char *words[5 + 11]; /* an ahead's keys and args at most */
    store_rate_call_t *c = calloc(1, sizeof(*c) + extra);
    int n = 0, rc;

    if (c == NULL) {
        *status = STORE_BUSY;
        return NULL;
    }
    for (int i = 0; i < nkeys; i++)
        words[n++] = keys[i];
    for (int i = 0; i < nargs; i++)
        words[n++] = args[i];
    c->cb = cb;
    c->arg = arg;
    c->kind = kind;
    c->st = st;
    if ((rc = store_eval(st, &rate_script, nkeys, n, words, NULL, rate_reply, c, &c->ev)) !=
        REDISC_OK) {
        *status = rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
        free(c);
        return NULL;
    }
    *status = STORE_OK;
    return c;
}

/* The take's ARGV after its word: the policy's numbers and the longest wait. */
static void take_args(const char *args[6], char nums[5][NUMFMT_DEC_SIZE],
                      const ratelimit_policy_t *policy, int64_t max_wait_ms)
{
    args[1] = numfmt_dec(nums[0], policy->sender.interval_us);
    args[2] = numfmt_dec(nums[1], policy->sender.burst);
    args[3] = numfmt_dec(nums[2], policy->pair.interval_us);
    args[4] = numfmt_dec(nums[3], policy->pair.burst);
    args[5] = numfmt_dec(nums[4], max_wait_ms < 0 ? 0 : max_wait_ms);
}

/* store_rate_take, and with lag_ms >= 0 store_rate_take_bulk. */
static store_rate_call_t *rate_take(store_t *st, const char *channel_id, const char *recipient_id,
                                    int pair_held, const ratelimit_policy_t *policy,
                                    int64_t max_wait_ms, int64_t lag_ms, store_rate_cb *cb,
                                    void *arg, store_status_t *status)
{
    const char *prefix = store_prefix(st);
    char keys[4][STORE_KEY_MAX], nums[6][NUMFMT_DEC_SIZE];
    const char *kv[4] = {keys[0], keys[1], keys[2], keys[3]};
    const char *args[7] = {"take"};
    int nkeys = recipient_id != NULL && !pair_held ? 4 : 2;

    if (store_key_rate(keys[0], STORE_KEY_MAX, prefix, channel_id, NULL) < 0 ||
        store_key_rate_pause(keys[1], STORE_KEY_MAX, prefix, channel_id, NULL) < 0 ||
        (nkeys == 4 &&
         (store_key_rate(keys[2], STORE_KEY_MAX, prefix, channel_id, recipient_id) < 0 ||
          store_key_rate_pause(keys[3], STORE_KEY_MAX, prefix, channel_id, recipient_id) < 0))) {
        *status = STORE_BAD_RECORD; /* an id too long for a key */
        return NULL;
    }
    take_args(args, nums, policy, max_wait_ms);
    if (lag_ms >= 0)
        args[6] = numfmt_dec(nums[5], lag_ms);
    return rate_eval(st, RATE_TAKE, kv, nkeys, args, lag_ms >= 0 ? 7 : 6, cb, arg, 0, status);
}

store_rate_call_t *store_rate_take(store_t *st, const char *channel_id, const char *recipient_id,
                                   int pair_held, const ratelimit_policy_t *policy,
                                   int64_t max_wait_ms, store_rate_cb *cb, void *arg,
                                   store_status_t *status)
{
    return rate_take(st, channel_id, recipient_id, pair_held, policy, max_wait_ms, -1, cb, arg,
                     status);
}

store_rate_call_t *store_rate_take_bulk(store_t *st, const char *channel_id,
                                        const char *recipient_id, int pair_held,
                                        const ratelimit_policy_t *policy, int64_t max_wait_ms,
                                        int64_t lag_ms, store_rate_cb *cb, void *arg,
                                        store_status_t *status)
{
    return rate_take(st, channel_id, recipient_id, pair_held, policy, max_wait_ms,
                     lag_ms > 0 ? lag_ms : 0, cb, arg, status);
}

store_rate_call_t *store_rate_take_ahead(store_t *st, const char *channel_id, const char *member_id,
                                         unsigned pair, int turn, const ratelimit_policy_t *policy,
                                         int64_t max_wait_ms, store_status_t *status)
{
    const char *prefix = store_prefix(st);
    char keys[5][STORE_KEY_MAX], bases[3][STORE_KEY_MAX], nums[6][NUMFMT_DEC_SIZE];
    const char *kv[5] = {keys[0], keys[1], keys[2], keys[3], keys[4]};
    const char *args[11] = {pair & STORE_AHEAD_CONTACT ? "contact" : "ahead"};
    int nkeys = 3, nargs = 6, blen = 0;
    int len = store_key_rate(keys[0], STORE_KEY_MAX, prefix, channel_id, NULL);
    size_t alen = pair ? STORE_RATE_ADDRESS_MAX : 0, clen = 0;
    int bad = len < 0 ||
              store_key_rate_pause(keys[1], STORE_KEY_MAX, prefix, channel_id, NULL) < 0 ||
              store_key_member(keys[2], STORE_KEY_MAX, prefix, channel_id, member_id) < 0;
    store_rate_call_t *c;

    /* the pair's keys (and the contact's) without the address: the script appends it */
    if (pair) {
        bad = bad || store_key_rate_fence(keys[nkeys++], STORE_KEY_MAX, prefix, channel_id) < 0;
        blen = store_key_rate(bases[0], STORE_KEY_MAX, prefix, channel_id, "") + 1;
        bad = bad || blen <= 0 ||
              store_key_rate_pause(bases[1], STORE_KEY_MAX, prefix, channel_id, "") < 0 ||
              ((pair & STORE_AHEAD_CONTACT) &&
               store_key_contact(bases[2], STORE_KEY_MAX, prefix, channel_id, "") < 0);
        clen = pair & STORE_AHEAD_CONTACT ? AHEAD_CONTACT_MAX : 0;
    }
    /* the member's turn queue shares the sender's slot on one server only (store_turn_keys) */
    if (store_redis(st) == NULL)
        turn = 0;
    if (turn && store_key_turns(keys[nkeys++], STORE_KEY_MAX, prefix, channel_id, member_id) < 0)
        bad = 1;
    if (bad) {
        *status = STORE_BAD_RECORD;
        return NULL;
    }
    take_args(args, nums, policy, max_wait_ms);
    if (pair) {
        args[nargs++] = bases[0];
        args[nargs++] = bases[1];
        args[nargs++] = pair & STORE_AHEAD_PHONE ? "1" : "0";
        args[nargs++] = numfmt_dec(nums[5], STORE_RATE_ADDRESS_MAX - 1);
        if (pair & STORE_AHEAD_CONTACT)
            args[nargs++] = bases[2];
    }
    c = rate_eval(st, RATE_AHEAD, kv, nkeys, args, nargs, NULL, NULL,
                  (size_t)len + 1 + (size_t)blen + alen + clen, status);
    if (c != NULL) {
        c->interval_us[0] = policy->sender.interval_us;
        c->interval_us[1] = policy->pair.interval_us;
        memcpy(c->keys, keys[0], (size_t)len + 1);
        if (pair) {
            c->pair_base = memcpy(c->keys + len + 1, bases[0], (size_t)blen);
            c->recipient = c->keys + len + 1 + blen; /* "" (calloc) until it came */
            if (clen > 0)
                c->contact = c->recipient + alen;
        }
    }
    return c;
}

int store_rate_ahead_pair(const store_rate_call_t *call)
{
    return call->pair_base != NULL;
}

const char *store_rate_ahead_recipient(const store_rate_call_t *call)
{
    return call->in && call->got == STORE_OK && call->recipient != NULL &&
                   call->recipient[0] != '\0'
               ? call->recipient
               : NULL;
}

const char *store_rate_ahead_contact(const store_rate_call_t *call)
{
    return call->in && call->got == STORE_OK && call->contact != NULL && call->contact[0] != '\0'
               ? call->contact
               : NULL;
}

int store_rate_ahead_use(store_rate_call_t *c, const char *to, int64_t late_ms, store_rate_cb *cb,
                         void *arg, store_rate_verdict_t *verdict, int64_t *wait_us)
{
    int64_t left;

    if (!c->in) {
        c->cb = cb; /* its answer goes to cb as a take's */
        c->arg = arg;
        if (c->pair_base != NULL) { /* the answer's address must be to ("": none will) */
            c->expect = 1;
            if (strlen(to) < STORE_RATE_ADDRESS_MAX)
                strcpy(c->recipient, to);
        }
        return 2;
    }
    if (c->got != STORE_OK || c->verdict == STORE_RATE_SKIP) {
        free(c);
        return 0;
    }
    /* the slot's time (or, too late, the time it was refused), as from now */
    left = c->wait_us - (clock_mono_us() - c->in_us);
    /* a pair's slot serves a message to its address only (the record changed between the
     * script's read and the member's); a send this late could crowd the next slots' sends */
    if ((c->pair_base != NULL && strcmp(c->recipient, to) != 0) || left < -late_ms * 1000) {
        ahead_give_back(c);
        return 0;
    }
    /* too late and the pair's retake say so as they were (the retake's wait from now) */
    *verdict = c->verdict == STORE_RATE_TOO_LATE || c->verdict == STORE_RATE_RETAKE ? c->verdict
               : left > 0 ? STORE_RATE_WAIT
                          : STORE_RATE_GO;
    *wait_us = c->verdict == STORE_RATE_TOO_LATE ? c->wait_us : left > 0 ? left : 0;
    free(c);
    return 1;
}

store_rate_call_t *store_rate_pause(store_t *st, const char *channel_id, const char *recipient_id,
                                    int64_t retry_after_ms, store_rate_cb *cb, void *arg,
                                    store_status_t *status)
{
    char key[STORE_KEY_MAX], after[NUMFMT_DEC_SIZE], first[NUMFMT_DEC_SIZE], max[NUMFMT_DEC_SIZE];
    char board[BOARD_CHANNEL_MAX];
    const char *kv[1] = {key};
    const char *args[5] = {"pause"};

    if (store_key_rate_pause(key, sizeof(key), store_prefix(st), channel_id, recipient_id) < 0) {
        *status = STORE_BAD_RECORD;
        return NULL;
    }
    args[1] = numfmt_dec(after, retry_after_ms > 0 ? retry_after_ms : 0);
    args[2] = numfmt_dec(first, RATE_PAUSE_FIRST_MS);
    args[3] = numfmt_dec(max, RATE_PAUSE_MAX_MS);
    args[4] = board_channel(st, board);
    return rate_eval(st, RATE_PAUSE, kv, 1, args, 5, cb, arg, 0, status);
}

void store_rate_cancel(store_rate_call_t *call)
{
    if (call == NULL)
        return;
    if (call->kind == RATE_AHEAD) {
        if (call->in) {
            ahead_give_back(call);
        } else { /* its answer says what to give back */
            call->cb = NULL;
            call->orphan = 1;
        }
        return;
    }
    store_eval_cancel(call->ev);
    free(call);
}

/* ---- the board: pauses heard of, without a round trip ---- */

/* Owned by its creator; store_rate_board_free lets it go (before its store). */
struct store_rate_board {
    store_t *st;
    redisc_sub_t *sub;
    /* by the pause key's hash: the latest end heard of, in monotonic ms. Keys that share a slot
     * share an end: a send may look again in Redis for nothing, never miss a pause. */
    int64_t until_ms[BOARD_SLOTS];
};

static int64_t *board_slot(store_rate_board_t *b, const char *key, size_t len)
{
    return &b->until_ms[hash_fnv1a(key, len) & (BOARD_SLOTS - 1)];
}

/* "<pause key> <ms left>", as the pause script publishes it. */
static void on_board_news(void *arg, const char *msg, size_t len)
{
    store_rate_board_t *b = arg;
    const char *sp = msg != NULL ? memrchr(msg, ' ', len) : NULL;
    int64_t left = 0, until, *slot;

    if (sp == NULL || sp == msg || sp + 1 == msg + len)
        return; /* (re)subscribed, or not ours: nothing to note */
    for (const char *p = sp + 1; p < msg + len; p++) {
        if (*p < '0' || *p > '9' || left > RATE_PAUSE_MAX_MS)
            return;
        left = left * 10 + (*p - '0');
    }
    until = clock_mono_us() / 1000 + left;
    slot = board_slot(b, msg, (size_t)(sp - msg));
    if (until > *slot)
        *slot = until;
}

store_rate_board_t *store_rate_board_new(store_t *st)
{
    char channel[BOARD_CHANNEL_MAX];
    store_rate_board_t *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->st = st;
    if ((b->sub = store_watch_key(st, board_channel(st, channel), on_board_news, b)) == NULL) {
        free(b);
        return NULL;
    }
    return b;
}

void store_rate_board_free(store_rate_board_t *b)
{
    if (b == NULL)
        return;
    store_unwatch(b->sub);
    free(b);
}

/* The end heard of for one pause key, or 0. */
static int64_t board_until(store_rate_board_t *b, const char *channel_id, const char *recipient_id)
{
    char key[STORE_KEY_MAX];
    int len = store_key_rate_pause(key, sizeof(key), store_prefix(b->st), channel_id, recipient_id);

    return len < 0 ? 0 : *board_slot(b, key, (size_t)len);
}

int64_t store_rate_board_paused(store_rate_board_t *b, const char *channel_id,
                                const char *recipient_id)
{
    int64_t until, now;

    if (b == NULL)
        return 0;
    until = board_until(b, channel_id, NULL);
    if (recipient_id != NULL) {
        int64_t pair = board_until(b, channel_id, recipient_id);
        if (pair > until)
            until = pair;
    }
    now = clock_mono_us() / 1000;
    return until > now ? until - now : 0;
}
