/* adapter.h - the table every platform fills: build the platform request for one step of a
 * send, parse the platform's answer. Adapters are pure: no sockets, no clock (now is passed in),
 * no Redis. The gateway runs the calls they build through the upstream client. */
#ifndef BOTGATE_ADAPTERS_ADAPTER_H
#define BOTGATE_ADAPTERS_ADAPTER_H

#include "../core/error.h"
#include "../json/jsonw.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Response types (bits of adapter_ops_t.response_types). */
enum {
    ADAPTER_TEXT = 1u << 0,
    ADAPTER_IMAGE = 1u << 1,
    ADAPTER_TEMPLATE = 1u << 2,
    ADAPTER_VIDEO = 1u << 3,
    ADAPTER_AUDIO = 1u << 4,
    ADAPTER_FILE = 1u << 5,
    ADAPTER_STICKER = 1u << 6,
    ADAPTER_LOCATION = 1u << 7,
    ADAPTER_BUTTON = 1u << 8,
    ADAPTER_CAROUSEL = 1u << 9,
    ADAPTER_LIST = 1u << 10,
    ADAPTER_NATIVE = 1u << 11,
};
/* The media types a platform that sends media by upload (media_by_upload) uploads first. */
#define ADAPTER_UPLOADED (ADAPTER_IMAGE | ADAPTER_VIDEO | ADAPTER_AUDIO)

/* What a platform answer means for botgate. */
typedef enum {
    ADAPTER_OK = 0,
    ADAPTER_RECIPIENT_INVALID, /* the user does not exist or cannot receive: 100 or 104 */
    ADAPTER_AUTH_INVALID,      /* the channel's credential is refused or missing: 104 */
    ADAPTER_AUTH_EXPIRED,      /* refresh the credential once, then retry the call once */
    ADAPTER_RATE_LIMITED,      /* 120; retry_after_s tells when, if the platform said */
    ADAPTER_SERVER_ERROR,      /* 5xx, temporary failure, garbage answer, unreachable: 113 */
    ADAPTER_REJECTED,          /* the platform refused the message for another reason: 113 */
    ADAPTER_UNSUPPORTED,       /* the response type does not exist on this platform: 117 */
    ADAPTER_WINDOW_CLOSED,     /* outside the member's conversation window (whatsapp 470, cloud
                                * 131047, facebook 10/2018278, wechat 45015): 127 */
} adapter_status_t;

#define ADAPTER_MAX_HEADERS 6
/* The header line of a JSON body (adapter_set_json_body): net/netcurl.c recognises it to use its
 * shared header list. */
#define ADAPTER_JSON_HEADER "Content-Type: application/json"
#define ADAPTER_ID_MAX      192
#define ADAPTER_ERROR_MAX   200

/* One HTTP call to make. Owns every string in it; adapter_call_free() releases them. */
typedef struct adapter_call {
    const char *method;                     /* "GET" or "POST" (static string) */
    char *url;                              /* absolute URL, query already encoded */
    char *headers[ADAPTER_MAX_HEADERS + 1]; /* "Name: value" lines, NULL-terminated */
    char *body;                             /* NULL for none */
    size_t body_len;
} adapter_call_t;

/* The platform's answer, as the upstream client received it. Borrowed. */
typedef struct adapter_answer {
    long status;      /* HTTP status; 0 when no answer arrived */
    const char *body; /* NUL-terminated copy of the body ("" when none) */
    size_t body_len;
    const char *retry_after;  /* Retry-After header value, NULL when absent */
    const char *content_type; /* Content-Type header value, NULL when absent */
} adapter_answer_t;

/* Outcome of building a call or parsing an answer. */
typedef struct adapter_result {
    adapter_status_t status;
    char message_id[ADAPTER_ID_MAX]; /* platform message id; "" when the platform gives none */
    char chat_id[ADAPTER_ID_MAX];    /* conversation id; "" means "the recipient address" */
    char ref[ADAPTER_ID_MAX];        /* check: the platform address (wa_id); upload: media_id */
    json_t *meta;                    /* owned: the platform's own meta object, or NULL */
    long platform_code;              /* the platform's error code, 0 when none */
    int retry_after_s;               /* for ADAPTER_RATE_LIMITED; -1 when unknown */
    int rate_recipient;              /* for ADAPTER_RATE_LIMITED: 1 when the limit that refused
                                      * is the recipient's (the conversation, the pair), not the
                                      * sender's: only that one is paused */
    char error[ADAPTER_ERROR_MAX];   /* short reason for a failure, never a secret */
} adapter_result_t;

/* Who and where a call goes to. Borrowed. */
typedef struct adapter_target {
    const char *base_url; /* the platform's configured base URL (NULL for whatsapp: info.apiPath) */
    const json_t *info;   /* the channel's info object; holds secrets */
    const char *to;       /* the member's address on the platform (wa_id for whatsapp) */
    int64_t now_ms;       /* the current time, for expiry computations */
} adapter_target_t;

