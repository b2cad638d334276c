/* op_send.c - POST /sendResponses: parse and validate, resolve token/channel/member (op.c),
 * check every response against the platform, then deliver them one after the other, in
 * request order, and answer with one result element per response. */
#include "op.h"

#include "../core/clock.h"
#include "../core/window.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void send_next(op_t *op);
static void send_on_recorded(op_t *op, int ok);
static void send_drained(op_t *op, int call_cut);

/* A response's text (op->texts[i]) is its JSON with the type first: {"type":"T",...}. Once its
 * delivery is over, nothing parses it again, and the text is split in place into what its
 * result element needs: the type (a known type: letters only) and the messageEvent data, the
 * rest as an object. Splitting twice changes nothing. */
#define TYPE_AT (sizeof("{\"type\":\"") - 1)

static void text_split(char *text, const char **type, const char **data)
{
    char *end = text + TYPE_AT + strcspn(text + TYPE_AT, "\"");

    if (*end == '"') {
        *end = '\0';
        if (end[1] == ',')
            end[1] = '{';
    }
    *type = text + TYPE_AT;
    *data = end[1] == '{' ? end + 1 : "{}";
}

/* The messageEvent of response i, from its text. */
static result_event_t send_event(const op_t *op, unsigned i, const char *message_id, char buf[32])
{
    result_event_t ev = deliver_event(&op->dl, message_id, buf);

    text_split(op->texts[i], &ev.type, &ev.data);
    return ev;
}

static void write_undelivered(op_t *op, const bg_error_t *current, const bg_error_t *rest);

/* Response i went (or was to go) as its fallback: its element, just written, says so. */
static void mark_fallback(op_t *op, unsigned i)
{
    if ((op->fallbacks >> i & 1) == 0 || op->results.len == 0 ||
        op->results.buf[op->results.len - 1] != '}')
        return;
    op->results.len--;
    jw_lit(&op->results, ",\"fallbackUsed\":true}");
}

/* The text delivery reads for response i: its fallback's when that is what goes. */
static const char *delivery_text(const op_t *op, unsigned i)
{
    const char *text = op->texts[i];

    return op->fallbacks >> i & 1 ? text + strlen(text) + 1 : text;
}

/* Response i as validated (let_go keeps them), or its fallback when that is what goes, taken
 * out for delivery (a reference; delivery lets it go once its call is built); the array goes
 * with the last one. */
static json_t *delivery_response(op_t *op, unsigned i)
{
    json_t *response = json_array_get(op->send.root, i);

    if (op->fallbacks >> i & 1)
        response = json_object_get(response, "fallback");
    /* none (a windowTemplate took its place, send_as_template): delivery parses the text */
    response = json_is_object(response) ? json_incref(response) : NULL;
    if (i + 1 == op->count)
        request_send_free(&op->send);
    else
        json_array_set_new(op->send.root, i, json_null());
    return response;
}

static void send_answer(op_t *op, int send_ok, const bg_error_t *cut);

static void send_cleanup(op_t *op)
{
    request_send_free(&op->send);
    jw_free(&op->results);
    for (unsigned i = 0; op->texts != NULL && i < op->count; i++)
        free(op->texts[i]);
    free(op->texts);
    op->texts = NULL;
}

/* The progress record of the response before op->index was written (or not: then nothing
 * more is sent, the record could not say so). */
static void send_on_recorded(op_t *op, int ok)
{
    bg_error_t err;

    if (ok) {
        send_next(op);
        return;
    }
    bg_error_set(&err, BG_ERR_STORE, "not sent: the store could not record the progress");
    write_undelivered(op, &err, &err);
    send_answer(op, 0, NULL);
}

/* 1 when a recorded element carries an error: read as JSON (a rare path: a request taken
 * over), not searched in the text, where a NATIVE response's data can hold the same bytes. */
static int element_failed(const char *element)
{
    json_t *e = json_loads(element, 0, NULL);
    int failed = e == NULL || json_object_get(e, "error") != NULL;

    json_decref(e);
    return failed;
}

/* Taking over a request whose instance died: the responses it delivered are reported with
 * their recorded elements, the one whose call may have gone out with 125; neither is sent. */
