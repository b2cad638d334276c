/* op_redirect.c - POST /redirectMemberToNode: resolve token/channel/member (op.c), then drive
 * the node engine (core/node.c): fetch each node of the chain, deliver its responses, call its
 * webhooks, and finally apply the run's changes to the latest member record in one
 * compare-and-set, so that concurrent redirects of one member keep each other's updates. */
#include "op.h"

#include "../core/member.h"
#include "../core/node.h"

#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEBHOOK_ANSWER_MAX (256 * 1024) /* the answer is kept in the member record */

static void step(op_t *op);
static void drained(op_t *op, int call_cut);

/* The field of a tree hash that holds the tree itself (its app and name), not a node: never
 * a target, whoever names it. */
#define TREE_FIELD "_tree"

static void cleanup(op_t *op)
{
    node_run_free(op->node);
    op->node = NULL;
    json_decref(op->target_node);
    op->target_node = NULL;
}

/* ---- nodes ---- */

static void fail_store(op_t *op, store_status_t st)
{
    bg_error_t err;

    bg_error_set(&err, BG_ERR_STORE,
                 st == STORE_BUSY ? "store busy: too many commands in flight"
                                  : "store unavailable");
    op_fail(op, &err);
}

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

static void on_node(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        json_decref(value);
        fail_store(op, st);
        return;
    }
    node_run_node_loaded(op->node, own_node(op, st, value));
    step(op);
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
    op->call = store_get_node(op->w->store, tree, node_id, cb, op, &st);
    if (op->call == NULL)
        fail_store(op, st);
}

static void fetch_node(op_t *op, const char *tree, const char *node_id)
{
    json_t *node = op->target_node;

    if (node != NULL) {
        /* the target, loaded before the member was created */
        op->target_node = NULL;
        node_run_node_loaded(op->node, node);
        step(op);
        return;
    }
    ask_node(op, tree, node_id, on_node);
}

/* ---- a new recipient: created only when the target exists ---- */

static void on_target(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;
    bg_error_t err;

    op->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        json_decref(value);
        fail_store(op, st);
        return;
    }
    op->target_node = own_node(op, st, value);
    if (!json_is_object(op->target_node)) {
        bg_error_set(&err, BG_ERR_NO_TREE, "tree or node not found");
        op_fail(op, &err);
        return;
    }
    op_resolve_recipient(op);
}

/* A redirect that answers 115 writes nothing: the target node is looked up before the
 * member of a recipientId is found or created, and handed to the run afterwards. */
static void before_recipient(op_t *op)
{
    ask_node(op, op->redirect.tree, op->redirect.node_id, on_target);
}

/* ---- responses ---- */

static void on_delivered(op_t *op, deliver_result_t *r)
{
    const json_t *response = op->response;
    json_t *ev;

    if (!r->ok && r->abort && !op->drain_cut) { /* cut: a 121 answer lists it (drained) */
        op_fail(op, &r->err);
        return;
    }
    if (r->ok) {
        char generated[40];
        const char *mid = r->res.message_id;
        if (*mid == '\0') {
            worker_random_hex(op->w, generated, 32);
            mid = generated;
        }
        ev = deliver_event(op, response, mid);
        node_run_send_done(op->node, result_node_element(ev, NULL));
    } else {
        ev = deliver_event(op, response, NULL);
        node_run_send_done(op->node, result_node_element(ev, &r->err));
    }
    json_decref(op->sending);
    op->sending = NULL;
    step(op);
}

static void send_response(op_t *op, const json_t *response)
{
    const char *type = json_string_value(json_object_get(response, "type"));
    bg_error_t err;

    /* A stored node is checked here, after rendering: its responses may not suit this
     * channel's platform, or may have rendered into something invalid. */
    bg_error_clear(&err);
    if (request_check_response(response, "response", &err) == 0 &&
        (adapter_response_type(type) & op->adapter->response_types) == 0)
        bg_error_set(&err, BG_ERR_UNSUPPORTED, "type %.40s is not supported on %s channels",
                     type, op->adapter->type);
    if (err.code != BG_OK) {
        json_t *ev = json_is_object(response) && type ? deliver_event(op, response, NULL) : NULL;
        node_run_send_done(op->node, result_node_element(ev, &err));
        step(op);
        return;
    }
    /* The run's response stays valid only until send_done: keep our own reference. */
    op->sending = json_incref((json_t *)response);
    deliver_start(op, op->sending, on_delivered);
}

/* ---- webhooks ---- */

