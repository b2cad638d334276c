/* broadcast.c - broadcasts' records and sets in Redis (broadcast.h). Every script names keys of
 * one slot, so that broadcasts run on a Redis Cluster as on one server: a broadcast's record and
 * sets are in its channel's slot; its requests, queued in the outbox's shards, count their ends
 * in the broadcast's hash of their shard (store/outbox.c), whose counts the status sums; a
 * cancel is told to every shard. The steps across slots are each idempotent and ordered, so that
 * a crash between two leaves what the next one (or a take over) completes. A script touches
 * only keys among its KEYS (TAKE_SCRIPT says why). Scripts that take a slice of ids go as EVAL
 * with every id a word (store_eval carries 16 words). */
#include "broadcast.h"
#include "bcslice.h"

#include "../core/hint.h"
#include "../json/numfmt.h"
#include "eval.h"
#include "outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A shard's hash made by a cancel or a callback (not by a queued request) is kept this long:
 * the defaults' BOTGATE_OUTBOX_TTL_S + BOTGATE_IDEMPOTENCY_TTL_S. */
#define SHARD_KEEP_MS "100800000"
/* The shards' counts are summed into the record at most this often by the delivery (a GET sums
 * them each time): what frees the window and ends the broadcast. */
#define SYNC_MS        "200"
#define SHARDS_DEFAULT 16 /* a record that does not say (gateway/config.c's default) */

/* KEYS record, todo, taking; ARGV app, body, callback, channel, keep_ms, shards (the outbox's:
 * where the status sums its counts). */
const char store_bc_create_script[] = STORE_LUA_NOW_MS
    "redis.call('DEL', KEYS[2], KEYS[3]) "
    "redis.call('HSET', KEYS[1], 'app', ARGV[1], 'body', ARGV[2], 'cb', ARGV[3], 'ch', "
    "ARGV[4], 'state', 'accepting', 'total', 0, 'sent', 0, 'failed', 0, 'unknown', 0, "
    "'cancelled', 0, 'ccount', 0, 'taken', 0, 'synced', 0, 'shards', ARGV[6], "
    "'created', now, 'updated', now) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[5]) return {1, ''}";

