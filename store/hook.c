/* hook.c - webhooks' members, subscriptions and events in Redis (hook.h). The member's keys
 * carry the channel's hash tag, the event's its outbox shard's ({outbox:<n>}): each script runs
 * on one slot, with every key it touches among its KEYS. */
#include "hook.h"

#include "eval.h"

#include "../json/numfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMBER_RUNS 3 /* a guess that was wrong, then one the recipient moved from meanwhile */
#define EVENT_RUNS  3 /* the records a receipt's messages point at, then once more if they moved */
#define ARGS_MAX    9 /* of the event's script */

/* set_field(text, name, value, had): the JSON object text with its top-level field name set to
 * value (a number's text), or nil when that cannot be done surely. had is what cjson decoded of
 * the field. The field is found by its text "name": when it appears once (its value a number,
 * a plain string, true, false or null), else added at the end when the object has no such field
 * at all. Only compact records are edited; the caller decodes the result to check it. */
#define SET_FIELD_FN                                                                               \
    "local function set_field(text, name, value, had) "                                            \
    "local key = '\"' .. name .. '\":' local at = string.find(text, key, 1, true) "                \
    "if not at then if had ~= nil then return nil end "                                            \
    "local head = string.match(text, '^(.-)%s*}%s*$') if not head then return nil end "            \
    "return head .. (string.find(head, '{%s*$') and '' or ',') .. key .. value .. '}' end "        \
    "if string.find(text, key, at + #key, true) then return nil end "                              \
    "local vs = at + #key "                                                                        \
    "local e = select(2, string.find(text, '^%s*%-?[%d%.eE%+%-]+', vs)) or "                       \
    "select(2, string.find(text, '^%s*\"[^\"\\\\]*\"', vs)) or "                                   \
    "select(2, string.find(text, '^%s*%a+', vs)) "                                                 \
    "if not e then return nil end "                                                                \
    "return string.sub(text, 1, vs - 1) .. value .. string.sub(text, e + 1) end "

/* inbound(record, at, now): the record with lastInboundAt moved up to at and updatedAt set to
 * now (what member_mark_inbound does), or nil when the record is not one this can edit surely
 * (not an object, lastInboundAt not a number: the caller's compare-and-set does it). The edited
 * text is decoded again and must say what was meant. */
#define INBOUND_FN                                                                                 \
    "local function inbound(m, at, now) "                                                          \
    "local ok, r = pcall(cjson.decode, m) if not ok or type(r) ~= 'table' then return nil end "    \
    "local last = r.lastInboundAt "                                                                \
    "if last ~= nil and type(last) ~= 'number' then return nil end "                               \
    "local out, want = m, last "                                                                   \
    "if last == nil or last < tonumber(at) then "                                                  \
    "out = set_field(out, 'lastInboundAt', at, last) want = tonumber(at) end "                     \
    "out = out and set_field(out, 'updatedAt', now, r.updatedAt) "                                 \
    "if not out then return nil end "                                                              \
    "ok, r = pcall(cjson.decode, out) "                                                            \
    "if not ok or type(r) ~= 'table' or r.lastInboundAt ~= want or "                               \
    "r.updatedAt ~= tonumber(now) then return nil end return out end "

/* KEYS recipient, member (of the guess; the fresh one's without a guess), member (of the fresh
 * id); ARGV guess ("" none), fresh id, fresh record, lastInboundAt ("0": not a message), now.
 * {'moved', id}: the recipient is another member's, nothing written (run again with that
 * guess); {'made', id}: new (or its member was gone), made from the fresh record as
 * store.c's RESOLVE_SCRIPT makes it; {'found', id}: lastInboundAt kept; {'cas', id, record}:
 * found, lastInboundAt left to the caller. Atomic: two first messages of a user make one
 * member. */
