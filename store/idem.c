/* idem.c - Idempotency-Key records and per-member turns in Redis (idem.h). Every call is one
 * script (eval.h) on keys of one slot; waiting is the caller's, on the pub/sub channel named
 * like the key. */
#include "idem.h"

#include "eval.h"
#include "idemlua.h"
#include "../json/numfmt.h"

#include <stdlib.h>
#include <string.h>

/* KEYS[1] the record; ARGV fp, owner, ttl_ms (what 'held' says), ttl_ms + lease_ms
 * (idemlua.h). */
static const char BEGIN_SCRIPT[] =
    IDEM_BEGIN_LUA("KEYS[1]", "ARGV[1]", "ARGV[2]", "ARGV[3]", "ARGV[4]", "return {'run'}");

/* KEYS[1] the record; ARGV owner, the index delivered, its element. A response's call may go
 * out once 'at' names it: before it, the record says the earlier ones are done. A new record
 * has no 'at': its first response's call may go out (a request that resumes it reports that
 * one as outcome unknown, not sent again). */
static const char PROGRESS_SCRIPT[] =
    "if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end "
    "redis.call('HSET', KEYS[1], 'e' .. ARGV[2], ARGV[3], 'at', ARGV[2] + 1) return 1";

/* KEYS[1] the record; ARGV owner, status, code, body. The progress ('at' and the e<i>
 * elements) goes with the same write: the answer holds every element again, and a record
 * answered is replayed, never resumed (a 1 MB request's record held 2.4 MB for a day). */
static const char FINISH_SCRIPT[] =
    /* one read, no HDEL for a record without progress (a request of one response has none),
     * no PEXPIRE (begin's TTL covers ttl after the lease) and no PUBLISH unless a duplicate
     * waits: 2 redis.call for it, not 7 */
    "local r = redis.call('HMGET', KEYS[1], 'owner', 'status', 'at', 'w') "
    "if r[1] == ARGV[1] and not r[2] then "
    "if r[3] then local drop = {'at'} "
    "for i = 0, tonumber(r[3]) - 1 do drop[#drop + 1] = 'e' .. i end "
    "redis.call('HDEL', KEYS[1], unpack(drop)) end "
    "redis.call('HSET', KEYS[1], 'status', ARGV[2], 'code', ARGV[3], 'body', ARGV[4]) end "
    "if r[4] then redis.call('PUBLISH', KEYS[1], 'done') end return 1";

/* KEYS[1] the record; ARGV owner. */
static const char ABANDON_SCRIPT[] =
    "local r = redis.call('HMGET', KEYS[1], 'owner', 'status', 'w') "
    "if r[1] == ARGV[1] and not r[2] then redis.call('DEL', KEYS[1]) end "
    "if r[3] then redis.call('PUBLISH', KEYS[1], 'gone') end return 1";

/* Per-member order. KEYS[1] the member's queue: a list of turn ids in the order they reached
 * Redis, the first holds the turn; KEYS[2] its leases: a hash, turn id -> lease end (Redis's
 * clock, ms). A request alone takes its turn without a script (store_turn_take: RPUSH, then
 * PEXPIRE NX: the queue's TTL is then the holder's lease) and gives it back with LREM; this
 * script runs only when someone is ahead, when it is first queued (ARGV[3] '1') and at each
 * check after. It records the lease of the one ahead while the queue's TTL still is it (before
 * the TTL grows to cover the waiters), its own, keeps both keys as long as the longest lease,
 * drops the heads whose lease ran out (their instance died) and tells the queue's channel the
 * new head. ARGV id, lease_ms, first. -> {0} its turn (or it was dropped: its own lease ran
 * out), {ms} the lease left of the one ahead. */