/* KEYS record, todo, tag; ARGV keep_ms, cursor, count. */
const char store_bc_add_tag_script[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'accepting' then return {-1, ''} end "
    "local r = redis.call('SSCAN', KEYS[3], ARGV[2], 'COUNT', ARGV[3]) "
    "if #r[2] > 0 then redis.call('SADD', KEYS[2], unpack(r[2])) "
    "redis.call('PEXPIRE', KEYS[2], ARGV[1]) end return {#r[2], r[1]}";

/* KEYS record, todo; ARGV keep_ms. Its id's index and its line among the running broadcasts
 * are written before (store_bc_finish): an accept that dies before this leaves it accepting,
 * never taken from, and dropped from the running ones once its record expired. */
const char store_bc_finish_script[] = STORE_LUA_NOW_MS
    "if redis.call('HGET', KEYS[1], 'state') ~= 'accepting' then return {-1, ''} end "
    "local n = redis.call('SCARD', KEYS[2]) local state = n > 0 and 'running' or 'done' "
    "redis.call('HSET', KEYS[1], 'state', state, 'total', n, 'updated', now) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[1]) "
    "if n > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end return {n, state}";

/* The record's status: app, state, total, sent, failed, unknown, cancelled (not queued), created,
 * updated, callback, cancelled (queued), shards ({} when there is no record). */
#define STATUS_FIELDS                                                                              \
    "local r = redis.call('HMGET', KEYS[1], 'app', 'state', 'total', 'sent', 'failed', "           \
    "'unknown', 'cancelled', 'created', 'updated', 'cb', 'ccount', 'shards') "                     \
    "if not r[1] then return {} end for i = 1, 12 do r[i] = r[i] or '' end return r"

/* KEYS record. The counts as last summed (store_bc_merge_script sums them). */
const char store_bc_status_script[] = STATUS_FIELDS;

/* KEYS the broadcast's hash of one outbox shard; ARGV cancel ("1": no attempt of it starts
 * there from now on, store/outbox.c), keep_ms (when the hash is new). Its counts (sent, failed,
 * unknown, cancelled) and the attempts that may be sending (their lease is not over). */
const char store_bc_shard_script[] = STORE_LUA_NOW_MS
    "if ARGV[1] == '1' then redis.call('HSET', KEYS[1], 'x', 1) "
    "if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end end "
    "local out, at = {0, 0, 0, 0, 0}, {sent = 1, failed = 2, unknown = 3, cancelled = 4} "
    "local h = redis.call('HGETALL', KEYS[1]) "
    "for i = 1, #h, 2 do local k = at[h[i]] if k then out[k] = tonumber(h[i + 1]) "
    "elseif string.sub(h[i], 1, 2) == 'r:' and tonumber(h[i + 1]) > now then "
    "out[5] = out[5] + 1 end end return out";

/* KEYS record, todo; ARGV sent, failed, unknown, cancelled: the shards' counts summed. A count
 * only grows (a sum read while requests end is below the truth, never above it): each keeps
 * the larger, so that two sums that cross leave the later truth. A running broadcast is done
 * once every member ended. Then the status (STATUS_FIELDS). */
const char store_bc_merge_script[] = STORE_LUA_NOW_MS
    "local r = redis.call('HMGET', KEYS[1], 'state', 'total', 'cancelled', 'sent', "
    "'failed', 'unknown', 'ccount') "
    "if not r[1] then return {} end "
    "local names, ended = {'sent', 'failed', 'unknown', 'ccount'}, tonumber(r[3] or '0') "
    "for i = 1, 4 do local v = math.max(tonumber(r[i + 3] or '0'), tonumber(ARGV[i])) "
    "redis.call('HSET', KEYS[1], names[i], v) ended = ended + v end "
    "if r[1] == 'running' and ended >= tonumber(r[2]) and "
    "redis.call('SCARD', KEYS[2]) == 0 then "
    "redis.call('HSET', KEYS[1], 'state', 'done', 'updated', now) end " STATUS_FIELDS;

/* KEYS record, todo; ARGV app. What is not queued is cancelled at once and no member is taken
 * from now on; the shards are told next (store_bc_shard_script), so that no queued member
 * starts. {shards, the state before}, or {-1, ''} when it is not app's. */
const char store_bc_cancel_script[] =
    STORE_LUA_NOW_MS "local r = redis.call('HMGET', KEYS[1], 'app', 'state', 'shards') "
                     "if not r[1] or r[1] ~= ARGV[1] then return {-1, ''} end "
                     "if r[2] == 'running' then local n = redis.call('SCARD', KEYS[2]) "
                     "redis.call('DEL', KEYS[2]) redis.call('HINCRBY', KEYS[1], 'cancelled', n) "
                     "redis.call('HSET', KEYS[1], 'state', 'cancelled', 'updated', now) end "
                     "return {tonumber(r[3] or '0') or 0, r[2]}";

/* KEYS the callback stream (shard 0's), the broadcast's hash of shard 0; ARGV id, channel,
 * keep_ms. An ended broadcast's statusCallback: an entry of the stream names it ('k' its id,
 * 'h' its channel), queued once however often this runs; whichever instance reads the entry
 * posts the callback (gateway/outbox.c), and another takes it over when that one dies. */
static const char CALLBACK_SCRIPT[] =
    "if redis.call('HSETNX', KEYS[2], 'cbq', 1) == 0 then return 0 end "
    "if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end "
    "redis.call('XADD', KEYS[1], '*', 'k', ARGV[1], 'h', ARGV[2]) return 1";

/* KEYS record, todo, taking, channel; ARGV max, window, lease_ms, keep_ms, sync_ms, flagged.
 * Running: {'sync', shards} when the shards' counts were summed sync_ms ago or more and a member is
 * in flight or none is left (the caller sums them and takes again); else members taken and not
 * confirmed within the lease (their taker died) first, then new ones while fewer than window are in
 * flight (taken, not counted ended). Cancelled: {'flag', shards} until flagged (the caller told the
 * shards), then the members a dead taker left: queued now, each is recorded cancelled
 * (ENQUEUE_SCRIPT), so that every member is counted once. With nothing to take: {state ('gone': no
 * record), has a callback, members being taken, shards}. Taken: {'take', body, app, the channel's
 * record, the ids}, each id recorded in the taking hash first (one HSET per 500: unpack's words are
 * bounded by Lua's stack). The members' records are read next (step_read), not here: their keys are
 * built from the ids, and a script may touch only the keys it names (a Redis Cluster refuses the
 * others, or runs the script half-way, while their slot migrates). */
static const char TAKE_SCRIPT[] = STORE_LUA_NOW_MS
    "local s = redis.call('HMGET', KEYS[1], 'state', 'taken', 'body', 'app', 'sent', "
    "'failed', 'unknown', 'ccount', 'synced', 'cb', 'shards', 'xset') "
    "local shards = tonumber(s[11] or '0') or 0 "
    "if s[1] == 'accepting' then return {'accepting'} end "
    "local ids, max = {}, tonumber(ARGV[1]) "
    "local function expired() local t = redis.call('HGETALL', KEYS[3]) "
    "for i = 1, #t, 2 do if #ids < max and tonumber(t[i + 1]) < now - tonumber(ARGV[3]) "
    "then ids[#ids + 1] = t[i] end end end "
    "if s[1] == 'running' then "
    "local inflight = tonumber(s[2] or '0') for i = 5, 8 do "
    "inflight = inflight - tonumber(s[i] or '0') end "
    "local left = redis.call('SCARD', KEYS[2]) "
    "if (inflight > 0 or left == 0) and now - tonumber(s[9] or '0') >= tonumber(ARGV[5]) "
    "then redis.call('HSET', KEYS[1], 'synced', now) return {'sync', shards} end "
    "redis.call('PEXPIRE', KEYS[1], ARGV[4]) redis.call('PEXPIRE', KEYS[2], ARGV[4]) "
    "expired() "
    "local room = math.min(tonumber(ARGV[2]) - inflight, max - #ids) "
    "if room > 0 and left > 0 then local more = redis.call('SPOP', KEYS[2], room) "
    "for _, id in ipairs(more) do ids[#ids + 1] = id end "
    "redis.call('HINCRBY', KEYS[1], 'taken', #more) end "
    "if #ids == 0 then return {room > 0 and 'empty' or 'full'} end "
    "elseif s[1] == 'cancelled' then "
    "if not s[12] then if ARGV[6] ~= '1' then return {'flag', shards} end "
    "redis.call('HSET', KEYS[1], 'xset', 1) end expired() end "
    "if #ids == 0 then return {s[1] or 'gone', (s[10] or '') ~= '' and 1 or 0, "
    "redis.call('HLEN', KEYS[3]), shards} end "
    "local f = {} for _, id in ipairs(ids) do f[#f + 1] = id f[#f + 1] = now "
    "if #f >= 1000 then redis.call('HSET', KEYS[3], unpack(f)) f = {} end end "
    "if #f > 0 then redis.call('HSET', KEYS[3], unpack(f)) end "
    "redis.call('PEXPIRE', KEYS[3], ARGV[4]) "
    "local out = {'take', s[3], s[4], redis.call('GET', KEYS[4]) or ''} "
    "for _, id in ipairs(ids) do out[#out + 1] = id end return out";

/* KEYS stream, the broadcast's hash of the shard, then per request its record and the member's
 * order key (every key it touches among its KEYS); ARGV keep_ms, ttl_ms, app, channel, the
 * broadcast's record, then per request its id, the member id, its body. The outbox's accept for
 * each (store/outbox.c ACCEPT_SCRIPT), the hash named in the record ('bq'; 'bk' says whose it is:
 * not 'bc', which the scripts of versions whose broadcasts needed one server took for the record
 * they count in); a request queued already (its member taken again) is skipped; once the broadcast
 * was cancelled (the hash's 'x') a request is recorded ended, cancelled, and counted there instead
 * of queued. The stream's entry names the hash too ('bq'), so that the request's first start
 * declares it among its KEYS (store/outbox.c). */
static const char ENQUEUE_SCRIPT[] = STORE_LUA_NOW_MS
    "local x = redis.call('HEXISTS', KEYS[2], 'x') == 1 local n, a = 0, 6 "
    "for i = 3, #KEYS, 2 do local rec, ord = KEYS[i], KEYS[i + 1] "
    "if redis.call('EXISTS', rec) == 0 then "
    "if x then redis.call('HSET', rec, 'app', ARGV[3], 'ch', ARGV[4], 'mb', "
    "ARGV[a + 1], 'status', 'failed', 'result', "
    "'\"sendResult\":{\"ok\":0,\"result\":[]},\"error\":{\"err_code\":null,"
    "\"err\":\"the broadcast was cancelled\"}', 'attempts', 0, 'created', now, "
    "'updated', now, 'bk', ARGV[5], 'bq', KEYS[2]) "
    "redis.call('HINCRBY', KEYS[2], 'cancelled', 1) else "
    "local seq = redis.call('HINCRBY', ord, 'n', 1) "
    "redis.call('PEXPIRE', ord, ARGV[1]) "
    "redis.call('HSET', rec, 'app', ARGV[3], 'body', ARGV[a + 2], 'ch', ARGV[4], "
    "'mb', ARGV[a + 1], 'cb', '', 'seq', seq, 'status', 'queued', 'attempts', 0, "
    "'created', now, 'updated', now, 'next', 0, 'ends', now + ARGV[2], 'bk', ARGV[5], "
    "'bq', KEYS[2]) "
    "redis.call('XADD', KEYS[1], '*', 'r', ARGV[a], 'o', ord, 'bq', KEYS[2]) "
    "n = n + 1 end "
    "redis.call('PEXPIRE', rec, ARGV[1]) end a = a + 3 end "
    "redis.call('PEXPIRE', KEYS[2], ARGV[1]) return {n, ''}";

/* A call of one step (C_PLAIN) or of several, one command in flight at a time. */
typedef enum { C_PLAIN, C_STATUS, C_TAKE, C_FINISH, C_CANCEL, C_RECIPIENTS } call_kind_t;

/* The steps of the calls of several. */
typedef enum {
    S_FIRST,  /* the first script: the status, the cancel, the take */
    S_READ,   /* a take's members' records (MGET) */
    S_SHARDS, /* the shards' hashes, one after the other */
    S_MERGE,  /* their sums into the record */
    S_NOTIFY, /* an ended broadcast's callback queued */
    S_DROP,   /* ... and dropped from the running ones */
    S_INDEX,  /* finish: the id's index, the running line, the script */
    S_ACTIVE,
    S_FINISH,
} call_step_t;

/* Owned by the store from its start until its callback has run or it is cancelled. */
struct store_bc_call {
    call_kind_t kind;
    call_step_t step;
    void (*cb)(void);
    void *arg;
    store_t *st;
    store_cmd_t *cmd; /* the command in flight */
    /* the calls of several steps: whose, and what the steps carry */
    char channel[STORE_KEY_MAX], id[64];
    unsigned shards, shard; /* the shards to read, the next one */
    int cancel;             /* tell the shards of the cancel (flag 'x') */
    int flagged;            /* a take: the shards were told */
    int retakes;            /* a take: taken again after a sum or a flag */
    int has_cb;             /* a take that found it ended: it has a status callback */
    int checking;           /* ... cancelled: the shards read for attempts still running */
    int64_t sum[5];         /* sent, failed, unknown, cancelled, attempts running */
    int64_t n;              /* a cancel: the shards; a take: the members being taken */
    char text[16];          /* a cancel: the state before; a take: the state that ended */
    unsigned max, window;   /* a take's */
    int64_t lease_ms, keep_ms;
    store_bc_rslice_t *rslice; /* C_RECIPIENTS: the slice, kept for its next run */
    char **taken; /* a take's words while its records are read: body, app, channel, the ids */
    size_t n_taken;
};

static void call_free(store_bc_call_t *c)
{
    store_bc_rslice_free(c->rslice);
    free(c->taken); /* one block */
    free(c);
}

void store_bc_cancel(store_bc_call_t *call)
{
    if (call == NULL)
        return;
    store_command_cancel(call->st, call->cmd);
    call_free(call);
}

static void on_reply(redisReply *reply, void *arg);
static void fail(store_bc_call_t *c, store_status_t st);

/* Sends argv (argv[0] "EVAL" or a command; key routes it) as c's next step: REDISC_OK, else
 * nothing was sent. */
static int issue(store_bc_call_t *c, const char *key, int argc, const char **argv,
                 const size_t *lens)
{
    return store_command(c->st, key, on_reply, c, argc, argv, lens, &c->cmd);
}

static store_status_t status_of(int rc)
{
    return rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
}

/* A call of kind, nothing sent yet; NULL (status set) when out of memory. */
static store_bc_call_t *call_alloc(store_t *st, call_kind_t kind, void (*cb)(void), void *arg,
                                   store_status_t *status)
{
    store_bc_call_t *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        *status = STORE_BUSY;
        return NULL;
    }
    c->kind = kind;
    c->cb = cb;
    c->arg = arg;
    c->st = st;
    return c;
}

