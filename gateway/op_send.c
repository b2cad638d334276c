/* op_send.c - POST /sendResponses: parse and validate, resolve token/channel/member (op.c),
 * check every response against the platform, then deliver them one after the other, in
 * request order, and answer with one result element per response. */
#include "op.h"

#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void send_next(op_t *op);

static void on_delivered(op_t *op, deliver_result_t *r)
{
    char buf[32];
    result_event_t ev;

    if (!r->ok && r->abort) {
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
        ev = deliver_event_of(op, op->response, mid, buf);
        result_write_sent(&op->results, &ev, deliver_chat_id(op, &r->res), r->res.meta,
                          op->adapter->api_version);
    } else {
        ev = deliver_event_of(op, op->response, NULL, buf);
        result_write_failed(&op->results, &ev, op->to, &r->err);
        op->send_ok = 0;
    }
    op->index++;
    send_next(op);
}

static void answer(op_t *op, int send_ok)
{
    jsonw_t w;
    char *text;
    size_t len;

    jw_init(&w);
    result_write_answer(&w, op->member_id, send_ok, op->results.buf ? op->results.buf : "",
                        op->results.len);
    if (op->results.failed || (text = jw_steal(&w, &len)) == NULL) {
        bg_error_t err;
        jw_free(&w);
        bg_error_set(&err, BG_ERR_UNAVAILABLE, "out of memory");
        op_fail(op, &err);
        return;
    }
    op_answer_text(op, text, len);
}

static void send_next(op_t *op)
{
    if (op->index < json_array_size(op->send.responses)) {
        deliver_start(op, json_array_get(op->send.responses, op->index), on_delivered);
        return;
    }
    answer(op, op->send_ok);
}

/* The deadline passed during delivery: what was delivered is reported, the response in flight
 * and the rest are reported as not sent. */
static void expired(op_t *op)
{
    bg_error_t err;
    size_t n = json_array_size(op->send.responses);

    if (op->index == 0 && op->adapter->server_error_aborts) {
        bg_error_set(&err, BG_ERR_PLATFORM, "the platform did not answer in time");
        op_fail(op, &err);
        return;
    }
    bg_error_set(&err, BG_ERR_PLATFORM, "the platform did not answer in time");
    for (size_t i = op->index; i < n; i++) {
        char buf[32];
        result_event_t ev = deliver_event_of(op, json_array_get(op->send.responses, i), NULL, buf);
        if (i == op->index + 1)
            bg_error_set(&err, BG_ERR_PLATFORM, "not sent: the request deadline passed");
        if (i > 0)
            jw_lit(&op->results, ",");
        result_write_failed(&op->results, &ev, op->to, &err);
    }
    answer(op, 0);
}

/* What is read again once the request is resolved: its responses, the channel id (a
 * delivery's store calls, the log line) and the member id (the answer). The rest, the
 * member's record and the parsed body around the responses, goes before the platform calls
 * rather than after their answers: thousands of requests may wait for them at once. Out of
 * memory, everything is simply kept. */
static void let_go(op_t *op)
{
    size_t nc = strlen(op->target.channel_id) + 1;
    size_t nm = op->target.member_id ? strlen(op->target.member_id) + 1 : 0;
    char *ids;
    json_t *root;

    if (op->target.member_id != NULL && strcmp(op->member_id, op->target.member_id) == 0) {
        op->member_id = op->target.member_id;
        json_decref(op->member);
        op->member = NULL;
    }
    if ((ids = malloc(nc + nm)) == NULL)
        return;
    memcpy(ids, op->target.channel_id, nc);
    if (nm > 0)
        memcpy(ids + nc, op->target.member_id, nm);
    if (op->member_id == op->target.member_id)
        op->member_id = ids + nc;
    op->target.channel_id = ids;
    op->target.member_id = nm > 0 ? ids + nc : NULL;
    op->target.recipient_id = NULL; /* read only to find the member */
    op->send.target = op->target;
    op->send_ids = ids;
    root = op->send.root; /* the responses array is all it keeps */
    op->send.root = json_incref((json_t *)op->send.responses);
    json_decref(root);
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
    let_go(op);
    op->send_ok = 1;
    op->index = 0;
    send_next(op);
}

void op_send_start(worker_t *w, struct evhttp_request *req)
{
    op_t *op = op_new(w, req, METRICS_ROUTE_SEND);
    const char *body;
    size_t len;
    bg_error_t err;

    if (op == NULL) {
        evhttp_send_error(req, 500, "Internal Server Error");
        return;
    }
    op->accepted_scopes = AUTH_ACCEPT_SEND;
    op->run = run;
    op->expired = expired;
    if (op_take_token(op) < 0)
        return;
    body = op_body(op, &len);
    if (request_parse_send(body, len, &op->send, &err) < 0) {
        op_fail(op, &err);
        return;
    }
    op_body_done(op);
    op->target = op->send.target;
    op_resolve(op);
}
