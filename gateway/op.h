/* op.h - one API request in flight: its deadline, the records it resolved, its answer. Both
 * operations share the resolve phase (token, channel, member) and the delivery of a response
 * to the platform (deliver.c); each then runs its own state machine (op_send.c,
 * op_redirect.c). An op owns everything allocated for its request and frees it in op_finish(). */
#ifndef BOTGATE_GATEWAY_OP_H
#define BOTGATE_GATEWAY_OP_H

#include "../adapters/adapter.h"
#include "../core/auth.h"
#include "../core/error.h"
#include "../core/request.h"
#include "../core/result.h"
#include "../store/store.h"
#include "metrics.h"
#include "upstream.h"
#include "worker.h"

#include <event2/event_struct.h>
#include <event2/util.h>
#include <jansson.h>
#include <stdint.h>

struct evhttp_request;
struct op;
struct node_run;

/* What only credential refreshes and media uploads need: kept out of op_t, which every
 * request in flight carries (deliver.c allocates it; op_free frees it). */
typedef struct deliver_extra {
    struct event timer;           /* a wait inside a delivery (Retry-After) */
    /* the hash of the credential that failed, to see a new one: a credential may be long
     * (wechat reserves 512 bytes, some platforms more) */
    char stale_hash[AUTH_HASH_HEX];
    struct cred_wait *wait;       /* the group it waits in for a held lock (deliver.c), or NULL */
    struct op *wait_prev, *wait_next;
    unsigned wait_seen;           /* the group's last hand-out that looked at it */
    char lock_owner[40];
    char media_id[ADAPTER_ID_MAX];
    char url_hash[AUTH_HASH_HEX];
} deliver_extra_t;

/* Delivery of one response (deliver.c). */
typedef enum {
    DL_IDLE = 0,
    DL_CRED_LOCK,    /* taking the channel's credential lock */
    DL_CRED_REREAD,  /* re-reading the channel: did another refresh it? */
    DL_CRED_WAIT,    /* another holds the lock: wait with the worker's others (cred_wait) */
    DL_CRED_CALL,    /* login / token call */
    DL_CRED_WRITE,   /* writing the new credential back */
    DL_CONTACT_CACHE,/* whatsapp: number seen valid lately? */
    DL_CONTACT_CALL, /* whatsapp: /v1/contacts */
    DL_MEDIA_CACHE,  /* wechat: media_id cached for this URL? */
    DL_MEDIA_FETCH,  /* wechat: downloading the image */
    DL_MEDIA_UPLOAD, /* wechat: uploading it */
    DL_SEND,         /* the message call */
    DL_RETRY_WAIT,   /* waiting Retry-After before the one retry */
} deliver_phase_t;

/* The outcome of one delivery, handed to the operation. */
typedef struct deliver_result {
    int ok;
    adapter_result_t res; /* message_id, chat_id, meta on success */
    bg_error_t err;       /* on failure */
    int abort;            /* the failure concerns the whole request (first response only) */
} deliver_result_t;

typedef void op_run_fn(struct op *op);
typedef void op_delivered_fn(struct op *op, deliver_result_t *r);
/* call_cut: the current response's message call was stopped on the wire (outcome unknown). */
typedef void op_drained_fn(struct op *op, int call_cut);

typedef enum { OP_PARSE, OP_RESOLVE, OP_RECIPIENT, OP_RUN, OP_WRITEBACK, OP_DONE } op_phase_t;

/* What an operation adds to the shared machinery (op_send.c, op_redirect.c). */
typedef struct op_kind {
    op_run_fn *run;       /* the operation's own machine, started after resolve */
    op_run_fn *expired;   /* the deadline passed while running (NULL: answer 113) */
    op_run_fn *cleanup;   /* frees what the operation added (NULL: nothing) */
    /* The platform call of op->response is out: op->response may go while it waits
     * (thousands of requests wait at once), set to NULL. NULL: it stays. */
    op_run_fn *set_aside;
    /* A retry needs it again: op->response, or NULL when out of memory. */
    op_run_fn *take_back;
    /* The drain stopped the request while running (op_drain): answer 121 with the elements
     * so far, every response not sent marked 121. Called when no call is out any more. */
    op_drained_fn *drained;
    /* The member is addressed by recipientId, which creates it when it is new: checks first
     * what the operation needs, then calls op_resolve_recipient() or answers. NULL: none. */
    op_run_fn *before_recipient;
} op_kind_t;

