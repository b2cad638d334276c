/* ratelimit.c - the shared rate limiter: a GCRA per limit, kept in Redis and timed by TIME. */
#include "ratelimit.h"

#include "eval.h"
#include "idemlua.h"
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
 * number and its wa_id): a longer one the delivery reads itself, as without. */
#define AHEAD_CONTACT_MAX 96

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
 * ahead: KEYS sender TAT, sender pause, member[, pair TAT, pair pause][, member's turn queue];
 *       ARGV as take, with 'ahead'[, '1': with the pair's keys] -> {4} (no member, or the queue
 *       is not empty: nothing taken), else as take with the new TATs of the sender and of the
 *       pair (integers; nil where none was taken) a third and fourth: the give-back's tokens.
 *       The pair's keys are the member's (store_key_rate): known before its record is read,
 *       they are among KEYS, as is every key a script touches (Redis's scripting rules; a
 *       Redis Cluster checks, and migrates, only the keys it is given).
 * contact: as ahead with the pair's keys, the contact's key (the member's: whatsapp, its
 *       number seen valid by /v1/contacts, "<number> <wa_id>") after them, and ARGV '1' when
 *       the address is a phone number, the longest externalId: the script reads the member's
 *       number (its externalId, normalised as request_normalize_phone does: "+-() " go) and
 *       takes the slots only when the contact is that number's, and the number itself. Else
 *       (not seen valid, or known by another wa_id: paced after its check) nothing:
 *       {4, 0, nil, nil, the contact}. The contact comes fifth in every answer.
 * back: KEYS TAT[, TAT]; ARGV 'back', then for each key the TAT a take set and the limit's I:
 *       a slot goes back when nobody took one after it (its TAT is still that one).
 * pause: KEYS pause; ARGV 'pause', retry-after ms (0: the doubling one), first ms, max ms
 *       [, board channel] -> pause left in ms. A given Retry-After counts up to max ms. With a
 *       board channel, "<pause key> <ms left>" is published there (store_rate_board_new). */
static const char RATE_SCRIPT[] =
    /* BEGIN RATE_SCRIPT */
    /* What the script costs Redis is mostly its redis.calls, then each string made a number
     * (strtod) and each number made a string (printf): a key only tested is tested in one
     * EXISTS, two strings are read by one MGET, and a TAT is written by '%d', a plain integer
     * as '%.0f' wrote it (callgrind, Redis 7.0: about 3.3k instructions, where '%.0f' took 7k
     * and a number handed to redis.call, which Redis writes by '%.17g', 5.6k). */
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000000 + t[2]\n"
    "local op = ARGV[1]\n"
    "if op == 'pause' then\n"
    "  local h = redis.call('HMGET', KEYS[1], 'until', 'next')\n"
    "  local till, nxt, max = (h[1] or 0) + 0, (h[2] or ARGV[3]) + 0, ARGV[4] + 0\n"
    "  local d = ARGV[2] + 0\n"
    "  if d > max then d = max end\n"
    "  if d <= 0 then\n"
    "    if now < till then d = 0\n"
    "    else d = nxt; nxt = nxt * 2; if nxt > max then nxt = max end end\n"
    "  end\n"
    "  if now + d * 1000 > till then till = now + d * 1000 end\n"
    "  local left = math.ceil((till - now) / 1000)\n"
    "  redis.call('HSET', KEYS[1], 'until', string.format('%d', till), 'next', nxt)\n"
    "  redis.call('PEXPIRE', KEYS[1], left + nxt)\n"
    "  if ARGV[5] then redis.call('PUBLISH', ARGV[5], KEYS[1] .. ' ' .. left) end\n"
    "  return left\n"
    "end\n"
    "if op == 'back' then\n"
    "  local got = redis.call('MGET', unpack(KEYS))\n"
    "  for i = 1, #KEYS do\n"
    "    local v = ARGV[2 * i]\n"
    "    if got[i] == v then\n"
    "      local tat = v - ARGV[2 * i + 1]\n"
    "      if tat > now then\n"
    "        redis.call('SET', KEYS[i], string.format('%d', tat), 'PX',\n"
    "                   math.ceil((tat - now) / 1000) + 1)\n"
    "      else redis.call('DEL', KEYS[i]) end\n"
    "    end\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local ahead = op == 'ahead' or op == 'contact'\n"
    /* the pair's keys: 3 and 4 for a take, 4 and 5 (after the member's) for an ahead. held:
     * a pause key may be there (else neither is: no HGET) */
    "local pk, pair, wa, lag, bulk, held = 3, #KEYS >= 4, false, 0, false, true\n"
    "if ahead then\n"
    "  pk, pair = 4, ARGV[7] == '1'\n"
    "  local ck = op == 'contact' and 6\n"
    "  local q = KEYS[(pair and 6 or 4) + (ck and 1 or 0)]\n"
    "  local m, sp, pp, rec, wa_read = KEYS[3], KEYS[2], pair and KEYS[5]\n"
    "  if ck then\n"
    "    local r = redis.call('MGET', m, KEYS[ck])\n"
    "    rec, wa_read = r[1], r[2]\n"
    "    if not rec then return {4, 0} end\n"
    "  end\n"
    /* one EXISTS counts the member w times, each pause key once (fewer than w in all) and
     * the turn queue (a list: there while not empty) 2w times: a member there and no queue
     * is a count from w to 2w - 1, and past w a pause key is there */
    "  local w, n = pp and 3 or 2\n"
    "  if pp then\n"
    "    n = q and redis.call('EXISTS', m, m, m, sp, pp, q, q, q, q, q, q)\n"
    "      or redis.call('EXISTS', m, m, m, sp, pp)\n"
    "  else\n"
    "    n = q and redis.call('EXISTS', m, m, sp, q, q, q, q) or redis.call('EXISTS', m, m, sp)\n"
    "  end\n"
    "  if n < w or n >= 2 * w then return {4, 0} end\n"
    "  held = n > w\n"
    /* the member's number, as op.c's member_address makes the delivery's of it, and its
     * contact, as deliver.c's check reads it: seen valid for that number as it is, or not */
    "  if ck then\n"
    "    local ok, r = pcall(cjson.decode, rec)\n"
    "    local addr = ok and type(r) == 'table' and r.externalId\n"
    "    if type(addr) ~= 'string' or #addr > ARGV[9] + 0 then return {4, 0} end\n"
    "    if ARGV[8] == '1' then addr = string.gsub(addr, '[%+%-%(%) ]', '') end\n"
    "    wa = wa_read\n"
    "    if wa ~= addr .. ' ' .. addr then return {4, 0, false, false, wa} end\n"
    "  end\n"
    "else\n"
    "  if pair then held = redis.call('EXISTS', KEYS[2], KEYS[4]) > 0 end\n"
    "  if ARGV[7] then bulk, lag = true, ARGV[7] * 1000 end\n"
    "end\n"
    /* each limit's clock (now, or the end of its pause), then its slot: at (TAT - (B-1)*I) at
     * the earliest, the TAT at least the clock (a broadcast's: at least lag before it) */
    "local s_int, p_int = ARGV[2] + 0, pair and ARGV[4] + 0\n"
    "local s_at, p_at = now, now\n"
    "if held then\n"
    "  local p = redis.call('HGET', KEYS[2], 'until')\n"
    "  if p and p + 0 > now then s_at = p + 0 end\n"
    "  if pair then\n"
    "    p = redis.call('HGET', KEYS[pk + 1], 'until')\n"
    "    if p and p + 0 > now then p_at = p + 0 end\n"
    "  end\n"
    "end\n"
    "local s_tat, p_tat, sv, pv\n"
    "if s_int > 0 and pair and p_int > 0 then\n"
    "  local r = redis.call('MGET', KEYS[1], KEYS[pk])\n"
    "  sv, pv = r[1], r[2]\n"
    "elseif s_int > 0 then sv = redis.call('GET', KEYS[1])\n"
    "elseif pair and p_int > 0 then pv = redis.call('GET', KEYS[pk]) end\n"
    "if s_int > 0 then\n"
    "  s_tat = (sv or 0) + 0\n"
    "  if s_tat < s_at - lag then s_tat = s_at end\n"
    "  local x = s_tat - (ARGV[3] - 1) * s_int\n"
    "  if x > s_at then s_at = x end\n"
    "end\n"
    "if pair and p_int > 0 then\n"
    "  p_tat = (pv or 0) + 0\n"
    "  if p_tat < p_at then p_tat = p_at end\n"
    "  local x = p_tat - (ARGV[5] - 1) * p_int\n"
    "  if x > p_at then p_at = x end\n"
    "end\n"
    "local at = s_at > p_at and s_at or p_at\n"
    "local wait = at - now\n"
    "if wait > ARGV[6] * 1000 then\n"
    "  if ahead then return {2, wait, false, false, wa} end\n"
    "  return {2, wait}\n"
    "end\n"
    "if bulk and p_at <= s_at and wait > 0 then return {2, wait} end\n"
    /* a slot taken moves its TAT to max(TAT, at) + I, kept until then (a broadcast's: lag
     * longer). The sender's slot is at its TAT or before (a broadcast's made up after it,
     * when it passed at most lag ago): its next TAT is one interval after the one it had */
    "local p_token, v, s_token = false, wait > 0 and 1 or 0, false\n"
    "if p_tat then\n"
    "  p_token = (p_tat > at and p_tat or at) + p_int\n"
    "  local px = math.ceil((p_token - now) / 1000)\n"
    "  redis.call('SET', KEYS[pk], string.format('%d', p_token), 'PX', (px > 0 and px or 0) + 1)\n"
    "end\n"
    "if p_at > s_at and s_tat then v = 3\n"
    "elseif s_tat then\n"
    "  s_token = s_tat + s_int\n"
    "  local px = math.ceil((s_token - now + lag) / 1000)\n"
    "  redis.call('SET', KEYS[1], string.format('%d', s_token), 'PX', (px > 0 and px or 0) + 1)\n"
    "end\n"
    "if ahead then return {v, wait, s_token, p_token, wa} end\n"
    "return {v, wait}\n"
    /* END RATE_SCRIPT */
    ;

static _Thread_local store_script_t rate_script = STORE_SCRIPT(RATE_SCRIPT);

/* An ahead with an Idempotency-Key's begin (store_rate_take_ahead): KEYS the ahead's, with the
 * member's turn queue, then the record; ARGV the ahead's nine (a pair's three "0" without one),
 * then the begin's four. The begin runs first: unless it says run, its answer is the script's
 * (a string first) and no slot is taken; else the answer is the ahead's. */
#define AHEAD_BEGIN_LUA                                                                            \
    "local bk, bn = KEYS[#KEYS], #ARGV " IDEM_BEGIN_LUA("bk", "ARGV[bn - 3]", "ARGV[bn - 2]",      \
                                                        "ARGV[bn - 1]", "ARGV[bn]", "")
static _Thread_local char ahead_begin_text[sizeof(AHEAD_BEGIN_LUA) - 1 + sizeof(RATE_SCRIPT)];
static _Thread_local store_script_t ahead_begin_script;

static store_script_t *ahead_begin(void)
{
    if (ahead_begin_script.text == NULL) {
        memcpy(ahead_begin_text, AHEAD_BEGIN_LUA, sizeof(AHEAD_BEGIN_LUA) - 1);
        memcpy(ahead_begin_text + sizeof(AHEAD_BEGIN_LUA) - 1, RATE_SCRIPT, sizeof(RATE_SCRIPT));
        ahead_begin_script.text = ahead_begin_text;
        ahead_begin_script.len = sizeof(ahead_begin_text) - 1;
    }
    return &ahead_begin_script;
}

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
    /* the pair's TAT key (in keys), NULL when no pair's slot was asked for */
    const char *pair_key;
    /* the member's contact read with the slots (AHEAD_CONTACT_MAX bytes in keys), NULL when
     * not asked for; "" until one came */
    char *contact;
    store_idem_call_t *begin; /* riding with the slots until their answer came, else NULL */
    char keys[];              /* the sender's TAT key, then the pair's and the contact */
};