/* ---- webhooks in (contract.md section 14) ---- */

#define ADAPTER_HOOK_EVENTS_MAX 100 /* events of one webhook body: more is refused */

/* What a verified webhook body says, in the platform's own words normalised: each event is
 * {"eventType":"INBOUND|POSTBACK|DELIVERED|READ|FAILED","from":"<the member's address on the
 * platform>","id":"<the platform's id of what happened>","timestamp":<ms>,"data":{...},
 * "platform":{...the platform's own object...}}. Owned by whoever called adapter_hook_init;
 * adapter_hook_clear frees it. */
typedef struct adapter_hook {
    json_t *events;  /* array */
    char *challenge; /* a handshake inside the body (slack url_verification), else NULL */
    char error[ADAPTER_ERROR_MAX]; /* why the body was refused, never a secret */
} adapter_hook_t;

void adapter_hook_init(adapter_hook_t *h);
void adapter_hook_clear(adapter_hook_t *h);

typedef struct adapter_ops {
    const char *type;           /* channel type, as in contract.md section 2 */
    const char *api_version;    /* version reported in result.meta */
    const char *from_field;     /* info field that holds the bot's address (messageEvent.from) */
    unsigned response_types;    /* the ADAPTER_<TYPE> bits of the types it sends */
    int recipient_invalid_code; /* err_code for ADAPTER_RECIPIENT_INVALID: 100 or 104 */
    int server_error_aborts;    /* 1: a server error on the first response aborts with 113 */
    int phone_recipients;       /* 1: recipient ids are phone numbers, normalised before use */
    int image_by_upload;        /* 1: media (ADAPTER_UPLOADED) is downloaded and uploaded first
                                 * (build_upload) */
    const char *cred_field;     /* info field of the refreshable credential; NULL when static */
    int message_tags;           /* 1: a response may carry a messageTag (facebook); else 108 */

    /* What this platform refuses of a response of a type it has (response_types), beyond the
     * checks every platform shares (core/request.c): 0, or BG_ERR_UNSUPPORTED (117),
     * BG_ERR_LIMIT (118) or BG_ERR_MISSING_PARAM (108, members that contradict each other)
     * with msg naming the member ("quickReplies has more than 3 items").
     * NULL when it takes every valid response of its types. Called before anything is sent. */
    int (*check)(unsigned kind, const json_t *response, char *msg, size_t size);

    /* The message call for one response. media_id is NULL unless image_by_upload. */
    int (*build_send)(const adapter_target_t *t, const json_t *response, const char *media_id,
                      adapter_call_t *out, adapter_result_t *res);
    void (*parse_send)(const adapter_target_t *t, const adapter_answer_t *a, adapter_result_t *res);

    /* Credential refresh (whatsapp admin login, wechat access token); NULL when the
     * credential is static. parse_cred returns the fields to merge into info (new reference)
     * or NULL with res filled. */
    int (*cred_needs_refresh)(const json_t *info, int64_t now_ms);
    int (*build_cred)(const adapter_target_t *t, adapter_call_t *out, adapter_result_t *res);
    json_t *(*parse_cred)(const adapter_target_t *t, const adapter_answer_t *a,
                          adapter_result_t *res);

    /* Recipient check before the first message (whatsapp contacts); NULL when none. On
     * success res->ref holds the address to send to. t->to is the normalised number. */
    int (*build_check)(const adapter_target_t *t, adapter_call_t *out, adapter_result_t *res);
    void (*parse_check)(const adapter_target_t *t, const adapter_answer_t *a,
                        adapter_result_t *res);

    /* Media upload (image_by_upload); on success res->ref holds the media id. */
    int (*build_upload)(const adapter_target_t *t, const char *data, size_t len,
                        const char *content_type, adapter_call_t *out, adapter_result_t *res);
    void (*parse_upload)(const adapter_target_t *t, const adapter_answer_t *a,
                         adapter_result_t *res);

    /* The events of a webhook body whose signature was verified (content_type as sent, may be
     * NULL): 0 with h->events (possibly empty: a body with nothing botgate reports) or
     * h->challenge, or -1 with h->error naming what is wrong. NULL: the platform has no
     * webhooks. */
    int (*parse_hook)(const char *body, size_t len, const char *content_type, adapter_hook_t *h);
} adapter_ops_t;

/* The adapter for a channel type, NULL when botgate has none (117). */
const adapter_ops_t *adapter_find(const char *type);

/* The response type bit for a response's "type" string, 0 when unknown. */
unsigned adapter_response_type(const char *type);

/* Whether ops can send response (already valid per request_check_response): 0, or 117/118
 * (or 108: a messageTag on a platform without tags) with msg saying why, naming the member. msg may
 * be NULL with size 0: the code alone, the reason not written (it is asked again when it is told).
 */
