/* outbox.c - the outbox's streams and records in Redis (outbox.h). Every script touches the
 * keys of one shard (hash tag {outbox:<n>}), and only those among its KEYS; times are Redis's
 * (TIME): every instance agrees. */
#include "outbox.h"
#include "outbox_entries.h"

#include "../json/numfmt.h"
#include "eval.h"
#include "idem.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KEYS stream, record, order[, turns, leases]; ARGV id, app, body, channel, member, callback,
 * keep_ms, ttl_ms (the accepting instance's queue TTL: 'ends', when what is not sent expires),
 * kind[, turn_lease_ms, guess_ms]. The entry carries the order key: an attempt's script names it
 * among its keys. With the turn keys, the request's id goes into the member's turn queue (idem.c's
 * JOIN_SCRIPT tells how it is kept) in the same step: a sync request that reaches Redis after
 * it queues behind it. The one ahead gets its lease recorded first, while the queue's TTL is
 * still its lease (guess_ms when its PEXPIRE has not come yet, or when the TTL is an earlier
 * queued request's: a sync request holds the turn no longer than its deadline), as
 * JOIN_SCRIPT does. With a Redis Cluster the turn keys are in the shard's slot
 * (store_turn_keys), here as in START_SCRIPT and END_SCRIPT. A record that exists already was
 * settled (SETTLE_SCRIPT): the request is not queued (-1). */
static const char ACCEPT_SCRIPT[] = STORE_LUA_NOW_MS
    "if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end " /* settled: not queued */
    "local seq = redis.call('HINCRBY', KEYS[3], 'n', 1) "
    "redis.call('PEXPIRE', KEYS[3], ARGV[7]) "
    "redis.call('HSET', KEYS[2], 'app', ARGV[2], 'body', ARGV[3], 'ch', ARGV[4], 'mb', "
    "ARGV[5], 'cb', ARGV[6], 'seq', seq, 'status', 'queued', 'attempts', 0, 'created', now, "
    "'updated', now, 'next', 0, 'ends', now + ARGV[8], 'kind', ARGV[9]) "
    "redis.call('PEXPIRE', KEYS[2], ARGV[7]) "
    "if not KEYS[4] then "
    "redis.call('XADD', KEYS[1], '*', 'r', ARGV[1], 'o', KEYS[3]) return now end "
    "local q, w, lease, guess = KEYS[4], KEYS[5], tonumber(ARGV[10]), tonumber(ARGV[11]) "
    "local ttl = redis.call('PTTL', q) local h = redis.call('LINDEX', q, 0) "
    "if h and redis.call('HEXISTS', w, h) == 0 then "
    "redis.call('HSET', w, h, now + math.min(ttl > 0 and ttl or guess, guess)) end "
    "redis.call('RPUSH', q, ARGV[1]) redis.call('HSET', w, ARGV[1], now + lease) "
    "if lease > ttl then redis.call('PEXPIRE', q, lease) end "
    "if lease > redis.call('PTTL', w) then redis.call('PEXPIRE', w, lease) end "
    "redis.call('XADD', KEYS[1], '*', 'r', ARGV[1], 'o', KEYS[3], 'tc', ARGV[4], 'tm', "
    "ARGV[5]) return now";

/* A request of a broadcast (store/broadcast.c) names in its record ("bq") the broadcast's hash of
 * its shard (keys.h), of the record's slot: an attempt running is written there with its lease
 * end (a cancel waits for those), and the request's end is counted there as kind (sent, failed,
 * unknown, cancelled), in the step that ends it. The broadcast's record, in its channel's slot,
 * sums the shards' counts (store_bc_status). */
#define BC_END_FN                                                                                  \
    "local function bc_end(q, rec, kind) if not q then return end "                                \
    "redis.call('HDEL', q, 'r:' .. rec) if kind then redis.call('HINCRBY', q, kind, 1) end end "

/* KEYS record; ARGV keep_ms. An accept whose answer was lost (a timeout: it may run later, or
 * have run): 1 when it was queued; else 0, and a record without an app marks the id, so that
 * the accept, should it still come, queues nothing (ACCEPT_SCRIPT) and GET finds nothing. */
static const char SETTLE_SCRIPT[] =
    "if redis.call('HEXISTS', KEYS[1], 'app') == 1 then return 1 end "
    "redis.call('HSET', KEYS[1], 'status', 'void') redis.call('PEXPIRE', KEYS[1], ARGV[1]) "
    "return 0";

/* KEYS record, order[, turns][, the broadcast's hash]; ARGV owner, lease_ms, id ('' without
 * turns), the broadcast's hash ('' when not known). A member's requests start in the
 * order of their sequence numbers: the one before must be finished ('done' in the order hash).
 * With its place in the member's turn queue, it starts once no one is ahead there (a sync
 * request that came before it; dead ones are dropped by store_turn_join), unless it expired:
 * then it sends nothing. 'out' stays set while an attempt may have a call out: found set with
 * the lease over, the attempt died, and response 'next' may have been delivered. A script
 * touches only its KEYS (a Redis Cluster refuses another key while its slot migrates, and the
 * script stops there, half-way): the stream entry of a broadcast's request names its hash
 * ('bq', store/broadcast.c's enqueue); one queued by an older version does not, and its start
 * gets the name back, nothing written, and runs again with it (one more round trip, once). */
static const char START_SCRIPT[] = STORE_LUA_NOW_MS BC_END_FN
    "local r = redis.call('HMGET', KEYS[1], 'status', 'seq', 'due', 'lease', 'ends', "
    "'next', 'out') "
    "if not r[1] then return {'gone'} end "
    "if r[1] == 'done' or r[1] == 'failed' then return {'final'} end "
    "if tonumber(redis.call('HGET', KEYS[2], 'done') or '0') < tonumber(r[2]) - 1 then "
    "return {'order'} end "
    "if r[4] and tonumber(r[4]) > now then return {'wait', tostring(tonumber(r[4]) - now)} "
    "end "
    "local bq = redis.call('HGET', KEYS[1], 'bq') "
    "if bq and bq ~= ARGV[4] then return {'hash', bq} end "
    /* a cancelled broadcast's request ends here, unsent (unknown when an attempt
     * died with its call maybe out) */
    "if bq and redis.call('HEXISTS', bq, 'x') == 1 then "
    "redis.call('HDEL', KEYS[1], 'body', 'due', 'owner', 'lease', 'out') "
    "redis.call('HSET', KEYS[1], 'status', 'failed', 'result', "
    "'\"sendResult\":{\"ok\":0,\"result\":[]},\"error\":{\"err_code\":null,"
    "\"err\":\"the broadcast was cancelled\"}', 'updated', now) "
    "redis.call('HSET', KEYS[2], 'done', r[2]) redis.call('PUBLISH', KEYS[2], r[2]) "
    "bc_end(bq, KEYS[1], r[7] == '1' and 'unknown' or 'cancelled') return {'final'} end "
    "local ends = tonumber(r[5]) local expired = now >= ends "
    "if r[3] and tonumber(r[3]) > now and not expired then "
    "return {'wait', tostring(math.min(tonumber(r[3]), ends) - now)} end "
    "if ARGV[3] ~= '' and not expired then local h = redis.call('LINDEX', KEYS[3], 0) "
    "if h and h ~= ARGV[3] and redis.call('LPOS', KEYS[3], ARGV[3]) then "
    "return {'turn'} end end "
    "if bq then redis.call('HSET', bq, 'r:' .. KEYS[1], now + ARGV[2]) end "
    "redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease', now + ARGV[2], 'out', '1', "
    "'status', 'sending', 'updated', now) "
    "local n = tonumber(r[6] or '0') "
    "local f = redis.call('HMGET', KEYS[1], 'body', 'app', 'kind', 'ch') "
    "local out = {'run', n, r[7] == '1' and 1 or 0, expired and 1 or 0, "
    "redis.call('HINCRBY', KEYS[1], 'attempts', 1), f[1], f[2], bq or '', f[3] or '', "
    "f[4] or ''} "
    "for i = 0, n - 1 do out[#out + 1] = redis.call('HGET', KEYS[1], 'e' .. i) or '' end "
    "return out";

/* KEYS record[, the element's message index key]; ARGV owner, index, element, the index's
 * value (message_index). */
static const char PROGRESS_SCRIPT[] =
    STORE_LUA_NOW_MS "if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end "
                     "if KEYS[2] then local ttl = redis.call('PTTL', KEYS[1]) "
                     "redis.call('SET', KEYS[2], ARGV[4], 'PX', ttl > 0 and ttl or 86400000) end "
                     "redis.call('HSET', KEYS[1], 'e' .. ARGV[2], ARGV[3], 'next', ARGV[2] + 1, "
                     "'updated', now) return 1";

/* KEYS record, order, stream[, turns, leases][, the broadcast's hash][, message index keys];
 * ARGV owner, entry, final, status, result, delay_ms, keep_ms, group, request id,
 * callback_keep_ms, the broadcast's hash (''), '1' with turns, the first index key's place in
 * KEYS, then the index keys' values (message_index). Final: the
 * status is written, the member's order and turn pass (the next in the turn queue is told, as
 * store_turn_done does), the entry is acknowledged and deleted, and the callback's entry added with
 * the member's next callback number ('cbn'; its callbacks are posted in that order, 'cbdone' the
 * last one ended: the order hash is kept while they may be tried), in one step: a crash leaves
 * either all of it or none. The elements' message ids are indexed for their receipts (the last
 * response's element is recorded only here). A broadcast's request counts its end in the
 * broadcast (bc_end), whose hash its start told (START_SCRIPT): another one is refused, before
 * anything is written. */
static const char END_SCRIPT[] = STORE_LUA_NOW_MS BC_END_FN
    "if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end "
    "local bq = redis.call('HGET', KEYS[1], 'bq') if bq and bq ~= ARGV[11] then "
    "return redis.error_reply('ERR broadcast hash ' .. bq .. ' not among KEYS') end "
    "local ix = tonumber(ARGV[13]) "
    "for k = ix, #KEYS do redis.call('SET', KEYS[k], ARGV[14 + k - ix], 'PX', ARGV[7]) end "
    "redis.call('HDEL', KEYS[1], 'owner', 'lease', 'out') "
    "if ARGV[3] == '0' then bc_end(bq, KEYS[1], nil) "
    "redis.call('HSET', KEYS[1], 'status', 'queued', 'due', "
    "now + ARGV[6], 'updated', now) return 1 end "
    "local drop = {'due', 'body'} "
    "for i = 0, tonumber(redis.call('HGET', KEYS[1], 'next') or '0') - 1 do "
    "drop[#drop + 1] = 'e' .. i end "
    "redis.call('HDEL', KEYS[1], unpack(drop)) "
    "redis.call('HSET', KEYS[1], 'status', ARGV[4], 'result', ARGV[5], 'updated', now) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[7]) "
    "local seq = redis.call('HGET', KEYS[1], 'seq') "
    "redis.call('HSET', KEYS[2], 'done', seq) redis.call('PUBLISH', KEYS[2], seq) "
    "bc_end(bq, KEYS[1], ARGV[4] == 'done' and 'sent' or "
    "(string.find(ARGV[5], '\"err_code\":125', 1, true) and 'unknown' or 'failed')) "
    "if ARGV[12] == '1' then redis.call('LREM', KEYS[4], 1, ARGV[9]) "
    "redis.call('HDEL', KEYS[5], ARGV[9]) local h = redis.call('LINDEX', KEYS[4], 0) "
    "if h then redis.call('PUBLISH', KEYS[4], h) end end "
    "redis.call('XACK', KEYS[3], ARGV[8], ARGV[2]) redis.call('XDEL', KEYS[3], ARGV[2]) "
    "if (redis.call('HGET', KEYS[1], 'cb') or '') ~= '' then "
    "local cs = redis.call('HINCRBY', KEYS[2], 'cbn', 1) "
    "if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[10]) then "
    "redis.call('PEXPIRE', KEYS[2], ARGV[10]) end "
    "redis.call('XADD', KEYS[3], '*', 'c', ARGV[9], 'o', KEYS[2], 'cs', cs) end return 1";

/* KEYS order; ARGV the callback's number. 1 when the member's callbacks before it ended. */
static const char CB_TURN_SCRIPT[] =
    "return tonumber(redis.call('HGET', KEYS[1], 'cbdone') or '0') >= tonumber(ARGV[1]) - 1 "
    "and 1 or 0";

/* KEYS stream, order; ARGV group, entry, the callback's number (0: none). A callback ended:
 * its entry goes, and the member's next callback may be posted (its job is told). */
static const char CB_DONE_SCRIPT[] =
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) redis.call('XDEL', KEYS[1], ARGV[2]) "
    "local n = tonumber(ARGV[3]) "
    "if n > 0 and redis.call('EXISTS', KEYS[2]) == 1 and "
    "tonumber(redis.call('HGET', KEYS[2], 'cbdone') or '0') < n then "
    "redis.call('HSET', KEYS[2], 'cbdone', n) redis.call('PUBLISH', KEYS[2], 'cb') end return 1";

/* KEYS stream; ARGV group, entry. */
static const char ACK_SCRIPT[] =
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) redis.call('XDEL', KEYS[1], ARGV[2]) return 1";