static const char MEMBER_SCRIPT[] = SET_FIELD_FN INBOUND_FN
    "local id = redis.call('GET', KEYS[1]) "
    "if id and id ~= ARGV[1] then return {'moved', id} end "
    "local m = id and redis.call('GET', KEYS[2]) "
    "if not m then redis.call('SET', KEYS[1], ARGV[2]) redis.call('SET', KEYS[3], ARGV[3]) "
    "return {'made', ARGV[2]} end "
    "if ARGV[4] == '0' then return {'found', id} end "
    "local out = inbound(m, ARGV[4], ARGV[5]) if not out then return {'cas', id, m} end "
    "redis.call('SET', KEYS[2], out) return {'found', id}";

/* KEYS stream, seen, the n subscriptions' order keys, the m messages' index keys (their values
 * "<requestId> <index>": store/outbox.c's index_message), then the records of the requests
 * they point at as far as the caller knows them; ARGV event id, app, body, keep_ms, n, m,
 * receipt, the records' key base, the subscriptions as "id\nurl\n" pairs. An event seen before
 * (the platform's retry) adds nothing: 0. Everything is read before anything is written: a
 * message whose record is not among KEYS gets the script's answer {request ids} with nothing
 * done, and the caller runs it again with them. A receipt moves the element's receipt forward
 * only (delivered, then read; failed whenever), kept in the record's 'rc' (a JSON object:
 * index -> receipt), and queues the request's status callback when it has one. */
static const char EVENT_SCRIPT[] =
    "local n, m = tonumber(ARGV[5]), tonumber(ARGV[6]) "
    "if n > 0 and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end "
    "local known, marks, need = {}, {}, {} "
    "for k = 3 + n + m, #KEYS do known[KEYS[k]] = true end "
    "for k = 3 + n, 2 + n + m do local v = redis.call('GET', KEYS[k]) "
    "local id, i = nil, nil if v then id, i = string.match(v, '^(%S+) (%d+)$') end "
    "if id then if known[ARGV[8] .. id] then marks[#marks + 1] = {id, i} "
    "else need[#need + 1] = id end end end "
    "if #need > 0 then return need end "
    "local rank, now = {delivered = 1, read = 2, failed = 3}, 0 "
    "if #marks > 0 then local t = redis.call('TIME') "
    "now = t[1] * 1000 + math.floor(t[2] / 1000) end "
    "for _, mk in ipairs(marks) do local rec, i = ARGV[8] .. mk[1], mk[2] "
    "if redis.call('EXISTS', rec) == 1 then "
    "local rc = {} local raw = redis.call('HGET', rec, 'rc') "
    "if raw then local ok, t = pcall(cjson.decode, raw) "
    "if ok and type(t) == 'table' then rc = t end end "
    "local had = rc[i] "
    "if not had or (rank[had] or 0) < rank[ARGV[7]] then rc[i] = ARGV[7] "
    "redis.call('HSET', rec, 'rc', cjson.encode(rc), 'updated', now) "
    "if (redis.call('HGET', rec, 'cb') or '') ~= '' then "
    "redis.call('XADD', KEYS[1], '*', 'c', mk[1]) end end end end "
    "if n == 0 then return 1 end "
    "local parts = {} for p in string.gmatch(ARGV[9], '([^\\n]+)') do "
    "parts[#parts + 1] = p end "
    "for j = 1, n do local order = KEYS[2 + j] "
    "local seq = redis.call('HINCRBY', order, 'n', 1) "
    "redis.call('PEXPIRE', order, ARGV[4]) "
    "redis.call('XADD', KEYS[1], '*', 'e', ARGV[1], 's', parts[2 * j - 1], 'u', "
    "parts[2 * j], 'a', ARGV[2], 'o', order, 'q', seq, 'b', ARGV[3]) end "
    "redis.call('SET', KEYS[2], '1', 'PX', ARGV[4]) return 1";

static _Thread_local store_script_t member_script = STORE_SCRIPT(MEMBER_SCRIPT);
static _Thread_local store_script_t event_script = STORE_SCRIPT(EVENT_SCRIPT);

typedef enum { HC_MEMBER, HC_SUBS, HC_EVENT } hc_kind_t;