/* Sends argv (argv[0] "EVAL" or a command; key routes it) for a call of kind. */
static store_bc_call_t *send(store_t *st, call_kind_t kind, void (*cb)(void), void *arg,
                             const char *key, int argc, const char **argv, const size_t *lens,
                             store_status_t *status)
{
    store_bc_call_t *c = call_alloc(st, kind, cb, arg, status);
    int rc;

    if (c == NULL)
        return NULL;
    if ((rc = issue(c, key, argc, argv, lens)) != REDISC_OK) {
        free(c);
        *status = status_of(rc);
        return NULL;
    }
    return c;
}

/* A call of several steps, its first one not sent yet; NULL when out of memory or the ids do
 * not fit. */
static store_bc_call_t *call_new(store_t *st, call_kind_t kind, void (*cb)(void), void *arg,
                                 const char *channel_id, const char *id, store_status_t *status)
{
    store_bc_call_t *c;

    if (strlen(channel_id) >= sizeof(c->channel) || strlen(id) >= sizeof(c->id)) {
        *status = STORE_BAD_RECORD;
        return NULL;
    }
    if ((c = call_alloc(st, kind, cb, arg, status)) == NULL)
        return NULL;
    strcpy(c->channel, channel_id);
    strcpy(c->id, id);
    return c;
}

