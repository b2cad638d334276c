/* op_send.c - POST /sendResponses: parse and validate, resolve token/channel/member (op.c),
 * check every response against the platform, then deliver them one after the other, in
 * request order, and answer with one result element per response. */
#include "op.h"

#include <event2/http.h>
#include <stdio.h>
#include <string.h>

static void send_next(op_t *op);

static void on_delivered(op_t *op, deliver_result_t *r)
{
    const json_t *response = op->response;
    json_t *el;

    if (!r->ok && r->abort) {
        op_fail(op, &r->err);
        return;
    }
    if (r->ok) {
        char generated[40];
        const char *mid = r->res.message_id;
        /* wechat gives no message id: make one so that every element has one */
        if (*mid == '\0') {
            worker_random_hex(op->w, generated, 32);
            mid = generated;
        }
        el = result_send_element(mid, deliver_chat_id(op, &r->res), r->res.meta,
                                 op->adapter->api_version, deliver_event(op, response, mid));
    } else {
        el = result_send_failed(op->to, deliver_event(op, response, NULL), &r->err);
        op->send_ok = 0;
    }
    json_array_append_new(op->results, el);
    op->index++;
    send_next(op);
}

static void send_next(op_t *op)
{
    if (op->index < json_array_size(op->send.responses)) {
        deliver_start(op, json_array_get(op->send.responses, op->index), on_delivered);
        return;
    }
    op_answer(op, result_answer(op->member_id, op->send_ok, json_incref(op->results)));
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
        const json_t *response = json_array_get(op->send.responses, i);
        if (i == op->index + 1)
            bg_error_set(&err, BG_ERR_PLATFORM, "not sent: the request deadline passed");
        json_array_append_new(op->results,
                              result_send_failed(op->to, deliver_event(op, response, NULL), &err));
    }
    op_answer(op, result_answer(op->member_id, 0, json_incref(op->results)));
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
    op->results = json_array();
    op->send_ok = 1;
    op->index = 0;
    send_next(op);
}

void op_send_start(worker_t *w, struct evhttp_request *req)
{
    op_t *op = op_new(w, req, METRICS_ROUTE_SEND);
    const char *body;
    size_t len;

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
    if (request_parse_send(body, len, &op->send, &op->err) < 0) {
        op_fail(op, &op->err);
        return;
    }
    op->target = op->send.target;
    op_resolve(op);
}