/* Owned by the store from its start until its callback has run or it is cancelled; a script's
 * words are kept for its next run (another guess, the records a receipt needs). */
struct store_hook_call {
    hc_kind_t kind;
    store_t *st;
    store_eval_t *ev; /* a script in flight */
    store_cmd_t *cmd; /* or a command */
    void (*cb)(void); /* of the kind's type */
    void *arg;
    int runs;
    int nkeys, nargs;
    char *keys[STORE_EVAL_WORDS_MAX], *args[ARGS_MAX];
    size_t key_lens[STORE_EVAL_WORDS_MAX], arg_lens[ARGS_MAX];
    char base[STORE_KEY_MAX]; /* the member keys' (HC_MEMBER), the records' (HC_EVENT) */
};

static void call_free(store_hook_call_t *c)
{
    for (int i = 0; i < c->nkeys; i++)
        free(c->keys[i]);
    for (int i = 0; i < c->nargs; i++)
        free(c->args[i]);
    free(c);
}

void store_hook_cancel(store_hook_call_t *call)
{
    if (call == NULL)
        return;
    if (call->ev != NULL)
        store_eval_cancel(call->ev);
    else if (call->cmd != NULL)
        store_command_cancel(call->st, call->cmd);
    call_free(call);
}

static store_hook_call_t *call_new(store_t *st, hc_kind_t kind, void (*cb)(void), void *arg)
{
    store_hook_call_t *c = calloc(1, sizeof(*c));

    if (c != NULL) {
        c->kind = kind;
        c->st = st;
        c->cb = cb;
        c->arg = arg;
    }
    return c;
}

/* Sets word i of words (keys or args) to a copy of the n bytes at s: -1 when out of memory. */
static int word_set(char **words, size_t *lens, int i, const char *s, size_t n)
{
    char *copy = malloc(n + 1);

    if (copy == NULL)
        return -1;
    memcpy(copy, s, n);
    copy[n] = '\0';
    free(words[i]);
    words[i] = copy;
    lens[i] = n;
    return 0;
}

static int key_add(store_hook_call_t *c, const char *s)
{
    if (c->nkeys + c->nargs >= STORE_EVAL_WORDS_MAX ||
        word_set(c->keys, c->key_lens, c->nkeys, s, strlen(s)) < 0)
        return -1;
    c->nkeys++;
    return 0;
}

static int arg_add(store_hook_call_t *c, const char *s, size_t n)
{
    if (c->nargs >= ARGS_MAX || word_set(c->args, c->arg_lens, c->nargs, s, n) < 0)
        return -1;
    c->nargs++;
    return 0;
}

static int arg_num(store_hook_call_t *c, long long v)
{
    char buf[NUMFMT_DEC_SIZE];
    const char *s = numfmt_dec(buf, v);

    return arg_add(c, s, strlen(s));
}

static store_status_t status_of(int rc)
{
    return rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
}

static void on_reply(redisReply *reply, void *arg);

/* Runs c's script on its words: STORE_OK, or what kept it from being sent. */
static store_status_t call_run(store_hook_call_t *c, store_script_t *script)
{
    const char *words[STORE_EVAL_WORDS_MAX];
    size_t lens[STORE_EVAL_WORDS_MAX];
    int n = 0, rc;

    for (int i = 0; i < c->nkeys; i++, n++) {
        words[n] = c->keys[i];
        lens[n] = c->key_lens[i];
    }
    for (int i = 0; i < c->nargs; i++, n++) {
        words[n] = c->args[i];
        lens[n] = c->arg_lens[i];
    }
    c->runs++;
    c->ev = NULL;
    rc = store_eval(c->st, script, c->nkeys, n, words, lens, on_reply, c, &c->ev);
    return rc == REDISC_OK ? STORE_OK : status_of(rc);
}

/* The first run: c, or NULL (c freed) with *status. */
static store_hook_call_t *call_start(store_hook_call_t *c, store_script_t *script,
                                     store_status_t *status)
{
    if ((*status = call_run(c, script)) != STORE_OK) {
        call_free(c);
        return NULL;
    }
    return c;
}

