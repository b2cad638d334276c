/* op.c - what both operations share: the request's life (deadline, answer, log line, free) and
 * the resolve phase. Token, channel and (when memberId is given) member are fetched in one
 * round trip; a member found by recipientId, and created when new, takes a second one, and
 * only once the token and the channel have been accepted, so that nobody can create members
 * without a valid token. */
#include "op.h"

#include "../core/clock.h"
#include "../core/dlist.h"
#include "../core/hash.h"
#include "../core/member.h"
#include "../core/prefer.h"
#include "../core/rng.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

/* Every request in flight carries one: it stays within its allocator size class (the
 * figures: bench/README.md, "Where the bytes and instructions go"). */
_Static_assert(sizeof(op_t) <= 448, "op_t grew past 448 bytes");

/* The deadline passed: the op is answered, and so freed. */
static void op_expire(op_t *op)
{
    bg_error_t err;

    if (op->drain_cut) {
        op_drain(op, 1); /* a call left to finish by the drain did not: answered as cut */
        return;
    }
    op_cancel_all(op);
    if (op->phase == OP_WAIT) {
        op_guard_expired(op, &err);
        op_fail(op, &err);
        return;
    }
    if (op->phase == OP_RUN && op->kind->expired != NULL) {
        op->kind->expired(op);
        return;
    }
    bg_error_set(&err, op->phase == OP_RUN ? BG_ERR_PLATFORM : BG_ERR_STORE,
                 op->phase == OP_RUN ? "the platform did not answer in time"
                                     : "the store did not answer in time");
    op_fail(op, &err);
}

/* Every request gets the same timeout, so the in-flight list, appended to as requests
 * arrive, is in deadline order: one worker timer for its first request does what a timer
 * per request would, without an event per request or a heap insert and delete each. It
 * fires early when that request was answered before; then it is set again for the new first
 * one. */
static void arm_deadlines(op_env_t *env, int64_t now_ms)
{
    int64_t ms = env->ops->dl.deadline_ms - now_ms;
    struct timeval tv = clock_ms_timeval(ms < 1 ? 1 : ms);

    evtimer_add(env->deadline_timer, &tv);
}

void op_on_deadlines(evutil_socket_t fd, short what, void *arg)
{
    op_env_t *env = arg;
    int64_t now_ms = clock_mono_us() / 1000;

    (void)fd;
    (void)what;
    while (env->ops != NULL && env->ops->dl.deadline_ms <= now_ms)
        op_expire(env->ops); /* answered and unlinked: op_fail and the expired hooks free it */
    if (env->ops != NULL)
        arm_deadlines(env, now_ms);
}

/* A recipientId that passed parsing reaches the platform whole. */
_Static_assert(REQUEST_MAX_RECIPIENT < ADAPTER_ID_MAX, "recipientId must fit an address");

/* The request headers op_start reads, found in one walk over them (evhttp_find_header would
 * walk them once per name, and drop_request_headers once more): each is the first of its name,
 * compared without case, as evhttp_find_header finds it; a second Idempotency-Key is noted, not
 * ignored. Borrowed from the request's headers. */
typedef struct op_headers {
    const char *request_id, *idempotency_key, *authorization;
    struct evkeyval *connection;
    unsigned idempotency_twice : 1; /* a second Idempotency-Key: which one is meant is unknown */
    unsigned prefer_async : 1;      /* a Prefer header states respond-async (RFC 7240) */
    unsigned prefer_bad : 1;        /* a Prefer header is not the header's syntax */
} op_headers_t;

static void read_headers(struct evkeyvalq *headers, op_headers_t *h)
{
    struct evkeyval *kv;

    memset(h, 0, sizeof(*h));
    TAILQ_FOREACH(kv, headers, next)
    {
        switch (kv->key[0] | 0x20) { /* ASCII lower case; an empty key matches none */
        case 'x':
            if (h->request_id == NULL && evutil_ascii_strcasecmp(kv->key, "X-Request-Id") == 0)
                h->request_id = kv->value;
            break;
        case 'i':
            if (evutil_ascii_strcasecmp(kv->key, "Idempotency-Key") == 0) {
                h->idempotency_twice |= h->idempotency_key != NULL;
                if (h->idempotency_key == NULL)
                    h->idempotency_key = kv->value;
            }
            break;
        case 'a':
            if (h->authorization == NULL && evutil_ascii_strcasecmp(kv->key, "Authorization") == 0)
                h->authorization = kv->value;
            break;
        case 'c':
            if (h->connection == NULL && evutil_ascii_strcasecmp(kv->key, "Connection") == 0)
                h->connection = kv;
            break;
        case 'p':
            /* every Prefer header counts: RFC 7240 lets a client split them */
            if (evutil_ascii_strcasecmp(kv->key, "Prefer") == 0) {
                int async = prefer_respond_async(kv->value);
                h->prefer_async |= async == 1;
                h->prefer_bad |= async < 0;
            }
            break;
        }
    }
}