static void send_resumed(op_t *op)
{
    const char *element;
    op_resumed_t how;

    while (op->resuming && op->index < op->count &&
           (how = op_guard_resumed(op, op->index, &element)) != OP_RESUMED_NO) {
        if (op->index > 0)
            jw_lit(&op->results, ",");
        if (how == OP_RESUMED_DELIVERED) {
            jw_raw(&op->results, element, strlen(element));
            if (element_failed(element))
                op->send_ok = 0;
            else
                op->sent++;
        } else {
            char buf[32];
            result_event_t ev = send_event(op, op->index, NULL, buf);
            bg_error_t err;
            if (how == OP_RESUMED_EXPIRED)
                bg_error_set(&err, BG_ERR_EXPIRED, "expired in the queue: not sent");
            else
                bg_error_set(&err, BG_ERR_OUTCOME_UNKNOWN,
                             "outcome unknown: an earlier attempt may have delivered it");
            result_write_failed(&op->results, &ev, op->dl.to, &err);
            mark_fallback(op, op->index);
            op->send_ok = 0;
        }
        op->index++;
    }
}

static void send_on_delivered(deliver_t *d, const deliver_result_t *r, void *arg)
{
    op_t *op = arg;
    result_event_t ev;
    size_t at;

    (void)d;
    /* Cut by the drain, the answer is a 121 that lists every response: this one's failure
     * goes in its element like any other. */
    if (!r->ok && r->abort && !op->drain_cut) {
        op_fail(op, &r->err);
        return;
    }
    if (op->index > 0)
        jw_lit(&op->results, ",");
    at = op->results.len;
    ev = r->event;
    text_split(op->texts[op->index], &ev.type, &ev.data);
    if (r->ok) {
        result_write_sent(&op->results, &ev, r->chat_id, r->res.meta, op->dl.adapter->api_version);
        op->sent++;
    } else {
        result_write_failed_after(&op->results, &ev, r->chat_id, &r->err, r->retry_after_ms);
        op->send_ok = 0;
    }
    mark_fallback(op, op->index);
    /* delivered: what is left of it goes */
    free(op->texts[op->index]);
    op->texts[op->index] = NULL;
    op->index++;
    /* With an Idempotency-Key the next call goes out once the record says this one is done:
     * a request that takes over after a crash sends neither again. */
    if (op->index < op->count && !op->results.failed) {
        switch (op_guard_progress(op, op->index - 1, op->results.buf + at, op->results.len - at,
                                  send_on_recorded)) {
        case 1:
            return;
        case -1:
            send_on_recorded(op, 0);
            return;
        }
    }
    send_next(op);
}

static void fail_memory(op_t *op)
{
    op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
}

/* The answer around the elements written: a success, or with cut the failure answer of a
 * request the drain cut short (result_write_cut_answer). */
static void send_answer(op_t *op, int send_ok, const bg_error_t *cut)
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
    /* written: the operation's part goes now, the answer is all that is left */
    send_cleanup(op);
    op->kind_freed = 1;
    if (cut != NULL)
        op_fail_text(op, cut->code, text, len);
    else
        op_answer_text(op, text, len);
}

/* The member's window is closed (send_windows): 1 when response op->index may not go, as the
 * platform would refuse it; it then fails with 127, no call made, and its element is written
 * as any other's (send_on_delivered). */
static int window_refused(op_t *op)
{
    const char *type = op->dl.adapter->type;
    json_t *going = json_loads(delivery_text(op, op->index), 0, NULL);
    /* unreadable (out of memory): sent, and the platform's own refusal says */
    int exempt = going == NULL || window_exempt(type, going);
    bg_error_t err;

    json_decref(going);
    if (exempt)
        return 0;
    window_refusal(&err, type, op->window_closed - 1, json_object_get(op->dl.channel, "info"));
    deliver_refuse(&op->dl, &err, send_on_delivered, op);
    return 1;
}

static void send_next(op_t *op)
{
    send_resumed(op);
    if (op->index < op->count && op->drain_cut) {
        send_drained(op, 0); /* no new call once the drain time is over */
        return;
    }
    if (op->index < op->count && op->window_closed && window_refused(op))
        return;
    if (op->index < op->count) {
        const char *text = delivery_text(op, op->index);
        deliver_start_parsed(&op->dl, delivery_response(op, op->index), text, strlen(text),
                             send_on_delivered, op);
        return;
    }
    send_answer(op, op->send_ok, NULL);
}

/* Elements for the responses from op->index on, none of them delivered: the one in flight
 * with current, the rest with rest. */
static void write_undelivered(op_t *op, const bg_error_t *current, const bg_error_t *rest)
{
    for (unsigned i = op->index; i < op->count; i++) {
        char buf[32];
        result_event_t ev = send_event(op, i, NULL, buf);
        if (i > 0)
            jw_lit(&op->results, ",");
        result_write_failed(&op->results, &ev, op->dl.to, i == op->index ? current : rest);
        mark_fallback(op, i);
    }
}