/* KEYS record. */
static const char STATUS_SCRIPT[] =
    "local r = redis.call('HMGET', KEYS[1], 'app', 'status', 'attempts', 'created', 'updated', "
    "'result', 'next', 'cb', 'mb', 'rc') "
    "if not r[1] then return {} end "
    "local out = {r[1], r[2], r[3], r[4], r[5], r[6] or '', r[8] or '', r[9] or '', r[10] or ''} "
    "if not r[6] then for i = 0, tonumber(r[7] or '0') - 1 do "
    "out[#out + 1] = redis.call('HGET', KEYS[1], 'e' .. i) or '' end end return out";

/* KEYS stream; ARGV group. Entries (XLEN) and the first entry's id (its time). */
static const char DEPTH_SCRIPT[] =
    STORE_LUA_NOW_MS "local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1] "
                     "local age = 0 if first then "
                     "age = now - tonumber(string.match(first[1], '^(%d+)')) end "
                     "return {redis.call('XLEN', KEYS[1]), age}";

/* KEYS stream; ARGV group, min_idle_ms. Consumers that hold nothing and did not read for
 * min_idle_ms are removed (XINFO and XGROUP DELCONSUMER in one step: one that takes an entry
 * meanwhile is not removed with it). */
static const char PRUNE_SCRIPT[] =
    "local gone = 0 "
    "for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do "
    "local f = {} for i = 1, #c, 2 do f[c[i]] = c[i + 1] end "
    "if f['pending'] == 0 and f['idle'] > tonumber(ARGV[2]) then "
    "redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name']) gone = gone + 1 end end "
    "return gone";