static void on_webhook(void *arg, const upstream_answer_t *ans)
{
    op_t *op = arg;
    int ok = ans->a.status >= 200 && ans->a.status <= 299;
    json_t *answer = ok ? json_loadb(ans->a.body, ans->a.body_len, JSON_DECODE_ANY, NULL) : NULL;

    op->xfer = NULL;
    metrics_call(&op->w->metrics, METRICS_TARGET_WEBHOOK, ans->a.status,
                 (int64_t)ans->elapsed_us);
    node_run_webhook_done(op->node, ok, answer);
    step(op);
}

static void webhook(op_t *op, const json_t *hook)
{
    const char *url = json_string_value(json_object_get(hook, "url"));
    const char *method = json_string_value(json_object_get(hook, "method"));
    const json_t *body = json_object_get(hook, "body");
    long timeout = (long)json_integer_value(json_object_get(hook, "timeoutMs"));
    long remaining = (long)op_remaining_ms(op) - 20;

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
        step(op);
        return;
    }
    op->xfer = upstream_start(op->w->up_user, &c, timeout, WEBHOOK_ANSWER_MAX,
                              UPSTREAM_FOLLOW, on_webhook, op);
    if (op->xfer == NULL) {
        node_run_webhook_done(op->node, 0, NULL);
        step(op);
    }
}

/* ---- the end: one atomic write-back, then the answer ---- */

static void answer(op_t *op, int written)
{
    json_t *results = node_run_results(op->node);
    int ok = node_run_ok(op->node);

    if (!written) {
        bg_error_t err;
        bg_error_set(&err, BG_ERR_STORE, "the member could not be updated");
        json_array_append_new(results, result_node_element(NULL, &err));
        ok = 0;
    }
    op_answer(op, result_answer(op->member_id, ok, results));
}

static void on_written(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->call = NULL;
    json_decref(value);
    answer(op, st == STORE_OK);
}

static void done(op_t *op)
{
    bg_error_t err;
    store_status_t st;

    if (node_run_error(op->node, &err)) {
        op_fail(op, &err);
        return;
    }
    op->phase = OP_WRITEBACK;
    op->call = store_update_member(op->w->store, op->target.channel_id, op->member_id, op->member,
                                   op->member_seq, member_mutate, node_run_delta(op->node),
                                   op_now_wall_ms(), on_written, op, &st);
    if (op->call == NULL)
        answer(op, 0);
}

static void step(op_t *op)
{
    node_need_t need;

    if (op->drain_cut) {
        drained(op, 0); /* nothing new starts once the drain time is over */
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
    case NODE_DONE:
        done(op);
        return;
    }
}

/* The deadline passed: answer with what ran; the member is not updated. */
static void expired(op_t *op)
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
static void drained(op_t *op, int call_cut)
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
        json_array_append_new(results,
                              result_node_element(deliver_event(op, op->sending, NULL), &err));
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
        bg_error_set(&err, BG_ERR_UNAVAILABLE, "out of memory");
        op_fail(op, &err);
        return;
    }
    op_fail_text(op, cut.code, text, text_len);
}

static void run(op_t *op)
{
    node_flags_t flags = {op->redirect.run_pre, op->redirect.send_response,
                          op->redirect.run_post};

    op->node = node_run_new(op->member, op->channel, op->redirect.meta, op->redirect.tree,
                            op->redirect.node_id, flags, op_now_wall_ms());
    if (op->node == NULL) {
        bg_error_t err;
        bg_error_set(&err, BG_ERR_UNAVAILABLE, "out of memory");
        op_fail(op, &err);
        return;
    }
    step(op);
}

static const op_kind_t redirect_kind = {
    .run = run,
    .expired = expired,
    .cleanup = cleanup,
    .drained = drained,
    .before_recipient = before_recipient};

void op_redirect_start(worker_t *w, struct evhttp_request *req)
{
    op_t *op = op_new(w, req, METRICS_ROUTE_REDIRECT, &redirect_kind);
    const char *body;
    size_t len;
    bg_error_t err;
    char token_hash[AUTH_HASH_HEX];

    if (op == NULL) {
        evhttp_send_error(req, 500, "Internal Server Error");
        return;
    }
    op->accepted_scopes = AUTH_ACCEPT_REDIRECT;
    if (op_take_token(op, token_hash) < 0)
        return;
    body = op_body(op, &len);
    if (request_parse_redirect(body, len, &op->redirect, &err) < 0) {
        op_fail(op, &err);
        return;
    }
    op_body_done(op);
    op->target = op->redirect.target;
    op_resolve(op, token_hash);
}