static store_rate_call_t *rate_eval(store_t *st, rate_kind_t kind, const char *const *keys,
                                    int nkeys, const char *const *args, int nargs,
                                    store_idem_call_t *begin, store_rate_cb *cb, void *arg,
                                    size_t extra, store_status_t *status);

/* The slots taken ahead go back (those taken: the sender's, the pair's), and the call with
 * them. A pair's slot lost would hold its user a whole pair interval (6 s on WhatsApp). */
static void ahead_give_back(store_rate_call_t *c)
{
    char nums[4][NUMFMT_DEC_SIZE];
    const char *kv[2], *args[5] = {"back"}, *tat_keys[2] = {c->keys, c->pair_key};
    int n = 0;

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
        rate_eval(c->st, RATE_BACK, kv, n, args, 1 + 2 * n, NULL, NULL, NULL, 0, &ignored);
    }
    free(c);
}

/* An ahead's answer past its verdict: the tokens of the slots taken (nil: none) and the
 * contact read. */
static void ahead_read(store_rate_call_t *c, const redisReply *reply)
{
    const redisReply *contact = reply->elements > 4 ? reply->element[4] : NULL;

    for (size_t i = 2; i < reply->elements && i < 4; i++)
        if (reply->element[i]->type == REDIS_REPLY_INTEGER)
            c->tat_us[i - 2] = reply->element[i]->integer;
    if (c->contact != NULL && contact != NULL && contact->type == REDIS_REPLY_STRING &&
        contact->len < AHEAD_CONTACT_MAX) {
        memcpy(c->contact, contact->str, contact->len);
        c->contact[contact->len] = '\0';
    }
}