/* A caller's X-Request-Id is kept when it is short and plain; otherwise one is made up. */
static void take_request_id(op_t *op, const char *given)
{
    size_t n = given ? strlen(given) : 0;

    if (n > 0 && n < sizeof(op->id) &&
        strspn(given, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                      "OPQRSTUVWXYZ0123456789-_.:") == n) {
        memcpy(op->id, given, n + 1);
        return;
    }
    rng_hex(&op->env->deliver.rng, op->id, 16);
}

static op_t *op_new(op_env_t *env, struct evhttp_request *req, const op_kind_t *kind,
                    const op_headers_t *h)
{
    op_t *op = calloc(1, sizeof(*op));

    if (op == NULL)
        return NULL;
    op->env = env;
    op->req = req;
    op->kind = kind;
    op->started_us = clock_mono_us();
    op->dl.env = &env->deliver;
    op->dl.deadline_ms = op->started_us / 1000 + env->deliver.cfg->request_timeout_ms;
    op->phase = OP_PARSE;
    take_request_id(op, h->request_id);
    DLIST_APPEND(env->ops, env->ops_last, op);
    if (!evtimer_pending(env->deadline_timer, NULL))
        arm_deadlines(env, op->started_us / 1000);
    env->in_flight++;
    atomic_fetch_add_explicit(&env->deliver.metrics->in_flight, 1, memory_order_relaxed);
    return op;
}

static void cancel_store_calls(op_t *op)
{
    for (int i = 0; i < 3; i++) {
        store_cancel(op->calls[i]);
        op->calls[i] = NULL;
    }
    store_cancel(op->call);
    op->call = NULL;
}

void op_cancel_all(op_t *op)
{
    cancel_store_calls(op);
    if (op_outbox(op) != NULL)
        op->env->outbox->cancel(op);
    deliver_cancel(&op->dl);
    op_guard_cancel(op);
    if (op->kind->cancel != NULL)
        op->kind->cancel(op);
}

/* Each part stops what it has in flight as it is freed (a delivery not idle, the kind's
 * cleanup; the guard went with op_guard_end): nothing of the op is called back after this. */
static void op_free(op_t *op)
{
    op_env_t *env = op->env;

    cancel_store_calls(op);
    DLIST_UNLINK(env->ops, env->ops_last, op);
    auth_token_free(&op->token);
    if (deliver_holds(&op->dl))
        deliver_cancel(&op->dl); /* an idle delivery holds nothing of its own */
    json_decref(op->dl.channel);
    free(op->dl.to);
    json_decref(op->member);
    if (op->kind->cleanup != NULL && !op->kind_freed)
        op->kind->cleanup(op);
    free((char *)op->target.channel_id); /* the block of the target's ids (keep_target) */
    if (op_outbox(op) != NULL)
        op->env->outbox->release(op);
    free(op);
    env->in_flight--;
    if (env->draining && env->in_flight == 0)
        env->done(env->done_arg);
}

/* BOTGATE_HTTP_STATUS=conventional: the status a generic HTTP client and its retry middleware
 * understand, for the same body. 4xx: the request as sent will fail again; 502/503: botgate or
 * the platform could not do it now; 429: nothing was sent, each message was rate limited, so
 * the whole request may go again. */
static int conventional_status(const op_t *op, int status, int code)
{
    switch (code) {
    case BG_OK:
        return deliver_only_rate_limited(&op->dl) ? 429 : status;
    case BG_ERR_UNAUTHORIZED:
        return 401;
    case BG_ERR_MISSING_PARAM:
    case BG_ERR_UNSUPPORTED:
    case BG_ERR_PHONE_INVALID:
    case BG_ERR_RECIPIENT_INVALID:
        return 400;
    case BG_ERR_NO_CHANNEL:
    case BG_ERR_NO_MEMBER:
    case BG_ERR_NO_TREE:
        return 404;
    case BG_ERR_CHANNEL_OFF:
    case BG_ERR_IDEM_RUNNING:
    case BG_ERR_IDEM_MISMATCH:
        return 409;
    case BG_ERR_LIMIT:
        return 413;
    case BG_ERR_PLATFORM:
        return 502;
    case BG_ERR_STORE:
    case BG_ERR_UNAVAILABLE:
        return 503;
    default:
        return status;
    }
}