static _Thread_local store_script_t prune_script = STORE_SCRIPT(PRUNE_SCRIPT);
/* KEYS order; ARGV seq. 1: its turn; 0: an earlier one is not finished; 2: finished already. */
static const char EVENT_TURN_SCRIPT[] =
    "local done = tonumber(redis.call('HGET', KEYS[1], 'done') or '0') "
    "local seq = tonumber(ARGV[1]) "
    "if done >= seq then return 2 end if done == seq - 1 then return 1 end return 0";

/* KEYS order, stream; ARGV seq, group, entry. */
static const char EVENT_END_SCRIPT[] =
    "if tonumber(redis.call('HGET', KEYS[1], 'done') or '0') < tonumber(ARGV[1]) then "
    "redis.call('HSET', KEYS[1], 'done', ARGV[1]) redis.call('PUBLISH', KEYS[1], ARGV[1]) end "
    "redis.call('XACK', KEYS[2], ARGV[2], ARGV[3]) redis.call('XDEL', KEYS[2], ARGV[3]) return 1";

static _Thread_local store_script_t event_turn_script = STORE_SCRIPT(EVENT_TURN_SCRIPT);
static _Thread_local store_script_t event_end_script = STORE_SCRIPT(EVENT_END_SCRIPT);
static _Thread_local store_script_t accept_script = STORE_SCRIPT(ACCEPT_SCRIPT);
static _Thread_local store_script_t settle_script = STORE_SCRIPT(SETTLE_SCRIPT);
static _Thread_local store_script_t start_script = STORE_SCRIPT(START_SCRIPT);
static _Thread_local store_script_t progress_script = STORE_SCRIPT(PROGRESS_SCRIPT);
static _Thread_local store_script_t end_script = STORE_SCRIPT(END_SCRIPT);
static _Thread_local store_script_t ack_script = STORE_SCRIPT(ACK_SCRIPT);
static _Thread_local store_script_t status_script = STORE_SCRIPT(STATUS_SCRIPT);
static _Thread_local store_script_t depth_script = STORE_SCRIPT(DEPTH_SCRIPT);
static _Thread_local store_script_t cb_turn_script = STORE_SCRIPT(CB_TURN_SCRIPT);
static _Thread_local store_script_t cb_done_script = STORE_SCRIPT(CB_DONE_SCRIPT);

typedef enum {
    C_ACCEPT,
    C_START,
    C_DONE,
    C_STATUS,
    C_CLAIM,
    C_DEPTH,
    C_SECRET,
    C_TURN,
    C_SETTLE,
    C_EVENT, /* an integer answer: store_outbox_turn_cb */
} call_kind_t;

/* Owned by the store from its start until its callback has run or it is cancelled. */
struct store_outbox_call {
    call_kind_t kind;
    void (*cb)(void); /* of the kind's type */
    void *arg;
    unsigned shard;
    store_t *st;
    store_eval_t *ev; /* a script */
    store_cmd_t *cmd; /* or a command */
};

