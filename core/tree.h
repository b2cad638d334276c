/* tree.h - checking a tree file before `botgatectl tree import` stores it (contract.md 3, 6).
 *
 * The file: {"_id":"T1","app":"A1","name":"Orders","nodes":{"N1":{node},"N2":{node}}}. */
#ifndef BOTGATE_CORE_TREE_H
#define BOTGATE_CORE_TREE_H

#include "error.h"
#include "nodecode.h"

#include <jansson.h>

#define TREE_ID_MAX              256   /* bytes in an id or a key (tree, app, node, locale) */
#define TREE_MAX_RESPONSES       50    /* elements of one response list (as in one request) */
#define TREE_WEBHOOK_TIMEOUT_MAX 30000 /* ms */

/* 0 when the tree is well formed, else -1 with err naming the place
 * ("nodes.N1.preAction[0].path must be a string"). err_code 108, except 117 for an action of
 * an unknown type and 118 for a response list longer than TREE_MAX_RESPONSES.
 * Checks: _id and app ids, name a string, nodes a non-empty object whose keys are ids other
 * than "_tree" (the hash field of the tree's own record); each node an object where present:
 * name a string; preAction / postAction arrays of actions; response an array of responses;
 * responseByLocale an object of such arrays keyed by locale ids; redirect null or an object
 * with tree and nodeCompositeId ids and runPreAction / sendResponse / runPostAction booleans
 * (or null) when present; transform null or Lua code, and the code of every script action,
 * compiled by runner (126 naming the place and line: "nodes.N1.transform:3: ..."; without a
 * runner only checked to be a string). Other members of a node are let through.
 * Ids: non-empty, at most TREE_ID_MAX bytes, none of the characters request ids refuse
 * (request_id_chars_ok: controls, U+2028, U+2029, braces). */
int tree_validate(const json_t *tree, const nodecode_t *runner, bg_error_t *err);

/* One action ({"type":..}) of a node; where names it in messages ("nodes.N1.preAction[0]"). */
int tree_check_action(const json_t *action, const char *where, const nodecode_t *runner,
                      bg_error_t *err);

/* One response of a node: any type of contract.md section 11, checked as a sent response is
 * (request_check_response), but that a string holding "{{" is checked once rendered. Whether
 * the channel's platform has the type is the gateway's check, when it is sent. */
int tree_check_response(const json_t *resp, const char *where, bg_error_t *err);

/* 1 when s is an id: non-empty, at most TREE_ID_MAX bytes, request_id_chars_ok. */
int tree_id_ok(const char *s);

/* The value of the tree hash's _tree field: {"app":..,"name":..}. New reference; NULL when
 * tree is not an object. */
json_t *tree_meta_json(const json_t *tree);

#endif