/* An accepted async request's answer (202) says where its status is. The id is read back from
 * the answer, which a replay (Idempotency-Key) has too: {"ok":1,"requestId":"<id>",... */
static void async_headers(struct evhttp_request *req, const char *text, size_t len)
{
    static const char at[] = "\"requestId\":\"";
    const char *id = text != NULL ? memmem(text, len, at, sizeof(at) - 1) : NULL;
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    char location[64];
    size_t n;

    if (id == NULL)
        return;
    id += sizeof(at) - 1;
    n = strcspn(id, "\"");
    if (n == 0 || n > 40)
        return;
    snprintf(location, sizeof(location), "/requests/%.*s", (int)n, id);
    evhttp_add_header(out, "Preference-Applied", "respond-async");
    evhttp_add_header(out, "Location", location);
}

/* Sends the answer text (taken over) and frees the op. */
static void op_reply_as(op_t *op, int status, char *text, size_t len, int code, int replayed)
{
    http_answer_t a;

    /* a replay answers as the first answer did (its status was stored mapped) */
    if (op->env->deliver.cfg->http_status_conventional && !replayed)
        status = conventional_status(op, status, code);
    a.status = status;
    a.code = code;
    a.route = op->kind->route;
    a.request_id = op->id;
    a.channel = op->target.channel_id;
    a.member = op->member_id;
    a.app = op->token.record != NULL ? op->token.app : NULL;
    a.platform_calls = op->dl.platform_calls;
    a.sent = deliver_sent(&op->dl);
    a.failed = op->dl.failed;
    a.started_us = op->started_us;
    a.close = op->env->draining != 0;
    a.replayed = replayed;
    if (op->guard != NULL)
        op_guard_end(op, status, code, text, len);
    atomic_fetch_add_explicit(&op->env->deliver.metrics->in_flight, -1, memory_order_relaxed);
    if (op_is_queued(op)) {
        op->env->outbox->answered(op, status, code, text, len);
        free(text);
    } else {
        if (status == 202)
            async_headers(op->req, text, len);
        http_answer(op->env->http, op->req, &a, text, len);
    }
    op->phase = OP_DONE;
    op_free(op);
}

static void op_reply_text(op_t *op, int status, char *text, size_t len, int code)
{
    op_reply_as(op, status, text, len, code, 0);
}

/* Answers with a stored answer (text taken over), marked Idempotent-Replayed. */
static void op_replay_text(op_t *op, int status, int code, char *text, size_t len)
{
    op_reply_as(op, status, text, len, code, 1);
}

static void op_reply(op_t *op, int status, json_t *body, int code)
{
    size_t len = 0;
    char *text = jw_dump(body, &len);

    json_decref(body);
    op_reply_text(op, status, text, len, code);
}

void op_fail(op_t *op, const bg_error_t *err)
{
    int status = err->http_status == 413 ? 413 : 500;

    op_reply(op, status, bg_error_to_json(err), err->code);
}

void op_answer(op_t *op, json_t *answer)
{
    op_reply(op, 200, answer, 0);
}

void op_answer_text(op_t *op, char *text, size_t len)
{
    op_reply_text(op, 200, text, len, 0);
}

void op_answer_accepted(op_t *op, char *text, size_t len)
{
    op_reply_text(op, 202, text, len, 0);
}

void op_fail_text(op_t *op, int code, char *text, size_t len)
{
    op_reply_text(op, 500, text, len, code);
}

/* Before its first platform call a request has sent nothing: a retry elsewhere is safe. */
static void fail_not_started(op_t *op)
{
    op_fail_code(op, BG_ERR_UNAVAILABLE,
                 "server is shutting down: the request did not start, nothing was sent");
}

int op_drain(op_t *op, int now)
{
    /* The message call of the response in flight is out: it may deliver the message whatever
     * botgate does, so cutting it would leave its outcome unknown. */
    int on_wire = op->phase == OP_RUN && deliver_on_wire(&op->dl);

    op->drain_cut = 1;
    if (!now && on_wire) {
        /* it ends within the upstream timeout; a retry after it would be a new call */
        deliver_no_retry(&op->dl);
        return 1;
    }
    if (!now && op->phase == OP_WRITEBACK)
        return 1; /* everything ran: only the member's write-back (one store call) is left */
    op_cancel_all(op);
    if ((op->phase == OP_RUN || op->phase == OP_WRITEBACK) && op->kind->drained != NULL)
        op->kind->drained(op, on_wire);
    else
        fail_not_started(op);
    return 0;
}

