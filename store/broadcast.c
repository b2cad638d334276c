/* broadcast.c - broadcasts' records and sets in Redis (broadcast.h). A broadcast's keys share the
 * channel's hash tag; queuing its members writes outbox records, which name the broadcast's
 * keys for the outbox's scripts (store/outbox.c). Those scripts and the enqueue reach keys of
 * two slots: broadcasts, like the outbox's blocking reads, need one Redis server. Scripts that
 * take a slice of ids go as EVAL with every id a word (store_eval carries 16 words). */
#include "broadcast.h"

#include "../json/numfmt.h"
#include "eval.h"

#include <stdlib.h>
#include <string.h>

#define NOW_MS "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "

/* A broadcast that ended (done, or cancelled) with a statusCallback: an entry of the outbox's
 * stream (shard 0's: store_bc_callback_stream) names it, 'k' its id and 'h' its channel, in
 * the script that ended it; whichever instance reads the entry posts the callback
 * (gateway/outbox.c), and another takes it over when that one dies. ARGV entry: the active
 * entry, "<channel>\t<id>". */
#define CALLBACK_FN                                                                                \
    "local function callback_entry(rec, stream, entry) "                                           \
    "if (redis.call('HGET', rec, 'cb') or '') == '' then return end "                              \
    "local ch, id = string.match(entry, '^(.*)\t(.*)$') "                                          \
    "redis.call('XADD', stream, '*', 'k', id, 'h', ch) end "

/* KEYS record, todo, taking, sending; ARGV app, body, callback, channel, keep_ms. */
const char store_bc_create_script[] =
    NOW_MS "redis.call('DEL', KEYS[2], KEYS[3], KEYS[4]) "
           "redis.call('HSET', KEYS[1], 'app', ARGV[1], 'body', ARGV[2], 'cb', ARGV[3], 'ch', "
           "ARGV[4], 'state', 'accepting', 'total', 0, 'sent', 0, 'failed', 0, 'unknown', 0, "
           "'cancelled', 0, 'inflight', 0, 'created', now, 'updated', now) "
           "redis.call('PEXPIRE', KEYS[1], ARGV[5]) return {1, ''}";

/* KEYS record, todo; ARGV keep_ms, member key base, ids... Every id is checked before any is
 * added: a refused accept is deleted whole anyway. */