static const char JOIN_SCRIPT[] = STORE_LUA_NOW_MS
    "local q, w, me, left = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]) "
    "local ttl = redis.call('PTTL', q) "
    "local function lease(id) local l = redis.call('HGET', w, id) "
    "if l then return tonumber(l) end "
    /* not recorded: the queue's TTL is its lease; none yet (its PEXPIRE follows its RPUSH).
     * A queue that holds a queued request's place (the outbox) lives for hours: an id that
     * never recorded its lease there (its instance died before it joined) holds it no longer
     * than a request's deadline (it came before this one: its deadline is before ours) */
    "if ttl > 0 then return now + math.min(ttl, left) end return now + left end "
    "local h = redis.call('LINDEX', q, 0) "
    "if h and h ~= me and redis.call('HEXISTS', w, h) == 0 then "
    "redis.call('HSET', w, h, lease(h)) end "
    "if not redis.call('LPOS', q, me) then "
    "if ARGV[3] ~= '1' then return {0} end "
    "redis.call('RPUSH', q, me) end "
    "if ARGV[3] == '1' then redis.call('HSET', w, me, now + left) "
    /* fields of ids that left without a word (their own lease ran out) */
    "if redis.call('HLEN', w) > 2 * redis.call('LLEN', q) + 16 then "
    "for _, id in ipairs(redis.call('HKEYS', w)) do "
    "if not redis.call('LPOS', q, id) then redis.call('HDEL', w, id) end end end end "
    "if left > ttl then redis.call('PEXPIRE', q, left) redis.call('PEXPIRE', w, left) "
    "else redis.call('PEXPIRE', w, ttl) end "
    "local dropped = false "
    "while true do h = redis.call('LINDEX', q, 0) "
    "if not h or h == me or lease(h) > now then break end "
    "redis.call('LPOP', q) redis.call('HDEL', w, h) dropped = true end "
    "if dropped and h then redis.call('PUBLISH', q, h) end "
    "if not h or h == me then return {0} end "
    "return {lease(h) - now}";

static _Thread_local store_script_t begin_script = STORE_SCRIPT(BEGIN_SCRIPT);
static _Thread_local store_script_t progress_script = STORE_SCRIPT(PROGRESS_SCRIPT);
static _Thread_local store_script_t finish_script = STORE_SCRIPT(FINISH_SCRIPT);
static _Thread_local store_script_t abandon_script = STORE_SCRIPT(ABANDON_SCRIPT);
static _Thread_local store_script_t join_script = STORE_SCRIPT(JOIN_SCRIPT);

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
    /* a begin held (store_idem_begin_held): its words, key, fp, owner, held and ttl, each with
     * its NUL, until it is sent (alone, or riding); NULL once sent */
    store_t *st;
    char *words;
    unsigned riding : 1; /* sent with the slots taken ahead: their answer frees it */
};

