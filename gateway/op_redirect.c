/* op_redirect.c - POST /redirectMemberToNode: resolve token/channel/member (op.c), then drive
 * the node engine (core/node.c): fetch each node of the chain, deliver its responses, call its
 * webhooks and its scripts' http.request calls (on the worker's loop: a script waiting for
 * one holds no thread, so the scripts of many requests interleave), and finally apply the run's
 * changes to the latest member record in one compare-and-set, so that concurrent redirects of one
 * member keep each other's updates. */
#include "op.h"

#include "../core/member.h"
#include "../core/node.h"
#include "../core/window.h"

#include "../core/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEBHOOK_ANSWER_MAX (256 * 1024) /* the answer is kept in the member record */

static void redirect_step(op_t *op);
static void redirect_drained(op_t *op, int call_cut);

/* The field of a tree hash that holds the tree itself (its app and name), not a node: never
 * a target, whoever names it. */
#define TREE_FIELD "_tree"

static void redirect_cancel(op_t *op);

static void redirect_cleanup(op_t *op)
{
    redirect_cancel(op);
    request_redirect_free(&op->redirect);
    node_run_free(op->node);
    op->node = NULL;
    json_decref(op->sending); /* or target_node, which it shares its place with */
    op->sending = NULL;
    free(op->sending_text);
    op->sending_text = NULL;
}

static void redirect_cancel(op_t *op)
{
    if (op->webhook != NULL) {
        net_cancel(op->webhook);
        op->webhook = NULL;
    }
}

/* ---- nodes ---- */

/* The node in a store_get_node answer (taken), or NULL when there is none for this caller: a
 * node of another app's tree is not found, exactly like a missing one. New reference. */
static json_t *own_node(const op_t *op, store_status_t st, json_t *value)
{
    const char *app = json_string_value(json_object_get(json_object_get(value, "tree"), "app"));
    json_t *node = NULL;

    if (st == STORE_OK && app != NULL && strcmp(app, op->token.app) == 0)
        node = json_incref(json_object_get(value, "node"));
    json_decref(value);
    return node;
}

static void on_node_loaded(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        json_decref(value);
        op_fail_store(op, st);
        return;
    }
    node_run_node_loaded(op->node, own_node(op, st, value));
    redirect_step(op);
}

/* Asks the store for a node; cb gets its answer (at once, not found, for the tree's own
 * field), or the op fails when the store cannot take the call. */
static void ask_node(op_t *op, const char *tree, const char *node_id, store_cb *cb)
{
    store_status_t st;

    if (strcmp(node_id, TREE_FIELD) == 0) {
        cb(op, STORE_NOT_FOUND, NULL);
        return;
    }
    op->call = store_get_node(op->env->deliver.store, tree, node_id, cb, op, &st);
    if (op->call == NULL)
        op_fail_store(op, st);
}

static void fetch_node(op_t *op, const char *tree, const char *node_id)
{
    json_t *node = op->target_node;

    if (node != NULL) {
        /* the target, loaded before the member was created */
        op->target_node = NULL;
        node_run_node_loaded(op->node, node);
        redirect_step(op);
        return;
    }
    ask_node(op, tree, node_id, on_node_loaded);
}

/* ---- a new recipient: created only when the target exists ---- */

/* The target node looked up before the run (for a new recipient, or a queued redirect), kept
 * for it in target_node: 0, or -1 when answered (115 when there is none). */
static int keep_target_node(op_t *op, store_status_t st, json_t *value)
{
    bg_error_t err;

    op->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        json_decref(value);
        op_fail_store(op, st);
        return -1;
    }
    op->target_node = own_node(op, st, value);
    if (!json_is_object(op->target_node)) {
        bg_error_set(&err, BG_ERR_NO_TREE, "tree or node not found");
        op_fail(op, &err);
        return -1;
    }
    return 0;
}

static void on_target_node(void *arg, store_status_t st, json_t *value)
{
    if (keep_target_node(arg, st, value) == 0)
        op_resolve_recipient(arg);
}

/* A redirect that answers 115 writes nothing: the target node is looked up before the
 * member of a recipientId is found or created, and handed to the run afterwards. */
static void before_recipient(op_t *op)
{
    ask_node(op, op->redirect.tree, op->redirect.node_id, on_target_node);
}

/* ---- responses ---- */