size_t op_drain_all(op_env_t *env, int now)
{
    size_t kept = 0;
    op_t *next;

    for (op_t *op = env->ops; op != NULL; op = next) {
        next = op->next; /* answering op frees only op */
        kept += (size_t)op_drain(op, now);
    }
    return kept;
}

/* ---- resolve ---- */

int op_refuse_sync_callback(const op_t *op, const json_t *root, bg_error_t *err)
{
    const json_t *cb = json_object_get(root, "statusCallback");

    /* a queued request runs without an HTTP request and without its callback (outbox.c keeps
     * it in the request's record) */
    if (op->req == NULL || op->kind->async || cb == NULL || json_is_null(cb))
        return 0;
    return bg_error_set(err, BG_ERR_MISSING_PARAM,
                        "parameter statusCallback needs Prefer: respond-async (a synchronous "
                        "request's answer is its status; receipts of its messages reach "
                        "subscriptions as events)");
}

void op_fail_code(op_t *op, int code, const char *msg)
{
    bg_error_t err;

    bg_error_set(&err, code, "%s", msg);
    op_fail(op, &err);
}

void op_fail_store(op_t *op, store_status_t st)
{
    op_fail_code(op, BG_ERR_STORE, op_store_failure(st));
}

/* The guard did not let the request go on (op_guard_stop_fn). */
static void guard_stopped(op_t *op, int code, const char *msg, int status, char *text, size_t len)
{
    if (text != NULL)
        op_replay_text(op, status, code, text, len);
    else
        op_fail_code(op, code, msg);
}

/* Sets the delivery's address (op->dl.to, with the member's id: op_free frees it) from the
 * member's record: 0, or -1 when it has no address on the platform, -2 when out of memory.
 * It fits a platform call: REQUEST_MAX_RECIPIENT < ADAPTER_ID_MAX. */
static int member_address(op_t *op)
{
    const char *ext = json_string_value(json_object_get(op->member, "externalId"));
    char phone[ADAPTER_ID_MAX];

    /* Longer than a platform call carries: refused, never sent to a cut address. */
    if (ext == NULL || *ext == '\0' || strlen(ext) > REQUEST_MAX_RECIPIENT)
        return -1;
    if (op->dl.adapter->phone_recipients) {
        request_normalize_phone(ext, phone, sizeof(phone));
        if (phone[0] == '\0')
            return -1;
        ext = phone;
    }
    return deliver_set_address(&op->dl, ext, op->member_id) == 0 ? 0 : -2;
}

static void run_kind(op_t *op)
{
    op->phase = OP_RUN;
    op->kind->run(op);
}

static void slot_ahead(op_t *op, store_idem_call_t *begin);