int adapter_check_response(const adapter_ops_t *ops, const json_t *response, char *msg,
                           size_t size);
/* The err_code a failed status maps to on this platform. */
int adapter_err_code(const adapter_ops_t *ops, adapter_status_t status);

void adapter_result_init(adapter_result_t *res);
void adapter_result_clear(adapter_result_t *res); /* frees meta, then init */
void adapter_call_free(adapter_call_t *call);     /* frees the contents, not the struct */

/* Helpers for the adapter files. */
int adapter_fail(adapter_result_t *res, adapter_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int adapter_add_header(adapter_call_t *call, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets the JSON body (compact) and the Content-Type header; steals body. */
int adapter_set_json_body(adapter_call_t *call, json_t *body);
/* Percent-encodes s for a query string; returns a malloc'd string. */
char *adapter_urlencode(const char *s);
/* A string field of info, NULL when absent, not a string or empty. */
const char *adapter_info_str(const json_t *info, const char *key);
/* Whether the credential info.<field> is missing, or expires (info.<expiry_field>, epoch ms)
 * within margin_ms of now_ms: what a platform's cred_needs_refresh asks. */
int adapter_cred_expiring(const json_t *info, const char *field, const char *expiry_field,
                          int64_t now_ms, int64_t margin_ms);
/* Parses an answer body as JSON (NULL if it is not JSON). New reference. */
json_t *adapter_answer_json(const adapter_answer_t *a);
/* Copies s into a fixed buffer, cutting at a UTF-8 boundary. */
void adapter_copy(char *dst, size_t size, const char *s);
/* "<a>: <b>" (or a alone when b is empty) into a fixed buffer, cut at a UTF-8 boundary: a
 * platform error's title and details. */
void adapter_join(char *dst, size_t size, const char *a, const char *b);

/* The six platform tables (one file each). */
extern const adapter_ops_t adapter_facebook;
extern const adapter_ops_t adapter_whatsapp;
extern const adapter_ops_t adapter_whatsapp_cloud;
extern const adapter_ops_t adapter_slack;
extern const adapter_ops_t adapter_wechat;
extern const adapter_ops_t adapter_teamwork;

/* Like adapter_copy for a text that comes from a platform answer: every occurrence of the info
 * strings named in keys (NULL-terminated, at most ADAPTER_MAX_SECRETS; the channel's secrets),
 * as stored or percent-encoded, is replaced with "***", since platforms echo parameters back. */
#define ADAPTER_MAX_SECRETS 8
void adapter_copy_masked(char *dst, size_t size, const char *s, const json_t *info,
                         const char *const *keys);
/* base (one trailing '/' dropped) followed by the formatted path; malloc'd, NULL when base is
 * NULL or empty. */
char *adapter_url(const char *base, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes out a JSON POST to url with body; steals both (either may be NULL: then it fails).
 * Returns -1 with out freed on failure. */
int adapter_json_post(adapter_call_t *out, char *url, json_t *body);
/* The same with a body already written as text (its writer is emptied). */
int adapter_json_post_text(adapter_call_t *out, char *url, jsonw_t *body);
/* The type bit of a response that ops supports; 0 with res filled (REJECTED when the type is
 * missing, UNSUPPORTED when the platform lacks it). */
unsigned adapter_response_kind(const adapter_ops_t *ops, const json_t *response,
                               adapter_result_t *res);
/* A non-empty string field of a response; NULL with res filled (REJECTED) when missing. */
const char *adapter_response_str(const adapter_ops_t *ops, const json_t *response, const char *key,
                                 adapter_result_t *res);
/* The longest wait a platform's Retry-After may ask for: contract.md section 8's longest pause.
 * A platform that asks for more (a Slack 429 once said 2147483647) gets this. */
#define ADAPTER_RETRY_AFTER_MAX_S 60
/* A Retry-After value (RFC 9110 10.2.3) in whole seconds from now_ms, at most
 * ADAPTER_RETRY_AFTER_MAX_S: delta-seconds, or an HTTP-date in any of its three forms (a date
 * already past is 0). -1 when absent or unreadable, and for a date when now_ms is 0 (no clock). */
int adapter_retry_after(const char *value, int64_t now_ms);
/* Days from 1970-01-01 to the proleptic Gregorian date y-m-d (m 1..12), for the dates that
 * platforms write (an HTTP-date, WhatsApp's expiry). */
int64_t adapter_days_from_civil(int64_t y, int m, int d);
/* What every answer parser does last: a rate-limit result takes the answer's Retry-After, unless
 * the platform's own parser read it already. */
void adapter_rate_wait(const adapter_target_t *t, const adapter_answer_t *a, adapter_result_t *res);
/* ops->parse_send, then adapter_rate_wait: how the gateway reads a message call's answer, so
 * that no platform can forget the header. */
void adapter_parse_send(const adapter_ops_t *ops, const adapter_target_t *t,
                        const adapter_answer_t *a, adapter_result_t *res);

/* A platform error code and what it means; tables end with a code of 0. */
typedef struct adapter_code {
    long code;
    adapter_status_t status;
} adapter_code_t;
/* The status for code in table, dflt when the table does not list it. */
adapter_status_t adapter_code_status(const adapter_code_t *table, long code, adapter_status_t dflt);

/* The Graph API error object (facebook, whatsapp-cloud). Strings are borrowed from the answer. */
typedef struct adapter_graph_error {
    long code;           /* error.code, 0 when absent */
    long subcode;        /* error.error_subcode, 0 when absent */
    const char *message; /* error.message, "" when absent */
    const char *details; /* error.error_data.details (or error_data as a string), "" when absent */
} adapter_graph_error_t;
/* Reads the error object of a Graph answer: 0 when there is one, -1 when not. */
int adapter_graph_error(const json_t *answer, adapter_graph_error_t *err);

/* Helpers for the rich types (adapter.c). */
/* A new copy of a NATIVE response's message object, NULL with res filled when it is missing. */
json_t *adapter_native_message(const adapter_ops_t *ops, const json_t *response,
                               adapter_result_t *res);
/* A string member of a JSON object, NULL when absent or not a string. */
const char *adapter_str(const json_t *obj, const char *key);
/* 1 when every button of the array is of the given type ("postback", "url", "phone"). */
int adapter_buttons_all(const json_t *buttons, const char *type);
/* Characters (not bytes) of a UTF-8 string. */
size_t adapter_chars(const char *s);
/* Sets key to a copy of the string at response.key when there is one. */
void adapter_copy_str(json_t *obj, const char *key, const json_t *response, const char *rkey);
/* msg is "<what> has more than <n> items" etc.: the code for the check op (msg is not written
 * when size is 0). */
int adapter_check_fail(int code, char *msg, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The message body shared by the whatsapp kinds (defined in whatsapp.c): on-premises, or the
 * Cloud API form when cloud is 1 (messaging_product, template language without policy). ns is
 * the optional template namespace. NULL with res filled on failure. */
#define ADAPTER_WHATSAPP_TYPES                                                                     \
    (ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_TEMPLATE | ADAPTER_VIDEO | ADAPTER_AUDIO |             \
     ADAPTER_FILE | ADAPTER_STICKER | ADAPTER_LOCATION | ADAPTER_BUTTON | ADAPTER_LIST |           \
     ADAPTER_NATIVE)
/* The check op of the whatsapp kinds (defined in whatsapp.c). */
int adapter_whatsapp_check(unsigned kind, const json_t *response, char *msg, size_t size);
json_t *adapter_whatsapp_body(const adapter_ops_t *ops, unsigned kind, const json_t *response,
                              const char *to, const char *ns, int cloud, adapter_result_t *res);

/* Helpers of the parse_hook functions (hook.c). */
int adapter_hook_fail(adapter_hook_t *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends an event; data is stolen, platform is borrowed (a reference is taken). -1 with
 * h->error set when from or id is missing or empty, or past ADAPTER_HOOK_EVENTS_MAX. */
int adapter_hook_add(adapter_hook_t *h, const char *type, const char *from, const char *id,
                     int64_t timestamp_ms, json_t *data, json_t *platform);
/* A tap (a quick reply, a button, a list row, a menu): a POSTBACK event whose data is
 * {"payload":..,"title":..} (either null when absent). */
int adapter_hook_tap(adapter_hook_t *h, const char *from, const char *id, int64_t timestamp_ms,
                     const char *payload, const char *title, json_t *platform);
/* A JSON webhook body, strictly: an object, valid UTF-8, no duplicate keys. NULL with h->error
 * set. New reference. */
json_t *adapter_hook_json(const char *body, size_t len, adapter_hook_t *h);
/* The value of name in an application/x-www-form-urlencoded body, decoded; malloc'd, NULL
 * when absent or badly encoded. */
char *adapter_form_value(const char *body, size_t len, const char *name);
/* A platform time as ms: a JSON integer of seconds (or of ms when ms is set), or a string of
 * digits (with a fraction, slack's "1503435956.000247"). -1 when it is none of these. */
int64_t adapter_hook_time(const json_t *v, int ms);
/* The data of an inbound message that is not text: {"type":"<TYPE in capitals>","url":..}
 * (document is FILE; url left out when NULL). New reference. */
json_t *adapter_hook_media(const char *type, const char *url);
/* whatsapp's webhook (on-premises and cloud share its objects). */
int adapter_whatsapp_parse_hook(const char *body, size_t len, const char *content_type,
                                adapter_hook_t *h);

#endif