/* The broadcast's keys: record, todo, taking. -1 when they do not fit. */
static int bc_keys(store_t *st, const char *channel_id, const char *id, char keys[3][STORE_KEY_MAX])
{
    const char *prefix = store_prefix(st);

    return store_key_broadcast(keys[0], STORE_KEY_MAX, prefix, channel_id, id) < 0 ||
                   store_key_broadcast_set(keys[1], STORE_KEY_MAX, prefix, channel_id, id, "todo") <
                       0 ||
                   store_key_broadcast_set(keys[2], STORE_KEY_MAX, prefix, channel_id, id,
                                           "taking") < 0
               ? -1
               : 0;
}

/* "<channel>\t<id>": a running broadcast's line in the active set. */
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

/* The take's members (c->taken) with their records (the MGET's reply). */
static void take_reply(store_bc_call_t *c, store_status_t st, const redisReply *reply)
{
    store_bc_take_t t = {0};
    size_t n = c->n_taken - 3;
    const char **recs = NULL;
    size_t *lens = NULL;

    if (st == STORE_OK && (reply->type != REDIS_REPLY_ARRAY || reply->elements != n))
        st = STORE_BAD_RECORD;
    if (st == STORE_OK &&
        ((recs = calloc(n, sizeof(*recs))) == NULL || (lens = calloc(n, sizeof(*lens))) == NULL))
        st = STORE_UNAVAILABLE;
    if (st == STORE_OK) {
        t.state = "take";
        t.body = c->taken[0];
        t.app = c->taken[1];
        t.channel = c->taken[2];
        t.n = n;
        t.members = (const char *const *)c->taken + 3;
        /* a member deleted since it was taken reads as one deleted before: "" (its request
         * ends failed, 114, as its send finds no member) */
        for (size_t i = 0; i < n; i++)
            recs[i] = store_eval_str(reply->element[i], &lens[i]);
        t.records = recs;
        t.record_lens = lens;
    }
    ((store_bc_take_cb *)c->cb)(c->arg, st, st == STORE_OK ? &t : NULL);
    free(recs);
    free(lens);
}

/* A take that found no member to take: its state (c->text), and whether this call dropped
 * the broadcast from the running ones. */
static void take_ended(store_bc_call_t *c, store_status_t st, int ended)
{
    store_bc_take_t t = {0};

    t.state = c->text;
    t.ended = ended;
    ((store_bc_take_cb *)c->cb)(c->arg, st, st == STORE_OK ? &t : NULL);
}

/* The status (STATUS_FIELDS) with sending attempts running. */
static void status_reply(store_bc_call_t *c, store_status_t st, const redisReply *reply,
                         int64_t sending)
{
    store_bc_status_t s = {0};

    if (st == STORE_OK && reply->type != REDIS_REPLY_ARRAY)
        st = STORE_BAD_RECORD;
    else if (st == STORE_OK && reply->elements == 0)
        st = STORE_NOT_FOUND;
    else if (st == STORE_OK && reply->elements != 12)
        st = STORE_BAD_RECORD;
    if (st == STORE_OK) {
        s.app = store_eval_str(reply->element[0], NULL);
        s.state = store_eval_str(reply->element[1], NULL);
        s.total = store_eval_int(reply->element[2]);
        s.sent = store_eval_int(reply->element[3]);
        s.failed = store_eval_int(reply->element[4]);
        s.unknown = store_eval_int(reply->element[5]);
        s.cancelled = store_eval_int(reply->element[6]) + store_eval_int(reply->element[10]);
        s.created_ms = store_eval_int(reply->element[7]);
        s.updated_ms = store_eval_int(reply->element[8]);
        s.callback = store_eval_str(reply->element[9], NULL);
        s.sending = sending;
    }
    ((store_bc_status_cb *)c->cb)(c->arg, st, st == STORE_OK ? &s : NULL);
}

/* A call's plain reply: {n, text}, a string, nil (STORE_NOT_FOUND), or SMEMBERS' lines. */
static void plain_reply(store_bc_call_t *c, store_status_t st, const redisReply *reply)
{
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
            return;
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
        return;
    } else if (st == STORE_OK) {
        st = STORE_BAD_RECORD;
    }
    ((store_bc_cb *)c->cb)(c->arg, st, n, text);
}

/* ---- the steps of the calls of several ---- */

/* Each step sends c's next command: REDISC_OK, else nothing was sent (c then ends with
 * STORE_UNAVAILABLE or STORE_BUSY). */

/* The next shard's hash (store_bc_shard_script), or after the last one the sums into the
 * record (store_bc_merge_script), or for a cancel (and a take's check) nothing more (1). */