void store_outbox_cancel(store_outbox_call_t *call)
{
    if (call == NULL)
        return;
    if (call->ev != NULL)
        store_eval_cancel(call->ev);
    else
        store_command_cancel(call->st, call->cmd);
    free(call);
}

size_t store_outbox_decode_entries(const redisReply *list, unsigned shard,
                                   store_outbox_entry_t *out, size_t room)
{
    size_t n = 0;

    if (list == NULL || list->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < list->elements && n < room; i++) {
        const redisReply *e = list->element[i], *f;
        store_outbox_entry_t en = {
            .shard = shard, .order_key = "", .url = "", .app = "", .body = ""};
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
            e->element[0]->type != REDIS_REPLY_STRING)
            continue;
        en.entry_id = e->element[0]->str;
        f = e->element[1];
        for (size_t k = 0; f->type == REDIS_REPLY_ARRAY && k + 1 < f->elements; k += 2) {
            const char *name = store_eval_str(f->element[k], NULL);
            const char *value = store_eval_str(f->element[k + 1], NULL);
            if (strcmp(name, "r") == 0) {
                en.request_id = value;
            } else if (strcmp(name, "c") == 0) {
                en.request_id = value;
                en.callback = 1;
            } else if (strcmp(name, "k") == 0) {
                en.request_id = value;
                en.callback = 1;
            } else if (strcmp(name, "h") == 0) {
                en.broadcast_channel = value;
            } else if (strcmp(name, "o") == 0) {
                en.order_key = value;
            } else if (strcmp(name, "tc") == 0) {
                en.turn_channel = value;
            } else if (strcmp(name, "tm") == 0) {
                en.turn_member = value;
            } else if (strcmp(name, "cs") == 0) {
                en.callback_seq = strtoll(value, NULL, 10);
            } else if (strcmp(name, "e") == 0) {
                en.request_id = value;
            } else if (strcmp(name, "s") == 0) {
                en.subscription = value;
            } else if (strcmp(name, "u") == 0) {
                en.url = value;
            } else if (strcmp(name, "a") == 0) {
                en.app = value;
            } else if (strcmp(name, "b") == 0) {
                en.body = store_eval_str(f->element[k + 1], &en.body_len);
            } else if (strcmp(name, "q") == 0) {
                en.seq = strtoll(value, NULL, 10);
            } else if (strcmp(name, "bq") == 0) {
                en.bc_hash = value;
            }
        }
        /* a deleted entry (a claim finds its id with no fields) has nothing left to do */
        out[n++] = en;
    }
    return n;
}

#define ENTRIES_MAX STORE_OUTBOX_ENTRIES_MAX

