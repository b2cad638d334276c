/* result.h - the result elements of both operations and the success answer (contract.md 5). */
#ifndef BOTGATE_CORE_RESULT_H
#define BOTGATE_CORE_RESULT_H

#include "error.h"
#include "../json/jsonw.h"

#include <jansson.h>
#include <stdint.h>

/* An address on a platform: a JSON number when it is all digits and at most 15 long (so it
 * survives a double), else a string; null for NULL. New reference. */
json_t *result_address(const char *addr);

/* messageEvent: {from, to, data, type, timestamp[, messageId]}. data is the response without
 * its "type". message_id NULL leaves messageId out. New reference. */
json_t *result_message_event(const char *from, const char *to, const json_t *response,
                             int64_t timestamp_ms, const char *message_id);

/* What a messageEvent says. Borrowed. */
typedef struct result_event {
    const char *from, *to;
    const json_t *response; /* or NULL, and the two below, written by result_write_data */
    const char *type, *data;
    int64_t timestamp_ms;
    const char *message_id; /* NULL: no messageId */
} result_event_t;

/* The messageEvent's data of a response: the response without its "type", in its own order,
 * as JSON text (a response's text kept while its platform call is out, instead of it). */
void result_write_data(jsonw_t *w, const json_t *response);

/* sendResponses elements are written as text (jsonw.h): the hot path of the busiest
 * operation. A delivered response: meta is the platform's own meta object or NULL for
 * {"api_status":"stable","version":api_version}. */
void result_write_sent(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                       const json_t *meta, const char *api_version);
/* A failed response. */
void result_write_failed(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                         const bg_error_t *err);
/* The same with "retryAfterMs" in its error object when retry_after_ms > 0 (a rate limit's
 * 120: the slot the element would have had). */
void result_write_failed_after(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                               const bg_error_t *err, int64_t retry_after_ms);
/* The success answer around elements, the comma-separated element texts. */
void result_write_answer(jsonw_t *w, const char *member_id, int send_ok, const char *elements,
                         size_t len);

/* The failure answer of a request cut short after it started sending (err_code 121 when
 * botgate shut down): {"ok":0,"err_code":..,"err":..,"error":..} with the success answer's
 * "member" and "sendResult" (ok 0) beside them, so that it says which responses went out. */
void result_write_cut_answer(jsonw_t *w, const bg_error_t *err, const char *member_id,
                             const char *elements, size_t len);

/* A redirectMemberToNode element: {"ok":1,"messageEvent":..} or {"ok":0,..,"error":..}.
 * Steals event (may be NULL); err NULL means success. */
json_t *result_node_element(json_t *event, const bg_error_t *err);
/* The same with "retryAfterMs" in its error object when retry_after_ms > 0. */
json_t *result_node_element_after(json_t *event, const bg_error_t *err, int64_t retry_after_ms);

/* The success answer of both operations. Steals results. */
json_t *result_answer(const char *member_id, int send_ok, json_t *results);

#endif
