/* broadcast_ids.h - the ids of a POST /broadcasts body larger than REQUEST_MAX_BODY (up to a
 * million, tens of MB): the body is checked in steps of the loop where it was received, and its
 * recipients.memberIds or recipientIds are read from it again a slice at a time while they are
 * accepted (broadcast.c); no value per id is built, and the body is never copied whole. */
#ifndef BOTGATE_GATEWAY_BROADCAST_IDS_H
#define BOTGATE_GATEWAY_BROADCAST_IDS_H

#include "../core/error.h"
#include "../core/idem.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct evbuffer;

#define BC_IDS_STEP (256 * 1024) /* bytes checked in one turn of the loop */

typedef struct bc_ids bc_ids_t;

/* The check ended: root is the body with the ids' array written "[]" (owned by the callee)
 * when it is valid JSON within the limits, else NULL and err says why (108, or 413/118 when
 * the body but the ids is over REQUEST_MAX_BODY). */
typedef void bc_ids_checked_fn(void *arg, json_t *root, const bg_error_t *err);

/* Checks body (borrowed: it must stay unchanged until bc_ids_free) in steps of BC_IDS_STEP
 * bytes, each in a turn of base's loop; with route, also the request's fingerprint
 * (idem_fingerprint of route and the body). fn is called from the loop, never from here. NULL
 * when out of memory. */
bc_ids_t *bc_ids_check(struct event_base *base, struct evbuffer *body, const char *route,
                       bc_ids_checked_fn *fn, void *arg);
void bc_ids_free(bc_ids_t *b); /* stops a check in flight: fn is not called */

/* After the check: the ids' parameter name ("memberIds", "recipientIds"), their count, and
 * the fingerprint ("" without a route). */
const char *bc_ids_name(const bc_ids_t *b);
size_t bc_ids_body_bytes(const bc_ids_t *b); /* the body's bytes (any time) */
size_t bc_ids_count(const bc_ids_t *b);
const char *bc_ids_fingerprint(const bc_ids_t *b);
/* The longest step of the check, and the steps, for the log. */
int64_t bc_ids_longest_step_us(const bc_ids_t *b);
unsigned bc_ids_steps(const bc_ids_t *b);

/* The check of the ids as check_body makes it of a small body's: non-empty, at most most_ids,
 * each a non-empty string of at most max bytes with request_id_chars_ok characters; -1 with
 * err naming the first one that is not (recipients.<name>[i]). */
int bc_ids_verdict(const bc_ids_t *b, size_t most_ids, size_t max, bg_error_t *err);

/* The next ids (at most n, SLICE_MAX at most) into ids, in the body's order, valid until the
 * next call: returns how many (0 at the end), -1 when out of memory. */
#define BC_IDS_SLICE_MAX 4096
int bc_ids_next(bc_ids_t *b, const char **ids, size_t n);

#endif