static int step_shard(store_bc_call_t *c, int *rc)
{
    char key[STORE_KEY_MAX], k[3][STORE_KEY_MAX];
    char n[4][NUMFMT_DEC_SIZE];
    const char *prefix = store_prefix(c->st);

    if (c->shard < c->shards) {
        if (store_key_outbox_broadcast(key, sizeof(key), prefix, c->shard, c->id) < 0) {
            *rc = REDISC_DOWN;
            return 0;
        }
        c->step = S_SHARDS;
        c->shard++;
        {
            const char *argv[] = {"EVAL", store_bc_shard_script, "1",
                                  key,    c->cancel ? "1" : "0", SHARD_KEEP_MS};
            *rc = issue(c, key, 6, argv, NULL);
        }
        return 0;
    }
    if (c->kind == C_CANCEL || c->checking)
        return 1;
    if (bc_keys(c->st, c->channel, c->id, k) < 0) {
        *rc = REDISC_DOWN;
        return 0;
    }
    c->step = S_MERGE;
    {
        const char *argv[] = {"EVAL",
                              store_bc_merge_script,
                              "2",
                              k[0],
                              k[1],
                              numfmt_dec(n[0], c->sum[0]),
                              numfmt_dec(n[1], c->sum[1]),
                              numfmt_dec(n[2], c->sum[2]),
                              numfmt_dec(n[3], c->sum[3])};
        *rc = issue(c, k[0], 9, argv, NULL);
    }
    return 0;
}

/* Starts reading every shard (cancel: telling it too) from the first. */
static int shards_begin(store_bc_call_t *c, int64_t shards, int cancel, int *rc)
{
    c->shards = shards > 0 && shards <= STORE_OUTBOX_SHARDS_MAX ? (unsigned)shards : SHARDS_DEFAULT;
    c->shard = 0;
    c->cancel = cancel;
    memset(c->sum, 0, sizeof(c->sum));
    return step_shard(c, rc);
}

static void step_take(store_bc_call_t *c, int *rc)
{
    char k[3][STORE_KEY_MAX], ch[STORE_KEY_MAX], n1[NUMFMT_DEC_SIZE], n2[NUMFMT_DEC_SIZE],
        n3[NUMFMT_DEC_SIZE];

    if (bc_keys(c->st, c->channel, c->id, k) < 0 ||
        store_key_channel(ch, sizeof(ch), store_prefix(c->st), c->channel) < 0) {
        *rc = REDISC_DOWN;
        return;
    }
    c->step = S_FIRST;
    {
        const char *argv[] = {"EVAL",
                              TAKE_SCRIPT,
                              "4",
                              k[0],
                              k[1],
                              k[2],
                              ch,
                              numfmt_dec(n1, c->max),
                              numfmt_dec(n2, c->window),
                              numfmt_dec(n3, c->lease_ms),
                              "3600000",
                              SYNC_MS,
                              c->flagged ? "1" : "0"};
        *rc = issue(c, k[0], 13, argv, NULL);
    }
}

/* A take's members (reply: {'take', body, app, channel, the ids}) kept in c->taken, then their
 * records read by one MGET (the channel's slot). A crash or a failure before they are queued
 * leaves them in the taking hash, taken again after the lease. 1: c is done. */
static int step_read(store_bc_call_t *c, const redisReply *reply, int *rc)
{
    char base[STORE_KEY_MAX], *at;
    size_t n = reply->elements - 1, len = 0, bl, l;
    const char **argv;

    if (reply->elements < 5 ||
        store_key_member_base(base, sizeof(base), store_prefix(c->st), c->channel) < 0)
        return fail(c, STORE_BAD_RECORD), 1;
    bl = strlen(base);
    for (size_t i = 0; i < n; i++) {
        store_eval_str(reply->element[1 + i], &l);
        len += l + 1;
    }
    if ((c->taken = malloc(n * sizeof(*c->taken) + len)) == NULL ||
        (argv = malloc((n - 2) * sizeof(*argv) + (n - 3) * bl + len)) == NULL)
        return fail(c, STORE_UNAVAILABLE), 1;
    c->n_taken = n;
    at = (char *)(c->taken + n);
    for (size_t i = 0; i < n; i++) {
        const char *w = store_eval_str(reply->element[1 + i], &l);
        c->taken[i] = memcpy(at, w, l);
        at[l] = '\0';
        at += l + 1;
    }
    argv[0] = "MGET";
    at = (char *)(argv + n - 2);
    for (size_t i = 3; i < n; i++) {
        argv[i - 2] = at;
        at += sprintf(at, "%s%s", base, c->taken[i]) + 1;
    }
    c->step = S_READ;
    *rc = issue(c, argv[1], (int)(n - 2), argv, NULL);
    free(argv);
    return 0;
}

/* An ended broadcast's callback, queued once (CALLBACK_SCRIPT). */
static void step_notify(store_bc_call_t *c, int *rc)
{
    char stream[STORE_KEY_MAX], hash[STORE_KEY_MAX];
    const char *prefix = store_prefix(c->st);

    if (store_bc_callback_stream(stream, sizeof(stream), prefix) < 0 ||
        store_key_outbox_broadcast(hash, sizeof(hash), prefix, 0, c->id) < 0) {
        *rc = REDISC_DOWN;
        return;
    }
    c->step = S_NOTIFY;
    {
        const char *argv[] = {"EVAL", CALLBACK_SCRIPT, "2",        stream,
                              hash,   c->id,           c->channel, SHARD_KEEP_MS};
        *rc = issue(c, stream, 8, argv, NULL);
    }
}

/* SREM of the broadcast's line from the running ones (SADD when add). */
static void step_active(store_bc_call_t *c, int add, int *rc)
{
    char act[STORE_KEY_MAX], entry[2 * STORE_KEY_MAX];

    if (store_key_broadcasts_active(act, sizeof(act), store_prefix(c->st)) < 0 ||
        active_entry(entry, sizeof(entry), c->channel, c->id) < 0) {
        *rc = REDISC_DOWN;
        return;
    }
    c->step = add ? S_ACTIVE : S_DROP;
    {
        const char *argv[] = {add ? "SADD" : "SREM", act, entry};
        *rc = issue(c, act, 3, argv, NULL);
    }
}

static void step_finish(store_bc_call_t *c, int *rc)
{
    char k[3][STORE_KEY_MAX], keep[NUMFMT_DEC_SIZE];

    if (bc_keys(c->st, c->channel, c->id, k) < 0) {
        *rc = REDISC_DOWN;
        return;
    }
    c->step = S_FINISH;
    {
        const char *argv[] = {"EVAL", store_bc_finish_script,      "2", k[0],
                              k[1],   numfmt_dec(keep, c->keep_ms)};
        *rc = issue(c, k[0], 6, argv, NULL);
    }
}