static void on_reply(redisReply *reply, void *arg)
{
    store_outbox_call_t *c = arg;
    store_status_t st =
        reply == NULL || reply->type == REDIS_REPLY_ERROR ? STORE_UNAVAILABLE : STORE_OK;

    switch (c->kind) {
    case C_ACCEPT:
        if (st == STORE_OK && reply->type != REDIS_REPLY_INTEGER)
            st = STORE_BAD_RECORD;
        if (st == STORE_OK && store_eval_int(reply) < 0)
            st = STORE_CONFLICT; /* settled before it ran: not queued */
        ((store_outbox_accept_cb *)c->cb)(c->arg, st, st == STORE_OK ? store_eval_int(reply) : 0);
        break;
    case C_DONE:
        if (st == STORE_OK && store_eval_int(reply) != 1)
            st = STORE_CONFLICT;
        ((store_outbox_done_cb *)c->cb)(c->arg, st);
        break;
    case C_START: {
        store_outbox_start_t *s = calloc(1, sizeof(*s));
        const char *what = st == STORE_OK && reply->type == REDIS_REPLY_ARRAY && reply->elements > 0
                               ? store_eval_str(reply->element[0], NULL)
                               : "";
        if (s == NULL) {
            st = STORE_UNAVAILABLE;
        } else if (st != STORE_OK) {
        } else if (strcmp(what, "gone") == 0) {
            s->state = STORE_OUTBOX_GONE;
        } else if (strcmp(what, "final") == 0) {
            s->state = STORE_OUTBOX_FINAL;
        } else if (strcmp(what, "order") == 0) {
            s->state = STORE_OUTBOX_ORDER;
        } else if (strcmp(what, "turn") == 0) {
            s->state = STORE_OUTBOX_TURN;
        } else if (strcmp(what, "wait") == 0 && reply->elements == 2) {
            s->state = STORE_OUTBOX_WAIT;
            s->wait_ms = store_eval_int(reply->element[1]);
        } else if (strcmp(what, "hash") == 0 && reply->elements == 2) {
            s->state = STORE_OUTBOX_HASH;
            s->bc_hash = store_eval_str(reply->element[1], NULL);
        } else if (strcmp(what, "run") == 0 && reply->elements >= 10 &&
                   store_eval_int(reply->element[1]) >= 0 &&
                   store_eval_int(reply->element[1]) < STORE_OUTBOX_ELEMENTS_MAX &&
                   reply->elements == 10 + (size_t)store_eval_int(reply->element[1])) {
            s->state = STORE_OUTBOX_RUN;
            s->next = (unsigned)store_eval_int(reply->element[1]);
            s->crashed = store_eval_int(reply->element[2]) == 1;
            s->expired = store_eval_int(reply->element[3]) == 1;
            s->attempts = store_eval_int(reply->element[4]);
            s->body = store_eval_str(reply->element[5], &s->body_len);
            s->app = store_eval_str(reply->element[6], NULL);
            s->bc_hash = store_eval_str(reply->element[7], NULL);
            s->bulk = s->bc_hash[0] != '\0';
            s->kind = store_eval_str(reply->element[8], NULL);
            s->channel = store_eval_str(reply->element[9], NULL);
            for (unsigned i = 0; i < s->next; i++)
                s->elements[i] = store_eval_str(reply->element[10 + i], &s->element_lens[i]);
        } else {
            st = STORE_BAD_RECORD;
        }
        ((store_outbox_start_cb *)c->cb)(c->arg, st, st == STORE_OK ? s : NULL);
        free(s);
        break;
    }
    case C_STATUS: {
        store_outbox_status_t *s = calloc(1, sizeof(*s));
        if (s == NULL)
            st = STORE_UNAVAILABLE;
        else if (st == STORE_OK && (reply->type != REDIS_REPLY_ARRAY ||
                                    (reply->elements != 0 && reply->elements < 9) ||
                                    reply->elements > 9 + STORE_OUTBOX_ELEMENTS_MAX))
            st = STORE_BAD_RECORD;
        else if (st == STORE_OK && reply->elements == 0)
            st = STORE_NOT_FOUND;
        if (st == STORE_OK) {
            s->app = store_eval_str(reply->element[0], NULL);
            s->status = store_eval_str(reply->element[1], NULL);
            s->attempts = store_eval_int(reply->element[2]);
            s->created_ms = store_eval_int(reply->element[3]);
            s->updated_ms = store_eval_int(reply->element[4]);
            s->result = store_eval_str(reply->element[5], &s->result_len);
            if (s->result_len == 0)
                s->result = NULL;
            s->callback = store_eval_str(reply->element[6], NULL);
            s->member_id = store_eval_str(reply->element[7], NULL);
            s->receipts = store_eval_str(reply->element[8], NULL);
            s->n_elements = (unsigned)(reply->elements - 9);
            for (unsigned i = 0; i < s->n_elements; i++)
                s->elements[i] = store_eval_str(reply->element[9 + i], &s->element_lens[i]);
        }
        ((store_outbox_status_cb *)c->cb)(c->arg, st, st == STORE_OK ? s : NULL);
        free(s);
        break;
    }
    case C_CLAIM: {
        store_outbox_entry_t *entries = calloc(ENTRIES_MAX, sizeof(*entries));
        size_t n = 0;
        if (entries == NULL)
            st = STORE_UNAVAILABLE;
        else if (st == STORE_OK && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 2)
            n = store_outbox_decode_entries(reply->element[1], c->shard, entries, ENTRIES_MAX);
        ((store_outbox_entries_cb *)c->cb)(c->arg, st, entries, n);
        free(entries);
        break;
    }
    case C_DEPTH:
        if (st == STORE_OK && (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2))
            st = STORE_BAD_RECORD;
        ((store_outbox_depth_cb *)c->cb)(c->arg, st,
                                         st == STORE_OK ? store_eval_int(reply->element[0]) : 0,
                                         st == STORE_OK ? store_eval_int(reply->element[1]) : 0);
        break;
    case C_SETTLE:
        if (st == STORE_OK && reply->type != REDIS_REPLY_INTEGER)
            st = STORE_BAD_RECORD;
        ((store_outbox_settle_cb *)c->cb)(c->arg, st, st == STORE_OK && store_eval_int(reply) == 1);
        break;
    case C_TURN:
        if (st == STORE_OK && reply->type != REDIS_REPLY_INTEGER)
            st = STORE_BAD_RECORD;
        ((store_outbox_turn_cb *)c->cb)(c->arg, st, st == STORE_OK && store_eval_int(reply) == 1);
        break;
    case C_EVENT:
        if (st == STORE_OK && reply->type != REDIS_REPLY_INTEGER)
            st = STORE_BAD_RECORD;
        ((store_outbox_turn_cb *)c->cb)(c->arg, st, st == STORE_OK ? (int)reply->integer : 0);
        break;
    case C_SECRET:
        if (st == STORE_OK && reply->type != REDIS_REPLY_STRING)
            st = STORE_NOT_FOUND;
        ((store_outbox_secret_cb *)c->cb)(c->arg, st, st == STORE_OK ? reply->str : NULL);
        break;
    }
    free(c);
}

static store_outbox_call_t *call_new(store_t *st, call_kind_t kind, void (*cb)(void), void *arg,
                                     unsigned shard)
{
    store_outbox_call_t *c = calloc(1, sizeof(*c));

    if (c != NULL) {
        c->kind = kind;
        c->cb = cb;
        c->arg = arg;
        c->shard = shard;
        c->st = st;
    }
    return c;
}

static store_status_t status_of(int rc)
{
    return rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
}

/* Runs script on words (nkeys keys first) for call c (NULL: nobody waits for its answer). */
static store_outbox_call_t *run(store_t *st, store_script_t *script, store_outbox_call_t *c,
                                int nkeys, int nwords, const char *const *words, const size_t *lens,
                                store_status_t *status)
{
    int rc = store_eval(st, script, nkeys, nwords, words, lens, c != NULL ? on_reply : NULL, c,
                        c != NULL ? &c->ev : NULL);

    if (rc != REDISC_OK) {
        free(c);
        if (status != NULL)
            *status = status_of(rc);
        return NULL;
    }
    return c;
}

/* A call whose answer someone waits for: NULL (status set) when out of memory. */
#define NEW_CALL(kind, cb, arg, shard, status)                                                     \
    call_new(st, (kind), (void (*)(void))(cb), (arg), (shard))

static int record_key(store_t *st, char *buf, unsigned shard, const char *id)
{
    return store_key_outbox_request(buf, STORE_KEY_MAX, store_prefix(st), shard, id);
}