/* The deadline passed during delivery: what was delivered is reported, the response in flight
 * and the rest are reported as not sent. */
static void send_expired(op_t *op)
{
    bg_error_t err, rest;

    bg_error_set(&err, BG_ERR_PLATFORM, "the platform did not answer in time");
    if (op->index == 0 && op->dl.adapter->server_error_aborts) {
        op_fail(op, &err);
        return;
    }
    bg_error_set(&rest, BG_ERR_PLATFORM, "not sent: the request deadline passed");
    write_undelivered(op, &err, &rest);
    send_answer(op, 0, NULL);
}

/* The drain stopped the request: every response is listed; 121 marks those surely not sent,
 * which alone a client may send again. A call stopped on the wire may have delivered: 113. */
static void send_drained(op_t *op, int call_cut)
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
    send_answer(op, 0, &cut);
}

/* Each response's text (op->texts): copied from the body where it can be (result_body_text),
 * else written from the parsed response; a response with a fallback gets both texts, as which
 * one goes is not known yet. -1 when out of memory. */
static int make_texts(op_t *op, const char *body, size_t len)
{
    const char *p = result_body_array(
        body, len, json_object_get(op->send.root, "response") != NULL ? "response" : "responses");
    jsonw_t scratch;

    op->count = (unsigned)json_array_size(op->send.responses);
    if ((op->texts = calloc(op->count, sizeof(*op->texts))) == NULL)
        return -1;
    jw_init(&scratch);
    for (unsigned i = 0; i < op->count; i++) {
        const json_t *resp = json_array_get(op->send.responses, i);
        int fallback = json_object_get(resp, "fallback") != NULL;
        if (p != NULL)
            op->texts[i] = result_body_text(&p, body + len, &scratch);
        if (op->texts[i] == NULL && (op->texts[i] = result_response_text(resp, fallback)) == NULL)
            break;
    }
    jw_free(&scratch);
    return op->count > 0 && op->texts[op->count - 1] == NULL ? -1 : 0;
}

/* What is read again once the request is resolved: its responses, as validated (each handed
 * to its delivery, which lets it go once its call is built) and as text for the result
 * elements (made by send_parse, each let go once delivered), and the ids, which the op keeps
 * (keep_target). The rest, the member's record and the parsed body around the responses, goes
 * before the platform calls rather than after their answers: thousands of requests may wait for
 * them at once. */
static void let_go(op_t *op)
{
    json_t *responses = json_incref((json_t *)op->send.responses);

    if (op->target.member_id != NULL && strcmp(op->member_id, op->target.member_id) == 0) {
        op->member_id = op->target.member_id;
        json_decref(op->member);
        op->member = NULL;
    }
    /* delivery builds each message call from the validated response rather than parsing its
     * text again (bench/README.md, issue 29) */
    request_send_free(&op->send);
    op->send.root = responses; /* delivery_response or send_cleanup frees it */
    op->send.responses = responses;
}

/* Every response is checked against the platform before anything is sent (or queued):
 * 0, or -1 when answered. */
static int send_check(op_t *op)
{
    const json_t *response;
    size_t i;

    /* Every response is checked against the platform before anything is sent; a type the
     * platform lacks goes as its fallback when it has one that the platform takes. */
    op->fallbacks = 0;
    json_array_foreach(op->send.responses, i, response) {
        const json_t *fallback, *checked = response;
        char msg[BG_ERROR_MSG_MAX - 32];
        /* the reason is written only when it is told: not for a type that goes as its
         * fallback */
        int code = adapter_check_response(op->dl.adapter, response, NULL, 0);
        const char *part = "";
        bg_error_t err;

        if (code == BG_ERR_UNSUPPORTED &&
            (fallback = json_object_get(response, "fallback")) != NULL) {
            part = ".fallback";
            checked = fallback;
            if ((code = adapter_check_response(op->dl.adapter, fallback, NULL, 0)) == 0)
                op->fallbacks |= (uint64_t)1 << i;
        }
        if (code != 0) {
            adapter_check_response(op->dl.adapter, checked, msg, sizeof(msg));
            bg_error_set(&err, code, "response[%zu]%s: %s", i, part, msg);
            op_fail(op, &err);
            return -1;
        }
    }
    return 0;
}

/* Response i goes as the channel's windowTemplate: its text becomes its own followed by the
 * template's (as a fallback's, which it replaces). -1 when out of memory. */