static void on_ignored(redisReply *reply, void *arg)
{
    (void)reply;
    (void)arg;
}

/* A running broadcast: every instance's delivery is told (store_bc_watch). */
static void publish_started(store_bc_call_t *c)
{
    char act[STORE_KEY_MAX], entry[2 * STORE_KEY_MAX];
    store_cmd_t *cmd;

    if (store_key_broadcasts_active(act, sizeof(act), store_prefix(c->st)) < 0 ||
        active_entry(entry, sizeof(entry), c->channel, c->id) < 0)
        return;
    {
        const char *argv[] = {"PUBLISH", act, entry};
        store_command(c->st, act, on_ignored, NULL, 3, argv, NULL, &cmd);
    }
}

/* Ends c with a failure of its kind. */
static void fail(store_bc_call_t *c, store_status_t st)
{
    switch (c->kind) {
    case C_TAKE:
        ((store_bc_take_cb *)c->cb)(c->arg, st, NULL);
        break;
    case C_STATUS:
        ((store_bc_status_cb *)c->cb)(c->arg, st, NULL);
        break;
    default:
        ((store_bc_cb *)c->cb)(c->arg, st, 0, "");
        break;
    }
}

/* An ended broadcast (its callback queued) leaves the running ones, unless it was cancelled
 * while members were being taken: it stays until they are queued (a dead taker's are taken
 * again), so that each is counted. 1: c is done. */
static int take_drop(store_bc_call_t *c, int *rc)
{
    if (strcmp(c->text, "cancelled") == 0 && c->n > 0) {
        take_ended(c, STORE_OK, 0);
        return 1;
    }
    step_active(c, 0, rc);
    return 0;
}

/* An ended broadcast's callback queued (when it has one), then take_drop. */
static int take_notify(store_bc_call_t *c, int *rc)
{
    c->checking = 0;
    if (!c->has_cb)
        return take_drop(c, rc);
    step_notify(c, rc);
    return 0;
}

/* A take's first reply that is not members: sum the shards, tell them of a cancel, or end
 * (queue the callback of an ended broadcast, drop it from the running ones). 1: c is done. */
static int take_next(store_bc_call_t *c, const redisReply *reply, int *rc)
{
    const char *state = store_eval_str(reply->element[0], NULL);
    int64_t shards = reply->elements >= 2 ? store_eval_int(reply->element[reply->elements - 1]) : 0;

    if (c->retakes < 4 && strcmp(state, "sync") == 0) {
        c->retakes++;
        return shards_begin(c, shards, 0, rc);
    }
    if (c->retakes < 4 && strcmp(state, "flag") == 0) {
        c->retakes++;
        return shards_begin(c, shards, 1, rc);
    }
    if (reply->elements != 4 || strlen(state) >= sizeof(c->text)) {
        take_reply(c, STORE_OK, reply); /* empty, full, accepting */
        return 1;
    }
    strcpy(c->text, state);
    c->n = store_eval_int(reply->element[2]); /* members being taken */
    c->has_cb = strcmp(state, "gone") != 0 && store_eval_int(reply->element[1]) == 1;
    /* a cancelled one's callback is queued once no attempt of it may still send: its job
     * then posts at once, rather than wait while its entry idles (another worker would take
     * it over after BOTGATE_OUTBOX_CLAIM_MS and post it too) */
    if (c->has_cb && strcmp(state, "cancelled") == 0) {
        c->checking = 1;
        return shards_begin(c, store_eval_int(reply->element[3]), 0, rc);
    }
    return take_notify(c, rc);
}

/* Sends the slice's next run (every recipient not added yet, each with its guess). */
static int recipients_run(store_bc_call_t *c)
{
    const char **argv;
    int argc = store_bc_rslice_words(c->rslice, &argv);

    return argc < 0 ? REDISC_BUSY : issue(c, argv[3], argc, argv, NULL);
}

/* A run of the slice answered: the recipients it named go again, or the slice is in. */
static int recipients_step(store_bc_call_t *c, const redisReply *reply, int *rc)
{
    int again = 0;
    store_status_t st =
        store_bc_rslice_reply(c->rslice, reply, store_recipient_hints(c->st), &again);

    if (st != STORE_OK)
        return fail(c, st), 1;
    if (again) {
        *rc = recipients_run(c);
        return 0;
    }
    ((store_bc_cb *)c->cb)(c->arg, STORE_OK, store_bc_rslice_added(c->rslice), "");
    return 1;
}

