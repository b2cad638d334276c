/* op_send.c - POST /sendResponses: parse and validate, resolve token/channel/member (op.c),
 * check every response against the platform, then deliver them one after the other, in
 * request order, and answer with one result element per response. */
#include "op.h"

#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void send_next(op_t *op);
static void drained(op_t *op, int call_cut);
static result_event_t event_of(const op_t *op, unsigned i, const char *message_id, char buf[32]);

static void on_delivered(op_t *op, deliver_result_t *r)
{
    char buf[32];
    result_event_t ev;

    /* Cut by the drain, the answer is a 121 that lists every response: this one's failure
     * goes in its element like any other. */
    if (!r->ok && r->abort && !op->drain_cut) {
        op_fail(op, &r->err);
        return;
    }
    if (op->index > 0)
        jw_lit(&op->results, ",");
    if (r->ok) {
        char generated[40];
        const char *mid = r->res.message_id;
        /* wechat gives no message id: make one so that every element has one */
        if (*mid == '\0') {
            worker_random_hex(op->w, generated, 32);
            mid = generated;
        }
        ev = event_of(op, op->index, mid, buf);
        result_write_sent(&op->results, &ev, deliver_chat_id(op, &r->res), r->res.meta,
                          op->adapter->api_version);
        op->sent++;
    } else {
        ev = event_of(op, op->index, NULL, buf);
        result_write_failed(&op->results, &ev, op->to, &r->err);
        op->send_ok = 0;
    }
    /* delivered: what is left of it goes */
    json_decref(op->responses[op->index]);
    op->responses[op->index] = NULL;
    free(op->aside);
    op->aside = NULL;
    op->response = NULL;
    op->index++;
    send_next(op);
}

static void fail_memory(op_t *op)
{
    bg_error_t err;

    bg_error_set(&err, BG_ERR_UNAVAILABLE, "out of memory");
    op_fail(op, &err);
}

/* The answer around the elements written: a success, or with cut the failure answer of a
 * request the drain cut short (result_write_cut_answer). */
static void answer(op_t *op, int send_ok, const bg_error_t *cut)
{
    const char *elements = op->results.buf ? op->results.buf : "";
    jsonw_t w;
    char *text;
    size_t len;

    jw_init(&w);
    if (cut != NULL)
        result_write_cut_answer(&w, cut, op->member_id, elements, op->results.len);
    else
        result_write_answer(&w, op->member_id, send_ok, elements, op->results.len);
    if (op->results.failed || (text = jw_steal(&w, &len)) == NULL) {
        jw_free(&w);
        fail_memory(op);
        return;
    }
    if (cut != NULL)
        op_fail_text(op, cut->code, text, len);
    else
        op_answer_text(op, text, len);
}

static void send_next(op_t *op)
{
    if (op->index < op->count && op->drain_cut) {
        drained(op, 0); /* no new call once the drain time is over */
        return;
    }
    if (op->index < op->count) {
        deliver_start(op, op->responses[op->index], on_delivered);
        return;
    }
    answer(op, op->send_ok, NULL);
}

/* The platform call of the current response is out. While it waits, the response is kept as
 * what its result needs, its type and its messageEvent data as text: some 30 bytes for a
 * short TEXT response, where jansson's objects take 600. Out of memory, it simply stays. */
static void set_aside(op_t *op)
{
    json_t *r = op->responses[op->index];
    const char *type = json_string_value(json_object_get(r, "type"));
    jsonw_t w;
    char *text;

    jw_init(&w);
    jw_raw(&w, type, strlen(type) + 1); /* with its NUL */
    result_write_data(&w, r);
    /* a copy of its size: the writer's buffer is 512 bytes or more, and thousands of these
     * wait at once */
    if (w.failed || (text = malloc(w.len + 1)) == NULL) {
        jw_free(&w);
        return;
    }
    memcpy(text, w.buf, w.len);
    text[w.len] = '\0';
    jw_free(&w);
    op->aside = text;
    json_decref(r);
    op->responses[op->index] = NULL;
    op->response = NULL;
}

/* The messageEvent data in op->aside, after its type and the type's NUL. */
static const char *aside_data(const op_t *op)
{
    return op->aside + strlen(op->aside) + 1;
}

/* A retry of its call needs the response again: parsed back from its data, with its type. */
static void take_back(op_t *op)
{
    const char *type = op->aside;
    json_t *r = json_loads(aside_data(op), 0, NULL);

    if (r == NULL || json_object_set_new(r, "type", json_string(type)) < 0) {
        json_decref(r);
        return; /* out of memory: op->response stays NULL */
    }
    free(op->aside);
    op->aside = NULL;
    op->responses[op->index] = r;
    op->response = r;
}

/* The messageEvent of response i, from the response or from what was set aside of it. */
static result_event_t event_of(const op_t *op, unsigned i, const char *message_id, char buf[32])
{
    result_event_t ev = deliver_event_of(op, op->responses[i], message_id, buf);

    if (ev.response == NULL && i == op->index && op->aside != NULL) {
        ev.type = op->aside;
        ev.data = aside_data(op);
    }
    return ev;
}

/* Elements for the responses from op->index on, none of them delivered: the one in flight
 * with current, the rest with rest. */