/* ---- the member ---- */

/* A member id read from the recipient key: one a key and the caller's buffers take. */
static int member_id_ok(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < 64 && strlen(r->str) == r->len;
}

/* Points the call's guess (KEYS[2], ARGV[1]) at member id. */
static int member_guess(store_hook_call_t *c, const char *id)
{
    size_t base = strlen(c->base), n = strlen(id);
    char key[STORE_KEY_MAX];

    if (base + n >= sizeof(key))
        return -1;
    memcpy(key, c->base, base);
    memcpy(key + base, id, n + 1);
    return word_set(c->keys, c->key_lens, 1, key, base + n) < 0 ||
                   word_set(c->args, c->arg_lens, 0, id, n) < 0
               ? -1
               : 0;
}

static void member_answer(store_hook_call_t *c, redisReply *reply)
{
    store_hook_member_cb *cb = (store_hook_member_cb *)c->cb;
    const char *what = "";
    json_t *record = NULL;
    store_status_t st = STORE_OK;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
        st = STORE_UNAVAILABLE;
    else if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
             reply->element[0]->type != REDIS_REPLY_STRING || !member_id_ok(reply->element[1]))
        st = STORE_BAD_RECORD;
    else
        what = reply->element[0]->str;
    if (st == STORE_OK && strcmp(what, "moved") == 0) {
        /* the recipient is another member's than guessed: that one's key, once more */
        if (c->runs >= MEMBER_RUNS)
            st = STORE_CONFLICT;
        else if (member_guess(c, reply->element[1]->str) < 0)
            st = STORE_BUSY;
        else if ((st = call_run(c, &member_script)) == STORE_OK)
            return;
    } else if (st == STORE_OK && strcmp(what, "cas") == 0) {
        const redisReply *m = reply->elements == 3 ? reply->element[2] : NULL;
        record =
            m != NULL && m->type == REDIS_REPLY_STRING ? json_loadb(m->str, m->len, 0, NULL) : NULL;
        if (!json_is_object(record))
            st = STORE_BAD_RECORD;
    } else if (st == STORE_OK && strcmp(what, "found") != 0 && strcmp(what, "made") != 0) {
        st = STORE_BAD_RECORD;
    }
    if (st != STORE_OK) {
        json_decref(record);
        cb(c->arg, st, NULL, NULL);
    } else {
        cb(c->arg, st, reply->element[1]->str, record);
    }
    call_free(c);
}

store_hook_call_t *store_hook_member(store_t *st, const store_hook_member_t *m,
                                     store_hook_member_cb *cb, void *arg, store_status_t *status)
{
    const char *fresh_id = json_string_value(json_object_get(m->fresh, "_id"));
    const char *guess = m->guess_id != NULL ? m->guess_id : "";
    char key[STORE_KEY_MAX], *record = NULL;
    store_hook_call_t *c;

    *status = STORE_BAD_RECORD;
    if (fresh_id == NULL || *fresh_id == '\0')
        return NULL;
    if ((c = call_new(st, HC_MEMBER, (void (*)(void))cb, arg)) == NULL ||
        (record = json_dumps(m->fresh, JSON_COMPACT)) == NULL) {
        *status = STORE_BUSY;
        goto fail;
    }
    if (store_key_member_base(c->base, sizeof(c->base), store_prefix(st), m->channel_id) < 0 ||
        store_key_recipient(key, sizeof(key), store_prefix(st), m->channel_id, m->recipient_id) <
            0 ||
        strlen(c->base) + strlen(fresh_id) >= sizeof(key) ||
        strlen(c->base) + strlen(guess) >= sizeof(key))
        goto fail;
    *status = STORE_BUSY;
    if (key_add(c, key) < 0)
        goto fail;
    snprintf(key, sizeof(key), "%s%s", c->base, *guess ? guess : fresh_id);
    if (key_add(c, key) < 0)
        goto fail;
    snprintf(key, sizeof(key), "%s%s", c->base, fresh_id);
    if (key_add(c, key) < 0 || arg_add(c, guess, strlen(guess)) < 0 ||
        arg_add(c, fresh_id, strlen(fresh_id)) < 0 || arg_add(c, record, strlen(record)) < 0 ||
        arg_num(c, m->inbound_at > 0 ? m->inbound_at : 0) < 0 || arg_num(c, m->now_ms) < 0)
        goto fail;
    free(record);
    return call_start(c, &member_script, status);
fail:
    free(record);
    if (c != NULL)
        call_free(c);
    return NULL;
}