/* The next step of c after reply: 1 when c is done (its callback ran). */
static int step(store_bc_call_t *c, store_status_t st, const redisReply *reply, int *rc)
{
    if (st != STORE_OK)
        return fail(c, st), 1;
    switch (c->step) {
    case S_FIRST:
        if (c->kind == C_RECIPIENTS)
            return recipients_step(c, reply, rc);
        if (c->kind == C_STATUS) {
            const char *state;
            if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 12)
                return status_reply(c, st, reply, 0), 1;
            state = store_eval_str(reply->element[1], NULL);
            /* a done one's counts are final; an accepting one has none */
            if (strcmp(state, "done") == 0 || strcmp(state, "accepting") == 0)
                return status_reply(c, st, reply, 0), 1;
            return shards_begin(c, store_eval_int(reply->element[11]), 0, rc);
        }
        if (c->kind == C_CANCEL) {
            const char *state;
            if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)
                return fail(c, STORE_BAD_RECORD), 1;
            state = store_eval_str(reply->element[1], NULL);
            c->n = store_eval_int(reply->element[0]);
            snprintf(c->text, sizeof(c->text), "%s", state);
            if (c->n < 0 || (strcmp(state, "running") != 0 && strcmp(state, "cancelled") != 0))
                return ((store_bc_cb *)c->cb)(c->arg, STORE_OK, c->n < 0 ? -1 : 0, c->text), 1;
            return shards_begin(c, c->n, 1, rc);
        }
        /* C_TAKE */
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0)
            return take_reply(c, STORE_BAD_RECORD, reply), 1;
        if (strcmp(store_eval_str(reply->element[0], NULL), "take") == 0)
            return step_read(c, reply, rc);
        return take_next(c, reply, rc);
    case S_READ:
        return take_reply(c, st, reply), 1;
    case S_SHARDS:
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 5)
            return fail(c, STORE_BAD_RECORD), 1;
        for (int i = 0; i < 5; i++)
            c->sum[i] += store_eval_int(reply->element[i]);
        if (step_shard(c, rc) == 0)
            return 0;
        if (c->kind == C_CANCEL) /* every shard told */
            return ((store_bc_cb *)c->cb)(c->arg, STORE_OK, c->sum[4], c->text), 1;
        if (c->sum[4] > 0) /* a take's check: attempts still running, the next take asks again */
            return take_ended(c, STORE_OK, 0), 1;
        return take_notify(c, rc);
    case S_MERGE:
        if (c->kind == C_STATUS)
            return status_reply(c, st, reply, c->sum[4]), 1;
        if (c->cancel)
            c->flagged = 1;
        step_take(c, rc);
        return 0;
    case S_NOTIFY:
        return take_drop(c, rc);
    case S_DROP:
        take_ended(c, st, reply->type == REDIS_REPLY_INTEGER && reply->integer == 1);
        return 1;
    case S_INDEX:
        step_active(c, 1, rc);
        return 0;
    case S_ACTIVE:
        step_finish(c, rc);
        return 0;
    case S_FINISH:
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
            store_eval_int(reply->element[0]) > 0)
            publish_started(c);
        plain_reply(c, st, reply);
        return 1;
    }
    return fail(c, STORE_BAD_RECORD), 1;
}

static void on_reply(redisReply *reply, void *arg)
{
    store_bc_call_t *c = arg;
    store_status_t st =
        reply == NULL || reply->type == REDIS_REPLY_ERROR ? STORE_UNAVAILABLE : STORE_OK;
    int rc = REDISC_OK;

    c->cmd = NULL;
    if (c->kind == C_PLAIN) {
        plain_reply(c, st, reply);
    } else if (step(c, st, reply, &rc) == 0) {
        if (rc == REDISC_OK)
            return; /* the next step is out */
        fail(c, status_of(rc));
    }
    call_free(c);
}

#define FAIL_KEYS(status)                                                                          \
    do {                                                                                           \
        *(status) = STORE_BAD_RECORD;                                                              \
        return NULL;                                                                               \
    } while (0)

#define PLAIN(cb) C_PLAIN, (void (*)(void))(cb)

/* Sends c's first step (step_* fills rc): c, or NULL (c freed, status set). */
static store_bc_call_t *first(store_bc_call_t *c, int rc, store_status_t *status)
{
    if (rc == REDISC_OK)
        return c;
    *status = status_of(rc);
    free(c);
    return NULL;
}