void store_idem_cancel(store_idem_call_t *call)
{
    if (call == NULL)
        return;
    if (call->riding) {
        call->idem_cb = NULL; /* the slots' answer comes for both, and frees it */
        return;
    }
    store_eval_cancel(call->ev);
    free(call->words);
    free(call);
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
        int64_t at = store_eval_int(r->element[1]);
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
        res->wait_ms = store_eval_int(r->element[1]);
    } else if (strcmp(what, "done") == 0 && r->elements == 4 &&
               r->element[3]->type == REDIS_REPLY_STRING) {
        res->state = STORE_IDEM_DONE;
        res->status = (int)store_eval_int(r->element[1]);
        res->code = (int)store_eval_int(r->element[2]);
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

/* A begin's answer to its caller; ran: it said run by going on (to the slots it rode with). */
static void begin_answer(store_idem_call_t *c, const redisReply *reply, int ran)
{
    store_status_t st =
        reply == NULL || reply->type == REDIS_REPLY_ERROR ? STORE_UNAVAILABLE : STORE_OK;
    store_idem_t res;
    resumed_t rs;

    if (st == STORE_OK && ran) {
        memset(&res, 0, sizeof(res));
        res.state = STORE_IDEM_RUN;
    } else if (st == STORE_OK && idem_decode(reply, &res, &rs) < 0) {
        st = STORE_BAD_RECORD;
    }
    c->idem_cb(c->arg, st, st == STORE_OK ? &res : NULL);
}

static void on_reply(redisReply *reply, void *arg)
{
    store_idem_call_t *c = arg;
    store_status_t st =
        reply == NULL || reply->type == REDIS_REPLY_ERROR ? STORE_UNAVAILABLE : STORE_OK;

    if (c->kind == IDEM_BEGIN) {
        begin_answer(c, reply, 0);
    } else if (c->kind == IDEM_PROGRESS) {
        if (st == STORE_OK && store_eval_int(reply) != 1)
            st = STORE_CONFLICT;
        c->progress_cb(c->arg, st);
    } else {
        int64_t wait_ms = -1;
        if (st == STORE_OK && reply->type == REDIS_REPLY_ARRAY && reply->elements == 1)
            wait_ms = store_eval_int(reply->element[0]);
        if (st == STORE_OK && wait_ms < 0)
            st = STORE_BAD_RECORD;
        c->turn_cb(c->arg, st, wait_ms);
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

/* Runs a script of one record that answers 1 when it did what it does (progress, finish,
 * abandon); cb (NULL: nobody asks) is told so. */
static store_idem_call_t *run_acked(store_t *st, store_script_t *script, store_idem_progress_cb *cb,
                                    void *arg, int nwords, const char *const *words,
                                    const size_t *lens, store_status_t *status)
{
    store_idem_call_t with = {.kind = IDEM_PROGRESS, .progress_cb = cb, .arg = arg};

    return run(st, script, cb != NULL ? &with : NULL, 1, nwords, words, lens, status);
}

int store_idem_key(store_t *st, char *buf, size_t size, const char *app, const char *route,
                   const char *key)
{
    return store_key_idem(buf, size, store_prefix(st), app, route, key);
}

store_idem_call_t *store_idem_begin_held(store_t *st, const char *key, const char *fp,
                                         const char *owner, int lease_ms, int ttl_s,
                                         store_idem_cb *cb, void *arg, store_status_t *status)
{
    char held[NUMFMT_DEC_SIZE], keep[NUMFMT_DEC_SIZE];
    long long ttl_ms = (long long)ttl_s * 1000;
    /* the record's TTL: the lease, then the answer's ttl (IDEM_BEGIN_LUA) */
    const char *words[5] = {key, fp, owner, numfmt_dec(held, ttl_ms),
                            numfmt_dec(keep, ttl_ms + (lease_ms > 0 ? lease_ms : 1))};
    size_t lens[5], size = 0;
    store_idem_call_t *c = calloc(1, sizeof(*c));
    char *p;

    for (int i = 0; i < 5; i++)
        size += (lens[i] = strlen(words[i])) + 1;
    if (c == NULL || (c->words = p = malloc(size)) == NULL) {
        free(c);
        if (status != NULL)
            *status = STORE_UNAVAILABLE;
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        memcpy(p, words[i], lens[i] + 1);
        p += lens[i] + 1;
    }
    c->kind = IDEM_BEGIN;
    c->idem_cb = cb;
    c->arg = arg;
    c->st = st;
    return c;
}

int store_idem_ride_words(const store_idem_call_t *call, const char *words[5])
{
    const char *p = call->words;

    if (p == NULL || call->riding)
        return -1;
    for (int i = 0; i < 5; i++) {
        words[i] = p;
        p += strlen(p) + 1;
    }
    return 0;
}

void store_idem_riding(store_idem_call_t *call)
{
    call->riding = 1;
    free(call->words); /* the ride's command holds them now */
    call->words = NULL;
}

void store_idem_ridden(store_idem_call_t *call, const redisReply *reply, int ran)
{
    if (call->idem_cb != NULL)
        begin_answer(call, reply, ran);
    free(call);
}

int store_idem_begin_send(store_idem_call_t *call, store_status_t *status)
{
    const char *words[5];
    int rc;

    if (store_idem_ride_words(call, words) < 0)
        return 0; /* it rides, or went already */
    rc = store_eval(call->st, &begin_script, 1, 5, words, NULL, on_reply, call, &call->ev);
    free(call->words);
    call->words = NULL;
    if (rc != REDISC_OK) {
        free(call);
        if (status != NULL)
            *status = rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
        return -1;
    }
    return 0;
}

store_idem_call_t *store_idem_begin(store_t *st, const char *key, const char *fp, const char *owner,
                                    int lease_ms, int ttl_s, store_idem_cb *cb, void *arg,
                                    store_status_t *status)
{
    store_idem_call_t *c =
        store_idem_begin_held(st, key, fp, owner, lease_ms, ttl_s, cb, arg, status);

    return c != NULL && store_idem_begin_send(c, status) == 0 ? c : NULL;
}

store_idem_call_t *store_idem_finish(store_t *st, const char *key, const char *owner,
                                     int http_status, int code, const char *body, size_t len,
                                     store_idem_progress_cb *cb, void *arg, store_status_t *status)
{
    char s[NUMFMT_DEC_SIZE], c[NUMFMT_DEC_SIZE];
    const char *words[] = {key, owner, numfmt_dec(s, http_status), numfmt_dec(c, code), body};
    size_t lens[5];

    for (int i = 0; i < 5; i++)
        lens[i] = i == 4 ? len : strlen(words[i]);
    return run_acked(st, &finish_script, cb, arg, 5, words, lens, status);
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
    return run_acked(st, &progress_script, cb, arg, 4, words, lens, status);
}

store_idem_call_t *store_idem_abandon(store_t *st, const char *key, const char *owner,
                                      store_idem_progress_cb *cb, void *arg, store_status_t *status)
{
    const char *words[] = {key, owner};

    return run_acked(st, &abandon_script, cb, arg, 2, words, NULL, status);
}

/* On one server the names of before (an upgrade keeps every member's order); with a cluster in
 * the member's outbox shard's slot. */
int store_turn_key(store_t *st, char *buf, size_t size, unsigned shard, const char *channel_id,
                   const char *member_id)
{
    return store_redis(st) != NULL
               ? store_key_turns(buf, size, store_prefix(st), channel_id, member_id)
               : store_key_outbox_turns(buf, size, store_prefix(st), shard, channel_id, member_id);
}

int store_turn_keys(store_t *st, unsigned shard, const char *channel_id, const char *member_id,
                    char turns[STORE_KEY_MAX], char leases[STORE_KEY_MAX])
{
    const char *prefix = store_prefix(st);
    int n;

    if (store_turn_key(st, turns, STORE_KEY_MAX, shard, channel_id, member_id) < 0)
        return -1;
    if (store_redis(st) != NULL)
        n = store_key_leases(leases, STORE_KEY_MAX, prefix, channel_id, member_id);
    else
        n = store_key_outbox_leases(leases, STORE_KEY_MAX, prefix, shard, channel_id, member_id);
    return n < 0 ? -1 : 0;
}

/* Sends one command on key's server; 0, or -1 with *status set. */
static int send(store_t *st, const char *key, redisc_cb *cb, void *arg, int argc, const char **argv,
                store_cmd_t **out, store_status_t *status)
{
    store_cmd_t *ignored;
    int rc = store_command(st, key, cb, arg, argc, argv, NULL, out != NULL ? out : &ignored);

    if (rc == REDISC_OK)
        return 0;
    if (status != NULL)
        *status = rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
    return -1;
}

/* ---- store_turn_take: GET of the member, RPUSH, PEXPIRE NX, one round trip ---- */

enum { TAKE_MEMBER, TAKE_PUSH, TAKE_EXPIRE, TAKE_PARTS };

struct store_turn_take {
    store_t *st;
    store_turn_taken_cb *cb;
    void *arg;
    int brief;   /* the member read decodes only _id and externalId; -1: no member read */
    int pending; /* replies still to come */
    store_status_t st_turn, st_member;
    long long pushed; /* the queue's length after the RPUSH: 1, the turn is ours */
    json_t *member;
    store_cmd_t *cmd[TAKE_PARTS];
};

typedef struct take_part {
    store_turn_take_t *t;
    int part;
} take_part_t;

void store_turn_take_cancel(store_turn_take_t *t)
{
    if (t == NULL)
        return;
    for (int i = 0; i < TAKE_PARTS; i++)
        if (t->cmd[i] != NULL)
            store_command_cancel(t->st, t->cmd[i]);
    json_decref(t->member);
    free(t);
}

static void on_take_part(redisReply *reply, void *arg);

/* The parts of one take: on one server its replies come in this order on one connection, but
 * each is answered by itself (with a cluster the member's read goes to its channel's master and
 * the queue's commands to its outbox shard's, and one may be redirected), so the call ends with
 * the last of them. */
static void on_take_reply(store_turn_take_t *t, int part, redisReply *reply)
{
    int failed = reply == NULL || reply->type == REDIS_REPLY_ERROR;

    t->cmd[part] = NULL;
    if (part == TAKE_MEMBER) {
        t->st_member = store_member_from_reply(reply, t->brief, &t->member);
    } else if (part == TAKE_PUSH) {
        if (failed || reply->type != REDIS_REPLY_INTEGER || reply->integer < 1)
            t->st_turn = STORE_UNAVAILABLE;
        else
            t->pushed = reply->integer;
    } else if (failed) {
        t->st_turn = STORE_UNAVAILABLE;
    }
    if (--t->pending > 0)
        return;
    {
        json_t *member = t->member;
        t->member = NULL;
        t->cb(t->arg, t->st_turn, t->st_turn == STORE_OK && t->pushed > 1, t->st_member, member);
    }
    free(t);
}

store_turn_take_t *store_turn_take(store_t *st, unsigned shard, const char *channel_id,
                                   const char *member_id, const char *id, int lease_ms, int brief,
                                   store_turn_taken_cb *cb, void *arg, store_status_t *status)
{
    char turns[STORE_KEY_MAX], member[STORE_KEY_MAX], ms[NUMFMT_DEC_SIZE];
    store_turn_take_t *t;

    /* the queue alone: its leases are the script's (store_turn_join) and the give-back's */
    if (store_turn_key(st, turns, sizeof(turns), shard, channel_id, member_id) < 0 ||
        (brief >= 0 &&
         store_key_member(member, sizeof(member), store_prefix(st), channel_id, member_id) < 0)) {
        if (status != NULL)
            *status = STORE_BAD_RECORD;
        return NULL;
    }
    if ((t = calloc(1, sizeof(*t) + TAKE_PARTS * sizeof(take_part_t))) == NULL) {
        if (status != NULL)
            *status = STORE_UNAVAILABLE;
        return NULL;
    }
    t->st = st;
    t->cb = cb;
    t->arg = arg;
    t->brief = brief;
    {
        take_part_t *parts = (take_part_t *)(t + 1);
        const char *get[] = {"GET", member};
        const char *push[] = {"RPUSH", turns, id};
        /* NX: only a queue the RPUSH made has no TTL: its TTL is then our lease; a queue that
         * waiters keep has theirs (JOIN_SCRIPT) */
        const char *expire[] = {"PEXPIRE", turns, numfmt_dec(ms, lease_ms), "NX"};
        for (int i = 0; i < TAKE_PARTS; i++)
            parts[i] = (take_part_t){t, i};
        if ((brief >= 0 && send(st, member, on_take_part, &parts[TAKE_MEMBER], 2, get,
                                &t->cmd[TAKE_MEMBER], status) < 0) ||
            send(st, turns, on_take_part, &parts[TAKE_PUSH], 3, push, &t->cmd[TAKE_PUSH], status) <
                0 ||
            send(st, turns, on_take_part, &parts[TAKE_EXPIRE], 4, expire, &t->cmd[TAKE_EXPIRE],
                 status) < 0) {
            /* what went out ends in Redis: the caller gives the turn back (store_turn_done) */
            store_turn_take_cancel(t);
            return NULL;
        }
        t->pending = brief >= 0 ? TAKE_PARTS : TAKE_PARTS - 1;
    }
    return t;
}

static void on_take_part(redisReply *reply, void *arg)
{
    take_part_t *p = arg;

    on_take_reply(p->t, p->part, reply);
}

store_idem_call_t *store_turn_join(store_t *st, unsigned shard, const char *channel_id,
                                   const char *member_id, const char *id, int lease_ms, int first,
                                   store_turn_cb *cb, void *arg, store_status_t *status)
{
    char turns[STORE_KEY_MAX], leases[STORE_KEY_MAX], ms[NUMFMT_DEC_SIZE];

    if (store_turn_keys(st, shard, channel_id, member_id, turns, leases) < 0) {
        if (status != NULL)
            *status = STORE_BAD_RECORD;
        return NULL;
    }
    {
        const char *words[] = {turns, leases, id, numfmt_dec(ms, lease_ms), first ? "1" : "0"};
        return run(st, &join_script, &(store_idem_call_t){.kind = TURN, .turn_cb = cb, .arg = arg},
                   2, 5, words, NULL, status);
    }
}

/* ---- store_turn_done: LREM and LINDEX; when someone waits, HDEL and PUBLISH ---- */

/* Both answers are in when pending is 0 (a cluster may redirect one: their order is not
 * relied on). */
typedef struct turn_done {
    store_t *st;
    int pending;
    int removed;  /* the LREM's answer: 1, the id was queued */
    int recorded; /* the id's lease was recorded: its field goes */
    char *head;   /* the LINDEX's answer: the queue's first id after the LREM, or NULL */
    char *turns, *leases, *id;
    char buf[];
} turn_done_t;

static void done_end(turn_done_t *d)
{
    int waits;

    if (--d->pending > 0)
        return;
    waits = d->removed && d->head != NULL;
    if (waits || d->recorded) {
        const char *hdel[] = {"HDEL", d->leases, d->id};
        send(d->st, d->leases, NULL, NULL, 3, hdel, NULL, NULL);
    }
    if (waits) {
        /* the id whose turn it is now: its request listens on the queue's channel */
        const char *publish[] = {"PUBLISH", d->turns, d->head};
        send(d->st, d->turns, NULL, NULL, 3, publish, NULL, NULL);
    }
    free(d->head);
    free(d);
}

static void on_done_removed(redisReply *reply, void *arg)
{
    turn_done_t *d = arg;

    d->removed = reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer > 0;
    done_end(d);
}

static void on_done_head(redisReply *reply, void *arg)
{
    turn_done_t *d = arg;

    if (reply != NULL && reply->type == REDIS_REPLY_STRING)
        d->head = strndup(reply->str, reply->len);
    done_end(d);
}

void store_turn_done(store_t *st, unsigned shard, const char *channel_id, const char *member_id,
                     const char *id, int recorded)
{
    char turns[STORE_KEY_MAX], leases[STORE_KEY_MAX];
    size_t nt, nl, ni = strlen(id);
    turn_done_t *d;

    if (store_turn_keys(st, shard, channel_id, member_id, turns, leases) < 0)
        return;
    nt = strlen(turns);
    nl = strlen(leases);
    if ((d = calloc(1, sizeof(*d) + nt + nl + ni + 3)) == NULL)
        return;
    d->st = st;
    d->recorded = recorded;
    d->pending = 2;
    d->turns = memcpy(d->buf, turns, nt + 1);
    d->leases = memcpy(d->buf + nt + 1, leases, nl + 1);
    d->id = memcpy(d->buf + nt + nl + 2, id, ni + 1);
    {
        const char *lrem[] = {"LREM", d->turns, "1", d->id};
        const char *lindex[] = {"LINDEX", d->turns, "0"};
        if (send(st, d->turns, on_done_removed, d, 4, lrem, NULL, NULL) < 0) {
            free(d);
            return;
        }
        if (send(st, d->turns, on_done_head, d, 3, lindex, NULL, NULL) < 0)
            d->pending = 1; /* the LREM's answer ends it; nobody is told */
    }
}