static void member_ready(op_t *op)
{
    op->member_id = json_string_value(json_object_get(op->member, "_id"));
    if (op->member_id == NULL) {
        op_fail_code(op, BG_ERR_NO_MEMBER, "member record has no _id");
        return;
    }
    switch (member_address(op)) {
    case -1:
        op_fail_code(op, BG_ERR_RECIPIENT_INVALID, "member has no address on the platform");
        return;
    case -2:
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    /* an async request is only queued now, with its place in the member's turn queue, which
     * its attempts hold (the outbox waits for that turn before it starts one) */
    if (op_is_async(op) || op_is_queued(op) || !op->env->deliver.cfg->member_order ||
        op->turn_held) {
        run_kind(op);
        return;
    }
    /* someone is ahead: a slot taken ahead (slot_ahead) would be stale by the turn; given back
     * now, it is most likely still the last one taken (with a Redis Cluster the slot's script
     * cannot see the member's queue, in another slot) */
    if (deliver_holds(&op->dl))
        deliver_cancel(&op->dl);
    if (op_guard_turn(op, run_kind, guard_stopped, slot_ahead))
        run_kind(op);
}

static void on_recipient(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->call = NULL;
    if (st != STORE_OK) {
        json_decref(value);
        if (st == STORE_BAD_RECORD)
            op_fail_code(op, BG_ERR_NO_MEMBER, "member record is not valid");
        else
            op_fail_store(op, st);
        return;
    }
    op->member = value;
    op->member_seq = store_write_seq(op->env->deliver.store);
    member_ready(op);
}

void op_resolve_recipient(op_t *op)
{
    char id[25], recipient[REQUEST_MAX_ID + 1];
    const char *rid = op->target.recipient_id;
    json_t *fresh;
    store_status_t st;

    if (op->dl.adapter->phone_recipients) {
        request_normalize_phone(rid, recipient, sizeof(recipient));
        if (recipient[0] == '\0') {
            op_fail_code(op, BG_ERR_MISSING_PARAM, "parameter recipientId is not a phone number");
            return;
        }
        rid = recipient;
    }
    rng_hex(&op->env->deliver.rng, id, 24);
    fresh = member_new(id, op->target.channel_id, op->token.app, rid, op->dl.adapter->type,
                       clock_wall_ms());
    op->phase = OP_RECIPIENT;
    op->call =
        store_member_for_recipient(op->env->deliver.store, op->target.channel_id, rid, fresh,
                                   op->kind->route == METRICS_ROUTE_SEND, on_recipient, op, &st);
    json_decref(fresh);
    if (op->call == NULL)
        op_fail_store(op, st);
}

static void resolve_member(op_t *op);

/* The token and the channel, once both are known: 1 when the request was refused (answered),
 * else 0 with the adapter set. */
static int resolve_refused(op_t *op)
{
    const json_t *on;
    const char *type;

    if (op->token_st == STORE_UNAVAILABLE || op->token_st == STORE_BUSY) {
        op_fail_store(op, op->token_st);
        return 1;
    }
    if (op->token_st != STORE_OK || !auth_allows(&op->token, op->kind->scopes, clock_wall_ms())) {
        op_fail_code(op, BG_ERR_UNAUTHORIZED, "User is not authorized");
        return 1;
    }
    if (op->channel_st == STORE_UNAVAILABLE || op->channel_st == STORE_BUSY) {
        op_fail_store(op, op->channel_st);
        return 1;
    }
    /* Another app's channel is answered exactly like a missing one. */
    if (op->channel_st != STORE_OK ||
        !auth_sees_channel(&op->token, op->target.channel_id,
                           json_string_value(json_object_get(op->dl.channel, "app")))) {
        op_fail_code(op, BG_ERR_NO_CHANNEL, "channel not found");
        return 1;
    }
    on = json_object_get(op->dl.channel, "on");
    if (json_is_false(on)) {
        op_fail_code(op, BG_ERR_CHANNEL_OFF, "channel is not live");
        return 1;
    }
    type = json_string_value(json_object_get(op->dl.channel, "type"));
    if ((op->dl.adapter = adapter_find(type)) == NULL) {
        bg_error_t err;
        bg_error_set(&err, BG_ERR_UNSUPPORTED, "channel type %.40s is not supported",
                     type ? type : "(none)");
        op_fail(op, &err);
        return 1;
    }
    return 0;
}

static void resolve_check(op_t *op)
{
    if (!op->token_done || !op->channel_done || !op->member_done || resolve_refused(op))
        return;
    if (!op->keyed || op_guard_begin(op, resolve_member))
        resolve_member(op);
}

/* The member, once the token and the channel were accepted (and the Idempotency-Key let the
 * request run). */
static void resolve_member(op_t *op)
{
    if (op->target.member_id == NULL) {
        if (op->kind->before_recipient != NULL)
            op->kind->before_recipient(op);
        else
            op_resolve_recipient(op);
        return;
    }
    if (op->member_st == STORE_UNAVAILABLE || op->member_st == STORE_BUSY) {
        op_fail_store(op, op->member_st);
        return;
    }
    if (op->member_st != STORE_OK) {
        op_fail_code(op, BG_ERR_NO_MEMBER, "member not found");
        return;
    }
    member_ready(op);
}

/* Decodes a token record into op->token, once per record object: the worker's cache hands
 * every request the same object until the record changes in Redis (records that share a slot
 * take turns in it). -1: not a valid record. */
static int token_decode(op_t *op, const json_t *record)
{
    auth_token_t *k = &op->env->_tokens[hash_ptr(record, OP_TOKENS_KEPT_BITS)];
    auth_token_t t;

    if (record == NULL || record != k->record) {
        if (auth_token_decode(record, &t) < 0)
            return -1;
        auth_token_free(k);
        *k = t;
    }
    op->token = *k;
    json_incref(op->token.record);
    return 0;
}

void op_env_clear(op_env_t *env)
{
    op_guard_clear(env);
    for (size_t i = 0; i < sizeof(env->_tokens) / sizeof(env->_tokens[0]); i++)
        auth_token_free(&env->_tokens[i]);
    deliver_env_clear(&env->deliver);
}

static void on_token(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->calls[0] = NULL;
    op->token_done = 1;
    op->token_st = st;
    if (st == STORE_OK && token_decode(op, value) < 0)
        op->token_st = STORE_BAD_RECORD;
    json_decref(value);
    resolve_check(op);
}

/* A record the store found (taken): kept in *out when it is an object. Returns its status. */
static store_status_t take_record(store_status_t st, json_t *value, json_t **out)
{
    if (st == STORE_OK && json_is_object(value)) {
        *out = value;
        return STORE_OK;
    }
    json_decref(value);
    return st == STORE_OK ? STORE_BAD_RECORD : st;
}

static void on_channel(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->calls[1] = NULL;
    op->channel_done = 1;
    op->channel_st = take_record(st, value, &op->dl.channel);
    resolve_check(op);
}

/* What the member's read found (the record taken). */
static void member_read(op_t *op, store_status_t st, json_t *value)
{
    op->member_done = 1;
    op->member_st = take_record(st, value, &op->member);
    op->member_seq = store_write_seq(op->env->deliver.store);
}

static void on_member(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->calls[2] = NULL;
    member_read(op, st, value);
    resolve_check(op);
}

/* The member read with its turn (op_guard_take_member): the token and the channel were
 * accepted before it was sent. */
static void on_member_taken(op_t *op, store_status_t st, json_t *value)
{
    member_read(op, st, value);
    resolve_member(op);
}

/* The member read, order off, once the token and the channel were accepted; with an
 * Idempotency-Key its begin went with it, and the later of the two answers goes on. */
static void on_member_accepted(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->calls[2] = NULL;
    member_read(op, st, value);
    if (op->begin_early != 1) /* else the begin has not let it run yet: on_begun goes on */
        resolve_member(op);
}

/* The key's begin, sent with the member's read, let the request run. */
static void on_begun(op_t *op)
{
    op->begin_early = 2;
    if (op->member_done)
        resolve_member(op);
}

/* The first message's slots of the channel's rate limit go in the member's read's round trip
 * (before the read and the turn's RPUSH) when the request delivers now; begin, an
 * Idempotency-Key's begin held, rides with them when it can (deliver_slot_ahead). */
static void slot_ahead(op_t *op, store_idem_call_t *begin)
{
    /* the record's id once read (a member found by recipientId), else the one asked for */
    const char *member_id = op->member_id != NULL ? op->member_id : op->target.member_id;

    if (op->kind->route == METRICS_ROUTE_SEND && !op_is_async(op) && member_id != NULL)
        deliver_slot_ahead(&op->dl, member_id, op->env->deliver.cfg->member_order, begin);
}

void op_resolve(op_t *op, const char *token_hash)
{
    store_t *store = op->env->deliver.store;
    store_status_t st = STORE_OK;
    json_t *cached;
    int accepted = 0;

    /* Token and channel come from the worker's cache when it has them; whatever is missing is
     * asked for in one round trip (hiredis pipelines the commands). */
    if (op->env->draining == OP_DRAIN_OVER) {
        fail_not_started(op); /* no platform call starts once the drain time is over */
        return;
    }
    op->phase = OP_RESOLVE;
    op->member_done = op->target.member_id == NULL;
    if (token_hash == NULL) {
        op->token_done = 1; /* a queued request: op_start_queued set the token */
        op->token_st = STORE_OK;
    } else if ((cached = store_cached_token(store, token_hash)) != NULL) {
        op->token_done = 1;
        op->token_st = token_decode(op, cached) == 0 ? STORE_OK : STORE_BAD_RECORD;
        json_decref(cached);
    }
    if ((op->dl.channel = store_cached_channel(store, op->target.channel_id)) != NULL) {
        op->channel_done = 1;
        op->channel_st = STORE_OK;
    }
    /* Both from the cache: checked now, so that only an accepted request takes a slot of the
     * channel's rate limit, and queues for the member's turn, in the round trip of the member's
     * read, with an Idempotency-Key's begin. A request to queue takes its place when it is
     * accepted, an attempt of a queued one holds it (outbox.c): neither takes a turn or a slot
     * here. */
    if (op->token_done && op->channel_done && op->target.member_id != NULL && !op_is_queued(op) &&
        !op_is_async(op)) {
        if (resolve_refused(op))
            return;
        if (op->env->deliver.cfg->member_order) {
            op_guard_take_member(op, on_member_taken, guard_stopped, slot_ahead);
            return;
        }
        slot_ahead(op, NULL);
        accepted = 1;
    }
    if (!op->token_done)
        op->calls[0] = store_get_token(store, token_hash, on_token, op, &st);
    if (st == STORE_OK && !op->channel_done)
        op->calls[1] = store_get_channel(store, op->target.channel_id, on_channel, op, &st);
    /* accepted already (both cached): the member's answer goes on without checking again */
    if (st == STORE_OK && op->target.member_id != NULL)
        op->calls[2] = store_get_member(store, op->target.channel_id, op->target.member_id,
                                        op->kind->route == METRICS_ROUTE_SEND,
                                        accepted ? on_member_accepted : on_member, op, &st);
    if (st != STORE_OK) {
        op_cancel_all(op);
        op_fail_store(op, st);
        return;
    }
    if (accepted) {
        /* with an Idempotency-Key its begin goes with the read; it answers the request when
         * it cannot run */
        if (op->keyed) {
            op->begin_early = 1;
            op_guard_begin(op, on_begun);
        }
        return;
    }
    resolve_check(op); /* everything may have come from the cache */
}

/* The request headers are read by now (X-Request-Id in op_new, Authorization here): they go
 * while the request waits for the platform, less memory per request in flight, and the
 * token with them. Only Connection stays, as it came: evhttp reads it again when it answers,
 * to keep the connection open or close it as the client asked. */
static void drop_request_headers(op_t *op, const op_headers_t *h)
{
    struct evkeyvalq *headers = evhttp_request_get_input_headers(op->req);

    if (h->connection != NULL)
        TAILQ_REMOVE(headers, h->connection, next);
    evhttp_clear_headers(headers);
    if (h->connection != NULL)
        TAILQ_INSERT_TAIL(headers, h->connection, next);
}

/* The accessToken value of a query, decoded as evhttp decodes it (a '+' is a space), with its
 * length: a %00 in it stays visible instead of cutting the C string short. NULL when absent;
 * the caller frees it. */
static char *query_token(const char *query, size_t *len)
{
    static const char key[] = "accessToken=";
    const char *p = query;

    while (p != NULL && *p != '\0') {
        size_t n = strcspn(p, "&");
        if (n >= sizeof(key) - 1 && memcmp(p, key, sizeof(key) - 1) == 0) {
            char *raw = strndup(p + sizeof(key) - 1, n - (sizeof(key) - 1));
            char *value = raw ? evhttp_uridecode(raw, 1, len) : NULL;
            free(raw);
            return value;
        }
        p = p[n] == '&' ? p + n + 1 : p + n;
    }
    return NULL;
}

/* The last token this worker hashed, and its hash: a bot sends all its requests with one
 * token, and its SHA-256 was 1.7 % of a request's CPU (perf, bench a-tls). The hash is a pure
 * function of the token (the lookup that may refuse it is by hash, after), so the memo cannot
 * outlive a revocation. It holds a client's secret: compared in constant time. */
static _Thread_local struct {
    size_t len; /* 0: empty */
    char token[AUTH_TOKEN_MAX];
    char hash[AUTH_HASH_HEX];
} token_memo;

static void hash_token_memo(const char *token, size_t len, char token_hash[AUTH_HASH_HEX])
{
    if (len == 0 || len != token_memo.len || CRYPTO_memcmp(token, token_memo.token, len) != 0) {
        auth_hash_token(token, len, token_memo.hash);
        memcpy(token_memo.token, token, len);
        token_memo.len = len;
    }
    memcpy(token_hash, token_memo.hash, AUTH_HASH_HEX);
}

/* The token of a request (its Authorization header auth, else its query), hashed: 0, or -1
 * when there is none. */
static int token_hash_of(struct evhttp_request *req, const char *auth,
                         char token_hash[AUTH_HASH_HEX])
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    size_t query_len = 0, len = 0;
    char *from_query = auth == NULL ? query_token(query, &query_len) : NULL;
    const char *token;
    int found = 0;

    token = auth_request_token(auth, from_query, query_len, &len);
    if (token != NULL && len <= AUTH_TOKEN_MAX) {
        hash_token_memo(token, len, token_hash);
        found = 1;
    }
    free(from_query);
    return found ? 0 : -1;
}

