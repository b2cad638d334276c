/* op.c - what both operations share: the request's life (deadline, answer, log line, free) and
 * the resolve phase. Token, channel and (when memberId is given) member are fetched in one
 * round trip; a member found by recipientId, and created when new, takes a second one, and
 * only once the token and the channel have been accepted, so that nobody can create members
 * without a valid token. */
#include "op.h"

#include "../core/jsonw.h"
#include "../core/member.h"
#include "conn.h"
#include "http.h"
#include "log.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

/* Every request in flight carries one: mimalloc would round 449 bytes up to 512. */
_Static_assert(sizeof(op_t) <= 448, "op_t grew past 448 bytes");

static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t op_now_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t op_remaining_ms(const op_t *op)
{
    return op->deadline_ms - mono_us() / 1000;
}

/* The deadline passed: the op is answered, and so freed. */
static void expire(op_t *op)
{
    bg_error_t err;

    if (op->drain_cut) {
        op_drain(op, 1); /* a call left to finish by the drain did not: answered as cut */
        return;
    }
    op_cancel_all(op);
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
 * per request did (128 bytes of struct event each, thousands in flight, and a heap insert
 * and delete per request). It fires early when that request was answered before; then it is
 * set again for the new first one. */
static void arm_deadlines(worker_t *w, int64_t now_ms)
{
    int64_t ms = w->ops->deadline_ms - now_ms;
    struct timeval tv;

    if (ms < 1)
        ms = 1;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    evtimer_add(w->deadline_timer, &tv);
}

void op_on_deadlines(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    int64_t now_ms = mono_us() / 1000;

    (void)fd;
    (void)what;
    while (w->ops != NULL && w->ops->deadline_ms <= now_ms)
        expire(w->ops); /* answered and unlinked: op_fail and the expired hooks free it */
    if (w->ops != NULL)
        arm_deadlines(w, now_ms);
}

/* A recipientId that passed parsing reaches the platform whole. */
_Static_assert(REQUEST_MAX_RECIPIENT < ADAPTER_ID_MAX, "recipientId must fit an address");

int op_set_to(op_t *op, const char *to)
{
    size_t n = strnlen(to, ADAPTER_ID_MAX - 1);
    char *copy = malloc(n + 1);

    if (copy == NULL)
        return -1;
    memcpy(copy, to, n);
    copy[n] = '\0';
    free(op->to);
    op->to = copy;
    return 0;
}

/* A caller's X-Request-Id is kept when it is short and plain; otherwise one is made up. */
static void take_request_id(op_t *op)
{
    const char *given = evhttp_find_header(evhttp_request_get_input_headers(op->req),
                                           "X-Request-Id");
    size_t n = given ? strlen(given) : 0;

    if (n > 0 && n < sizeof(op->id) && strspn(given, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                                     "OPQRSTUVWXYZ0123456789-_.:") == n) {
        memcpy(op->id, given, n + 1);
        return;
    }
    worker_random_hex(op->w, op->id, 16);
}

op_t *op_new(worker_t *w, struct evhttp_request *req, metrics_route_t route,
             const op_kind_t *kind)
{
    op_t *op = calloc(1, sizeof(*op));

    if (op == NULL) {
        /* The connection was marked busy when the request arrived, and only an op's answer
         * unmarks it: without this, a busy count that never returns to 0 keeps the sweep off
         * the connection and holds its slot under the cap for as long as the client wants.
         * (Only calloc failing gets here: not provoked by a test.) */
        conn_request_done(w, req);
        return NULL;
    }
    op->w = w;
    op->req = req;
    op->route = route;
    op->kind = kind;
    op->started_us = mono_us();
    op->deadline_ms = op->started_us / 1000 + w->cfg->request_timeout_ms;
    op->phase = OP_PARSE;
    take_request_id(op);
    op->prev = w->ops_last;
    if (w->ops_last != NULL)
        w->ops_last->next = op;
    else
        w->ops = op;
    w->ops_last = op;
    if (!evtimer_pending(w->deadline_timer, NULL))
        arm_deadlines(w, op->started_us / 1000);
    w->in_flight++;
    atomic_fetch_add_explicit(&w->metrics.in_flight, 1, memory_order_relaxed);
    return op;
}

void op_cancel_all(op_t *op)
{
    for (int i = 0; i < 3; i++) {
        store_cancel(op->calls[i]);
        op->calls[i] = NULL;
    }
    store_cancel(op->call);
    op->call = NULL;
    deliver_cancel(op);
}

static void op_free(op_t *op)
{
    worker_t *w = op->w;

    op_cancel_all(op);
    if (op->prev)
        op->prev->next = op->next;
    else
        w->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        w->ops_last = op->prev;
    auth_token_free(&op->token);
    free(op->to);
    json_decref(op->channel);
    json_decref(op->member);
    json_decref(op->sending);
    free(op->x);
    if (op->route == METRICS_ROUTE_SEND) {
        request_send_free(&op->send);
        free(op->send_ids);
        jw_free(&op->results);
        for (unsigned i = 0; op->responses != NULL && i < op->count; i++)
            json_decref(op->responses[i]);
        free(op->responses);
        free(op->aside);
    } else {
        request_redirect_free(&op->redirect);
        json_decref(op->node_tree_app);
    }
    if (op->kind->cleanup != NULL)
        op->kind->cleanup(op);
    free(op);
    w->in_flight--;
    worker_op_done(w);
}

static void free_buffer(const void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    free((void *)data);
}

/* One line per request, written as text: built as a jansson object it cost a quarter of a
 * request's own instructions at the default level. The strings come from parsed JSON or
 * are botgate's own ASCII. */
static void log_request(op_t *op, int status, int code, int64_t elapsed_us)
{
    const char *channel = op->target.channel_id;
    char ms[48];
    jsonw_t w;
    int n;

    if (!log_enabled(LOG_INFO))
        return;
    jw_init_size(&w, 256);
    jw_lit(&w, "\"msg\":\"request\",\"request_id\":");
    jw_str(&w, op->id);
    jw_lit(&w, op->route == METRICS_ROUTE_SEND ? ",\"route\":\"sendResponses\",\"status\":"
                                               : ",\"route\":\"redirectMemberToNode\",\"status\":");
    jw_int(&w, status);
    if (code > 0) {
        jw_lit(&w, ",\"err_code\":");
        jw_int(&w, code);
    } else if (code == BG_ERR_UNAUTHORIZED) {
        jw_lit(&w, ",\"err\":\"unauthorized\"");
    }
    if (channel) {
        jw_lit(&w, ",\"channel\":");
        jw_str(&w, channel);
    }
    if (op->member_id) {
        jw_lit(&w, ",\"member\":");
        jw_str(&w, op->member_id);
    }
    jw_lit(&w, ",\"platform_calls\":");
    jw_int(&w, op->platform_calls);
    /* milliseconds to the microsecond: 0.282, not a double's 0.28199999999999997 */
    n = snprintf(ms, sizeof(ms), ",\"duration_ms\":%lld.%03lld", (long long)(elapsed_us / 1000),
                 (long long)(elapsed_us % 1000));
    jw_raw(&w, ms, n > 0 && (size_t)n < sizeof(ms) ? (size_t)n : 0);
    if (!w.failed)
        log_fields_text(LOG_INFO, w.buf, w.len);
    jw_free(&w);
}

/* Sends the answer text (taken over) and frees the op. */
static void reply_text(op_t *op, int status, char *text, size_t len, int code)
{
    struct evbuffer *buf = evhttp_request_get_output_buffer(op->req);
    struct evkeyvalq *headers = evhttp_request_get_output_headers(op->req);
    int64_t elapsed = mono_us() - op->started_us;

    if (text != NULL)
        evbuffer_add_reference(buf, text, len, free_buffer, NULL);
    conn_request_done(op->w, op->req);
    evhttp_add_header(headers, "X-Request-Id", op->id);
    if (op->w->draining)
        evhttp_add_header(headers, "Connection", "close");
    /* counted before the answer leaves: whoever has the answer sees it in /metrics */
    metrics_request(&op->w->metrics, op->route, status, code, elapsed);
    atomic_fetch_add_explicit(&op->w->metrics.in_flight, -1, memory_order_relaxed);
    http_send(op->req, status, status == 200 ? "OK" : status == 413 ? "Payload Too Large"
                                                                    : "Internal Server Error");
    log_request(op, status, code, elapsed);
    op->phase = OP_DONE;
    op_free(op);
}

static void reply(op_t *op, int status, json_t *body, int code)
{
    size_t len = 0;
    char *text = jw_dump(body, &len);

    json_decref(body);
    reply_text(op, status, text, len, code);
}

void op_fail(op_t *op, const bg_error_t *err)
{
    int status = err->http_status == 413 ? 413 : 500;

    reply(op, status, bg_error_to_json(err), err->code);
}

void op_answer(op_t *op, json_t *answer)
{
    reply(op, 200, answer, 0);
}

void op_answer_text(op_t *op, char *text, size_t len)
{
    reply_text(op, 200, text, len, 0);
}

void op_fail_text(op_t *op, int code, char *text, size_t len)
{
    reply_text(op, 500, text, len, code);
}

static void fail_code(op_t *op, int code, const char *msg);

/* Before its first platform call a request has sent nothing: a retry elsewhere is safe. */
static void fail_not_started(op_t *op)
{
    fail_code(op, BG_ERR_UNAVAILABLE,
              "server is shutting down: the request did not start, nothing was sent");
}

int op_drain(op_t *op, int now)
{
    /* The message call of the response in flight is out: it may deliver the message whatever
     * botgate does, so cutting it would leave its outcome unknown. */
    int on_wire = op->phase == OP_RUN && op->dl == DL_SEND && op->xfer != NULL;

    op->drain_cut = 1;
    if (!now && on_wire) {
        /* it ends within the upstream timeout; a retry after it would be a new call */
        op->connect_retried = op->rate_retried = 1;
        op->auth_retried = 2;
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

/* ---- resolve ---- */

static void fail_code(op_t *op, int code, const char *msg)
{
    bg_error_t err;

    bg_error_set(&err, code, "%s", msg);
    op_fail(op, &err);
}

static void fail_store(op_t *op, store_status_t st)
{
    if (st == STORE_BUSY)
        fail_code(op, BG_ERR_STORE, "store busy: too many commands in flight");
    else
        fail_code(op, BG_ERR_STORE, "store unavailable");
}

/* Sets op->to from the member's record: 0, or -1 when it has no address on the platform,
 * -2 when out of memory. */
static int member_address(op_t *op)
{
    const char *ext = json_string_value(json_object_get(op->member, "externalId"));
    char phone[ADAPTER_ID_MAX];

    /* Longer than a platform call carries: refused, never sent to a cut address. */
    if (ext == NULL || *ext == '\0' || strlen(ext) > REQUEST_MAX_RECIPIENT)
        return -1;
    if (op->adapter->phone_recipients) {
        request_normalize_phone(ext, phone, sizeof(phone));
        if (phone[0] == '\0')
            return -1;
        ext = phone;
    }
    return op_set_to(op, ext) == 0 ? 0 : -2;
}

static void member_ready(op_t *op)
{
    op->member_id = json_string_value(json_object_get(op->member, "_id"));
    if (op->member_id == NULL) {
        fail_code(op, BG_ERR_NO_MEMBER, "member record has no _id");
        return;
    }
    switch (member_address(op)) {
    case -1:
        fail_code(op, BG_ERR_RECIPIENT_INVALID, "member has no address on the platform");
        return;
    case -2:
        fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    op->phase = OP_RUN;
    op->kind->run(op);
}

static void on_recipient(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->call = NULL;
    if (st != STORE_OK) {
        json_decref(value);
        if (st == STORE_BAD_RECORD)
            fail_code(op, BG_ERR_NO_MEMBER, "member record is not valid");
        else
            fail_store(op, st);
        return;
    }
    op->member = value;
    op->member_seq = store_write_seq(op->w->store);
    member_ready(op);
}

void op_resolve_recipient(op_t *op)
{
    char id[25], recipient[REQUEST_MAX_ID + 1];
    const char *rid = op->target.recipient_id;
    json_t *fresh;
    store_status_t st;

    if (op->adapter->phone_recipients) {
        request_normalize_phone(rid, recipient, sizeof(recipient));
        if (recipient[0] == '\0') {
            fail_code(op, BG_ERR_MISSING_PARAM, "parameter recipientId is not a phone number");
            return;
        }
        rid = recipient;
    }
    worker_random_hex(op->w, id, 24);
    fresh = member_new(id, op->target.channel_id, op->token.app, rid, op->adapter->type,
                       op_now_wall_ms());
    op->phase = OP_RECIPIENT;
    op->call = store_member_for_recipient(op->w->store, op->target.channel_id, rid, fresh,
                                          op->route == METRICS_ROUTE_SEND, on_recipient, op, &st);
    json_decref(fresh);
    if (op->call == NULL)
        fail_store(op, st);
}

static void resolve_check(op_t *op)
{
    const json_t *on;
    const char *type;

    if (!op->token_done || !op->channel_done || !op->member_done)
        return;
    if (op->token_st == STORE_UNAVAILABLE || op->token_st == STORE_BUSY) {
        fail_store(op, op->token_st);
        return;
    }
    if (op->token_st != STORE_OK ||
        !auth_allows(&op->token, op->accepted_scopes, op_now_wall_ms())) {
        fail_code(op, BG_ERR_UNAUTHORIZED, "User is not authorized");
        return;
    }
    if (op->channel_st == STORE_UNAVAILABLE || op->channel_st == STORE_BUSY) {
        fail_store(op, op->channel_st);
        return;
    }
    /* Another app's channel is answered exactly like a missing one. */
    if (op->channel_st != STORE_OK ||
        !auth_sees_channel(&op->token, op->target.channel_id,
                           json_string_value(json_object_get(op->channel, "app")))) {
        fail_code(op, BG_ERR_NO_CHANNEL, "channel not found");
        return;
    }
    on = json_object_get(op->channel, "on");
    if (json_is_false(on)) {
        fail_code(op, BG_ERR_CHANNEL_OFF, "channel is not live");
        return;
    }
    type = json_string_value(json_object_get(op->channel, "type"));
    if ((op->adapter = adapter_find(type)) == NULL) {
        bg_error_t err;
        bg_error_set(&err, BG_ERR_UNSUPPORTED, "channel type %.40s is not supported",
                     type ? type : "(none)");
        op_fail(op, &err);
        return;
    }
    if (op->target.member_id == NULL) {
        if (op->kind->before_recipient != NULL)
            op->kind->before_recipient(op);
        else
            op_resolve_recipient(op);
        return;
    }
    if (op->member_st == STORE_UNAVAILABLE || op->member_st == STORE_BUSY) {
        fail_store(op, op->member_st);
        return;
    }
    if (op->member_st != STORE_OK) {
        fail_code(op, BG_ERR_NO_MEMBER, "member not found");
        return;
    }
    member_ready(op);
}

static void on_token(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->calls[0] = NULL;
    op->token_done = 1;
    op->token_st = st;
    if (st == STORE_OK && auth_token_decode(value, &op->token) < 0)
        op->token_st = STORE_BAD_RECORD;
    json_decref(value);
    resolve_check(op);
}

static void on_channel(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->calls[1] = NULL;
    op->channel_done = 1;
    op->channel_st = st;
    if (st == STORE_OK && json_is_object(value))
        op->channel = value;
    else {
        json_decref(value);
        if (st == STORE_OK)
            op->channel_st = STORE_BAD_RECORD;
    }
    resolve_check(op);
}

static void on_member(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->calls[2] = NULL;
    op->member_done = 1;
    op->member_st = st;
    if (st == STORE_OK && json_is_object(value)) {
        op->member = value;
        op->member_seq = store_write_seq(op->w->store);
    } else {
        json_decref(value);
        if (st == STORE_OK)
            op->member_st = STORE_BAD_RECORD;
    }
    resolve_check(op);
}

void op_resolve(op_t *op, const char *token_hash)
{
    store_t *store = op->w->store;
    store_status_t st = STORE_OK;
    json_t *cached;

    /* Token and channel come from the worker's cache when it has them; whatever is missing is
     * asked for in one round trip (hiredis pipelines the commands). */
    if (op->w->draining == WORKER_DRAIN_OVER) {
        fail_not_started(op); /* no platform call starts once the drain time is over */
        return;
    }
    op->phase = OP_RESOLVE;
    op->member_done = op->target.member_id == NULL;
    if ((cached = store_cached_token(store, token_hash)) != NULL) {
        op->token_done = 1;
        op->token_st = auth_token_decode(cached, &op->token) == 0 ? STORE_OK : STORE_BAD_RECORD;
        json_decref(cached);
    }
    if ((op->channel = store_cached_channel(store, op->target.channel_id)) != NULL) {
        op->channel_done = 1;
        op->channel_st = STORE_OK;
    }
    if (!op->token_done)
        op->calls[0] = store_get_token(store, token_hash, on_token, op, &st);
    if (st == STORE_OK && !op->channel_done)
        op->calls[1] = store_get_channel(store, op->target.channel_id, on_channel, op, &st);
    if (st == STORE_OK && op->target.member_id != NULL)
        op->calls[2] = store_get_member(store, op->target.channel_id, op->target.member_id,
                                        op->route == METRICS_ROUTE_SEND, on_member, op, &st);
    if (st != STORE_OK) {
        op_cancel_all(op);
        fail_store(op, st);
        return;
    }
    resolve_check(op); /* everything may have come from the cache */
}

/* The request headers are read by now (X-Request-Id in op_new, Authorization here): they go
 * while the request waits for the platform, a few hundred bytes less per request in flight,
 * and the token with them. Only Connection stays: evhttp reads it again when it answers, to
 * keep the connection open or close it as the client asked. */
static void drop_request_headers(op_t *op)
{
    struct evkeyvalq *headers = evhttp_request_get_input_headers(op->req);
    const char *connection = evhttp_find_header(headers, "Connection");
    char keep[64];
    size_t n = connection ? strlen(connection) : 0;

    if (n >= sizeof(keep))
        return; /* not a value evhttp knows; left as it came */
    if (connection != NULL)
        memcpy(keep, connection, n + 1);
    evhttp_clear_headers(headers);
    if (connection != NULL)
        evhttp_add_header(headers, "Connection", keep);
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

/* Takes the token of the request, or answers "not authorized". Returns 0 when there is one. */
int op_take_token(op_t *op, char token_hash[AUTH_HASH_HEX])
{
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(op->req),
                                          "Authorization");
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(op->req);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    size_t query_len = 0, len = 0;
    char *from_query = auth == NULL ? query_token(query, &query_len) : NULL;
    const char *token;
    int found = 0;

    token = auth_request_token(auth, from_query, query_len, &len);
    if (token != NULL && len <= AUTH_TOKEN_MAX) {
        auth_hash_token(token, len, token_hash);
        found = 1;
    }
    free(from_query);
    drop_request_headers(op);
    if (!found) {
        fail_code(op, BG_ERR_UNAUTHORIZED, "User is not authorized");
        return -1;
    }
    return 0;
}

/* The request body as one contiguous block (evhttp keeps it in its input buffer). */
const char *op_body(op_t *op, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(op->req);

    *len = evbuffer_get_length(in);
    return *len ? (const char *)evbuffer_pullup(in, -1) : "";
}

/* Once parsed, nothing reads the body again (the parsed request holds its own copies): its
 * buffer goes now rather than when the answer is sent, a kilobyte less per request that
 * waits for a platform. */
void op_body_done(op_t *op)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(op->req);

    evbuffer_drain(in, evbuffer_get_length(in));
}