/* The response in flight is done with: what delivery had of it goes. */
static void sending_done(op_t *op)
{
    json_decref(op->sending);
    op->sending = NULL;
    free(op->sending_text);
    op->sending_text = NULL;
}

/* Whether response went as its fallback: the check that chose it, made again rather than
 * kept (every request in flight carries the op). */
static int sent_as_fallback(const op_t *op, const json_t *response)
{
    char msg[8];

    return json_object_get(response, "fallback") != NULL &&
           adapter_check_response(op->dl.adapter, response, msg, sizeof(msg)) == BG_ERR_UNSUPPORTED;
}

/* What goes for response under the member's conversation window (contract.md section 14):
 * sent (the response, or its fallback for a type the platform lacks) when the window is open
 * or the platform takes it outside; else its TEMPLATE fallback or the channel's windowTemplate
 * when one may go; else NULL with err 127, and no call is made. */
static const json_t *window_pick(const op_t *op, const json_t *response, const json_t *sent,
                                 bg_error_t *err)
{
    const char *type = op->dl.adapter->type;
    const json_t *fallback = json_object_get(response, "fallback"), *info, *tmpl;
    int64_t hours = window_closed_hours(type, window_last_inbound(op->member), clock_wall_ms());
    bg_error_t why;

    if (hours < 0 || window_exempt(type, sent))
        return sent;
    if (sent == response && fallback != NULL && window_exempt(type, fallback) &&
        adapter_check_response(op->dl.adapter, fallback, NULL, 0) == 0)
        return fallback;
    info = json_object_get(op->dl.channel, "info");
    tmpl = window_channel_template(info, &why);
    if (tmpl != NULL && window_exempt(type, tmpl) &&
        adapter_check_response(op->dl.adapter, tmpl, NULL, 0) == 0)
        return tmpl;
    window_refusal(err, type, hours, info);
    return NULL;
}

/* Whether something went in response's place: the choices made again, as above (a window
 * that closed while the call was out counts too: rare, and the element then says so). */
static int sent_instead(const op_t *op, const json_t *response)
{
    const json_t *sent =
        sent_as_fallback(op, response) ? json_object_get(response, "fallback") : response;
    bg_error_t err;

    return sent != response || window_pick(op, response, sent, &err) != sent;
}

static void redirect_on_delivered(deliver_t *d, const deliver_result_t *r, void *arg)
{
    op_t *op = arg;
    const result_event_t *e = &r->event;
    json_t *ev, *el;

    (void)d;
    if (!r->ok && r->abort && !op->drain_cut) { /* cut: a 121 answer lists it (drained) */
        op_fail(op, &r->err);
        return;
    }
    ev = result_message_event(e->from, e->to, op->sending, e->timestamp_ms, e->message_id);
    el = result_node_element_after(ev, r->ok ? NULL : &r->err, r->retry_after_ms);
    if (el != NULL && sent_instead(op, op->sending))
        json_object_set_new(el, "fallbackUsed", json_true());
    node_run_send_done(op->node, el);
    sending_done(op);
    redirect_step(op);
}

static void send_response(op_t *op, const json_t *response)
{
    const char *type = json_string_value(json_object_get(response, "type"));
    const json_t *sent = response, *fallback = json_object_get(response, "fallback");
    char msg[BG_ERROR_MSG_MAX - 32];
    bg_error_t err;
    size_t len;
    int code;

    /* A stored node is checked here, after rendering: its responses may not suit this
     * channel's platform, or may have rendered into something invalid. A type the platform
     * lacks goes as its fallback, as in sendResponses. */
    bg_error_clear(&err);
    if (request_check_response(response, "response", &err) == 0) {
        code = adapter_check_response(op->dl.adapter, response, msg, sizeof(msg));
        if (code == BG_ERR_UNSUPPORTED && fallback != NULL &&
            adapter_check_response(op->dl.adapter, fallback, msg, sizeof(msg)) == 0) {
            sent = fallback;
            code = 0;
        }
        if (code != 0)
            bg_error_set(&err, code, "%s", msg);
        else
            sent = window_pick(op, response, sent, &err);
    }
    if (err.code == BG_OK && (op->sending_text = jw_dump(sent, &len)) == NULL)
        bg_error_set(&err, BG_ERR_UNAVAILABLE, "out of memory");
    if (err.code != BG_OK) {
        json_t *ev =
            json_is_object(response) && type ? deliver_event_json(&op->dl, response, NULL) : NULL;
        node_run_send_done(op->node, result_node_element(ev, &err));
        redirect_step(op);
        return;
    }
    /* The run's response stays valid only until send_done: keep our own reference for its
     * result element. */
    op->sending = json_incref((json_t *)response);
    deliver_start(&op->dl, op->sending_text, len, redirect_on_delivered, op);
}