static void write_undelivered(op_t *op, const bg_error_t *current, const bg_error_t *rest)
{
    for (unsigned i = op->index; i < op->count; i++) {
        char buf[32];
        result_event_t ev = event_of(op, i, NULL, buf);
        if (i > 0)
            jw_lit(&op->results, ",");
        result_write_failed(&op->results, &ev, op->to, i == op->index ? current : rest);
    }
}

/* The deadline passed during delivery: what was delivered is reported, the response in flight
 * and the rest are reported as not sent. */
static void expired(op_t *op)
{
    bg_error_t err, rest;

    bg_error_set(&err, BG_ERR_PLATFORM, "the platform did not answer in time");
    if (op->index == 0 && op->adapter->server_error_aborts) {
        op_fail(op, &err);
        return;
    }
    bg_error_set(&rest, BG_ERR_PLATFORM, "not sent: the request deadline passed");
    write_undelivered(op, &err, &rest);
    answer(op, 0, NULL);
}

/* The drain stopped the request: every response is listed; 121 marks those surely not sent,
 * which alone a client may send again. A call stopped on the wire may have delivered: 113. */
static void drained(op_t *op, int call_cut)
{
    bg_error_t cut, current, rest;

    bg_error_set(&rest, BG_ERR_UNAVAILABLE, "not sent: the server is shutting down");
    if (call_cut)
        bg_error_set(&current, BG_ERR_PLATFORM,
                     "the server stopped before the platform answered: it may have been "
                     "delivered");
    else
        current = rest;
    write_undelivered(op, &current, &rest);
    bg_error_set(&cut, BG_ERR_UNAVAILABLE,
                 "server is shutting down: %u of %u responses delivered; those with err_code "
                 "121 in sendResult were not sent",
                 op->sent, op->count);
    answer(op, 0, &cut);
}

/* What is read again once the request is resolved: its responses, the channel id (a
 * delivery's store calls, the log line) and the member id (the answer). The rest, the
 * member's record and the parsed body, goes before the platform calls rather than after
 * their answers: thousands of requests may wait for them at once. The responses stay, each
 * until it is delivered (and the one in flight set aside meanwhile: set_aside). */
static int let_go(op_t *op)
{
    size_t nc = strlen(op->target.channel_id) + 1;
    size_t nm = op->target.member_id ? strlen(op->target.member_id) + 1 : 0;
    char *ids;

    op->count = (unsigned)json_array_size(op->send.responses);
    if ((op->responses = malloc(op->count * sizeof(*op->responses))) == NULL)
        return -1;
    for (unsigned i = 0; i < op->count; i++) /* before anything can fail: op_free reads them */
        op->responses[i] = json_incref(json_array_get(op->send.responses, i));
    if ((ids = malloc(nc + nm)) == NULL)
        return -1;
    if (op->target.member_id != NULL && strcmp(op->member_id, op->target.member_id) == 0) {
        op->member_id = op->target.member_id;
        json_decref(op->member);
        op->member = NULL;
    }
    memcpy(ids, op->target.channel_id, nc);
    if (nm > 0)
        memcpy(ids + nc, op->target.member_id, nm);
    if (op->member_id == op->target.member_id)
        op->member_id = ids + nc;
    op->target.channel_id = ids;
    op->target.member_id = nm > 0 ? ids + nc : NULL;
    op->target.recipient_id = NULL; /* read only to find the member */
    op->send_ids = ids;
    request_send_free(&op->send);
    return 0;
}

static void run(op_t *op)
{
    const json_t *response;
    size_t i;

    /* Every response is checked against the platform before anything is sent. */
    json_array_foreach(op->send.responses, i, response) {
        const char *type = json_string_value(json_object_get(response, "type"));
        if ((adapter_response_type(type) & op->adapter->response_types) == 0) {
            bg_error_t err;
            bg_error_set(&err, BG_ERR_UNSUPPORTED,
                         "response[%zu]: type %.40s is not supported on %s channels", i, type,
                         op->adapter->type);
            op_fail(op, &err);
            return;
        }
    }
    if (let_go(op) < 0) {
        fail_memory(op);
        return;
    }
    op->send_ok = 1;
    op->index = 0;
    send_next(op);
}

static const op_kind_t send_kind = {.run = run,
                                    .expired = expired,
                                    .set_aside = set_aside,
                                    .take_back = take_back,
                                    .drained = drained};

void op_send_start(worker_t *w, struct evhttp_request *req)
{
    op_t *op = op_new(w, req, METRICS_ROUTE_SEND, &send_kind);
    const char *body;
    size_t len;
    bg_error_t err;
    char token_hash[AUTH_HASH_HEX];

    if (op == NULL) {
        evhttp_send_error(req, 500, "Internal Server Error");
        return;
    }
    op->accepted_scopes = AUTH_ACCEPT_SEND;
    if (op_take_token(op, token_hash) < 0)
        return;
    body = op_body(op, &len);
    if (request_parse_send(body, len, &op->send, &err) < 0) {
        op_fail(op, &err);
        return;
    }
    op_body_done(op);
    op->target = op->send.target;
    op_resolve(op, token_hash);
}
