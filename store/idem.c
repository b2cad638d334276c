/* idem.c - Idempotency-Key records and per-member turns in Redis (idem.h). Every call is one
 * script (eval.h) on keys of one slot; waiting is the caller's, on the pub/sub channel named
 * like the key. */
#include "idem.h"

#include "eval.h"
#include "../core/numfmt.h"

#include <stdlib.h>
#include <string.h>

/* Redis's clock, in ms: the one every instance shares. */
#define NOW_MS "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "

/* KEYS[1] the record; ARGV fp, owner, lease_ms, ttl_ms. */
static const char BEGIN_SCRIPT[] =
    NOW_MS "local r = redis.call('HMGET', KEYS[1], 'fp', 'status', 'code', 'body', 'lease') "
           "if not r[1] then "
           "redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'owner', ARGV[2], 'lease', now + ARGV[3]) "
           "redis.call('PEXPIRE', KEYS[1], ARGV[4]) return {'run'} end "
           "if r[1] ~= ARGV[1] then return {'conflict'} end "
           "if r[2] then return {'done', r[2], r[3], r[4]} end "
           "local left = tonumber(r[5]) - now "
           "if left > 0 then return {'wait', tostring(left)} end "
           "redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'lease', now + ARGV[3]) "
           "local at = tonumber(redis.call('HGET', KEYS[1], 'at') or '0') "
           "local out = {'resume', at} "
           "for i = 0, at - 1 do out[#out + 1] = redis.call('HGET', KEYS[1], 'e' .. i) end "
           "return out";

/* KEYS[1] the record; ARGV owner, the index delivered, its element. A response's call may go
 * out once 'at' names it: before it, the record says the earlier ones are done. A new record
 * has no 'at': its first response's call may go out (a request that resumes it reports that
 * one as outcome unknown, not sent again). */
static const char PROGRESS_SCRIPT[] =
    "if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end "
    "redis.call('HSET', KEYS[1], 'e' .. ARGV[2], ARGV[3], 'at', ARGV[2] + 1) return 1";

/* KEYS[1] the record; ARGV owner, status, code, body, ttl_ms. The progress ('at' and the
 * e<i> elements) goes with the same write: the answer holds every element again, and a record
 * answered is replayed, never resumed (a 1 MB request's record held 2.4 MB for a day). */
static const char FINISH_SCRIPT[] =
    "if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and "
    "redis.call('HEXISTS', KEYS[1], 'status') == 0 then "
    "local drop = {'at'} "
    "for i = 0, tonumber(redis.call('HGET', KEYS[1], 'at') or '0') - 1 do "
    "drop[#drop + 1] = 'e' .. i end "
    "redis.call('HDEL', KEYS[1], unpack(drop)) "
    "redis.call('HSET', KEYS[1], 'status', ARGV[2], 'code', ARGV[3], 'body', ARGV[4]) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[5]) end "
    "redis.call('PUBLISH', KEYS[1], 'done') return 1";

/* KEYS[1] the record; ARGV owner. */
static const char ABANDON_SCRIPT[] =
    "if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and "
    "redis.call('HEXISTS', KEYS[1], 'status') == 0 then redis.call('DEL', KEYS[1]) end "
    "redis.call('PUBLISH', KEYS[1], 'gone') return 1";

/* KEYS[1] the member's queue (ticket -> ticket), KEYS[2] its leases (ticket -> lease end, and
 * the counter 'seq'). head() drops the tickets ahead whose lease ran out (their instance died)
 * and says who is first; whoever dropped one tells the queue's channel. */
#define TURN_HEAD                                                                                  \
    NOW_MS                                                                                         \
    "local function head() local dropped = false while true do "                                   \
    "local h = redis.call('ZRANGE', KEYS[1], 0, 0)[1] "                                            \
    "if not h then return nil, 0, dropped end "                                                    \
    "local lease = tonumber(redis.call('HGET', KEYS[2], h) or '0') "                               \
    "if lease > now then return h, lease, dropped end "                                            \
    "redis.call('ZREM', KEYS[1], h) redis.call('HDEL', KEYS[2], h) dropped = true end end "

