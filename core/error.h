/* error.h - botgate's error model: the err_codes of the interface and a small error value. */
#ifndef BOTGATE_CORE_ERROR_H
#define BOTGATE_CORE_ERROR_H

#include <jansson.h>

/* err_code values. 100-113 come from interface.md, 114-129 are botgate's extensions
 * (contract.md section 5, docs/api.md). */
enum {
    BG_OK = 0,
    BG_ERR_PHONE_INVALID = 100,     /* whatsapp kinds: the number has no account */
    BG_ERR_RECIPIENT_INVALID = 104, /* recipient invalid, or the channel's credential is */
    BG_ERR_MISSING_PARAM = 108,     /* parameter missing or of the wrong type */
    BG_ERR_NO_CHANNEL = 112,        /* no such channel (or not visible to this token) */
    BG_ERR_PLATFORM = 113,          /* platform server error or unreachable */
    BG_ERR_NO_MEMBER = 114,         /* memberId unknown in this channel */
    BG_ERR_NO_TREE = 115,           /* tree or node not found */
    BG_ERR_CHANNEL_OFF = 116,       /* channel is not live */
    BG_ERR_UNSUPPORTED = 117,       /* channel type or response type not supported */
    BG_ERR_LIMIT = 118,             /* over a limit */
    BG_ERR_STORE = 119,             /* Redis down or timed out */
    BG_ERR_RATE_LIMITED = 120,      /* the platform rate-limited the send */
    BG_ERR_UNAVAILABLE = 121,       /* botgate cannot take it now: shutting down, out of memory */
    BG_ERR_NO_ROUTE = 122,          /* no such endpoint, or not with this method */
    BG_ERR_IDEM_RUNNING = 123,      /* a request with this Idempotency-Key is still running */
    BG_ERR_IDEM_MISMATCH = 124,     /* the Idempotency-Key was used for another request */
    BG_ERR_OUTCOME_UNKNOWN = 125,   /* an earlier attempt may have delivered this response */
    BG_ERR_SCRIPT = 126,            /* node code failed: a Lua error, or over a limit */
    BG_ERR_WINDOW = 127,            /* outside the member's conversation window (core/window.h) */
    BG_ERR_EXPIRED = 128,           /* queued (Prefer: respond-async) past the outbox's TTL */
    BG_ERR_NOT_FOUND = 129,         /* no such queued request for this app */
    BG_ERR_SIGNATURE = 130,         /* a webhook's signature or token is missing or wrong */
    BG_ERR_INTERNAL = BG_ERR_UNAVAILABLE, /* older name */
    /* Not an err_code on the wire: "User is not authorized" answers carry none. */
    BG_ERR_UNAUTHORIZED = -1,
};

#define BG_ERROR_MSG_MAX 256

/* An error value: filled by the function that fails, turned into an answer by the route. */
typedef struct bg_error {
    int code;        /* one of the values above; BG_OK when no error */
    int http_status; /* 500 unless a limit asks for another (413) */
    char msg[BG_ERROR_MSG_MAX];
} bg_error_t;

/* Sets code and a printf-formatted message; http_status becomes 500. Returns -1 so that
 * callers can write `return bg_error_set(err, ...)`. */
int bg_error_set(bg_error_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void bg_error_clear(bg_error_t *err);

/* Cuts a trailing UTF-8 sequence that truncation left incomplete, so the text stays valid. */
void bg_utf8_trim(char *s);

/* Drops a sequence cut at the end (bg_utf8_trim), then replaces every other byte that is not
 * part of a valid UTF-8 sequence with '?': messages built with
 * "%.40s" from a caller's text may cut a character anywhere, and an answer's message must
 * stay a valid JSON string. bg_error_set() and adapter_fail() apply it. */
void bg_utf8_sanitize(char *s);

/* The JSON body of a failure answer: {"ok":0,"err_code":N,"err":msg,"error":msg}
 * (no err_code for BG_ERR_UNAUTHORIZED, as interface.md shows). New reference. */
json_t *bg_error_to_json(const bg_error_t *err);

/* The element-level error object {"err_code":N,"err":msg}. New reference. */
json_t *bg_error_element_json(const bg_error_t *err);

#endif