/* ---- webhooks ---- */

static void on_webhook(void *arg, const net_answer_t *ans)
{
    op_t *op = arg;
    int ok = ans->status >= 200 && ans->status <= 299;
    json_t *answer = ok ? json_loadb(ans->body, ans->body_len, JSON_DECODE_ANY, NULL) : NULL;

    op->webhook = NULL;
    metrics_call(op->env->deliver.metrics, "webhook", ans->status, (int64_t)ans->elapsed_us);
    node_run_webhook_done(op->node, ok, answer);
    redirect_step(op);
}

static void webhook(op_t *op, const json_t *hook)
{
    const char *url = json_string_value(json_object_get(hook, "url"));
    const char *method = json_string_value(json_object_get(hook, "method"));
    const json_t *body = json_object_get(hook, "body");
    long timeout = (long)json_integer_value(json_object_get(hook, "timeoutMs"));
    long remaining = (long)deliver_remaining_ms(&op->dl) - 20;

    adapter_call_t c = {0};

    c.method = method != NULL && strcmp(method, "GET") == 0 ? "GET" : "POST";
    c.url = strdup(url ? url : "");
    if (strcmp(c.method, "POST") == 0 && body != NULL && !json_is_null(body))
        adapter_set_json_body(&c, json_incref((json_t *)body));
    if (timeout <= 0 || timeout > remaining)
        timeout = remaining;
    if (c.url == NULL || timeout <= 0) {
        adapter_call_free(&c);
        node_run_webhook_done(op->node, 0, NULL);
        redirect_step(op);
        return;
    }
    op->webhook = deliver_net_start(op->env->deliver.up_user, &c, timeout, WEBHOOK_ANSWER_MAX,
                                    NET_FOLLOW, on_webhook, op);
    if (op->webhook == NULL) {
        node_run_webhook_done(op->node, 0, NULL);
        redirect_step(op);
    }
}

/* ---- a script's http.request: the same client and guard as a webhook ---- */

static void on_script_http(void *arg, const net_answer_t *ans)
{
    op_t *op = arg;

    op->webhook = NULL;
    metrics_call(op->env->deliver.metrics, "webhook", ans->status, (int64_t)ans->elapsed_us);
    node_run_http_done(op->node, ans->status, ans->body, ans->body_len, ans->content_type,
                       ans->status != 0              ? NULL
                       : ans->error && ans->error[0] ? ans->error
                                                     : "no answer");
    redirect_step(op);
}