/* ARGV lease_ms. */
static const char TAKE_SCRIPT[] = TURN_HEAD
    "local n = redis.call('HINCRBY', KEYS[2], 'seq', 1) "
    "redis.call('ZADD', KEYS[1], n, n) redis.call('HSET', KEYS[2], n, now + ARGV[1]) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[1] * 3) redis.call('PEXPIRE', KEYS[2], ARGV[1] * 3) "
    "local h, lease, dropped = head() "
    "if dropped and h then redis.call('PUBLISH', KEYS[1], h) end "
    "if h == tostring(n) then return {n, 0} end return {n, lease - now}";

/* ARGV ticket. A ticket no longer queued (its own lease ran out) goes: its deadline did too. */
static const char CHECK_SCRIPT[] =
    TURN_HEAD "local h, lease, dropped = head() "
              "if dropped and h then redis.call('PUBLISH', KEYS[1], h) end "
              "if h == nil or h == ARGV[1] or not redis.call('ZSCORE', KEYS[1], ARGV[1]) then "
              "return {tonumber(ARGV[1]), 0} end "
              "return {tonumber(ARGV[1]), lease - now}";

/* ARGV ticket. */
static const char DONE_SCRIPT[] =
    TURN_HEAD "redis.call('ZREM', KEYS[1], ARGV[1]) redis.call('HDEL', KEYS[2], ARGV[1]) "
              "local h = head() if h then redis.call('PUBLISH', KEYS[1], h) end return 1";

static _Thread_local store_script_t begin_script = STORE_SCRIPT(BEGIN_SCRIPT);
static _Thread_local store_script_t progress_script = STORE_SCRIPT(PROGRESS_SCRIPT);
static _Thread_local store_script_t finish_script = STORE_SCRIPT(FINISH_SCRIPT);
static _Thread_local store_script_t abandon_script = STORE_SCRIPT(ABANDON_SCRIPT);
static _Thread_local store_script_t take_script = STORE_SCRIPT(TAKE_SCRIPT);
static _Thread_local store_script_t check_script = STORE_SCRIPT(CHECK_SCRIPT);
static _Thread_local store_script_t done_script = STORE_SCRIPT(DONE_SCRIPT);

typedef enum { IDEM_BEGIN, IDEM_PROGRESS, TURN } call_kind_t;

#define RESUME_MAX 64 /* responses of one request: 50 at most (request.h) */

/* Owned by the store from its start until its callback has run or it is cancelled. */
struct store_idem_call {
    call_kind_t kind;
    store_idem_cb *idem_cb; /* as kind says: one of the two */
    store_turn_cb *turn_cb;
    store_idem_progress_cb *progress_cb;
    void *arg;
    store_eval_t *ev;
};

void store_idem_cancel(store_idem_call_t *call)
{
    if (call == NULL)
        return;
    store_eval_cancel(call->ev);
    free(call);
}

static int64_t reply_int(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return (int64_t)r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return -1;
}

/* The elements of a resume answer, pointing into the reply. */
typedef struct resumed {
    const char *texts[RESUME_MAX];
    size_t lens[RESUME_MAX];
} resumed_t;