typedef struct op {
    worker_t *w;
    struct evhttp_request *req;
    metrics_route_t route;
    op_phase_t phase;
    char id[40];                  /* request id (X-Request-Id) */
    int64_t started_us;           /* monotonic */
    int64_t deadline_ms;          /* monotonic: started + the request timeout */
    struct op *prev, *next;       /* the worker's in-flight list, oldest (first due) first */

    /* what the request asked; borrowed from the parsed body */
    request_target_t target;
    const op_kind_t *kind;

    /* resolve */
    auth_token_t token;
    store_status_t token_st, channel_st, member_st;
    unsigned accepted_scopes;
    json_t *channel;              /* owned */
    json_t *member;               /* owned */
    uint64_t member_seq;          /* store_write_seq() when the member was read */
    store_call_t *calls[3];       /* token, channel, member: in flight during resolve */
    store_call_t *call;           /* the one store call in flight after resolve */
    const adapter_ops_t *adapter;
    const char *member_id;        /* borrowed from member, or from target */
    char *to;                     /* the member's address on the platform (owned; op_set_to) */

    /* delivery */
    deliver_phase_t dl;
    int platform_calls;
    const json_t *response;       /* the response being delivered (borrowed; op_kind_t) */
    json_t *sending;              /* the response with media_id etc. (owned), or NULL */
    op_delivered_fn *delivered;
    upstream_xfer_t *xfer;
    upstream_cb *xfer_cb;         /* where the answer of xfer goes after the metrics */
    struct deliver_extra *x;      /* state of the rare paths, allocated when first needed */
    int delivered_count;          /* responses already through delivery */

    /* One bit each: every request in flight carries them. */
    unsigned token_done : 1, channel_done : 1, member_done : 1;
    unsigned timer_armed : 1;     /* x->timer */
    unsigned send_ok : 1;         /* sendResponses: every response so far was delivered */
    unsigned cred_ready : 1;      /* credential checked for this request */
    unsigned cred_refreshed : 1;  /* refreshed once in this request already */
    unsigned cred_forced : 1;     /* refresh although not expired (the platform said so) */
    unsigned lock_held : 1;
    unsigned contact_ready : 1;
    unsigned auth_retried : 2;    /* 0..2 */
    unsigned rate_retried : 1, connect_retried : 1;
    unsigned drain_cut : 1;       /* the drain time is over: nothing new starts (op_drain) */

    /* what only one of the operations has, as route says */
    union {
        struct {
            send_request_t send;
            char *send_ids;       /* the channel and member ids, once the body is let go */
            jsonw_t results;      /* the elements written so far, comma-separated */
            json_t **responses;   /* once resolved; each let go once delivered (op_send.c) */
            char *aside;          /* while responses[index]'s call is out, in its place: its
                                   * type, a NUL, its messageEvent data as JSON text */
            unsigned count;       /* responses */
            unsigned index;       /* the response being delivered */
            unsigned sent;        /* responses delivered (for a 121 answer's message) */
        };
        struct {
            redirect_request_t redirect;
            struct node_run *node;
            json_t *node_tree_app;
            json_t *target_node;  /* loaded by before_recipient, until the run takes it */
        };
    };
} op_t;

/* The evhttp entry points of the two operations. */
void op_send_start(worker_t *w, struct evhttp_request *req);
void op_redirect_start(worker_t *w, struct evhttp_request *req);

/* Shared by the operations. */
op_t *op_new(worker_t *w, struct evhttp_request *req, metrics_route_t route,
             const op_kind_t *kind);
/* Takes the request's token (hashed into token_hash), or answers "not authorized" and
 * returns -1. The hash is the caller's: it is used once, by op_resolve, right after. */
int op_take_token(op_t *op, char token_hash[AUTH_HASH_HEX]);
/* The request body as one contiguous block. */
const char *op_body(op_t *op, size_t *len);
/* Frees the body once it is parsed: nothing reads it again. */
void op_body_done(op_t *op);
/* After the body is parsed: looks up token, channel, member, then calls op->kind->run. */
void op_resolve(op_t *op, const char *token_hash);
/* The member of op->target.recipient_id, created when it is new; then op->kind->run. */
void op_resolve_recipient(op_t *op);
/* Answers with err (or answer when err is NULL) and frees the op. */
void op_fail(op_t *op, const bg_error_t *err);
void op_answer(op_t *op, json_t *answer);
/* Answers 200 with JSON text already written (taken over, freed by the op). */
void op_answer_text(op_t *op, char *text, size_t len);
/* Answers HTTP 500 with err_code code and a failure body already written (taken over). */
void op_fail_text(op_t *op, int code, char *text, size_t len);
/* The drain stops the request (worker.c). now = 0: the drain time is over; a message call on
 * the wire is left to finish (within its own timeout) and the request is answered when it
 * has, with nothing started after it; anything else stops at once. now = 1: stop at once.
 * Answered requests are freed; a request in flight is answered err_code 121 with what it
 * delivered (op_kind_t.drained). Returns 1 when the request is still in flight. */
int op_drain(op_t *op, int now);
void op_cancel_all(op_t *op);
int64_t op_remaining_ms(const op_t *op);
/* Sets op->to to a copy of to (at most ADAPTER_ID_MAX - 1 bytes); -1 when out of memory. */
int op_set_to(op_t *op, const char *to);
/* The worker's deadline timer: answers the requests whose deadline passed (worker.c arms it
 * with the worker as argument; op.c re-arms it). */
void op_on_deadlines(evutil_socket_t fd, short what, void *arg);
int64_t op_now_wall_ms(void);

/* deliver.c */
void deliver_start(op_t *op, const json_t *response, op_delivered_fn *done);
void deliver_cancel(op_t *op);
/* A messageEvent for response on this op's channel. New reference. */
json_t *deliver_event(const op_t *op, const json_t *response, const char *message_id);
/* The same as text-writer input; buf holds a numeric from address. */
result_event_t deliver_event_of(const op_t *op, const json_t *response, const char *message_id,
                                char buf[32]);
const char *deliver_chat_id(const op_t *op, const adapter_result_t *res);

#endif
