/* result.h - the result elements of both operations and the success answer (contract.md 5). */
#ifndef BOTGATE_CORE_RESULT_H
#define BOTGATE_CORE_RESULT_H

#include "error.h"

#include <jansson.h>
#include <stdint.h>

/* An address on a platform: a JSON number when it is all digits and at most 15 long (so it
 * survives a double), else a string; null for NULL. New reference. */
json_t *result_address(const char *addr);

/* messageEvent: {from, to, data, type, timestamp[, messageId]}. data is the response without
 * its "type". message_id NULL leaves messageId out. New reference. */
json_t *result_message_event(const char *from, const char *to, const json_t *response,
                             int64_t timestamp_ms, const char *message_id);

/* A sendResponses element for a delivered response. meta is the platform's own meta object or
 * NULL for {"api_status":"stable","version":api_version}. Steals event; borrows meta. */
json_t *result_send_element(const char *message_id, const char *chat_id, const json_t *meta,
                            const char *api_version, json_t *event);

/* A sendResponses element for a failed response. Steals event. */
json_t *result_send_failed(const char *chat_id, json_t *event, const bg_error_t *err);

/* A redirectMemberToNode element: {"ok":1,"messageEvent":..} or {"ok":0,..,"error":..}.
 * Steals event (may be NULL); err NULL means success. */
json_t *result_node_element(json_t *event, const bg_error_t *err);

/* The success answer of both operations. Steals results. */
json_t *result_answer(const char *member_id, int send_ok, json_t *results);

#endif
