/* node.c - the node run: pre-action, response, post-action, redirect, one node at a time.
 * Nodes come from the store as other systems wrote them, so nothing about their shape is
 * trusted here: a malformed part becomes an error element and the run goes on. */
#include "node.h"

#include "member.h"
#include "result.h"
#include "tmpl.h"
#include "tree.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLACE_MAX 160

typedef enum {
    PHASE_FETCH,     /* ask for run->tree / run->node_id */
    PHASE_PRE,       /* pre-action, from run->idx */
    PHASE_TRANSFORM, /* the node's transform code, when the response is sent */
    PHASE_RESPONSE,  /* responses of run->responses, from run->idx */
    PHASE_POST,      /* post-action, from run->idx */
    PHASE_REDIRECT,  /* follow the node's redirect, if any */
    PHASE_DONE,
} node_phase_t;

typedef enum { WAIT_NONE, WAIT_NODE, WAIT_SEND, WAIT_WEBHOOK, WAIT_HTTP } node_wait_t;

/* Owned by the caller (node_run_free); every json_t and string below is owned by the run. */
struct node_run {
    json_t *member;  /* the working copy; also scope.member, so templates see every change */
    json_t *scope;   /* {agendaMeta, member, channel (without info)} */
    json_t *delta;   /* the member delta */
    json_t *results; /* sendResult.result */
    bg_error_t error;
    int failed; /* the whole request fails (error holds why) */
    int64_t now_ms;

    node_phase_t phase;
    node_wait_t wait;
    char *tree, *node_id;      /* the node asked for, then running */
    node_flags_t flags;        /* of the node asked for, then running */
    json_t *node;              /* the running node */
    int count;                 /* nodes loaded so far */
    char *pos_tree, *pos_node; /* the last node reached */
    size_t idx;
    const json_t *responses; /* borrowed from node */
    json_t *pending;         /* the rendered response or webhook being waited on */
    char place[PLACE_MAX];   /* of the webhook being waited on, for its error element */

    const nodecode_t *code; /* borrowed, may be NULL: no node code runs */
    void *code_ctx;         /* the runner's (borrowed) */
    nodecode_run_t *script; /* the script running (an action or the transform) */
    int transform_started;  /* of the running node */
    json_t *transformed;    /* what the transform returned: the responses to send */
};

static char *dup_str(const char *s)
{
    return strdup(s ? s : "");
}