int op_request_token(struct evhttp_request *req, char token_hash[AUTH_HASH_HEX])
{
    return token_hash_of(req,
                         evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization"),
                         token_hash);
}

/* Takes the token of the request, or answers "not authorized". Returns 0 when there is one. */
static int take_token(op_t *op, const op_headers_t *h, char token_hash[AUTH_HASH_HEX])
{
    int found = token_hash_of(op->req, h->authorization, token_hash) == 0;

    drop_request_headers(op, h);
    if (!found) {
        op_fail_code(op, BG_ERR_UNAUTHORIZED, "User is not authorized");
        return -1;
    }
    return 0;
}

/* Copies the target's ids (channel, member, recipient) out of the parsed body into one block,
 * channel id first: the kind may let its body go before the answer, whose log line reads them.
 * -1 when out of memory (then the target is empty). */
static int keep_target(op_t *op)
{
    const char **ids[3] = {&op->target.channel_id, &op->target.member_id, &op->target.recipient_id};
    size_t len[3], total = 0;
    char *block, *at;

    for (int i = 0; i < 3; i++)
        total += len[i] = *ids[i] != NULL ? strlen(*ids[i]) + 1 : 0;
    if ((at = block = malloc(total)) == NULL) {
        memset(&op->target, 0, sizeof(op->target));
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        if (*ids[i] == NULL)
            continue;
        memcpy(at, *ids[i], len[i]);
        *ids[i] = at;
        at += len[i];
    }
    return 0;
}

