/* Shared types of the platform simulator (botgate-sim): endpoints, calls, replies, faults. */
#ifndef BOTGATE_SIM_H
#define BOTGATE_SIM_H

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_BODY    (64 * 1024 * 1024)
#define SIM_MAX_HEADERS (64 * 1024)
#define SIM_LOG_PAGE    10000            /* most entries one GET /_sim/log returns */
#define SIM_MAX_DELAY   (10 * 60 * 1000) /* ms; caps slow<N>, hook/slow and latency */

typedef enum {
    SIM_PLATFORM_FACEBOOK,
    SIM_PLATFORM_WHATSAPP,
    SIM_PLATFORM_WHATSAPP_CLOUD,
    SIM_PLATFORM_SLACK,
    SIM_PLATFORM_WECHAT,
    SIM_PLATFORM_TEAMWORK,
    SIM_PLATFORM_HOOK,
    SIM_PLATFORM_COUNT,
    SIM_PLATFORM_NONE = SIM_PLATFORM_COUNT /* media and control: never recorded */
} sim_platform_t;

typedef enum {
    SIM_KIND_MESSAGES,
    SIM_KIND_LOGIN,
    SIM_KIND_CONTACTS,
    SIM_KIND_TOKEN,
    SIM_KIND_UPLOAD,
    SIM_KIND_SEND,
    SIM_KIND_WEBHOOK,
    SIM_KIND_COUNT,
    SIM_KIND_NONE = SIM_KIND_COUNT
} sim_kind_t;

const char *sim_platform_name(sim_platform_t p);
const char *sim_kind_name(sim_kind_t k);

/* ---- faults (faults.c) ---- */

/* In check order: the first word found wins. */
typedef enum {
    SIM_FAULT_NONE,
    SIM_FAULT_INVALID,
    SIM_FAULT_BADTOKEN,
    SIM_FAULT_FAIL5XX,
    SIM_FAULT_RATELIMIT,
    SIM_FAULT_TIMEOUT,
    SIM_FAULT_GARBAGE,
    SIM_FAULT_TRUNCATED,
    SIM_FAULT_RESET,
    SIM_FAULT_MIDRESET,
    SIM_FAULT_HUGE,
    SIM_FAULT_SLOW,
} sim_fault_kind_t;

typedef struct {
    sim_fault_kind_t kind;
    int slow_ms;       /* SIM_FAULT_SLOW: the N of slow<N> */
    int ratelimit_613; /* SIM_FAULT_RATELIMIT spelled ratelimit613 */
    /* SIM_FAULT_RATELIMIT spelled ratelimitafter<N> (N seconds) or ratelimitdate<N> (an HTTP-date
     * N seconds ahead): the Retry-After of a 429; "" for the platform's usual refusal */
    char retry_after[40];
    char word[40]; /* as found, for the record ("slow1500") */
} sim_fault_t;

/* ---- replies ---- */

typedef enum {
    SIM_ACT_ANSWER,   /* send the reply (after delay_ms) */
    SIM_ACT_HOLD,     /* never answer; freed when the client leaves or at shutdown */
    SIM_ACT_RESET,    /* close the connection without an answer (after delay_ms) */
    SIM_ACT_MIDRESET, /* send the headers and half the body (after delay_ms), then reset */
} sim_action_t;

/* What to answer. Owned by whoever holds it: the handler fills it, the server sends it now or
 * moves it into a pending request; sim_reply_clear() frees it. */
typedef struct {
    int status;
    const char *content_type; /* static string; NULL = application/json (evhttp default) */
    char retry_after[40];     /* "" = none */
    char *location;           /* heap, for redirects, or NULL */
    struct evbuffer *body;    /* NULL = empty */
    sim_action_t action;
    int delay_ms;
} sim_reply_t;

void sim_fault_find(sim_fault_t *f, const char *const *texts, size_t n);
int sim_fault_is_error(const sim_fault_t *f); /* answered in the platform's error shape */
void sim_fault_apply(const sim_fault_t *f, sim_reply_t *r);

/* ---- platform rate limits (limits.c) ---- */

typedef enum { SIM_LIMIT_NONE, SIM_LIMIT_SENDER, SIM_LIMIT_PAIR } sim_limit_hit_t;

/* Replaces the rules with body's {"rules":[...]}; -1 with a message in err when invalid. */
int sim_limits_configure(json_t *body, char *err, size_t errlen);
json_t *sim_limits_get(void); /* the rules and the counts of sends passed and refused */
void sim_limits_reset(void);  /* forgets every limit's state and the counts, keeps the rules */
void sim_limits_free(void);
/* A send of platform from sender to recipient (NULL: no pair limit) arriving at now_us: counted
 * and SIM_LIMIT_NONE when the rules let it through, else the limit that refuses it and, in
 * *retry_ms, when it would have gone. */
sim_limit_hit_t sim_limits_check(sim_platform_t p, const char *sender, const char *recipient,
                                 int64_t now_us, int64_t *retry_ms);

/* ---- conversation windows (windows.c) ---- */

/* Sets one user's window closed or open from body's {"platform","recipient","closed"}; -1 with
 * a message in err when invalid. */