/* ---- subscriptions ---- */

static void subs_answer(store_hook_call_t *c, redisReply *reply)
{
    store_status_t st =
        reply == NULL || reply->type == REDIS_REPLY_ERROR ? STORE_UNAVAILABLE : STORE_OK;
    json_t *subs = NULL;

    if (st == STORE_OK && reply->type != REDIS_REPLY_ARRAY)
        st = STORE_BAD_RECORD;
    if (st == STORE_OK && (subs = json_array()) == NULL)
        st = STORE_UNAVAILABLE;
    for (size_t i = 0; st == STORE_OK && i + 1 < reply->elements; i += 2) {
        const redisReply *v = reply->element[i + 1];
        json_t *rec = v->type == REDIS_REPLY_STRING ? json_loadb(v->str, v->len, 0, NULL) : NULL;
        /* a record another writer broke is skipped: the others still get their events */
        if (json_is_object(rec) && json_is_string(json_object_get(rec, "_id")) &&
            json_is_string(json_object_get(rec, "url")))
            json_array_append(subs, rec);
        json_decref(rec);
    }
    ((store_hook_subs_cb *)c->cb)(c->arg, st, subs);
    json_decref(subs);
    call_free(c);
}

store_hook_call_t *store_hook_subscriptions(store_t *st, const char *app, store_hook_subs_cb *cb,
                                            void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    store_hook_call_t *c;
    int rc;

    if (store_key_subscriptions(key, sizeof(key), store_prefix(st), app) < 0) {
        *status = STORE_BAD_RECORD;
        return NULL;
    }
    if ((c = call_new(st, HC_SUBS, (void (*)(void))cb, arg)) == NULL) {
        *status = STORE_BUSY;
        return NULL;
    }
    {
        const char *argv[] = {"HGETALL", key};
        rc = store_command(st, key, on_reply, c, 2, argv, NULL, &c->cmd);
    }
    if (rc != REDISC_OK) {
        *status = status_of(rc);
        call_free(c);
        return NULL;
    }
    return c;
}

/* ---- an event ---- */

/* Adds the record keys of the request ids a run asked for (those it has already stay): -1
 * when an id is not one or the words are full. */
static int event_add_records(store_hook_call_t *c, const redisReply *ids)
{
    char key[STORE_KEY_MAX];

    for (size_t i = 0; i < ids->elements; i++) {
        const redisReply *id = ids->element[i];
        int have = 0;
        if (id->type != REDIS_REPLY_STRING || id->len == 0 ||
            strlen(c->base) + id->len >= sizeof(key))
            return -1;
        snprintf(key, sizeof(key), "%s%s", c->base, id->str);
        for (int k = 0; k < c->nkeys && !have; k++)
            have = strcmp(c->keys[k], key) == 0;
        if (!have && key_add(c, key) < 0)
            return -1;
    }
    return 0;
}

static void event_answer(store_hook_call_t *c, redisReply *reply)
{
    store_status_t st =
        reply == NULL || reply->type == REDIS_REPLY_ERROR ? STORE_UNAVAILABLE : STORE_OK;

    if (st == STORE_OK && reply->type == REDIS_REPLY_ARRAY && reply->elements > 0) {
        /* messages of queued requests: their records among the KEYS, and again */
        if (c->runs >= EVENT_RUNS)
            st = STORE_CONFLICT;
        else if (event_add_records(c, reply) < 0)
            st = STORE_BAD_RECORD;
        else if ((st = call_run(c, &event_script)) == STORE_OK)
            return;
    } else if (st == STORE_OK && reply->type != REDIS_REPLY_INTEGER) {
        st = STORE_BAD_RECORD;
    }
    ((store_hook_event_cb *)c->cb)(c->arg, st, st == STORE_OK ? (int)reply->integer : 0);
    call_free(c);
}