void op_start(void *route, struct evhttp_request *req)
{
    op_env_t *env = ((op_route_t *)route)->env;
    const op_kind_t *kind = ((op_route_t *)route)->kind;
    op_headers_t h;
    op_t *op;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body;
    bg_error_t err;
    char token_hash[AUTH_HASH_HEX];
    int guard = 0;

    read_headers(evhttp_request_get_input_headers(req), &h);
    /* only where the outbox runs: elsewhere the preference is ignored (RFC 7240 allows it) and
     * the request answered as always */
    if (h.prefer_async && !h.prefer_bad && env->outbox != NULL)
        kind = kind == &op_send_kind ? &op_send_async_kind : &op_redirect_async_kind;
    if ((op = op_new(env, req, kind, &h)) == NULL) {
        http_refuse(env->http, req); /* only calloc failing gets here */
        return;
    }
    body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    /* before the headers go (take_token); member order alone makes its guard once the member
     * is known (op_guard_turn) */
    if (h.idempotency_key != NULL && !h.idempotency_twice)
        guard = op_guard_take(op, h.idempotency_key, body, len, guard_stopped);
    if (take_token(op, &h, token_hash) < 0)
        return;
    if (guard == -2) {
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    if (guard < 0 || h.idempotency_twice) {
        op_fail_code(op, BG_ERR_MISSING_PARAM,
                     h.idempotency_twice
                         ? "parameter Idempotency-Key must be given once: the request has two"
                         : "parameter Idempotency-Key must be 1-255 printable ASCII characters");
        return;
    }
    if (h.prefer_bad) {
        op_fail_code(op, BG_ERR_MISSING_PARAM,
                     "parameter Prefer is not an RFC 7240 header (preference[=value][; param], "
                     "comma-separated)");
        return;
    }

    if (kind->parse(op, body, len, &err) < 0) {
        op_fail(op, &err);
        return;
    }
    if (keep_target(op) < 0) {
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    /* Once parsed, nothing reads the body again (the parsed request holds its own copies): its
     * buffer goes now rather than when the answer is sent, a kilobyte less per request that
     * waits for a platform. */
    evbuffer_drain(in, len);
    op->dl.channel_id = op->target.channel_id;
    op_resolve(op, token_hash);
}

int op_start_queued(op_env_t *env, const op_kind_t *kind, const char *body, size_t len,
                    const char *app, void *outbox)
{
    op_headers_t h;
    op_t *op;
    bg_error_t err;

    memset(&h, 0, sizeof(h));
    if ((op = op_new(env, NULL, kind, &h)) == NULL)
        return -1;
    op->resuming = 1; /* what earlier attempts did is asked for (op_guard_resumed) */
    op_outbox(op) = outbox;
    op->token.app = app;
    op->token.scopes = kind->scopes;
    op->dl.bulk = kind->bulk;
    if (kind->parse(op, body, len, &err) < 0) {
        op_fail(op, &err);
        return 0;
    }
    if (keep_target(op) < 0) {
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return 0;
    }
    op->dl.channel_id = op->target.channel_id;
    op_resolve(op, NULL);
    return 0;
}