static int send_as_template(op_t *op, unsigned i, const json_t *tmpl)
{
    char *alt = result_response_text(tmpl, 0), *both;
    size_t n = strlen(op->texts[i]), m;

    if (alt == NULL)
        return -1;
    m = strlen(alt);
    if ((both = realloc(op->texts[i], n + 1 + m + 1)) == NULL) {
        free(alt);
        return -1;
    }
    memcpy(both + n + 1, alt, m + 1);
    free(alt);
    op->texts[i] = both;
    op->fallbacks |= (uint64_t)1 << i;
    /* what goes is the template's text, not the validated response nor its fallback */
    json_array_set_new((json_t *)op->send.responses, i, json_null());
    return 0;
}

/* Conversation windows (contract.md section 14), read while the member's record is here: when
 * the window is closed, each response that the platform would refuse goes as its fallback, or
 * else as the channel's info.windowTemplate, when that may go (the element says fallbackUsed);
 * the rest fail with 127 as their turn comes (window_refused). A queued request's attempt
 * runs this too, with the time of the attempt. -1 when out of memory. */
static int send_windows(op_t *op)
{
    const char *type = op->dl.adapter->type;
    int64_t hours = window_closed_hours(type, window_last_inbound(op->member), clock_wall_ms());
    const json_t *response, *tmpl;
    bg_error_t err;
    size_t i;

    op->window_closed = 0;
    if (hours < 0)
        return 0;
    op->window_closed = hours < UINT16_MAX - 1 ? (uint16_t)(hours + 1) : UINT16_MAX;
    tmpl = window_channel_template(json_object_get(op->dl.channel, "info"), &err);
    if (tmpl != NULL &&
        (!window_exempt(type, tmpl) || adapter_check_response(op->dl.adapter, tmpl, NULL, 0) != 0))
        tmpl = NULL;
    json_array_foreach(op->send.responses, i, response) {
        const json_t *fallback = json_object_get(response, "fallback");
        int as_fallback = op->fallbacks >> i & 1;

        if (window_exempt(type, as_fallback ? fallback : response))
            continue;
        if (!as_fallback && fallback != NULL && window_exempt(type, fallback) &&
            adapter_check_response(op->dl.adapter, fallback, NULL, 0) == 0)
            op->fallbacks |= (uint64_t)1 << i;
        else if (tmpl != NULL && send_as_template(op, (unsigned)i, tmpl) < 0)
            return -1;
    }
    return 0;
}

static void send_run(op_t *op)
{
    if (send_check(op) < 0)
        return;
    if (send_windows(op) < 0) {
        fail_memory(op);
        return;
    }
    let_go(op);
    op->send_ok = 1;
    op->index = 0;
    send_next(op);
}

/* Prefer: respond-async: checked as above, then queued and answered 202 (outbox.c). */
static void send_queue(op_t *op)
{
    if (send_check(op) == 0)
        op->env->outbox->accept(op);
}

static void send_queue_expired(op_t *op)
{
    op_fail_code(op, BG_ERR_STORE, "the store did not answer in time");
}

static int send_parse(op_t *op, const char *body, size_t len, bg_error_t *err)
{
    if (request_parse_send(body, len, &op->send, err) < 0 ||
        op_refuse_sync_callback(op, op->send.root, err) < 0)
        return -1;
    op->target = op->send.target;
    /* the texts now, while the body is there to copy them from (op.c lets it go next) */
    if (make_texts(op, body, len) < 0)
        return bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
    return 0;
}

const op_kind_t op_send_kind = {.route = METRICS_ROUTE_SEND,
                                .scopes = AUTH_ACCEPT_SEND,
                                .parse = send_parse,
                                .run = send_run,
                                .expired = send_expired,
                                .cleanup = send_cleanup,
                                .drained = send_drained};

/* A broadcast's message to one member, queued by the broadcast (broadcast.c): sent as
 * above, its slots of the sender's limit after conversational traffic's (deliver_t.bulk). */
const op_kind_t op_send_bulk_kind = {.route = METRICS_ROUTE_SEND,
                                     .scopes = AUTH_ACCEPT_SEND,
                                     .parse = send_parse,
                                     .run = send_run,
                                     .expired = send_expired,
                                     .cleanup = send_cleanup,
                                     .drained = send_drained,
                                     .bulk = 1};

const op_kind_t op_send_async_kind = {.route = METRICS_ROUTE_SEND,
                                      .scopes = AUTH_ACCEPT_SEND,
                                      .parse = send_parse,
                                      .run = send_queue,
                                      .expired = send_queue_expired,
                                      .cleanup = send_cleanup,
                                      .async = 1};
