/* node.h - running a node and its redirect chain as a pure state machine (contract.md 6).
 *
 * The gateway drives it: it calls node_run_next() and does what the answer asks (fetch a
 * node, send a response, call a webhook), reports the outcome with the matching *_done /
 * *_loaded call, and calls node_run_next() again, until NODE_DONE. Then it answers with
 * node_run_results() / node_run_ok(), or fails the request when node_run_error() is set, and
 * writes node_run_delta() back to the latest member record (member_apply_delta).
 *
 * Every string of a response or an action is rendered (tmpl.h) against the working member, so
 * earlier changes are visible: a set's path and value, the tags, the webhook url (values
 * percent-encoded) and body. A set that is refused or a malformed action adds an error
 * element (108; 117 for an unknown type) and the run goes on.
 *
 * Node code (nodecode.h, run by script/): a {"type":"script","code":".."} action runs as a step of
 * its list; a node's "transform" code runs after the pre-action when the response is sent, and what
 * it returns (an array of responses, or nil for none) is sent instead of response /
 * responseByLocale, as returned (not rendered). A script's member changes are applied when it
 * ends; a script that fails adds an element 126 ("node N1 preAction[0]:3: ..."), changes
 * nothing and the run goes on (a failed transform sends nothing). */
#ifndef BOTGATE_CORE_NODE_H
#define BOTGATE_CORE_NODE_H

#include "error.h"
#include "nodecode.h"

#include <jansson.h>
#include <stdint.h>

#define NODE_CHAIN_MAX           11    /* nodes in one run: the target and 10 redirects */
#define NODE_WEBHOOK_TIMEOUT_MS  3000  /* a webhook action without timeoutMs */
#define NODE_WEBHOOK_TIMEOUT_MAX 30000 /* the largest timeoutMs accepted */

/* Owned by the caller, released with node_run_free(). The run keeps its own copies of the
 * member, the channel (without info) and the agenda meta it was given. */
typedef struct node_run node_run_t;

/* What runs on a node: 1 or 0 each. */
typedef struct node_flags {
    int run_pre, send_response, run_post;
} node_flags_t;

/* A run of tree/node_id with flags (for the target only; nodes reached through a redirect run
 * with the redirect's own flags). member, channel and agenda_meta are borrowed (copied).
 * NULL only when out of memory. */
node_run_t *node_run_new(const json_t *member, const json_t *channel, const json_t *agenda_meta,
                         const char *tree, const char *node_id, node_flags_t flags, int64_t now_ms);

/* What runs the node code (code and ctx borrowed; the caller keeps them alive as long as the
 * run): the gateway gives script/'s Lua sandbox with the worker's compiled scripts. Without
 * it, a script action or transform fails with 126. */
void node_run_set_code(node_run_t *run, const nodecode_t *code, void *ctx);

typedef enum {
    NODE_NEED_NODE,
    NODE_NEED_SEND,
    NODE_NEED_WEBHOOK,
    NODE_NEED_HTTP,
    NODE_DONE
} node_step_t;

/* What node_run_next() asks for. Every pointer is borrowed from the run and stays valid until
 * the matching *_done / *_loaded call (or node_run_free()). Fields that do not belong to the
 * step are NULL. */
typedef struct node_need {
    const char *tree, *node_id; /* NEED_NODE: fetch this node (NULL from the store: not found;
                                   a node of a tree of another app counts as not found) */
    const json_t *response;     /* NEED_SEND: the rendered response to send */
    const json_t *webhook;      /* NEED_WEBHOOK: {"url","method","body","timeoutMs","saveAs"}
                                   rendered; body and saveAs may be null; the url is http(s)
                                   but its address is not checked (the SSRF guard is the
                                   caller's) */
    const json_t *http;         /* NEED_HTTP: a script's http.request (nodecode_t http) */
} node_need_t;

/* Moves the run on as far as it can go without the caller and says what it needs. Asking
 * again before reporting the outcome repeats the same need. */
node_step_t node_run_next(node_run_t *run, node_need_t *need);

/* The node asked for by NEED_NODE (stolen); NULL (or anything that is not an object) when it
 * was not found. */
void node_run_node_loaded(node_run_t *run, json_t *node);

/* The result element of the response asked for by NEED_SEND (stolen): {"ok":1,
 * "messageEvent":{..}} or {"ok":0,..,"error":{..}} (result_node_element). NULL counts as a
 * failed send (err_code 113). */
void node_run_send_done(node_run_t *run, json_t *element);

/* The outcome of the webhook asked for by NEED_WEBHOOK: ok 1 when it answered with success,
 * answer its parsed JSON answer or NULL (stolen). With ok, an answer and a saveAs, the answer
 * is saved at member.botMeta.tempData.<saveAs>; without ok an error element 113 is added. */
void node_run_webhook_done(node_run_t *run, int ok, json_t *answer);

/* The answer to the http.request asked for by NEED_HTTP (nodecode_t http_done: status 0 and
 * error when none arrived). The script resumes on the next node_run_next(). */
void node_run_http_done(node_run_t *run, long status, const char *body, size_t body_len,
                        const char *content_type, const char *error);

/* After NODE_DONE: nonzero when the whole request fails (the target node was not found: 115,
 * "tree or node not found"); err (may be NULL) is filled then. */
int node_run_error(const node_run_t *run, bg_error_t *err);

/* The sendResult.result array: one element per response sent and one per action or redirect
 * that failed, in the order they happened. New reference. */
json_t *node_run_results(node_run_t *run);

/* 1 when no element failed (also when there is none). */
int node_run_ok(const node_run_t *run);

/* The member delta (member.h), its position op last. Borrowed; empty when the target was
 * not found. */
const json_t *node_run_delta(const node_run_t *run);

/* The run's working copy of the member with every change made (position and updatedAt
 * included after NODE_DONE). Borrowed. */
const json_t *node_run_member(const node_run_t *run);

void node_run_free(node_run_t *run);

#endif