int sim_windows_configure(json_t *body, char *err, size_t errlen);
json_t *sim_windows_get(void); /* {"closed":[{"platform","recipient"}...]} */
void sim_windows_reset(void);  /* every window open again */
void sim_windows_free(void);
/* 1 when recipient's window on platform is closed: the platform refuses what it refuses
 * outside the window (sim_window_refused in platforms.c). */
int sim_window_closed(sim_platform_t p, const char *recipient);
/* The user wrote: the window is open again (an inbound message the simulator sends). */
void sim_window_open(sim_platform_t p, const char *recipient);

/* ---- one incoming request as handlers see it (built by server.c) ---- */

typedef struct {
    struct evhttp_request *req;
    const char *method;       /* "GET" / "POST" */
    const char *path;         /* without the query */
    const char *query;        /* raw query or NULL */
    const char *auth;         /* Authorization, else x-api-key, else NULL */
    const unsigned char *raw; /* the body bytes (contiguous) */
    size_t raw_len;
    json_t *body;            /* parsed JSON body (endpoints with SIM_EP_JSON), or NULL; owned */
    struct evkeyvalq params; /* decoded query, parsed on first sim_call_param() */
    int params_parsed;
    /* filled by the handler, for the record */
    sim_platform_t platform; /* from the endpoint; the Graph route tells facebook from cloud */
    sim_kind_t kind;
    const char *recipient; /* points into body or params */
    sim_fault_t fault;
    json_t *record_body;   /* replaces body in the record (uploads); owned */
    int64_t ts_us;         /* arrival, wall clock */
    sim_limit_hit_t limit; /* refused by a rate limit (sim_platform_limit) */
} sim_call_t;

const char *sim_call_param(sim_call_t *c, const char *name);
const char *sim_call_bearer(const sim_call_t *c);

enum {
    SIM_EP_RECORD = 1,   /* goes into the record and counters */
    SIM_EP_LATENCY = 2,  /* the configured latency applies */
    SIM_EP_JSON = 4,     /* parse the body as JSON */
    SIM_EP_INFLIGHT = 8, /* counted in in_flight */
};

typedef struct {
    sim_platform_t platform;
    sim_kind_t kind;
    unsigned methods; /* EVHTTP_REQ_GET | EVHTTP_REQ_POST */
    unsigned flags;   /* SIM_EP_* */
    void (*handle)(sim_call_t *c, sim_reply_t *r);
} sim_endpoint_t;

/* Routers: NULL when the path is not theirs. */
const sim_endpoint_t *sim_platform_route(const char *path);
/* Whether a message body has the shape and limits the platform takes (shapes.c): 0, or -1 with
 * msg saying why (wechat: *code the errcode). */
int sim_shape_check(sim_platform_t platform, const json_t *body, char *msg, size_t size, int *code);
const sim_endpoint_t *sim_media_route(const char *path);
const sim_endpoint_t *sim_control_route(const char *path);
/* POST /_sim/inbound (hooks.c): the simulator sends a platform's signed webhook to botgate. */
void sim_hooks_inbound(sim_call_t *c, sim_reply_t *r);

/* After a platform send answered with success: the configured rate limits (limits.c) of its
 * sender and pair; a refused send gets the platform's own rate-limit answer instead. */
void sim_platform_limit(sim_call_t *c, sim_reply_t *r);

/* Reply builders (server.c). */
void sim_reply_json(sim_reply_t *r, int status, json_t *j); /* steals j */
void sim_reply_text(sim_reply_t *r, int status, const char *content_type, const char *text);
void sim_reply_clear(sim_reply_t *r);

/* ---- the shared record (record.c); every function is thread safe ---- */

typedef struct {
    sim_platform_t platform;
    sim_kind_t kind;
    const char *method, *path, *query, *auth, *recipient, *fault;
    json_t *body; /* borrowed; the record takes its own reference */
    int64_t ts_us;
    sim_limit_hit_t limit;
} sim_entry_t;

int sim_record_init(size_t log_max);
void sim_record_free(void);
void sim_record_add(const sim_entry_t *e);
json_t *sim_record_log(uint64_t since);
void sim_record_reset(void);
json_t *sim_record_stats(void);
void sim_record_token_call(const char *appid);
void sim_record_login_call(const char *username);
void sim_record_in_flight(int delta);
uint64_t sim_next_id(void);

void sim_tokens_issue(const char *token);
int sim_tokens_valid(const char *token);
size_t sim_tokens_expire(void);

int sim_latency_get(void);
void sim_latency_set(int ms);

int64_t sim_now_ms(void); /* wall clock */
int64_t sim_now_us(void);

/* ---- servers (server.c), one per thread ---- */

typedef struct sim_server sim_server_t;

/* Binds host:port (port 0: a free one; *bound_port gets the real one). NULL on failure. */
sim_server_t *sim_server_new(const char *host, int port, int *bound_port);
void *sim_server_run(void *srv);         /* thread body */
void sim_server_stop(sim_server_t *srv); /* from any thread */
void sim_server_free(sim_server_t *srv); /* after the thread ended */

#endif