/* The method as the static string adapter_call_t wants (script.c lets only these through). */
static const char *call_method(const char *m)
{
    static const char *const known[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
    size_t i;

    for (i = 0; m != NULL && i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(m, known[i]) == 0)
            return known[i];
    return "GET";
}

static void script_http(op_t *op, const json_t *req)
{
    const char *url = json_string_value(json_object_get(req, "url"));
    const json_t *body = json_object_get(req, "body"), *h;
    long timeout = (long)json_integer_value(json_object_get(req, "timeoutMs"));
    long remaining = (long)deliver_remaining_ms(&op->dl) - 20;
    adapter_call_t c = {0};
    const char *why = NULL;
    size_t i;

    c.method = call_method(json_string_value(json_object_get(req, "method")));
    c.url = strdup(url ? url : "");
    json_array_foreach(json_object_get(req, "headers"), i, h) {
        if (i < ADAPTER_MAX_HEADERS)
            c.headers[i] = strdup(json_string_value(h) ? json_string_value(h) : "");
    }
    if (json_is_string(body)) {
        c.body_len = json_string_length(body);
        c.body = malloc(c.body_len + 1);
        if (c.body != NULL)
            memcpy(c.body, json_string_value(body), c.body_len + 1);
    }
    if (timeout <= 0 || timeout > remaining)
        timeout = remaining;
    if (timeout <= 0)
        why = "no time left before the request deadline";
    else if (c.url == NULL || (json_is_string(body) && c.body == NULL))
        why = "out of memory";
    else if ((op->webhook =
                  deliver_net_start(op->env->deliver.up_user, &c, timeout, WEBHOOK_ANSWER_MAX,
                                    NET_FOLLOW, on_script_http, op)) == NULL)
        why = "the call could not be started";
    if (why != NULL) {
        adapter_call_free(&c);
        node_run_http_done(op->node, 0, NULL, 0, NULL, why);
        redirect_step(op);
    }
}

/* ---- the end: one atomic write-back, then the answer ---- */

static void redirect_answer(op_t *op, int written)
{
    json_t *results = node_run_results(op->node), *answer;
    int ok = node_run_ok(op->node);

    if (!written) {
        bg_error_t err;
        bg_error_set(&err, BG_ERR_STORE, "the member could not be updated");
        json_array_append_new(results, result_node_element(NULL, &err));
        ok = 0;
    }
    answer = result_answer(op->member_id, ok, results);
    /* the answer holds what it needs: the operation's part goes now */
    redirect_cleanup(op);
    op->kind_freed = 1;
    op_answer(op, answer);
}

static void on_member_written(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->call = NULL;
    json_decref(value);
    redirect_answer(op, st == STORE_OK);
}

static void redirect_done(op_t *op)
{
    bg_error_t err;
    store_status_t st;

    if (node_run_error(op->node, &err)) {
        op_fail(op, &err);
        return;
    }
    op->phase = OP_WRITEBACK;
    op->call = store_update_member(
        op->env->deliver.store, op->target.channel_id, op->member_id, op->member, op->member_seq,
        member_mutate, node_run_delta(op->node), clock_wall_ms(), on_member_written, op, &st);
    if (op->call == NULL)
        redirect_answer(op, 0);
}

static void redirect_step(op_t *op)
{
    node_need_t need;

    if (op->drain_cut) {
        redirect_drained(op, 0); /* nothing new starts once the drain time is over */
        return;
    }
    switch (node_run_next(op->node, &need)) {
    case NODE_NEED_NODE:
        fetch_node(op, need.tree, need.node_id);
        return;
    case NODE_NEED_SEND:
        send_response(op, need.response);
        return;
    case NODE_NEED_WEBHOOK:
        webhook(op, need.webhook);
        return;
    case NODE_NEED_HTTP:
        script_http(op, need.http);
        return;
    case NODE_DONE:
        redirect_done(op);
        return;
    }
}

/* The deadline passed: answer with what ran; the member is not updated. */
static void redirect_expired(op_t *op)
{
    json_t *results = node_run_results(op->node);
    bg_error_t err;

    bg_error_set(&err, BG_ERR_PLATFORM,
                 "the request deadline passed; the rest of the node did not run and the member "
                 "was not updated");
    json_array_append_new(results, result_node_element(NULL, &err));
    op_answer(op, result_answer(op->member_id, 0, results));
}

/* The elements of results as comma-separated text (result_write_cut_answer's input), and how
 * many of them are delivered responses. NULL when out of memory. */
static char *elements_text(const json_t *results, unsigned *delivered, size_t *len)
{
    const json_t *el;
    size_t i;
    jsonw_t w;

    *delivered = 0;
    jw_init(&w);
    json_array_foreach(results, i, el) {
        if (json_integer_value(json_object_get(el, "ok")) == 1 &&
            json_object_get(el, "messageEvent") != NULL)
            (*delivered)++;
        if (i > 0)
            jw_lit(&w, ",");
        jw_json(&w, el);
    }
    if (w.failed) {
        jw_free(&w);
        return NULL;
    }
    return jw_steal(&w, len);
}

/* The drain stopped the run: the elements so far, the response whose call was stopped on the
 * wire (it may have been delivered: 113), then one element for what did not run: 121, which
 * says that nothing of it was sent. */
static void redirect_drained(op_t *op, int call_cut)
{
    json_t *results = node_run_results(op->node);
    bg_error_t cut, err;
    unsigned delivered;
    char *elements, *text = NULL;
    size_t len, text_len;
    jsonw_t w;

    if (call_cut) {
        bg_error_set(&err, BG_ERR_PLATFORM,
                     "the server stopped before the platform answered: it may have been "
                     "delivered");
        json_array_append_new(
            results, result_node_element(deliver_event_json(&op->dl, op->sending, NULL), &err));
    }
    if (op->phase == OP_WRITEBACK)
        bg_error_set(&err, BG_ERR_STORE,
                     "the server stopped during the member's write-back: it may not have been "
                     "updated");
    else
        bg_error_set(&err, BG_ERR_UNAVAILABLE,
                     "not run: the server is shutting down; the rest of the node did not run "
                     "(none of its responses was sent) and the member was not updated");
    json_array_append_new(results, result_node_element(NULL, &err));
    elements = elements_text(results, &delivered, &len);
    json_decref(results);
    bg_error_set(&cut, BG_ERR_UNAVAILABLE,
                 "server is shutting down: %u responses delivered before the run was cut short; "
                 "sendResult tells what ran",
                 delivered);
    jw_init(&w);
    if (elements != NULL) {
        result_write_cut_answer(&w, &cut, op->member_id, elements, len);
        text = w.failed ? NULL : jw_steal(&w, &text_len);
    }
    jw_free(&w);
    free(elements);
    if (text == NULL) {
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    op_fail_text(op, cut.code, text, text_len);
}

static void redirect_run(op_t *op)
{
    node_flags_t flags = {op->redirect.run_pre, op->redirect.send_response, op->redirect.run_post};
    const char *element;
    op_resumed_t how = op->resuming ? op_guard_resumed(op, 0, &element) : OP_RESUMED_NO;

    /* Taking over a run whose instance died (Idempotency-Key, or the outbox): what it sent and
     * whether it wrote the member back are not known, and a run is not replayed half-way (its
     * actions and templates read the member it changed): nothing runs again, nothing is
     * written. A queued one past the outbox's TTL does not run either. */
    if (how != OP_RESUMED_NO) {
        bg_error_t err;
        json_t *results = json_array();
        if (how == OP_RESUMED_EXPIRED)
            bg_error_set(&err, BG_ERR_EXPIRED, "expired in the queue: the node was not run");
        else
            bg_error_set(&err, BG_ERR_OUTCOME_UNKNOWN,
                         "outcome unknown: an earlier attempt of this request may have run it; "
                         "nothing was run again");
        json_array_append_new(results, result_node_element(NULL, &err));
        op_answer(op, result_answer(op->member_id, 0, results));
        return;
    }

    op->node = node_run_new(op->member, op->dl.channel, op->redirect.meta, op->redirect.tree,
                            op->redirect.node_id, flags, clock_wall_ms());
    if (op->node == NULL) {
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    node_run_set_code(op->node, &script_nodecode, op->env->scripts);
    redirect_step(op);
}

static int redirect_parse(op_t *op, const char *body, size_t len, bg_error_t *err)
{
    if (request_parse_redirect(body, len, &op->redirect, err) < 0 ||
        op_refuse_sync_callback(op, op->redirect.root, err) < 0)
        return -1;
    op->target = op->redirect.target;
    return 0;
}

const op_kind_t op_redirect_kind = {.route = METRICS_ROUTE_REDIRECT,
                                    .scopes = AUTH_ACCEPT_REDIRECT,
                                    .parse = redirect_parse,
                                    .run = redirect_run,
                                    .expired = redirect_expired,
                                    .cancel = redirect_cancel,
                                    .cleanup = redirect_cleanup,
                                    .drained = redirect_drained,
                                    .before_recipient = before_recipient};

/* ---- Prefer: respond-async: checked, then queued (outbox.c) ---- */

static void on_queue_target(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    if (keep_target_node(op, st, value) == 0)
        op->env->outbox->accept(op);
}

/* Checked as far as it can be before it runs: the token, channel and member (op.c), and the
 * target node (115), which a new recipient's lookup loaded already. */
static void redirect_queue(op_t *op)
{
    if (op->target_node != NULL)
        op->env->outbox->accept(op);
    else
        ask_node(op, op->redirect.tree, op->redirect.node_id, on_queue_target);
}

static void redirect_queue_expired(op_t *op)
{
    op_fail_code(op, BG_ERR_STORE, "the store did not answer in time");
}

const op_kind_t op_redirect_async_kind = {.route = METRICS_ROUTE_REDIRECT,
                                          .scopes = AUTH_ACCEPT_REDIRECT,
                                          .parse = redirect_parse,
                                          .run = redirect_queue,
                                          .expired = redirect_queue_expired,
                                          .cleanup = redirect_cleanup,
                                          .before_recipient = before_recipient,
                                          .async = 1};