store_outbox_call_t *store_outbox_accept(store_t *st, unsigned shard, const char *id,
                                         const store_outbox_new_t *req, int64_t keep_ms,
                                         int64_t ttl_ms, store_outbox_accept_cb *cb, void *arg,
                                         store_status_t *status)
{
    char stream[STORE_KEY_MAX], record[STORE_KEY_MAX], order[STORE_KEY_MAX], keep[NUMFMT_DEC_SIZE],
        ttl[NUMFMT_DEC_SIZE], turns[STORE_KEY_MAX], leases[STORE_KEY_MAX], lease[NUMFMT_DEC_SIZE],
        guess[NUMFMT_DEC_SIZE];
    store_outbox_call_t *c;
    int turn = req->turn_lease_ms > 0;

    if (store_key_outbox(stream, sizeof(stream), store_prefix(st), shard) < 0 ||
        record_key(st, record, shard, id) < 0 ||
        store_key_outbox_order(order, sizeof(order), store_prefix(st), shard, req->channel_id,
                               req->member_id) < 0 ||
        (turn && store_turn_keys(st, shard, req->channel_id, req->member_id, turns, leases) < 0)) {
        *status = STORE_BAD_RECORD;
        return NULL;
    }
    if ((c = NEW_CALL(C_ACCEPT, cb, arg, shard, status)) == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *words[16];
        size_t lens[16];
        int n = 0, nkeys;
        words[n++] = stream;
        words[n++] = record;
        words[n++] = order;
        if (turn) {
            words[n++] = turns;
            words[n++] = leases;
        }
        nkeys = n;
        words[n++] = id;
        words[n++] = req->app;
        words[n++] = req->body;
        words[n++] = req->channel_id;
        words[n++] = req->member_id;
        words[n++] = req->callback;
        words[n++] = numfmt_dec(keep, keep_ms);
        words[n++] = numfmt_dec(ttl, ttl_ms);
        words[n++] = req->kind;
        if (turn) {
            words[n++] = numfmt_dec(lease, req->turn_lease_ms);
            words[n++] = numfmt_dec(guess, req->turn_guess_ms);
        }
        for (int i = 0; i < n; i++)
            lens[i] = words[i] == req->body ? req->body_len : strlen(words[i]);
        return run(st, &accept_script, c, nkeys, n, words, lens, status);
    }
}

store_outbox_call_t *store_outbox_settle(store_t *st, unsigned shard, const char *id,
                                         int64_t keep_ms, store_outbox_settle_cb *cb, void *arg,
                                         store_status_t *status)
{
    char record[STORE_KEY_MAX], keep[NUMFMT_DEC_SIZE];
    store_outbox_call_t *c;

    if (record_key(st, record, shard, id) < 0 ||
        (c = NEW_CALL(C_SETTLE, cb, arg, shard, status)) == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *words[] = {record, numfmt_dec(keep, keep_ms)};
        return run(st, &settle_script, c, 1, 2, words, NULL, status);
    }
}

/* ---- webhook events ---- */

