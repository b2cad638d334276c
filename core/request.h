/* request.h - parsing and validating request bodies: everything checked before any I/O. */
#ifndef BOTGATE_CORE_REQUEST_H
#define BOTGATE_CORE_REQUEST_H

#include "error.h"

#include <jansson.h>
#include <stddef.h>

#define REQUEST_MAX_BODY      (1024 * 1024) /* bytes; over it: HTTP 413, err_code 118 */
#define REQUEST_MAX_RESPONSES 50            /* responses per request */
#define REQUEST_MAX_STRING    (64 * 1024)   /* bytes in any one string of the body */
#define REQUEST_MAX_DEPTH     64            /* nesting of the body */
#define REQUEST_MAX_ID        256           /* bytes in channelId, memberId, tree, node */
/* bytes in recipientId: it becomes the member's address, and a platform call carries at most
 * ADAPTER_ID_MAX - 1 bytes of it (gateway/op.c checks the two agree). Over it: 108. */
#define REQUEST_MAX_RECIPIENT 191
/* bytes of a POST /broadcasts body (contract.md section 13 allows 1,000,000 recipients, more
 * than REQUEST_MAX_BODY carries): a million ids of REQUEST_MAX_ID bytes, each with its quotes
 * and comma, and REQUEST_MAX_BODY for the rest. Over it: HTTP 413, err_code 118. */
#define REQUEST_MAX_BROADCAST_BODY ((size_t)1000000 * (REQUEST_MAX_ID + 3) + REQUEST_MAX_BODY)

/* Who a request is about. Every pointer is borrowed from the parsed body. */
typedef struct request_target {
    const char *channel_id;
    const char *member_id;    /* NULL when absent */
    const char *recipient_id; /* NULL when absent or null */
} request_target_t;

/* POST /sendResponses. root owns everything; request_send_free() releases it. */
typedef struct send_request {
    json_t *root;
    request_target_t target;
    const json_t *responses; /* array of 1..REQUEST_MAX_RESPONSES validated response objects */
} send_request_t;

/* POST /redirectMemberToNode. */
typedef struct redirect_request {
    json_t *root;
    request_target_t target;
    const char *tree;
    const char *node_id;
    /* each 1 or 0, 1 by default (chars: the redirect's part of an op has room for the outbox's
     * pointer beside them, gateway/op.h) */
    unsigned char run_pre, send_response, run_post;
    const json_t *meta; /* the request's meta object, or an empty object */
} redirect_request_t;

/* Parses a body that must be one JSON object within the limits above (108 / 118). */
int request_parse_json(const char *body, size_t len, json_t **out, bg_error_t *err);

int request_parse_send(const char *body, size_t len, send_request_t *out, bg_error_t *err);
void request_send_free(send_request_t *req);

int request_parse_redirect(const char *body, size_t len, redirect_request_t *out, bg_error_t *err);
void request_redirect_free(redirect_request_t *req);

/* Response objects (contract.md section 11): limits every platform shares. A platform's own
 * (whatsapp's 3 quick replies...) are its adapter's (adapter_check_response). */
#define REQUEST_MAX_QUICK_REPLIES 13
#define REQUEST_MAX_TITLE         20   /* characters: quick reply and button titles, LIST button */
#define REQUEST_MAX_PAYLOAD       1000 /* characters of a postback payload */
#define REQUEST_MAX_BUTTONS       3
#define REQUEST_MAX_CARDS         10
#define REQUEST_MAX_CARD_TITLE    80 /* characters of a card's title and subtitle */
#define REQUEST_MAX_SECTIONS      10
#define REQUEST_MAX_ROWS          10  /* rows of a LIST, in all its sections */
#define REQUEST_MAX_ROW_TITLE     24  /* characters of a LIST section title */
#define REQUEST_MAX_ROW_ID        200 /* characters of a LIST row id */
#define REQUEST_MAX_PHONE         32
#define REQUEST_MAX_FILENAME      240
#define REQUEST_MAX_STICKER       64
#define REQUEST_WHERE_MAX         400 /* "nodes.<id>.responseByLocale.fr[3].sections[3].rows[2]" */

/* 1 when tag is one of the Messenger message tags a response's messageTag may name
 * (contract.md section 14): ACCOUNT_UPDATE, CONFIRMED_EVENT_UPDATE, POST_PURCHASE_UPDATE,
 * HUMAN_AGENT. */
int request_message_tag_ok(const char *tag);

/* Strings holding "{{" are a tree's templates: checked when rendered, not as stored. */
#define REQUEST_CHECK_TEMPLATED 1u

/* Checks one response object of any type of contract.md section 11, and its fallback; where
 * names it in messages ("response[2]"). A member the type does not have, a missing or mistyped
 * one: 108 naming it; over a limit: 118; unknown type: 117. */
int request_check_response(const json_t *resp, const char *where, bg_error_t *err);
int request_check_response_flags(const json_t *resp, const char *where, unsigned flags,
                                 bg_error_t *err);

/* The members of obj named in names (NULL-terminated) into vals, by their index in names (NULL
 * when absent), in one walk of obj: what is read next is not looked up by name again. Returns
 * the first member (in obj's order) that names lacks, NULL when none. */
const char *request_fields(const json_t *obj, const char *const *names, const json_t **vals);

/* 1 when s (valid UTF-8) holds none of the characters an id may not contain: C0 controls and
 * DEL, C1 controls (U+0080-U+009F), U+2028, U+2029, '{' and '}' (they would end a Redis key's
 * hash tag). Every id that goes into a key is checked with it: a request's, a tree's. */
int request_id_chars_ok(const char *s);

/* Removes '+', '-', '(', ')' and spaces from a phone number (contract.md section 5). */
void request_normalize_phone(const char *in, char *out, size_t size);

#endif
