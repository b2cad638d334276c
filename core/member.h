/* member.h - the member record (contract.md section 3) and the deltas that change it.
 *
 * A node run does not write the member it read: it records what it changed as a delta, a JSON
 * array of operations that the gateway applies to the latest stored record inside its
 * compare-and-set loop, so that concurrent runs on one member keep each other's changes:
 *   {"op":"set","path":"member.meta.a.b","value":V}
 *   {"op":"addTags","tags":["a","b"]}
 *   {"op":"removeTags","tags":["a"]}
 *   {"op":"position","tree":"T1","node":"N1"}
 */
#ifndef BOTGATE_CORE_MEMBER_H
#define BOTGATE_CORE_MEMBER_H

#include "error.h"

#include <jansson.h>
#include <stdint.h>

#define MEMBER_PATH_MAX   256 /* bytes in a set path */
#define MEMBER_PATH_DEPTH 16  /* segments below member.meta / member.botMeta.tempData */

/* 1 when a set may write path: "member.meta.<k>[.<k>...]", "member.botMeta.tempData.<k>[...]"
 * (non-empty segments, at most MEMBER_PATH_DEPTH of them, at most MEMBER_PATH_MAX bytes), or
 * exactly "member.botMeta.subscribed", "member.customLocale", "member.firstName",
 * "member.lastName". The value's type is not checked here. */
int member_path_allowed(const char *path);

/* 1 when path starts with one of the allowed prefixes or is one of the exact paths: the check
 * of a path that may still hold {{placeholders}} (tree import). */
int member_path_prefix_allowed(const char *path);

/* Sets the value at path in member (value is borrowed: member gets a deep copy). Intermediate
 * objects under meta / tempData are created, and an intermediate that is not an object is
 * replaced by one. subscribed takes a boolean (or the text "true" / "false", what a template
 * renders); customLocale a string or null; firstName and lastName a string. Anything else:
 * -1 with BG_ERR_MISSING_PARAM and a message naming the path; member is then unchanged. */
int member_apply_set(json_t *member, const char *path, json_t *value, bg_error_t *err);

/* Applies one delta operation in place (the op is borrowed). The op is checked before anything
 * is changed, so on error (-1, BG_ERR_MISSING_PARAM) member is unchanged. updatedAt is not
 * touched. */
int member_apply_op(json_t *member, const json_t *op, bg_error_t *err);

/* Applies the operations of delta in order and sets updatedAt to now_ms. addTags appends the
 * tags not yet present (in order, no duplicates, empty strings skipped); removeTags removes
 * every equal tag; position sets botMeta.tree and botMeta.nodeCompositeId. A record missing
 * botMeta, tags or meta gets them. All or nothing: on error (-1, BG_ERR_MISSING_PARAM, a
 * malformed op or a refused set) member is left unchanged. */
int member_apply_delta(json_t *member, const json_t *delta, int64_t now_ms, bg_error_t *err);

/* member_apply_delta in the shape of store.h's store_mutate_fn (change is the delta), without
 * the all-or-nothing copy: on -1 record may be half changed, and the caller discards it. */
int member_mutate(json_t *record, const json_t *change, int64_t now_ms);

/* In the shape of store.h's store_mutate_fn: change is {"lastInboundAt":<ms>}, when the member
 * last wrote (a webhook's inbound message or tap); the later of it and the stored one (read as
 * window_last_inbound reads it) is kept, so that webhooks that arrive out of order never move
 * it back. -1 when change has none. */
int member_mark_inbound(json_t *record, const json_t *change, int64_t now_ms);

/* A new member record with every field of contract.md section 3; NULL strings become "".
 * New reference. */
json_t *member_new(const char *id, const char *channel_id, const char *app, const char *external_id,
                   const char *platform, int64_t now_ms);

#endif