static void rate_reply(redisReply *reply, void *arg)
{
    store_rate_call_t *c = arg;
    store_status_t st = STORE_UNAVAILABLE;
    store_rate_verdict_t verdict = STORE_RATE_TOO_LATE;
    int64_t wait_us = 0;

    c->ev = NULL;
    if (c->begin != NULL) {
        /* the ahead's answer (its verdict first): the begin said run; else the begin's */
        int ran = reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
                  reply->element[0]->type == REDIS_REPLY_INTEGER;
        store_idem_ridden(c->begin, reply, ran);
        c->begin = NULL;
        if (!ran && reply != NULL && reply->type == REDIS_REPLY_ARRAY) {
            st = STORE_OK; /* nothing taken: the request does not run now */
            verdict = STORE_RATE_SKIP;
            reply = NULL;
        }
    }
    if (reply != NULL && c->kind == RATE_PAUSE && reply->type == REDIS_REPLY_INTEGER) {
        st = STORE_OK;
        wait_us = reply->integer * 1000; /* the pause's length, in ms */
    } else if (reply != NULL && c->kind != RATE_PAUSE && reply->type == REDIS_REPLY_ARRAY &&
               reply->elements >= 2 && reply->elements <= 5 &&
               reply->element[0]->type == REDIS_REPLY_INTEGER &&
               reply->element[1]->type == REDIS_REPLY_INTEGER &&
               reply->element[0]->integer >= STORE_RATE_GO &&
               reply->element[0]->integer <= STORE_RATE_SKIP) {
        st = STORE_OK;
        verdict = (store_rate_verdict_t)reply->element[0]->integer;
        wait_us = reply->element[1]->integer;
        if (c->kind == RATE_AHEAD)
            ahead_read(c, reply);
    }
    if (c->kind == RATE_AHEAD && c->cb == NULL) {
        c->got = st;
        if (c->orphan) {
            ahead_give_back(c);
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
                                    store_idem_call_t *begin, store_rate_cb *cb, void *arg,
                                    size_t extra, store_status_t *status)
{
    const char *words[7 + 1 + 9 + 4]; /* an ahead's keys and args at most, a begin's */
    const char *begin_words[5];
    store_rate_call_t *c = calloc(1, sizeof(*c) + extra);
    int n = 0, rc;

    if (c == NULL) {
        *status = STORE_BUSY;
        return NULL;
    }
    if (begin != NULL && store_idem_ride_words(begin, begin_words) < 0)
        begin = NULL;
    for (int i = 0; i < nkeys; i++)
        words[n++] = keys[i];
    if (begin != NULL)
        words[n++] = begin_words[0];
    for (int i = 0; i < nargs; i++)
        words[n++] = args[i];
    for (int i = nargs; begin != NULL && i < 9; i++)
        words[n++] = "0"; /* no pair's */
    for (int i = 1; begin != NULL && i < 5; i++)
        words[n++] = begin_words[i];
    c->cb = cb;
    c->arg = arg;
    c->kind = kind;
    c->st = st;
    if ((rc = store_eval(st, begin != NULL ? ahead_begin() : &rate_script, nkeys + (begin != NULL),
                         n, words, NULL, rate_reply, c, &c->ev)) != REDISC_OK) {
        *status = rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
        free(c);
        return NULL;
    }
    if (begin != NULL) {
        store_idem_riding(begin);
        c->begin = begin;
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
static store_rate_call_t *rate_take(store_t *st, const char *channel_id, const char *member_id,
                                    int pair_held, const ratelimit_policy_t *policy,
                                    int64_t max_wait_ms, int64_t lag_ms, store_rate_cb *cb,
                                    void *arg, store_status_t *status)
{
    const char *prefix = store_prefix(st);
    char keys[4][STORE_KEY_MAX], nums[6][NUMFMT_DEC_SIZE];
    const char *kv[4] = {keys[0], keys[1], keys[2], keys[3]};
    const char *args[7] = {"take"};
    int nkeys = member_id != NULL && !pair_held ? 4 : 2;

    if (store_key_rate(keys[0], STORE_KEY_MAX, prefix, channel_id, NULL) < 0 ||
        store_key_rate_pause(keys[1], STORE_KEY_MAX, prefix, channel_id, NULL) < 0 ||
        (nkeys == 4 &&
         (store_key_rate(keys[2], STORE_KEY_MAX, prefix, channel_id, member_id) < 0 ||
          store_key_rate_pause(keys[3], STORE_KEY_MAX, prefix, channel_id, member_id) < 0))) {
        *status = STORE_BAD_RECORD; /* an id too long for a key */
        return NULL;
    }
    take_args(args, nums, policy, max_wait_ms);
    if (lag_ms >= 0)
        args[6] = numfmt_dec(nums[5], lag_ms);
    return rate_eval(st, RATE_TAKE, kv, nkeys, args, lag_ms >= 0 ? 7 : 6, NULL, cb, arg, 0, status);
}

store_rate_call_t *store_rate_take(store_t *st, const char *channel_id, const char *member_id,
                                   int pair_held, const ratelimit_policy_t *policy,
                                   int64_t max_wait_ms, store_rate_cb *cb, void *arg,
                                   store_status_t *status)
{
    return rate_take(st, channel_id, member_id, pair_held, policy, max_wait_ms, -1, cb, arg,
                     status);
}

store_rate_call_t *store_rate_take_bulk(store_t *st, const char *channel_id, const char *member_id,
                                        int pair_held, const ratelimit_policy_t *policy,
                                        int64_t max_wait_ms, int64_t lag_ms, store_rate_cb *cb,
                                        void *arg, store_status_t *status)
{
    return rate_take(st, channel_id, member_id, pair_held, policy, max_wait_ms,
                     lag_ms > 0 ? lag_ms : 0, cb, arg, status);
}

store_rate_call_t *store_rate_take_ahead(store_t *st, const char *channel_id, const char *member_id,
                                         unsigned pair, int turn, store_idem_call_t *begin,
                                         const ratelimit_policy_t *policy, int64_t max_wait_ms,
                                         store_status_t *status)
{
    const char *prefix = store_prefix(st);
    char keys[7][STORE_KEY_MAX], nums[6][NUMFMT_DEC_SIZE];
    const char *kv[7] = {keys[0], keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]};
    const char *args[10] = {pair & STORE_AHEAD_CONTACT ? "contact" : "ahead"};
    int nkeys = pair ? 5 : 3, nargs = 6, plen = 0;
    int len = store_key_rate(keys[0], STORE_KEY_MAX, prefix, channel_id, NULL);
    size_t clen = pair & STORE_AHEAD_CONTACT ? AHEAD_CONTACT_MAX : 0;
    int bad = len < 0 ||
              store_key_rate_pause(keys[1], STORE_KEY_MAX, prefix, channel_id, NULL) < 0 ||
              store_key_member(keys[2], STORE_KEY_MAX, prefix, channel_id, member_id) < 0;
    store_rate_call_t *c;

    /* the pair's keys and the contact's are the member's: named here, as every key the script
     * touches, in the slot of the member's record */
    if (pair) {
        plen = store_key_rate(keys[3], STORE_KEY_MAX, prefix, channel_id, member_id) + 1;
        bad = bad || plen <= 0 ||
              store_key_rate_pause(keys[4], STORE_KEY_MAX, prefix, channel_id, member_id) < 0;
        if (clen > 0 &&
            store_key_contact(keys[nkeys++], STORE_KEY_MAX, prefix, channel_id, member_id) < 0)
            bad = 1;
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
        args[nargs++] = "1";
        args[nargs++] = pair & STORE_AHEAD_PHONE ? "1" : "0";
        args[nargs++] = numfmt_dec(nums[5], STORE_RATE_ADDRESS_MAX - 1);
    }
    /* the begin's key goes after the turn queue's, which the ahead finds by its place */
    c = rate_eval(st, RATE_AHEAD, kv, nkeys, args, nargs, turn ? begin : NULL, NULL, NULL,
                  (size_t)len + 1 + (size_t)plen + clen, status);
    if (c != NULL) {
        c->interval_us[0] = policy->sender.interval_us;
        c->interval_us[1] = policy->pair.interval_us;
        memcpy(c->keys, keys[0], (size_t)len + 1);
        if (pair)
            c->pair_key = memcpy(c->keys + len + 1, keys[3], (size_t)plen);
        if (clen > 0)
            c->contact = c->keys + len + 1 + plen; /* "" (calloc) until it came */
    }
    return c;
}

int store_rate_ahead_pair(const store_rate_call_t *call)
{
    return call->pair_key != NULL;
}

const char *store_rate_ahead_contact(const store_rate_call_t *call)
{
    return call->in && call->got == STORE_OK && call->contact != NULL && call->contact[0] != '\0'
               ? call->contact
               : NULL;
}

int store_rate_ahead_use(store_rate_call_t *c, int64_t late_ms, store_rate_cb *cb, void *arg,
                         store_rate_verdict_t *verdict, int64_t *wait_us)
{
    int64_t left;

    if (!c->in) {
        c->cb = cb; /* its answer goes to cb as a take's */
        c->arg = arg;
        return 2;
    }
    if (c->got != STORE_OK || c->verdict == STORE_RATE_SKIP) {
        free(c);
        return 0;
    }
    /* the slot's time (or, too late, the time it was refused), as from now */
    left = c->wait_us - (clock_mono_us() - c->in_us);
    if (left < -late_ms * 1000) { /* a send this late could crowd the next slots' sends */
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

store_rate_call_t *store_rate_pause(store_t *st, const char *channel_id, const char *member_id,
                                    int64_t retry_after_ms, store_rate_cb *cb, void *arg,
                                    store_status_t *status)
{
    char key[STORE_KEY_MAX], after[NUMFMT_DEC_SIZE], first[NUMFMT_DEC_SIZE], max[NUMFMT_DEC_SIZE];
    char board[BOARD_CHANNEL_MAX];
    const char *kv[1] = {key};
    const char *args[5] = {"pause"};

    if (store_key_rate_pause(key, sizeof(key), store_prefix(st), channel_id, member_id) < 0) {
        *status = STORE_BAD_RECORD;
        return NULL;
    }
    args[1] = numfmt_dec(after, retry_after_ms > 0 ? retry_after_ms : 0);
    args[2] = numfmt_dec(first, RATE_PAUSE_FIRST_MS);
    args[3] = numfmt_dec(max, RATE_PAUSE_MAX_MS);
    args[4] = board_channel(st, board);
    return rate_eval(st, RATE_PAUSE, kv, 1, args, 5, NULL, cb, arg, 0, status);
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
static int64_t board_until(store_rate_board_t *b, const char *channel_id, const char *member_id)
{
    char key[STORE_KEY_MAX];
    int len = store_key_rate_pause(key, sizeof(key), store_prefix(b->st), channel_id, member_id);

    return len < 0 ? 0 : *board_slot(b, key, (size_t)len);
}

int64_t store_rate_board_paused(store_rate_board_t *b, const char *channel_id,
                                const char *member_id)
{
    int64_t until, now;

    if (b == NULL)
        return 0;
    until = board_until(b, channel_id, NULL);
    if (member_id != NULL) {
        int64_t pair = board_until(b, channel_id, member_id);
        if (pair > until)
            until = pair;
    }
    now = clock_mono_us() / 1000;
    return until > now ? until - now : 0;
}