/* Appends {"ok":0,"error":{"err_code":code,"err":msg}}. */
static void add_error(node_run_t *run, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add_error(node_run_t *run, int code, const char *fmt, ...)
{
    bg_error_t e;
    va_list ap;

    e.code = code;
    e.http_status = 500;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
    va_end(ap);
    /* "%.64s" of an id may cut a character in the middle of the message, not only at its end:
     * the message must stay a valid JSON string or the element loses its "err". */
    bg_utf8_sanitize(e.msg);
    json_array_append_new(run->results, result_node_element(NULL, &e));
}

node_run_t *node_run_new(const json_t *member, const json_t *channel, const json_t *agenda_meta,
                         const char *tree, const char *node_id, node_flags_t flags, int64_t now_ms)
{
    node_run_t *run = calloc(1, sizeof(*run));

    if (run == NULL)
        return NULL;
    run->member = json_is_object(member) ? json_deep_copy(member) : json_object();
    run->scope = tmpl_scope(agenda_meta, NULL, channel);
    run->delta = json_array();
    run->results = json_array();
    run->tree = dup_str(tree);
    run->node_id = dup_str(node_id);
    if (run->member == NULL || run->scope == NULL || run->delta == NULL || run->results == NULL ||
        run->tree == NULL || run->node_id == NULL ||
        json_object_set(run->scope, "member", run->member) < 0) {
        node_run_free(run);
        return NULL;
    }
    bg_error_clear(&run->error);
    run->flags = flags;
    run->now_ms = now_ms;
    run->phase = PHASE_FETCH;
    return run;
}

void node_run_free(node_run_t *run)
{
    if (run == NULL)
        return;
    json_decref(run->member);
    json_decref(run->scope);
    json_decref(run->delta);
    json_decref(run->results);
    json_decref(run->node);
    json_decref(run->pending);
    json_decref(run->transformed);
    if (run->script != NULL)
        run->code->free(run->script);
    free(run->tree);
    free(run->node_id);
    free(run->pos_tree);
    free(run->pos_node);
    free(run);
}

/* Applies op (stolen) to the working member and records it in the delta. */
static int record_op(node_run_t *run, json_t *op, bg_error_t *e)
{
    if (member_apply_op(run->member, op, e) < 0) {
        json_decref(op);
        return -1;
    }
    json_array_append_new(run->delta, op);
    return 0;
}

static void action_set(node_run_t *run, const json_t *action, const char *place)
{
    json_t *path, *value, *op;
    bg_error_t e;

    path = tmpl_render_json(json_object_get(action, "path"), run->scope);
    value = tmpl_render_json(json_object_get(action, "value"), run->scope);
    if (!json_is_string(path) || value == NULL) {
        add_error(run, BG_ERR_MISSING_PARAM, "%s: set needs a string path and a value", place);
        json_decref(path);
        json_decref(value);
        return;
    }
    op = json_object();
    json_object_set_new(op, "op", json_string("set"));
    json_object_set_new(op, "path", path);
    json_object_set_new(op, "value", value);
    if (record_op(run, op, &e) < 0)
        add_error(run, BG_ERR_MISSING_PARAM, "%s: %s", place, e.msg);
}

static void action_tags(node_run_t *run, const json_t *action, const char *type, const char *place)
{
    json_t *tags = tmpl_render_json(json_object_get(action, "tags"), run->scope);
    json_t *kept, *t, *op;
    size_t i;
    bg_error_t e;

    if (!json_is_array(tags)) {
        add_error(run, BG_ERR_MISSING_PARAM, "%s: tags must be an array of strings", place);
        json_decref(tags);
        return;
    }
    kept = json_array();
    json_array_foreach(tags, i, t) {
        if (!json_is_string(t)) {
            add_error(run, BG_ERR_MISSING_PARAM, "%s: tags must be an array of strings", place);
            json_decref(tags);
            json_decref(kept);
            return;
        }
        if (json_string_length(t) > 0) /* a placeholder that rendered empty adds no tag */
            json_array_append(kept, t);
    }
    json_decref(tags);
    if (json_array_size(kept) == 0) {
        json_decref(kept);
        return;
    }
    op = json_object();
    json_object_set_new(op, "op", json_string(type));
    json_object_set_new(op, "tags", kept);
    if (record_op(run, op, &e) < 0)
        add_error(run, BG_ERR_MISSING_PARAM, "%s: %s", place, e.msg);
}

static int save_as_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= 256 &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

/* Builds run->pending for a webhook action; 0 when the caller must be asked for it. */
static int action_webhook(node_run_t *run, const json_t *action, const char *place)
{
    const json_t *body = json_object_get(action, "body"), *timeout, *save_as, *method;
    const char *url_src = json_string_value(json_object_get(action, "url"));
    const char *m;
    json_int_t timeout_ms = NODE_WEBHOOK_TIMEOUT_MS;
    char *url;
    json_t *hook;

    if (url_src == NULL ||
        (strncmp(url_src, "http://", 7) != 0 && strncmp(url_src, "https://", 8) != 0)) {
        add_error(run, BG_ERR_MISSING_PARAM, "%s: webhook url must start with http:// or https://",
                  place);
        return -1;
    }
    method = json_object_get(action, "method");
    if (method == NULL || json_is_null(method))
        m = body != NULL && !json_is_null(body) ? "POST" : "GET";
    else
        m = json_string_value(method);
    if (m == NULL || (strcmp(m, "GET") != 0 && strcmp(m, "POST") != 0)) {
        add_error(run, BG_ERR_MISSING_PARAM, "%s: webhook method must be GET or POST", place);
        return -1;
    }
    timeout = json_object_get(action, "timeoutMs");
    if (timeout != NULL && !json_is_null(timeout)) {
        if (!json_is_integer(timeout) || json_integer_value(timeout) < 1 ||
            json_integer_value(timeout) > NODE_WEBHOOK_TIMEOUT_MAX) {
            add_error(run, BG_ERR_MISSING_PARAM,
                      "%s: webhook timeoutMs must be an integer from 1 to %d", place,
                      NODE_WEBHOOK_TIMEOUT_MAX);
            return -1;
        }
        timeout_ms = json_integer_value(timeout);
    }
    save_as = json_object_get(action, "saveAs");
    if (save_as != NULL && !json_is_null(save_as) &&
        (!json_is_string(save_as) || !save_as_ok(json_string_value(save_as)))) {
        add_error(run, BG_ERR_MISSING_PARAM, "%s: webhook saveAs must match [A-Za-z0-9_]+", place);
        return -1;
    }
    url = tmpl_render_url(url_src, run->scope);
    hook = json_object();
    if (url == NULL || hook == NULL) {
        free(url);
        json_decref(hook);
        add_error(run, BG_ERR_UNAVAILABLE, "%s: out of memory", place);
        return -1;
    }
    json_object_set_new(hook, "url", json_string(url));
    free(url);
    json_object_set_new(hook, "method", json_string(m));
    json_object_set_new(hook, "body",
                        body != NULL ? tmpl_render_json(body, run->scope) : json_null());
    json_object_set_new(hook, "timeoutMs", json_integer(timeout_ms));
    json_object_set_new(hook, "saveAs", save_as != NULL ? json_deep_copy(save_as) : json_null());
    run->pending = hook;
    snprintf(run->place, sizeof(run->place), "%s", place);
    return 0;
}

void node_run_set_code(node_run_t *run, const nodecode_t *code, void *ctx)
{
    run->code = code;
    run->code_ctx = ctx;
}

/* Runs or continues run->script; 1 when it waits for its http.request (need filled), 0 when
 * it ended: its member changes applied, its result kept (a transform's), or an element 126. */
static int script_continue(node_run_t *run, node_need_t *need)
{
    const json_t *ops, *op;
    bg_error_t e;
    size_t i;

    switch (run->code->resume(run->script, &e)) {
    case NODECODE_NEED_HTTP:
        run->wait = WAIT_HTTP;
        need->http = run->code->http(run->script);
        return 1;
    case NODECODE_FAILED:
        add_error(run, BG_ERR_SCRIPT, "node %.64s %s", run->node_id, e.msg);
        break;
    case NODECODE_DONE:
        /* checked by the script run against this very member: they apply */
        ops = run->code->member_ops(run->script);
        json_array_foreach(ops, i, op) {
            if (record_op(run, json_incref((json_t *)op), &e) < 0)
                add_error(run, BG_ERR_SCRIPT, "node %.64s: %s", run->node_id, e.msg);
        }
        if (run->phase == PHASE_TRANSFORM) {
            json_decref(run->transformed);
            run->transformed = run->code->result(run->script);
        }
        break;
    }
    run->code->free(run->script);
    run->script = NULL;
    return 0;
}

/* Starts the code of a script called name ("preAction[0]", "transform"); as
 * script_continue. */
static int script_start(node_run_t *run, const json_t *code, const char *name, node_need_t *need)
{
    bg_error_t e;

    if (!json_is_string(code)) {
        add_error(run, BG_ERR_MISSING_PARAM, "node %.64s %s: code must be a string", run->node_id,
                  name);
        return 0;
    }
    if (run->code == NULL) {
        add_error(run, BG_ERR_SCRIPT, "node %.64s %s: no node code runs here", run->node_id, name);
        return 0;
    }
    run->script = run->code->start(
        run->code_ctx, name, json_string_value(code), json_string_length(code), run->member,
        json_object_get(run->scope, "channel"), json_object_get(run->scope, "agendaMeta"), &e);
    if (run->script == NULL && e.code == BG_ERR_SCRIPT) {
        add_error(run, BG_ERR_SCRIPT, "node %.64s %s", run->node_id, e.msg);
        return 0;
    }
    if (run->script == NULL) {
        add_error(run, BG_ERR_UNAVAILABLE, "node %.64s %s: out of memory", run->node_id, name);
        return 0;
    }
    return script_continue(run, need);
}

/* Runs the actions of list from run->idx on; NODE_DONE when the list is done, else what the
 * caller must do first (a webhook, a script's http call). */
static node_step_t run_actions(node_run_t *run, const char *list_name, node_need_t *need)
{
    const json_t *list = json_object_get(run->node, list_name);
    char place[PLACE_MAX];

    if (run->script != NULL && script_continue(run, need))
        return NODE_NEED_HTTP;
    if (list == NULL || json_is_null(list))
        return NODE_DONE;
    if (!json_is_array(list)) {
        add_error(run, BG_ERR_MISSING_PARAM, "node %.64s %s must be an array", run->node_id,
                  list_name);
        return NODE_DONE;
    }
    while (run->idx < json_array_size(list)) {
        const json_t *action = json_array_get(list, run->idx);
        const char *type = json_string_value(json_object_get(action, "type"));

        snprintf(place, sizeof(place), "node %.64s %s[%zu]", run->node_id, list_name, run->idx);
        run->idx++;
        if (type == NULL) {
            add_error(run, BG_ERR_UNSUPPORTED, "%s: an action needs a string type", place);
        } else if (strcmp(type, "set") == 0) {
            action_set(run, action, place);
        } else if (strcmp(type, "addTags") == 0 || strcmp(type, "removeTags") == 0) {
            action_tags(run, action, type, place);
        } else if (strcmp(type, "webhook") == 0) {
            if (action_webhook(run, action, place) == 0) {
                run->wait = WAIT_WEBHOOK;
                need->webhook = run->pending;
                return NODE_NEED_WEBHOOK;
            }
        } else if (strcmp(type, "script") == 0) {
            snprintf(place, sizeof(place), "%s[%zu]", list_name, run->idx - 1);
            if (script_start(run, json_object_get(action, "code"), place, need))
                return NODE_NEED_HTTP;
        } else {
            add_error(run, BG_ERR_UNSUPPORTED, "%s: unknown action type %.40s", place, type);
        }
    }
    return NODE_DONE;
}

/* The node's transform, when it has one: 1 when its script waits for an http call; else
 * run->responses is what it returned (NULL when it failed). */
static int run_transform(node_run_t *run, const json_t *code, node_need_t *need)
{
    const json_t *r, *item;
    size_t i;

    if (!run->transform_started) {
        run->transform_started = 1;
        json_decref(run->transformed);
        run->transformed = NULL;
        if (script_start(run, code, "transform", need))
            return 1;
    } else if (run->script != NULL && script_continue(run, need)) {
        return 1;
    }
    r = run->transformed;
    if (r == NULL || json_is_null(r) || (json_is_object(r) && json_object_size(r) == 0)) {
        run->responses = NULL; /* nil (or {}): nothing to send */
        return 0;
    }
    json_array_foreach(r, i, item) {
        if (!json_is_object(item))
            break;
    }
    if (!json_is_array(run->transformed) || i < json_array_size(run->transformed)) {
        add_error(run, BG_ERR_SCRIPT,
                  "node %.64s transform: must return an array of responses (tables), or nil",
                  run->node_id);
        json_decref(run->transformed);
        run->transformed = NULL;
    } else if (json_array_size(run->transformed) > TREE_MAX_RESPONSES) {
        /* the limit of a node's own response list */
        add_error(run, BG_ERR_LIMIT, "node %.64s transform: returned more than %d responses",
                  run->node_id, TREE_MAX_RESPONSES);
        json_decref(run->transformed);
        run->transformed = NULL;
    }
    run->responses = run->transformed;
    return 0;
}

/* responseByLocale[customLocale], else responseByLocale[locale], else response. */
static const json_t *choose_responses(const node_run_t *run)
{
    const json_t *by_locale = json_object_get(run->node, "responseByLocale"), *list;
    const char *keys[2];
    size_t i;

    keys[0] = json_string_value(json_object_get(run->member, "customLocale"));
    keys[1] = json_string_value(json_object_get(run->member, "locale"));
    if (json_is_object(by_locale)) {
        for (i = 0; i < 2; i++) {
            if (keys[i] != NULL && json_is_array(list = json_object_get(by_locale, keys[i])))
                return list;
        }
    }
    return json_object_get(run->node, "response");
}

/* Asks for the next response from run->idx on; 1 when there is one. */
static int run_responses(node_run_t *run, node_need_t *need)
{
    if (run->responses == NULL || json_is_null(run->responses))
        return 0;
    if (!json_is_array(run->responses)) {
        add_error(run, BG_ERR_MISSING_PARAM, "node %.64s response must be an array", run->node_id);
        return 0;
    }
    while (run->idx < json_array_size(run->responses)) {
        const json_t *resp = json_array_get(run->responses, run->idx);
        size_t at = run->idx++;

        if (!json_is_object(resp)) {
            add_error(run, BG_ERR_MISSING_PARAM, "node %.64s response[%zu] must be an object",
                      run->node_id, at);
            continue;
        }
        /* a transform's responses are sent as it built them */
        run->pending = run->responses == run->transformed ? json_deep_copy(resp)
                                                          : tmpl_render_json(resp, run->scope);
        if (run->pending == NULL) {
            add_error(run, BG_ERR_UNAVAILABLE, "node %.64s response[%zu]: out of memory",
                      run->node_id, at);
            continue;
        }
        run->wait = WAIT_SEND;
        need->response = run->pending;
        return 1;
    }
    return 0;
}

static int flag_of(const json_t *redirect, const char *name)
{
    const json_t *v = json_object_get(redirect, name);

    return json_is_boolean(v) ? json_is_true(v) : 1;
}

/* Sets up the fetch of the node's redirect; 0 when the chain ends here. */
static int follow_redirect(node_run_t *run)
{
    const json_t *r = json_object_get(run->node, "redirect");
    const char *tree, *node_id;
    char *t, *n;

    if (r == NULL || json_is_null(r))
        return 0;
    tree = json_string_value(json_object_get(r, "tree"));
    node_id = json_string_value(json_object_get(r, "nodeCompositeId"));
    if (!json_is_object(r) || tree == NULL || node_id == NULL || tree[0] == '\0' ||
        node_id[0] == '\0') {
        add_error(run, BG_ERR_MISSING_PARAM,
                  "node %.64s redirect needs tree and nodeCompositeId strings", run->node_id);
        return 0;
    }
    if (run->count >= NODE_CHAIN_MAX) {
        add_error(run, BG_ERR_LIMIT, "redirect chain longer than %d", NODE_CHAIN_MAX - 1);
        return 0;
    }
    t = strdup(tree);
    n = strdup(node_id);
    if (t == NULL || n == NULL) {
        free(t);
        free(n);
        add_error(run, BG_ERR_UNAVAILABLE, "out of memory");
        return 0;
    }
    run->flags.run_pre = flag_of(r, "runPreAction");
    run->flags.send_response = flag_of(r, "sendResponse");
    run->flags.run_post = flag_of(r, "runPostAction");
    free(run->tree);
    free(run->node_id);
    run->tree = t;
    run->node_id = n;
    return 1;
}

/* The position op, once, when at least one node was reached. */
static void end_at_position(node_run_t *run)
{
    json_t *op;
    bg_error_t e;

    run->phase = PHASE_DONE;
    if (run->failed || run->pos_tree == NULL)
        return;
    op = json_object();
    json_object_set_new(op, "op", json_string("position"));
    json_object_set_new(op, "tree", json_string(run->pos_tree));
    json_object_set_new(op, "node", json_string(run->pos_node));
    if (record_op(run, op, &e) == 0)
        json_object_set_new(run->member, "updatedAt", json_integer(run->now_ms));
}

node_step_t node_run_next(node_run_t *run, node_need_t *need)
{
    node_step_t st;

    memset(need, 0, sizeof(*need));
    switch (run->wait) {
    case WAIT_NODE:
        need->tree = run->tree;
        need->node_id = run->node_id;
        return NODE_NEED_NODE;
    case WAIT_SEND:
        need->response = run->pending;
        return NODE_NEED_SEND;
    case WAIT_WEBHOOK:
        need->webhook = run->pending;
        return NODE_NEED_WEBHOOK;
    case WAIT_HTTP:
        need->http = run->code->http(run->script);
        return NODE_NEED_HTTP;
    case WAIT_NONE:
        break;
    }
    for (;;) {
        switch (run->phase) {
        case PHASE_FETCH:
            run->wait = WAIT_NODE;
            need->tree = run->tree;
            need->node_id = run->node_id;
            return NODE_NEED_NODE;
        case PHASE_PRE:
            if (run->flags.run_pre && (st = run_actions(run, "preAction", need)) != NODE_DONE)
                return st;
            run->phase = PHASE_TRANSFORM;
            break;
        case PHASE_TRANSFORM: {
            const json_t *code = json_object_get(run->node, "transform");
            /* Chosen after the pre-action, which may have set customLocale. */
            if (!run->flags.send_response)
                run->responses = NULL;
            else if (code == NULL || json_is_null(code))
                run->responses = choose_responses(run);
            else if (run_transform(run, code, need))
                return NODE_NEED_HTTP;
            run->phase = PHASE_RESPONSE;
            run->idx = 0;
            break;
        }
        case PHASE_RESPONSE:
            if (run_responses(run, need))
                return NODE_NEED_SEND;
            run->phase = PHASE_POST;
            run->idx = 0;
            break;
        case PHASE_POST:
            if (run->flags.run_post && (st = run_actions(run, "postAction", need)) != NODE_DONE)
                return st;
            run->phase = PHASE_REDIRECT;
            break;
        case PHASE_REDIRECT:
            if (follow_redirect(run))
                run->phase = PHASE_FETCH;
            else
                end_at_position(run);
            break;
        case PHASE_DONE:
            return NODE_DONE;
        }
    }
}

void node_run_node_loaded(node_run_t *run, json_t *node)
{
    char *t, *n;

    if (run->wait != WAIT_NODE) {
        json_decref(node);
        return;
    }
    run->wait = WAIT_NONE;
    if (!json_is_object(node)) {
        json_decref(node);
        if (run->count == 0) {
            bg_error_set(&run->error, BG_ERR_NO_TREE, "tree or node not found");
            run->failed = 1;
        } else {
            add_error(run, BG_ERR_NO_TREE, "tree or node not found: redirect to %.64s/%.64s",
                      run->tree, run->node_id);
        }
        end_at_position(run);
        return;
    }
    t = strdup(run->tree);
    n = strdup(run->node_id);
    if (t == NULL || n == NULL) {
        free(t);
        free(n);
        json_decref(node);
        add_error(run, BG_ERR_UNAVAILABLE, "out of memory");
        end_at_position(run);
        return;
    }
    free(run->pos_tree);
    free(run->pos_node);
    run->pos_tree = t;
    run->pos_node = n;
    json_decref(run->node);
    run->node = node;
    run->responses = NULL;
    run->transform_started = 0;
    run->count++;
    run->idx = 0;
    run->phase = PHASE_PRE;
}

void node_run_send_done(node_run_t *run, json_t *element)
{
    if (run->wait != WAIT_SEND) {
        json_decref(element);
        return;
    }
    run->wait = WAIT_NONE;
    json_decref(run->pending);
    run->pending = NULL;
    if (element == NULL)
        add_error(run, BG_ERR_PLATFORM, "send failed");
    else
        json_array_append_new(run->results, element);
}

void node_run_webhook_done(node_run_t *run, int ok, json_t *answer)
{
    const char *save_as;
    char path[64 + 256];
    json_t *op;
    bg_error_t e;

    if (run->wait != WAIT_WEBHOOK) {
        json_decref(answer);
        return;
    }
    run->wait = WAIT_NONE;
    save_as = json_string_value(json_object_get(run->pending, "saveAs"));
    if (!ok) {
        add_error(run, BG_ERR_PLATFORM, "%s: webhook failed", run->place);
        json_decref(answer);
    } else if (answer != NULL && save_as != NULL) {
        snprintf(path, sizeof(path), "member.botMeta.tempData.%s", save_as);
        op = json_object();
        json_object_set_new(op, "op", json_string("set"));
        json_object_set_new(op, "path", json_string(path));
        json_object_set_new(op, "value", answer);
        if (record_op(run, op, &e) < 0)
            add_error(run, BG_ERR_MISSING_PARAM, "%s: %s", run->place, e.msg);
    } else {
        json_decref(answer);
    }
    json_decref(run->pending);
    run->pending = NULL;
}

void node_run_http_done(node_run_t *run, long status, const char *body, size_t body_len,
                        const char *content_type, const char *error)
{
    if (run->wait != WAIT_HTTP)
        return;
    run->wait = WAIT_NONE;
    run->code->http_done(run->script, status, body, body_len, content_type, error);
}

int node_run_error(const node_run_t *run, bg_error_t *err)
{
    if (!run->failed)
        return 0;
    if (err != NULL)
        *err = run->error;
    return 1;
}

json_t *node_run_results(node_run_t *run)
{
    return json_incref(run->results);
}

int node_run_ok(const node_run_t *run)
{
    const json_t *el;
    size_t i;

    json_array_foreach(run->results, i, el) {
        const json_t *ok = json_object_get(el, "ok");
        if (!(json_is_integer(ok) && json_integer_value(ok) == 1) && !json_is_true(ok))
            return 0;
    }
    return 1;
}

const json_t *node_run_delta(const node_run_t *run)
{
    return run->delta;
}

const json_t *node_run_member(const node_run_t *run)
{
    return run->member;
}