store_hook_call_t *store_hook_event(store_t *st, unsigned shard, const store_hook_event_t *ev,
                                    int64_t keep_ms, store_hook_event_cb *cb, void *arg,
                                    store_status_t *status)
{
    const char *prefix = store_prefix(st);
    char key[STORE_KEY_MAX], *subs = NULL;
    size_t size = 1, at = 0;
    unsigned m = ev->receipt != NULL ? ev->n_messages : 0;
    store_hook_call_t *c = NULL;

    *status = STORE_BAD_RECORD;
    if (ev->n_subs > STORE_HOOK_SUBS_MAX || m > STORE_HOOK_MESSAGES_MAX)
        return NULL;
    for (unsigned i = 0; i < ev->n_subs; i++) {
        if (strpbrk(ev->sub_ids[i], "\n:") != NULL || strchr(ev->urls[i], '\n') != NULL ||
            *ev->sub_ids[i] == '\0' || *ev->urls[i] == '\0')
            return NULL;
        size += strlen(ev->sub_ids[i]) + strlen(ev->urls[i]) + 2;
    }
    *status = STORE_BUSY;
    if ((c = call_new(st, HC_EVENT, (void (*)(void))cb, arg)) == NULL ||
        (subs = malloc(size)) == NULL)
        goto fail;
    for (unsigned i = 0; i < ev->n_subs; i++)
        at += (size_t)sprintf(subs + at, "%s\n%s\n", ev->sub_ids[i], ev->urls[i]);
    subs[at] = '\0';
    *status = STORE_BAD_RECORD;
    if (store_key_outbox_request(c->base, sizeof(c->base), prefix, shard, "") < 0 ||
        store_key_outbox(key, sizeof(key), prefix, shard) < 0 || key_add(c, key) < 0 ||
        store_key_outbox_event_seen(key, sizeof(key), prefix, shard, ev->event_id) < 0 ||
        key_add(c, key) < 0)
        goto fail;
    for (unsigned i = 0; i < ev->n_subs; i++)
        if (store_key_outbox_event_order(key, sizeof(key), prefix, shard, ev->sub_ids[i],
                                         ev->channel_id, ev->member_id) < 0 ||
            key_add(c, key) < 0)
            goto fail;
    for (unsigned i = 0; i < m; i++)
        if (store_key_outbox_message(key, sizeof(key), prefix, shard, ev->channel_id,
                                     ev->message_ids[i]) < 0 ||
            key_add(c, key) < 0)
            goto fail;
    if (arg_add(c, ev->event_id, strlen(ev->event_id)) < 0 ||
        arg_add(c, ev->app, strlen(ev->app)) < 0 || arg_add(c, ev->body, ev->body_len) < 0 ||
        arg_num(c, keep_ms) < 0 || arg_num(c, ev->n_subs) < 0 || arg_num(c, m) < 0 ||
        arg_add(c, m ? ev->receipt : "", m ? strlen(ev->receipt) : 0) < 0 ||
        arg_add(c, c->base, strlen(c->base)) < 0 || arg_add(c, subs, at) < 0)
        goto fail;
    free(subs);
    return call_start(c, &event_script, status);
fail:
    free(subs);
    if (c != NULL)
        call_free(c);
    return NULL;
}

static void on_reply(redisReply *reply, void *arg)
{
    store_hook_call_t *c = arg;

    c->ev = NULL;
    c->cmd = NULL;
    switch (c->kind) {
    case HC_MEMBER:
        member_answer(c, reply);
        break;
    case HC_SUBS:
        subs_answer(c, reply);
        break;
    case HC_EVENT:
        event_answer(c, reply);
        break;
    }
}