const char store_bc_add_members_script[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'accepting' then return {-1, ''} end "
    "for i = 3, #ARGV do if redis.call('EXISTS', ARGV[2] .. ARGV[i]) == 0 then "
    "return {0, ARGV[i]} end end "
    "redis.call('SADD', KEYS[2], unpack(ARGV, 3)) redis.call('PEXPIRE', KEYS[2], ARGV[1]) "
    "return {#ARGV - 2, ''}";

/* KEYS record, todo, tag; ARGV keep_ms, cursor, count. */
const char store_bc_add_tag_script[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'accepting' then return {-1, ''} end "
    "local r = redis.call('SSCAN', KEYS[3], ARGV[2], 'COUNT', ARGV[3]) "
    "if #r[2] > 0 then redis.call('SADD', KEYS[2], unpack(r[2])) "
    "redis.call('PEXPIRE', KEYS[2], ARGV[1]) end return {#r[2], r[1]}";

/* KEYS record, todo; ARGV keep_ms, recipient key base, member key base, then per recipient
 * its id, a new member id, a new member record: the get-or-create of a sendResponses by
 * recipientId (store.c), for each. */
const char store_bc_add_recipients_script[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'accepting' then return {-1, ''} end "
    "local n = 0 for i = 4, #ARGV, 3 do "
    "local id = redis.call('GET', ARGV[2] .. ARGV[i]) "
    "if not id or redis.call('EXISTS', ARGV[3] .. id) == 0 then id = ARGV[i + 1] "
    "redis.call('SET', ARGV[2] .. ARGV[i], id) redis.call('SET', ARGV[3] .. id, ARGV[i + 2]) end "
    "redis.call('SADD', KEYS[2], id) n = n + 1 end "
    "redis.call('PEXPIRE', KEYS[2], ARGV[1]) return {n, ''}";

/* KEYS record, todo, channel index, active, callback stream; ARGV keep_ms, channel, active
 * entry. */
const char store_bc_finish_script[] = NOW_MS CALLBACK_FN
    "if redis.call('HGET', KEYS[1], 'state') ~= 'accepting' then return {-1, ''} end "
    "local n = redis.call('SCARD', KEYS[2]) local state = n > 0 and 'running' or 'done' "
    "redis.call('HSET', KEYS[1], 'state', state, 'total', n, 'updated', now) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[1]) "
    "if n > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[1]) "
    "redis.call('SADD', KEYS[4], ARGV[3]) redis.call('PUBLISH', KEYS[4], ARGV[3]) "
    "else callback_entry(KEYS[1], KEYS[5], ARGV[3]) end "
    "redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[1]) return {n, state}";

/* KEYS record, todo, sending. */
const char store_bc_status_script[] =
    "local r = redis.call('HMGET', KEYS[1], 'app', 'state', 'total', 'sent', 'failed', "
    "'unknown', 'cancelled', 'created', 'updated', 'cb') "
    "if not r[1] then return {} end "
    "for i = 1, 10 do r[i] = r[i] or '' end "
    "r[11] = redis.call('SCARD', KEYS[3]) return r";

/* KEYS record, todo, sending, active, callback stream; ARGV app, active entry. What is not
 * queued is cancelled at once; what is queued is refused when its attempt starts (the outbox's
 * start script). */
const char store_bc_cancel_script[] = NOW_MS CALLBACK_FN
    "local r = redis.call('HMGET', KEYS[1], 'app', 'state') "
    "if not r[1] or r[1] ~= ARGV[1] then return {-1, ''} end "
    "if r[2] == 'running' then local n = redis.call('SCARD', KEYS[2]) "
    "redis.call('DEL', KEYS[2]) redis.call('HINCRBY', KEYS[1], 'cancelled', n) "
    "redis.call('HSET', KEYS[1], 'state', 'cancelled', 'updated', now) "
    "redis.call('SREM', KEYS[4], ARGV[2]) callback_entry(KEYS[1], KEYS[5], ARGV[2]) end "
    "return {redis.call('SCARD', KEYS[3]), r[2]}";

/* KEYS record, todo, taking, channel, active, callback stream; ARGV max, window, lease_ms,
 * keep_ms, member key base, active entry. Members taken and not confirmed within the lease
 * (their taker died) are taken again first; then new ones while fewer than window are in
 * flight. A take that finds the broadcast done drops it from the running ones, once in all,
 * and queues its callback. */
static const char TAKE_SCRIPT[] = NOW_MS CALLBACK_FN
    "local s = redis.call('HMGET', KEYS[1], 'state', 'inflight', 'body', 'app') "
    "if s[1] ~= 'running' then local ended = redis.call('SREM', KEYS[5], ARGV[6]) "
    "if ended == 1 and s[1] == 'done' then callback_entry(KEYS[1], KEYS[6], ARGV[6]) end "
    "return {s[1] or 'gone', ended} end "
    "redis.call('PEXPIRE', KEYS[1], ARGV[4]) redis.call('PEXPIRE', KEYS[2], ARGV[4]) "
    "local ids, max = {}, tonumber(ARGV[1]) "
    "local t = redis.call('HGETALL', KEYS[3]) "
    "for i = 1, #t, 2 do if #ids < max and tonumber(t[i + 1]) < now - tonumber(ARGV[3]) "
    "then ids[#ids + 1] = t[i] end end "
    "local room = math.min(tonumber(ARGV[2]) - tonumber(s[2]), max - #ids) "
    "if room > 0 then local more = redis.call('SPOP', KEYS[2], room) "
    "for _, id in ipairs(more) do ids[#ids + 1] = id end "
    "redis.call('HINCRBY', KEYS[1], 'inflight', #more) end "
    "if #ids == 0 then return {room > 0 and 'empty' or 'full'} end "
    "for _, id in ipairs(ids) do redis.call('HSET', KEYS[3], id, now) end "
    "redis.call('PEXPIRE', KEYS[3], ARGV[4]) "
    "local out = {'take', s[3], s[4], redis.call('GET', KEYS[4]) or ''} "
    "for _, id in ipairs(ids) do out[#out + 1] = id "
    "out[#out + 1] = redis.call('GET', ARGV[5] .. id) or '' end return out";

/* KEYS stream, record; ARGV keep_ms, ttl_ms, app, channel, sending, todo, active, active
 * entry, then per request: its record, the member's order key, its id, the member id, its
 * body. The outbox's accept for each (store/outbox.c ACCEPT_SCRIPT), with the broadcast's
 * keys in the record; a request queued already (its member taken again) is skipped, and one
 * whose broadcast was cancelled meanwhile is counted cancelled instead. */
static const char ENQUEUE_SCRIPT[] =
    NOW_MS "local running = redis.call('HGET', KEYS[2], 'state') == 'running' local n = 0 "
           "for i = 9, #ARGV, 5 do if redis.call('EXISTS', ARGV[i]) == 0 then "
           "if not running then redis.call('HINCRBY', KEYS[2], 'cancelled', 1) "
           "redis.call('HINCRBY', KEYS[2], 'inflight', -1) else "
           "local seq = redis.call('HINCRBY', ARGV[i + 1], 'n', 1) "
           "redis.call('PEXPIRE', ARGV[i + 1], ARGV[1]) "
           "redis.call('HSET', ARGV[i], 'app', ARGV[3], 'body', ARGV[i + 4], 'ch', ARGV[4], "
           "'mb', ARGV[i + 3], 'cb', '', 'seq', seq, 'status', 'queued', 'attempts', 0, "
           "'created', now, 'updated', now, 'next', 0, 'ends', now + ARGV[2], 'bc', KEYS[2], "
           "'bs', ARGV[5], 'bt', ARGV[6]) "
           "redis.call('PEXPIRE', ARGV[i], ARGV[1]) "
           "redis.call('XADD', KEYS[1], '*', 'r', ARGV[i + 2], 'o', ARGV[i + 1]) n = n + 1 "
           "end end end return {n, ''}";

typedef enum { C_PLAIN, C_STATUS, C_TAKE } call_kind_t;

/* Owned by the store from its start until its callback has run or it is cancelled. */
struct store_bc_call {
    call_kind_t kind;
    void (*cb)(void);
    void *arg;
    store_t *st;
    store_cmd_t *cmd;
};

void store_bc_cancel(store_bc_call_t *call)
{
    if (call == NULL)
        return;
    store_command_cancel(call->st, call->cmd);
    free(call);
}

static void take_reply(store_bc_call_t *c, store_status_t st, const redisReply *reply)
{
    store_bc_take_t t = {0};
    const char **ids = NULL, **recs = NULL;
    size_t *lens = NULL;

    if (st == STORE_OK && (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0))
        st = STORE_BAD_RECORD;
    if (st == STORE_OK) {
        t.state = store_eval_str(reply->element[0], NULL);
        t.ended = reply->elements == 2 && store_eval_int(reply->element[1]) == 1;
        if (strcmp(t.state, "take") == 0) {
            if (reply->elements < 4 || (reply->elements - 4) % 2 != 0) {
                st = STORE_BAD_RECORD;
            } else {
                t.n = (reply->elements - 4) / 2;
                ids = calloc(t.n + 1, sizeof(*ids));
                recs = calloc(t.n + 1, sizeof(*recs));
                lens = calloc(t.n + 1, sizeof(*lens));
                if (ids == NULL || recs == NULL || lens == NULL)
                    st = STORE_UNAVAILABLE;
                t.body = store_eval_str(reply->element[1], NULL);
                t.app = store_eval_str(reply->element[2], NULL);
                t.channel = store_eval_str(reply->element[3], NULL);
                for (size_t i = 0; st == STORE_OK && i < t.n; i++) {
                    ids[i] = store_eval_str(reply->element[4 + 2 * i], NULL);
                    recs[i] = store_eval_str(reply->element[5 + 2 * i], &lens[i]);
                }
                t.members = ids;
                t.records = recs;
                t.record_lens = lens;
            }
        }
    }
    ((store_bc_take_cb *)c->cb)(c->arg, st, st == STORE_OK ? &t : NULL);
    free(ids);
    free(recs);
    free(lens);
}

static void status_reply(store_bc_call_t *c, store_status_t st, const redisReply *reply)
{
    store_bc_status_t s = {0};

    if (st == STORE_OK && reply->type != REDIS_REPLY_ARRAY)
        st = STORE_BAD_RECORD;
    else if (st == STORE_OK && reply->elements == 0)
        st = STORE_NOT_FOUND;
    else if (st == STORE_OK && reply->elements != 11)
        st = STORE_BAD_RECORD;
    if (st == STORE_OK) {
        s.app = store_eval_str(reply->element[0], NULL);
        s.state = store_eval_str(reply->element[1], NULL);
        s.total = store_eval_int(reply->element[2]);
        s.sent = store_eval_int(reply->element[3]);
        s.failed = store_eval_int(reply->element[4]);
        s.unknown = store_eval_int(reply->element[5]);
        s.cancelled = store_eval_int(reply->element[6]);
        s.created_ms = store_eval_int(reply->element[7]);
        s.updated_ms = store_eval_int(reply->element[8]);
        s.callback = store_eval_str(reply->element[9], NULL);
        s.sending = store_eval_int(reply->element[10]);
    }
    ((store_bc_status_cb *)c->cb)(c->arg, st, st == STORE_OK ? &s : NULL);
}

static void on_reply(redisReply *reply, void *arg)
{
    store_bc_call_t *c = arg;
    store_status_t st =
        reply == NULL || reply->type == REDIS_REPLY_ERROR ? STORE_UNAVAILABLE : STORE_OK;

    switch (c->kind) {
    case C_TAKE:
        take_reply(c, st, reply);
        break;
    case C_STATUS:
        status_reply(c, st, reply);
        break;
    case C_PLAIN: {
        int64_t n = 0;
        const char *text = "";
        if (st == STORE_OK && reply->type == REDIS_REPLY_NIL) {
            st = STORE_NOT_FOUND;
        } else if (st == STORE_OK && reply->type == REDIS_REPLY_STRING) {
            text = reply->str;
        } else if (st == STORE_OK && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) {
            n = store_eval_int(reply->element[0]);
            text = store_eval_str(reply->element[1], NULL);
        } else if (st == STORE_OK && reply->type == REDIS_REPLY_ARRAY) {
            /* SMEMBERS: the lines, joined */
            size_t len = 0;
            char *all;
            for (size_t i = 0; i < reply->elements; i++)
                len += strlen(store_eval_str(reply->element[i], NULL)) + 1;
            if ((all = malloc(len + 1)) == NULL) {
                ((store_bc_cb *)c->cb)(c->arg, STORE_UNAVAILABLE, 0, "");
                break;
            }
            len = 0;
            for (size_t i = 0; i < reply->elements; i++) {
                const char *s = store_eval_str(reply->element[i], NULL);
                memcpy(all + len, s, strlen(s));
                len += strlen(s);
                all[len++] = '\n';
            }
            all[len] = '\0';
            ((store_bc_cb *)c->cb)(c->arg, STORE_OK, (int64_t)reply->elements, all);
            free(all);
            break;
        } else if (st == STORE_OK) {
            st = STORE_BAD_RECORD;
        }
        ((store_bc_cb *)c->cb)(c->arg, st, n, text);
        break;
    }
    }
    free(c);
}

/* Sends argv (argv[0] "EVAL" or a command; key routes it) for a call of kind. */
static store_bc_call_t *send(store_t *st, call_kind_t kind, void (*cb)(void), void *arg,
                             const char *key, int argc, const char **argv, const size_t *lens,
                             store_status_t *status)
{
    store_bc_call_t *c = calloc(1, sizeof(*c));
    int rc;

    if (c == NULL) {
        *status = STORE_BUSY;
        return NULL;
    }
    c->kind = kind;
    c->cb = cb;
    c->arg = arg;
    c->st = st;
    rc = store_command(st, key, on_reply, c, argc, argv, lens, &c->cmd);
    if (rc != REDISC_OK) {
        free(c);
        *status = rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
        return NULL;
    }
    return c;
}

/* The broadcast's keys: record, todo, taking, sending. -1 when they do not fit. */
static int bc_keys(store_t *st, const char *channel_id, const char *id, char keys[4][STORE_KEY_MAX])
{
    const char *prefix = store_prefix(st);

    return store_key_broadcast(keys[0], STORE_KEY_MAX, prefix, channel_id, id) < 0 ||
                   store_key_broadcast_set(keys[1], STORE_KEY_MAX, prefix, channel_id, id, "todo") <
                       0 ||
                   store_key_broadcast_set(keys[2], STORE_KEY_MAX, prefix, channel_id, id,
                                           "taking") < 0 ||
                   store_key_broadcast_set(keys[3], STORE_KEY_MAX, prefix, channel_id, id,
                                           "sending") < 0
               ? -1
               : 0;
}

#define FAIL_KEYS(status)                                                                          \
    do {                                                                                           \
        *(status) = STORE_BAD_RECORD;                                                              \
        return NULL;                                                                               \
    } while (0)

#define PLAIN(cb) C_PLAIN, (void (*)(void))(cb)

store_bc_call_t *store_bc_create(store_t *st, const char *channel_id, const char *id,
                                 const char *app, const char *body, size_t body_len,
                                 const char *callback, int64_t keep_ms, store_bc_cb *cb, void *arg,
                                 store_status_t *status)
{
    char k[4][STORE_KEY_MAX], keep[NUMFMT_DEC_SIZE];

    if (bc_keys(st, channel_id, id, k) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {
            "EVAL",     store_bc_create_script,   "4", k[0], k[1], k[2], k[3], app, body, callback,
            channel_id, numfmt_dec(keep, keep_ms)};
        size_t lens[12];
        for (int i = 0; i < 12; i++)
            lens[i] = i == 8 ? body_len : strlen(argv[i]);
        return send(st, PLAIN(cb), arg, k[0], 12, argv, lens, status);
    }
}

/* EVAL script with keys and the words head..., then items: argv built on the heap. */
static store_bc_call_t *send_slice(store_t *st, call_kind_t kind, void (*cb)(void), void *arg,
                                   const char *script, int nkeys, const char *const *keys,
                                   int nhead, const char *const *head, size_t nitems,
                                   const char *const *items, store_status_t *status)
{
    size_t argc = 3 + (size_t)nkeys + (size_t)nhead + nitems, i = 0;
    const char **argv = malloc(argc * sizeof(*argv));
    char nk[NUMFMT_DEC_SIZE];
    store_bc_call_t *c;

    if (argv == NULL) {
        *status = STORE_BUSY;
        return NULL;
    }
    argv[i++] = "EVAL";
    argv[i++] = script;
    argv[i++] = numfmt_dec(nk, nkeys);
    for (int k = 0; k < nkeys; k++)
        argv[i++] = keys[k];
    for (int k = 0; k < nhead; k++)
        argv[i++] = head[k];
    for (size_t k = 0; k < nitems; k++)
        argv[i++] = items[k];
    c = send(st, kind, cb, arg, keys[0], (int)argc, argv, NULL, status);
    free(argv);
    return c;
}

store_bc_call_t *store_bc_add_members(store_t *st, const char *channel_id, const char *id,
                                      const char *const *members, size_t n, store_bc_cb *cb,
                                      void *arg, store_status_t *status)
{
    char k[4][STORE_KEY_MAX], base[STORE_KEY_MAX];

    if (n == 0 || n > STORE_BROADCAST_SLICE_MAX || bc_keys(st, channel_id, id, k) < 0 ||
        store_key_member_base(base, sizeof(base), store_prefix(st), channel_id) < 0)
        FAIL_KEYS(status);
    {
        const char *keys[] = {k[0], k[1]}, *head[] = {"3600000", base};
        return send_slice(st, PLAIN(cb), arg, store_bc_add_members_script, 2, keys, 2, head, n,
                          members, status);
    }
}

store_bc_call_t *store_bc_add_tag(store_t *st, const char *channel_id, const char *id,
                                  const char *tag, const char *cursor, unsigned count,
                                  store_bc_cb *cb, void *arg, store_status_t *status)
{
    char k[4][STORE_KEY_MAX], tkey[STORE_KEY_MAX], num[NUMFMT_DEC_SIZE];

    if (bc_keys(st, channel_id, id, k) < 0 ||
        store_key_tag(tkey, sizeof(tkey), store_prefix(st), channel_id, tag) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {"EVAL", store_bc_add_tag_script, "3", k[0], k[1], tkey, "3600000",
                              cursor, numfmt_dec(num, count)};
        return send(st, PLAIN(cb), arg, k[0], 9, argv, NULL, status);
    }
}

store_bc_call_t *store_bc_add_recipients(store_t *st, const char *channel_id, const char *id,
                                         const char *const *recipients, const char *const *new_ids,
                                         const char *const *new_records, size_t n, store_bc_cb *cb,
                                         void *arg, store_status_t *status)
{
    char k[4][STORE_KEY_MAX], rbase[STORE_KEY_MAX], mbase[STORE_KEY_MAX];
    const char **items;
    store_bc_call_t *c;

    if (n == 0 || n > STORE_BROADCAST_SLICE_MAX || bc_keys(st, channel_id, id, k) < 0 ||
        store_key_recipient(rbase, sizeof(rbase), store_prefix(st), channel_id, "") < 0 ||
        store_key_member_base(mbase, sizeof(mbase), store_prefix(st), channel_id) < 0)
        FAIL_KEYS(status);
    if ((items = malloc(3 * n * sizeof(*items))) == NULL) {
        *status = STORE_BUSY;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        items[3 * i] = recipients[i];
        items[3 * i + 1] = new_ids[i];
        items[3 * i + 2] = new_records[i];
    }
    {
        const char *keys[] = {k[0], k[1]}, *head[] = {"3600000", rbase, mbase};
        c = send_slice(st, PLAIN(cb), arg, store_bc_add_recipients_script, 2, keys, 3, head, 3 * n,
                       items, status);
    }
    free(items);
    return c;
}

/* "<channel>\t<id>": a running broadcast's line in the active set. */
int store_bc_callback_stream(char *buf, size_t size, const char *prefix)
{
    return store_key_outbox(buf, size, prefix, 0);
}

static int active_entry(char *buf, size_t size, const char *channel_id, const char *id)
{
    size_t lc = strlen(channel_id), li = strlen(id);

    if (lc + li + 2 > size)
        return -1;
    memcpy(buf, channel_id, lc);
    buf[lc] = '\t';
    memcpy(buf + lc + 1, id, li + 1);
    return 0;
}

store_bc_call_t *store_bc_finish(store_t *st, const char *channel_id, const char *id,
                                 int64_t keep_ms, store_bc_cb *cb, void *arg,
                                 store_status_t *status)
{
    char k[4][STORE_KEY_MAX], idx[STORE_KEY_MAX], act[STORE_KEY_MAX], entry[STORE_KEY_MAX],
        stream[STORE_KEY_MAX], keep[NUMFMT_DEC_SIZE];

    if (bc_keys(st, channel_id, id, k) < 0 ||
        store_key_broadcast_channel(idx, sizeof(idx), store_prefix(st), id) < 0 ||
        store_key_broadcasts_active(act, sizeof(act), store_prefix(st)) < 0 ||
        store_bc_callback_stream(stream, sizeof(stream), store_prefix(st)) < 0 ||
        active_entry(entry, sizeof(entry), channel_id, id) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {"EVAL", store_bc_finish_script,    "5",        k[0], k[1], idx, act,
                              stream, numfmt_dec(keep, keep_ms), channel_id, entry};
        return send(st, PLAIN(cb), arg, k[0], 11, argv, NULL, status);
    }
}

static void on_ignored(redisReply *reply, void *arg)
{
    (void)reply;
    (void)arg;
}

void store_bc_abort(store_t *st, const char *channel_id, const char *id)
{
    char k[4][STORE_KEY_MAX];
    store_cmd_t *cmd;

    if (bc_keys(st, channel_id, id, k) < 0)
        return;
    {
        const char *argv[] = {"DEL", k[0], k[1]};
        store_command(st, k[0], on_ignored, NULL, 3, argv, NULL, &cmd);
    }
}

store_bc_call_t *store_bc_channel(store_t *st, const char *id, store_bc_cb *cb, void *arg,
                                  store_status_t *status)
{
    char idx[STORE_KEY_MAX];

    if (store_key_broadcast_channel(idx, sizeof(idx), store_prefix(st), id) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {"GET", idx};
        return send(st, PLAIN(cb), arg, idx, 2, argv, NULL, status);
    }
}

store_bc_call_t *store_bc_status(store_t *st, const char *channel_id, const char *id,
                                 store_bc_status_cb *cb, void *arg, store_status_t *status)
{
    char k[4][STORE_KEY_MAX];

    if (bc_keys(st, channel_id, id, k) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {"EVAL", store_bc_status_script, "3", k[0], k[1], k[3]};
        return send(st, C_STATUS, (void (*)(void))cb, arg, k[0], 6, argv, NULL, status);
    }
}

store_bc_call_t *store_bc_cancel_run(store_t *st, const char *channel_id, const char *id,
                                     const char *app, store_bc_cb *cb, void *arg,
                                     store_status_t *status)
{
    char k[4][STORE_KEY_MAX], act[STORE_KEY_MAX], entry[STORE_KEY_MAX], stream[STORE_KEY_MAX];

    if (bc_keys(st, channel_id, id, k) < 0 ||
        store_key_broadcasts_active(act, sizeof(act), store_prefix(st)) < 0 ||
        store_bc_callback_stream(stream, sizeof(stream), store_prefix(st)) < 0 ||
        active_entry(entry, sizeof(entry), channel_id, id) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {
            "EVAL", store_bc_cancel_script, "5", k[0], k[1], k[3], act, stream, app, entry};
        return send(st, PLAIN(cb), arg, k[0], 10, argv, NULL, status);
    }
}

store_bc_call_t *store_bc_active(store_t *st, store_bc_cb *cb, void *arg, store_status_t *status)
{
    char act[STORE_KEY_MAX];

    if (store_key_broadcasts_active(act, sizeof(act), store_prefix(st)) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {"SMEMBERS", act};
        return send(st, PLAIN(cb), arg, act, 2, argv, NULL, status);
    }
}

store_bc_call_t *store_bc_take(store_t *st, const char *channel_id, const char *id, unsigned max,
                               unsigned window, int64_t lease_ms, store_bc_take_cb *cb, void *arg,
                               store_status_t *status)
{
    char k[4][STORE_KEY_MAX], ch[STORE_KEY_MAX], act[STORE_KEY_MAX], entry[STORE_KEY_MAX],
        base[STORE_KEY_MAX], stream[STORE_KEY_MAX], n1[NUMFMT_DEC_SIZE], n2[NUMFMT_DEC_SIZE],
        n3[NUMFMT_DEC_SIZE];

    if (bc_keys(st, channel_id, id, k) < 0 ||
        store_key_channel(ch, sizeof(ch), store_prefix(st), channel_id) < 0 ||
        store_key_broadcasts_active(act, sizeof(act), store_prefix(st)) < 0 ||
        store_bc_callback_stream(stream, sizeof(stream), store_prefix(st)) < 0 ||
        store_key_member_base(base, sizeof(base), store_prefix(st), channel_id) < 0 ||
        active_entry(entry, sizeof(entry), channel_id, id) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {"EVAL",
                              TAKE_SCRIPT,
                              "6",
                              k[0],
                              k[1],
                              k[2],
                              ch,
                              act,
                              stream,
                              numfmt_dec(n1, max),
                              numfmt_dec(n2, window),
                              numfmt_dec(n3, lease_ms),
                              "3600000",
                              base,
                              entry};
        return send(st, C_TAKE, (void (*)(void))cb, arg, k[0], 15, argv, NULL, status);
    }
}

store_bc_call_t *store_bc_enqueue(store_t *st, unsigned shard, const char *channel_id,
                                  const char *id, const char *app, const store_bc_request_t *reqs,
                                  size_t n, int64_t keep_ms, int64_t ttl_ms, store_bc_cb *cb,
                                  void *arg, store_status_t *status)
{
    char k[4][STORE_KEY_MAX], stream[STORE_KEY_MAX], act[STORE_KEY_MAX], entry[STORE_KEY_MAX],
        keep[NUMFMT_DEC_SIZE], ttl[NUMFMT_DEC_SIZE];
    size_t argc = 3 + 2 + 8 + 5 * n, i = 0;
    const char **argv;
    size_t *lens;
    char(*names)[2][STORE_KEY_MAX];
    store_bc_call_t *c = NULL;

    if (n == 0 || n > STORE_BROADCAST_SLICE_MAX || bc_keys(st, channel_id, id, k) < 0 ||
        store_key_outbox(stream, sizeof(stream), store_prefix(st), shard) < 0 ||
        store_key_broadcasts_active(act, sizeof(act), store_prefix(st)) < 0 ||
        active_entry(entry, sizeof(entry), channel_id, id) < 0)
        FAIL_KEYS(status);
    argv = malloc(argc * sizeof(*argv));
    lens = malloc(argc * sizeof(*lens));
    names = malloc(n * sizeof(*names));
    if (argv == NULL || lens == NULL || names == NULL) {
        *status = STORE_BUSY;
        goto out;
    }
    argv[i++] = "EVAL";
    argv[i++] = ENQUEUE_SCRIPT;
    argv[i++] = "2";
    argv[i++] = stream;
    argv[i++] = k[0];
    argv[i++] = numfmt_dec(keep, keep_ms);
    argv[i++] = numfmt_dec(ttl, ttl_ms);
    argv[i++] = app;
    argv[i++] = channel_id;
    argv[i++] = k[3];
    argv[i++] = k[1];
    argv[i++] = act;
    argv[i++] = entry;
    for (size_t r = 0; r < n; r++) {
        if (store_key_outbox_request(names[r][0], STORE_KEY_MAX, store_prefix(st), shard,
                                     reqs[r].request_id) < 0 ||
            store_key_outbox_order(names[r][1], STORE_KEY_MAX, store_prefix(st), shard, channel_id,
                                   reqs[r].member_id) < 0) {
            *status = STORE_BAD_RECORD;
            goto out;
        }
        argv[i++] = names[r][0];
        argv[i++] = names[r][1];
        argv[i++] = reqs[r].request_id;
        argv[i++] = reqs[r].member_id;
        lens[i] = reqs[r].body_len;
        argv[i++] = reqs[r].body;
    }
    for (size_t w = 0; w < argc; w++)
        if (w < 13 || (w - 13) % 5 != 4)
            lens[w] = strlen(argv[w]);
    c = send(st, PLAIN(cb), arg, stream, (int)argc, argv, lens, status);
out:
    free(argv);
    free(lens);
    free(names);
    return c;
}

void store_bc_taken(store_t *st, const char *channel_id, const char *id, const char *const *members,
                    size_t n)
{
    char k[4][STORE_KEY_MAX];
    const char **argv;
    store_cmd_t *cmd;

    if (n == 0 || bc_keys(st, channel_id, id, k) < 0 ||
        (argv = malloc((n + 2) * sizeof(*argv))) == NULL)
        return;
    argv[0] = "HDEL";
    argv[1] = k[2];
    memcpy(argv + 2, members, n * sizeof(*argv));
    store_command(st, k[2], on_ignored, NULL, (int)n + 2, argv, NULL, &cmd);
    free(argv);
}

redisc_sub_t *store_bc_watch(store_t *st, redisc_message_cb *cb, void *arg)
{
    char act[STORE_KEY_MAX];

    if (store_key_broadcasts_active(act, sizeof(act), store_prefix(st)) < 0)
        return NULL;
    return store_watch_key(st, act, cb, arg);
}