static int idem_decode(const redisReply *r, store_idem_t *res, resumed_t *rs)
{
    const char *what;

    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return -1;
    what = r->element[0]->str;
    memset(res, 0, sizeof(*res));
    if (strcmp(what, "run") == 0) {
        res->state = STORE_IDEM_RUN;
    } else if (strcmp(what, "resume") == 0 && r->elements >= 2) {
        int64_t at = reply_int(r->element[1]);
        if (at < 0 || at >= RESUME_MAX)
            return -1;
        res->state = STORE_IDEM_RESUME;
        res->at = (unsigned)at;
        /* Redis ends an array at its first nil: the elements after a missing one are lost,
         * and count as not recorded */
        for (size_t i = 2; i < r->elements && i - 2 < (size_t)at; i++) {
            if (r->element[i]->type != REDIS_REPLY_STRING)
                break;
            rs->texts[res->n_elements] = r->element[i]->str;
            rs->lens[res->n_elements++] = r->element[i]->len;
        }
        res->elements = rs->texts;
        res->element_lens = rs->lens;
    } else if (strcmp(what, "conflict") == 0) {
        res->state = STORE_IDEM_CONFLICT;
    } else if (strcmp(what, "wait") == 0 && r->elements == 2) {
        res->state = STORE_IDEM_WAIT;
        res->wait_ms = reply_int(r->element[1]);
    } else if (strcmp(what, "done") == 0 && r->elements == 4 &&
               r->element[3]->type == REDIS_REPLY_STRING) {
        res->state = STORE_IDEM_DONE;
        res->status = (int)reply_int(r->element[1]);
        res->code = (int)reply_int(r->element[2]);
        res->body = r->element[3]->str;
        res->len = r->element[3]->len;
        /* 202: a request accepted for the outbox (Prefer: respond-async) */
        if (res->status != 200 && res->status != 202 && res->status != 500 && res->status != 413)
            return -1;
    } else {
        return -1;
    }
    return 0;
}

static void on_reply(redisReply *reply, void *arg)
{
    store_idem_call_t *c = arg;
    store_status_t st =
        reply == NULL || reply->type == REDIS_REPLY_ERROR ? STORE_UNAVAILABLE : STORE_OK;

    if (c->kind == IDEM_BEGIN) {
        store_idem_t res;
        resumed_t rs;
        if (st == STORE_OK && idem_decode(reply, &res, &rs) < 0)
            st = STORE_BAD_RECORD;
        c->idem_cb(c->arg, st, st == STORE_OK ? &res : NULL);
    } else if (c->kind == IDEM_PROGRESS) {
        if (st == STORE_OK && reply_int(reply) != 1)
            st = STORE_CONFLICT;
        c->progress_cb(c->arg, st);
    } else {
        int64_t ticket = -1, wait_ms = 0;
        if (st == STORE_OK && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) {
            ticket = reply_int(reply->element[0]);
            wait_ms = reply_int(reply->element[1]);
        }
        if (st == STORE_OK && (ticket < 0 || wait_ms < 0))
            st = STORE_BAD_RECORD;
        c->turn_cb(c->arg, st, ticket, wait_ms);
    }
    free(c);
}

/* Runs script on words (nkeys keys first); with is the call to answer, NULL when nobody waits
 * for the answer. */
static store_idem_call_t *run(store_t *st, store_script_t *script, const store_idem_call_t *with,
                              int nkeys, int nwords, const char *const *words, const size_t *lens,
                              store_status_t *status)
{
    store_idem_call_t *c = NULL;
    int rc;

    if (with != NULL && (c = malloc(sizeof(*c))) == NULL) {
        if (status != NULL)
            *status = STORE_UNAVAILABLE;
        return NULL;
    }
    if (c != NULL)
        *c = *with;
    rc = store_eval(st, script, nkeys, nwords, words, lens, c != NULL ? on_reply : NULL, c,
                    c != NULL ? &c->ev : NULL);
    if (rc != REDISC_OK) {
        free(c);
        if (status != NULL)
            *status = rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
        return NULL;
    }
    return c;
}

int store_idem_key(store_t *st, char *buf, size_t size, const char *app, const char *route,
                   const char *key)
{
    return store_key_idem(buf, size, store_prefix(st), app, route, key);
}

store_idem_call_t *store_idem_begin(store_t *st, const char *key, const char *fp, const char *owner,
                                    int lease_ms, int ttl_s, store_idem_cb *cb, void *arg,
                                    store_status_t *status)
{
    char lease[NUMFMT_DEC_SIZE], ttl[NUMFMT_DEC_SIZE];
    /* the record outlives the lease of whoever runs it, answered or not */
    long long keep = (long long)ttl_s * 1000 > lease_ms ? (long long)ttl_s * 1000 : lease_ms;

    {
        const char *words[] = {key, fp, owner, numfmt_dec(lease, lease_ms), numfmt_dec(ttl, keep)};
        return run(st, &begin_script,
                   &(store_idem_call_t){.kind = IDEM_BEGIN, .idem_cb = cb, .arg = arg}, 1, 5, words,
                   NULL, status);
    }
}