store_bc_call_t *store_bc_create(store_t *st, const char *channel_id, const char *id,
                                 const char *app, const char *body, size_t body_len,
                                 const char *callback, int64_t keep_ms, unsigned shards,
                                 store_bc_cb *cb, void *arg, store_status_t *status)
{
    char k[3][STORE_KEY_MAX], keep[NUMFMT_DEC_SIZE], n[NUMFMT_DEC_SIZE];

    if (bc_keys(st, channel_id, id, k) < 0)
        FAIL_KEYS(status);
    {
        const char *argv[] = {"EVAL",
                              store_bc_create_script,
                              "3",
                              k[0],
                              k[1],
                              k[2],
                              app,
                              body,
                              callback,
                              channel_id,
                              numfmt_dec(keep, keep_ms),
                              numfmt_dec(n, shards)};
        size_t lens[12];
        for (int i = 0; i < 12; i++)
            lens[i] = i == 7 ? body_len : strlen(argv[i]);
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
    char k[3][STORE_KEY_MAX];
    const char **keys, *head[] = {"3600000"};
    store_bc_call_t *c;

    if (n == 0 || n > STORE_BROADCAST_SLICE_MAX || bc_keys(st, channel_id, id, k) < 0)
        FAIL_KEYS(status);
    if ((keys = store_bc_member_keys(store_prefix(st), channel_id, k[0], k[1], members, n)) ==
        NULL) {
        *status = STORE_BUSY;
        return NULL;
    }
    c = send_slice(st, PLAIN(cb), arg, store_bc_add_members_script, (int)(2 + n), keys, 1, head, n,
                   members, status);
    free(keys);
    return c;
}

store_bc_call_t *store_bc_add_tag(store_t *st, const char *channel_id, const char *id,
                                  const char *tag, const char *cursor, unsigned count,
                                  store_bc_cb *cb, void *arg, store_status_t *status)
{
    char k[3][STORE_KEY_MAX], tkey[STORE_KEY_MAX], num[NUMFMT_DEC_SIZE];

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
    char k[3][STORE_KEY_MAX];
    store_bc_call_t *c;
    int rc;

    if (n == 0 || n > STORE_BROADCAST_SLICE_MAX || bc_keys(st, channel_id, id, k) < 0)
        FAIL_KEYS(status);
    if ((c = call_new(st, C_RECIPIENTS, (void (*)(void))cb, arg, channel_id, id, status)) == NULL)
        return NULL;
    c->rslice = store_bc_rslice_new(store_prefix(st), channel_id, k[0], k[1], recipients, new_ids,
                                    new_records, n, store_recipient_hints(st));
    if (c->rslice == NULL) {
        call_free(c);
        *status = STORE_BUSY;
        return NULL;
    }
    if ((rc = recipients_run(c)) != REDISC_OK) {
        call_free(c);
        *status = status_of(rc);
        return NULL;
    }
    return c;
}

int store_bc_callback_stream(char *buf, size_t size, const char *prefix)
{
    return store_key_outbox(buf, size, prefix, 0);
}

/* The id's index (SET), its running line (SADD, S_INDEX's next step), then the script: each
 * written before the broadcast may run, so that a crash between them leaves an accepting one,
 * which expires, never a running one that nobody finds. */
store_bc_call_t *store_bc_finish(store_t *st, const char *channel_id, const char *id,
                                 int64_t keep_ms, store_bc_cb *cb, void *arg,
                                 store_status_t *status)
{
    char idx[STORE_KEY_MAX], keep[NUMFMT_DEC_SIZE];
    store_bc_call_t *c;
    int rc;

    if (store_key_broadcast_channel(idx, sizeof(idx), store_prefix(st), id) < 0)
        FAIL_KEYS(status);
    if ((c = call_new(st, C_FINISH, (void (*)(void))cb, arg, channel_id, id, status)) == NULL)
        return NULL;
    c->keep_ms = keep_ms;
    c->step = S_INDEX;
    {
        const char *argv[] = {"SET", idx, channel_id, "PX", numfmt_dec(keep, keep_ms)};
        rc = issue(c, idx, 5, argv, NULL);
    }
    return first(c, rc, status);
}

void store_bc_abort(store_t *st, const char *channel_id, const char *id)
{
    char k[3][STORE_KEY_MAX], act[STORE_KEY_MAX], entry[2 * STORE_KEY_MAX];
    store_cmd_t *cmd;

    if (bc_keys(st, channel_id, id, k) < 0 ||
        store_key_broadcasts_active(act, sizeof(act), store_prefix(st)) < 0 ||
        active_entry(entry, sizeof(entry), channel_id, id) < 0)
        return;
    {
        const char *argv[] = {"DEL", k[0], k[1], k[2]};
        store_command(st, k[0], on_ignored, NULL, 4, argv, NULL, &cmd);
    }
    {
        const char *argv[] = {"SREM", act, entry};
        store_command(st, act, on_ignored, NULL, 3, argv, NULL, &cmd);
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

/* The record, then (unless it is done) every shard's counts summed into it. */
store_bc_call_t *store_bc_status(store_t *st, const char *channel_id, const char *id,
                                 store_bc_status_cb *cb, void *arg, store_status_t *status)
{
    char k[3][STORE_KEY_MAX];
    store_bc_call_t *c;
    int rc;

    if (bc_keys(st, channel_id, id, k) < 0)
        FAIL_KEYS(status);
    if ((c = call_new(st, C_STATUS, (void (*)(void))cb, arg, channel_id, id, status)) == NULL)
        return NULL;
    c->step = S_FIRST;
    {
        const char *argv[] = {"EVAL", store_bc_status_script, "1", k[0]};
        rc = issue(c, k[0], 4, argv, NULL);
    }
    return first(c, rc, status);
}

/* The record's cancel, then every shard told (store_bc_shard_script). */
store_bc_call_t *store_bc_cancel_run(store_t *st, const char *channel_id, const char *id,
                                     const char *app, store_bc_cb *cb, void *arg,
                                     store_status_t *status)
{
    char k[3][STORE_KEY_MAX];
    store_bc_call_t *c;
    int rc;

    if (bc_keys(st, channel_id, id, k) < 0)
        FAIL_KEYS(status);
    if ((c = call_new(st, C_CANCEL, (void (*)(void))cb, arg, channel_id, id, status)) == NULL)
        return NULL;
    c->step = S_FIRST;
    {
        const char *argv[] = {"EVAL", store_bc_cancel_script, "2", k[0], k[1], app};
        rc = issue(c, k[0], 6, argv, NULL);
    }
    return first(c, rc, status);
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
    store_bc_call_t *c = call_new(st, C_TAKE, (void (*)(void))cb, arg, channel_id, id, status);
    int rc = REDISC_OK;

    if (c == NULL)
        return NULL;
    c->max = max;
    c->window = window;
    c->lease_ms = lease_ms;
    step_take(c, &rc);
    return first(c, rc, status);
}

store_bc_call_t *store_bc_enqueue(store_t *st, unsigned shard, const char *channel_id,
                                  const char *id, const char *app, const store_bc_request_t *reqs,
                                  size_t n, int64_t keep_ms, int64_t ttl_ms, store_bc_cb *cb,
                                  void *arg, store_status_t *status)
{
    char k[3][STORE_KEY_MAX], stream[STORE_KEY_MAX], hash[STORE_KEY_MAX], keep[NUMFMT_DEC_SIZE],
        ttl[NUMFMT_DEC_SIZE], nkeys[NUMFMT_DEC_SIZE];
    size_t head = 3 + 2 + 2 * n + 5, argc = head + 3 * n, i = 0;
    const char **argv;
    size_t *lens;
    char(*names)[2][STORE_KEY_MAX];
    store_bc_call_t *c = NULL;

    if (n == 0 || n > STORE_BROADCAST_SLICE_MAX || bc_keys(st, channel_id, id, k) < 0 ||
        store_key_outbox(stream, sizeof(stream), store_prefix(st), shard) < 0 ||
        store_key_outbox_broadcast(hash, sizeof(hash), store_prefix(st), shard, id) < 0)
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
    argv[i++] = numfmt_dec(nkeys, (long long)(2 + 2 * n));
    argv[i++] = stream;
    argv[i++] = hash;
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
    }
    argv[i++] = numfmt_dec(keep, keep_ms);
    argv[i++] = numfmt_dec(ttl, ttl_ms);
    argv[i++] = app;
    argv[i++] = channel_id;
    argv[i++] = k[0];
    for (size_t r = 0; r < n; r++) {
        argv[i++] = reqs[r].request_id;
        argv[i++] = reqs[r].member_id;
        lens[i] = reqs[r].body_len;
        argv[i++] = reqs[r].body;
    }
    for (size_t w = 0; w < argc; w++)
        if (w < head || (w - head) % 3 != 2)
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
    char k[3][STORE_KEY_MAX];
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