unsigned store_outbox_shard(unsigned shards, const char *channel_id, const char *member_id)
{
    uint32_t h = 2166136261u;

    for (const char *p = channel_id; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ 0xff) * 16777619u; /* a byte no id has between them */
    for (const char *p = member_id; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return shards ? h % shards : 0;
}

store_outbox_call_t *store_outbox_event_turn(store_t *st, const store_outbox_entry_t *e,
                                             store_outbox_turn_cb *cb, void *arg,
                                             store_status_t *status)
{
    char seq[NUMFMT_DEC_SIZE];
    store_outbox_call_t *c = NEW_CALL(C_EVENT, cb, arg, e->shard, status);

    if (c == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *words[] = {e->order_key, numfmt_dec(seq, e->seq)};
        return run(st, &event_turn_script, c, 1, 2, words, NULL, status);
    }
}

void store_outbox_event_end(store_t *st, const store_outbox_entry_t *e)
{
    char stream[STORE_KEY_MAX], seq[NUMFMT_DEC_SIZE];

    if (store_key_outbox(stream, sizeof(stream), store_prefix(st), e->shard) < 0)
        return;
    {
        const char *words[] = {e->order_key, stream, numfmt_dec(seq, e->seq), STORE_OUTBOX_GROUP,
                               e->entry_id};
        run(st, &event_end_script, NULL, 2, 5, words, NULL, NULL);
    }
}

/* ---- the consumers (the blocking reader: outbox_read.c) ---- */

store_outbox_call_t *store_outbox_claim(store_t *st, unsigned shard, const char *consumer,
                                        int min_idle_ms, unsigned count,
                                        store_outbox_entries_cb *cb, void *arg,
                                        store_status_t *status)
{
    char stream[STORE_KEY_MAX], idle[NUMFMT_DEC_SIZE], n[NUMFMT_DEC_SIZE];
    store_outbox_call_t *c;
    int rc;

    if (store_key_outbox(stream, sizeof(stream), store_prefix(st), shard) < 0 ||
        (c = NEW_CALL(C_CLAIM, cb, arg, shard, status)) == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *argv[] = {"XAUTOCLAIM",
                              stream,
                              STORE_OUTBOX_GROUP,
                              consumer,
                              numfmt_dec(idle, min_idle_ms),
                              "0-0",
                              "COUNT",
                              numfmt_dec(n, count > ENTRIES_MAX ? ENTRIES_MAX : count)};
        rc = store_command(st, stream, on_reply, c, 8, argv, NULL, &c->cmd);
    }
    if (rc != REDISC_OK) {
        free(c);
        *status = status_of(rc);
        return NULL;
    }
    return c;
}

void store_outbox_ack(store_t *st, unsigned shard, const char *entry_id)
{
    char stream[STORE_KEY_MAX];

    if (store_key_outbox(stream, sizeof(stream), store_prefix(st), shard) < 0)
        return;
    {
        const char *words[] = {stream, STORE_OUTBOX_GROUP, entry_id};
        run(st, &ack_script, NULL, 1, 3, words, NULL, NULL);
    }
}

void store_outbox_keep(store_t *st, unsigned shard, const char *consumer, const char *const *ids,
                       unsigned n)
{
    char stream[STORE_KEY_MAX];
    const char **argv;
    store_cmd_t *cmd;
    int argc = 0;

    if (n == 0 || store_key_outbox(stream, sizeof(stream), store_prefix(st), shard) < 0 ||
        (argv = malloc((n + 7) * sizeof(*argv))) == NULL)
        return;
    argv[argc++] = "XCLAIM";
    argv[argc++] = stream;
    argv[argc++] = STORE_OUTBOX_GROUP;
    argv[argc++] = consumer;
    argv[argc++] = "0";
    for (unsigned i = 0; i < n; i++)
        argv[argc++] = ids[i];
    argv[argc++] = "JUSTID";
    store_command(st, stream, NULL, NULL, argc, argv, NULL, &cmd);
    free(argv);
}

void store_outbox_prune(store_t *st, unsigned shard, int64_t min_idle_ms)
{
    char stream[STORE_KEY_MAX], idle[NUMFMT_DEC_SIZE];

    if (store_key_outbox(stream, sizeof(stream), store_prefix(st), shard) < 0)
        return;
    {
        const char *words[] = {stream, STORE_OUTBOX_GROUP, numfmt_dec(idle, min_idle_ms)};
        run(st, &prune_script, NULL, 1, 3, words, NULL, NULL);
    }
}

store_outbox_call_t *store_outbox_depth(store_t *st, unsigned shard, store_outbox_depth_cb *cb,
                                        void *arg, store_status_t *status)
{
    char stream[STORE_KEY_MAX];
    store_outbox_call_t *c;

    if (store_key_outbox(stream, sizeof(stream), store_prefix(st), shard) < 0 ||
        (c = NEW_CALL(C_DEPTH, cb, arg, shard, status)) == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *words[] = {stream, STORE_OUTBOX_GROUP};
        return run(st, &depth_script, c, 1, 2, words, NULL, status);
    }
}

/* ---- one attempt ---- */

store_outbox_call_t *store_outbox_start(store_t *st, const store_outbox_entry_t *e,
                                        const char *owner, int lease_ms, store_outbox_start_cb *cb,
                                        void *arg, store_status_t *status)
{
    char record[STORE_KEY_MAX], turns[STORE_KEY_MAX], leases[STORE_KEY_MAX], lease[NUMFMT_DEC_SIZE];
    int turn = e->turn_channel != NULL && e->turn_member != NULL;
    const char *bq = e->bc_hash != NULL ? e->bc_hash : "";
    store_outbox_call_t *c;

    if (record_key(st, record, e->shard, e->request_id) < 0 ||
        (turn &&
         store_turn_keys(st, e->shard, e->turn_channel, e->turn_member, turns, leases) < 0) ||
        (c = NEW_CALL(C_START, cb, arg, e->shard, status)) == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *words[8];
        int n = 0, nkeys;
        words[n++] = record;
        words[n++] = e->order_key;
        if (turn)
            words[n++] = turns;
        if (*bq)
            words[n++] = bq;
        nkeys = n;
        words[n++] = owner;
        words[n++] = numfmt_dec(lease, lease_ms);
        words[n++] = turn ? e->request_id : "";
        words[n++] = bq;
        return run(st, &start_script, c, nkeys, n, words, NULL, status);
    }
}

/* One element's entry in the message index: the platform's message id of a sent element leads
 * its receipts back to the request (store_hook_event). Its key is computed here, not in the
 * script, so that the script touches only its KEYS. */
typedef struct {
    char key[STORE_KEY_MAX], value[STORE_KEY_MAX];
} msg_index_t;

/* The entry of element el (response i of request id, channel's) into out: 0 when it has no
 * message id (or its key does not fit). */
static int message_index(store_t *st, unsigned shard, const char *channel, const char *id,
                         const json_t *el, size_t i, msg_index_t *out)
{
    const json_t *msgs = json_object_get(json_object_get(el, "result"), "messages");
    const char *mid = json_string_value(json_object_get(json_array_get(msgs, 0), "id"));

    return mid != NULL && *mid != '\0' && channel != NULL &&
           store_key_outbox_message(out->key, sizeof(out->key), store_prefix(st), shard, channel,
                                    mid) >= 0 &&
           snprintf(out->value, sizeof(out->value), "%s %zu", id, i) < (int)sizeof(out->value);
}

store_outbox_call_t *store_outbox_progress(store_t *st, const store_outbox_entry_t *e,
                                           const char *owner, unsigned i, const char *element,
                                           size_t len, store_outbox_done_cb *cb, void *arg,
                                           store_status_t *status)
{
    char record[STORE_KEY_MAX], index[NUMFMT_DEC_SIZE];
    msg_index_t ix;
    json_t *el;
    int indexed;
    store_outbox_call_t *c;

    if (record_key(st, record, e->shard, e->request_id) < 0 ||
        (c = NEW_CALL(C_DONE, cb, arg, e->shard, status)) == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    el = json_loadb(element, len, 0, NULL);
    indexed = message_index(st, e->shard, e->channel, e->request_id, el, i, &ix);
    json_decref(el);
    {
        const char *words[6];
        size_t lens[6];
        int n = 0, nkeys;
        words[n++] = record;
        if (indexed)
            words[n++] = ix.key;
        nkeys = n;
        words[n++] = owner;
        words[n++] = numfmt_dec(index, i);
        words[n++] = element;
        if (indexed)
            words[n++] = ix.value;
        for (int k = 0; k < n; k++)
            lens[k] = words[k] == element ? len : strlen(words[k]);
        return run(st, &progress_script, c, nkeys, n, words, lens, status);
    }
}

/* An end's index keys at most: with its other 20 words within store_eval's (a request has 50
 * responses at most) */
#define END_INDEX_MAX ((STORE_EVAL_WORDS_MAX - 20) / 2)

/* The message index's entries of a final result's elements (its "sendResult" member's "result"),
 * malloc'd into *out: how many (0 and *out NULL when none). */
static size_t result_index(store_t *st, const store_outbox_entry_t *e, const char *result,
                           size_t len, msg_index_t **out)
{
    char *text;
    json_t *root = NULL;
    const json_t *els;
    size_t n = 0;

    *out = NULL;
    /* a result without message ids (a failure's) is not parsed */
    if (result == NULL || memmem(result, len, "\"messages\"", 10) == NULL ||
        (text = malloc(len + 2)) == NULL)
        return 0;
    text[0] = '{';
    memcpy(text + 1, result, len);
    text[len + 1] = '}';
    root = json_loadb(text, len + 2, 0, NULL);
    free(text);
    els = json_object_get(json_object_get(root, "sendResult"), "result");
    if (json_array_size(els) > 0 &&
        (*out = calloc(json_array_size(els) < END_INDEX_MAX ? json_array_size(els) : END_INDEX_MAX,
                       sizeof(**out))) != NULL)
        for (size_t i = 0; i < json_array_size(els) && i < END_INDEX_MAX; i++)
            n += message_index(st, e->shard, e->channel, e->request_id, json_array_get(els, i), i,
                               *out + n);
    json_decref(root);
    return n;
}

store_outbox_call_t *store_outbox_end(store_t *st, const store_outbox_entry_t *e, const char *owner,
                                      const store_outbox_end_t *end, store_outbox_done_cb *cb,
                                      void *arg, store_status_t *status)
{
    char record[STORE_KEY_MAX], stream[STORE_KEY_MAX], turns[STORE_KEY_MAX], leases[STORE_KEY_MAX],
        delay[NUMFMT_DEC_SIZE], keep[NUMFMT_DEC_SIZE], cb_keep[NUMFMT_DEC_SIZE],
        first[NUMFMT_DEC_SIZE];
    int turn = e->turn_channel != NULL && e->turn_member != NULL;
    const char *bq = e->bc_hash != NULL ? e->bc_hash : "";
    msg_index_t *ix = NULL;
    size_t nix = 0;
    store_outbox_call_t *c;

    if (record_key(st, record, e->shard, e->request_id) < 0 ||
        store_key_outbox(stream, sizeof(stream), store_prefix(st), e->shard) < 0 ||
        (turn &&
         store_turn_keys(st, e->shard, e->turn_channel, e->turn_member, turns, leases) < 0) ||
        (c = NEW_CALL(C_DONE, cb, arg, e->shard, status)) == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    if (end->final)
        nix = result_index(st, e, end->result, end->result_len, &ix);
    {
        const char *words[20 + 2 * END_INDEX_MAX];
        size_t lens[20 + 2 * END_INDEX_MAX];
        store_outbox_call_t *out;
        const char *first_at;
        int n = 0, nkeys;
        words[n++] = record;
        words[n++] = e->order_key;
        words[n++] = stream;
        if (turn) {
            words[n++] = turns;
            words[n++] = leases;
        }
        if (*bq)
            words[n++] = bq;
        first_at = numfmt_dec(first, n + 1); /* where the index keys begin */
        for (size_t i = 0; i < nix; i++)
            words[n++] = ix[i].key;
        nkeys = n;
        words[n++] = owner;
        words[n++] = e->entry_id;
        words[n++] = end->final ? "1" : "0";
        words[n++] = end->status ? end->status : "";
        words[n++] = end->result ? end->result : "";
        words[n++] = numfmt_dec(delay, end->delay_ms);
        words[n++] = numfmt_dec(keep, end->keep_ms);
        words[n++] = STORE_OUTBOX_GROUP;
        words[n++] = e->request_id;
        words[n++] = numfmt_dec(cb_keep, end->callback_keep_ms);
        words[n++] = bq;
        words[n++] = turn ? "1" : "0";
        words[n++] = first_at;
        for (size_t i = 0; i < nix; i++)
            words[n++] = ix[i].value;
        for (int i = 0; i < n; i++)
            lens[i] = words[i] == end->result ? end->result_len : strlen(words[i]);
        out = run(st, &end_script, c, nkeys, n, words, lens, status);
        free(ix);
        return out;
    }
}

store_outbox_call_t *store_outbox_status(store_t *st, unsigned shard, const char *id,
                                         store_outbox_status_cb *cb, void *arg,
                                         store_status_t *status)
{
    char record[STORE_KEY_MAX];
    store_outbox_call_t *c;

    if (record_key(st, record, shard, id) < 0 ||
        (c = NEW_CALL(C_STATUS, cb, arg, shard, status)) == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *words[] = {record};
        return run(st, &status_script, c, 1, 1, words, NULL, status);
    }
}

/* One command on an app's key (cmd key) for call c: NULL with *status when nothing was sent. */
static store_outbox_call_t *app_command(store_t *st, store_outbox_call_t *c, const char *cmd,
                                        const char *key, int key_len, store_status_t *status)
{
    int rc;

    if (c == NULL || key_len < 0) {
        free(c);
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *argv[] = {cmd, key};
        rc = store_command(st, key, on_reply, c, 2, argv, NULL, &c->cmd);
    }
    if (rc != REDISC_OK) {
        free(c);
        *status = status_of(rc);
        return NULL;
    }
    return c;
}

store_outbox_call_t *store_outbox_callback_turn(store_t *st, const store_outbox_entry_t *e,
                                                store_outbox_turn_cb *cb, void *arg,
                                                store_status_t *status)
{
    char n[NUMFMT_DEC_SIZE];
    store_outbox_call_t *c = NEW_CALL(C_TURN, cb, arg, e->shard, status);

    if (c == NULL) {
        *status = STORE_UNAVAILABLE;
        return NULL;
    }
    {
        const char *words[] = {e->order_key, numfmt_dec(n, e->callback_seq)};
        return run(st, &cb_turn_script, c, 1, 2, words, NULL, status);
    }
}

void store_outbox_callback_done(store_t *st, const store_outbox_entry_t *e)
{
    char stream[STORE_KEY_MAX], n[NUMFMT_DEC_SIZE];

    if (store_key_outbox(stream, sizeof(stream), store_prefix(st), e->shard) < 0)
        return;
    {
        /* an entry without a member's order key names its stream twice: one slot */
        const char *words[] = {stream, e->order_key[0] ? e->order_key : stream, STORE_OUTBOX_GROUP,
                               e->entry_id, numfmt_dec(n, e->callback_seq)};
        run(st, &cb_done_script, NULL, 2, 5, words, NULL, NULL);
    }
}

store_outbox_call_t *store_outbox_secret(store_t *st, const char *app, store_outbox_secret_cb *cb,
                                         void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    int n = store_key_app_secret(key, sizeof(key), store_prefix(st), app);

    return app_command(st, NEW_CALL(C_SECRET, cb, arg, 0, status), "GET", key, n, status);
}