void store_idem_finish(store_t *st, const char *key, const char *owner, int status, int code,
                       const char *body, size_t len, int ttl_s)
{
    char s[NUMFMT_DEC_SIZE], c[NUMFMT_DEC_SIZE], ttl[NUMFMT_DEC_SIZE];
    const char *words[] = {key,          owner, numfmt_dec(s, status),
                           numfmt_dec(c, code), body,  numfmt_dec(ttl, (long long)ttl_s * 1000)};
    size_t lens[6];

    for (int i = 0; i < 6; i++)
        lens[i] = i == 4 ? len : strlen(words[i]);
    run(st, &finish_script, NULL, 1, 6, words, lens, NULL);
}

store_idem_call_t *store_idem_progress(store_t *st, const char *key, const char *owner,
                                       unsigned done, const char *element, size_t len,
                                       store_idem_progress_cb *cb, void *arg,
                                       store_status_t *status)
{
    char index[NUMFMT_DEC_SIZE];
    const char *words[] = {key, owner, numfmt_dec(index, done), element};
    size_t lens[4];

    for (int i = 0; i < 4; i++)
        lens[i] = i == 3 ? len : strlen(words[i]);
    return run(st, &progress_script,
               &(store_idem_call_t){.kind = IDEM_PROGRESS, .progress_cb = cb, .arg = arg}, 1, 4,
               words, lens, status);
}

void store_idem_abandon(store_t *st, const char *key, const char *owner)
{
    const char *words[] = {key, owner};

    run(st, &abandon_script, NULL, 1, 2, words, NULL, NULL);
}

int store_turn_key(store_t *st, char *buf, size_t size, const char *channel_id,
                   const char *member_id)
{
    return store_key_turns(buf, size, store_prefix(st), channel_id, member_id);
}

/* A turn script on the member's two keys with one argument. */
static store_idem_call_t *turn_eval(store_t *st, store_script_t *script, const char *channel_id,
                                    const char *member_id, const char *value, store_turn_cb *cb,
                                    void *arg, store_status_t *status)
{
    char turns[STORE_KEY_MAX], leases[STORE_KEY_MAX];

    if (store_key_turns(turns, sizeof(turns), store_prefix(st), channel_id, member_id) < 0 ||
        store_key_leases(leases, sizeof(leases), store_prefix(st), channel_id, member_id) < 0) {
        if (status != NULL)
            *status = STORE_BAD_RECORD;
        return NULL;
    }
    {
        const char *words[] = {turns, leases, value};
        return run(st, script,
                   cb ? &(store_idem_call_t){.kind = TURN, .turn_cb = cb, .arg = arg} : NULL, 2, 3,
                   words, NULL, status);
    }
}

store_idem_call_t *store_turn_take(store_t *st, const char *channel_id, const char *member_id,
                                   int lease_ms, store_turn_cb *cb, void *arg,
                                   store_status_t *status)
{
    char lease[NUMFMT_DEC_SIZE];

    return turn_eval(st, &take_script, channel_id, member_id, numfmt_dec(lease, lease_ms), cb, arg,
                     status);
}

store_idem_call_t *store_turn_check(store_t *st, const char *channel_id, const char *member_id,
                                    int64_t ticket, store_turn_cb *cb, void *arg,
                                    store_status_t *status)
{
    char t[NUMFMT_DEC_SIZE];

    return turn_eval(st, &check_script, channel_id, member_id, numfmt_dec(t, ticket), cb, arg, status);
}

void store_turn_done(store_t *st, const char *channel_id, const char *member_id, int64_t ticket)
{
    char t[NUMFMT_DEC_SIZE];

    turn_eval(st, &done_script, channel_id, member_id, numfmt_dec(t, ticket), NULL, NULL, NULL);
}
