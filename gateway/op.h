/* op.h - one API request in flight: its deadline, the records it resolved, its answer. Both
 * operations share the resolve phase (token, channel, member) and hand each response to
 * delivery (deliver.h); each then runs its own state machine (op_send.c, op_redirect.c). An op
 * owns everything allocated for its request and frees it in one place, once it has answered.
 * A request knows no thread: what it needs of its worker comes through op_env_t. */
#ifndef BOTGATE_GATEWAY_OP_H
#define BOTGATE_GATEWAY_OP_H

#include "../adapters/adapter.h"
#include "../core/auth.h"
#include "../core/error.h"
#include "../json/jsonw.h"
#include "../core/request.h"
#include "../core/result.h"
#include "../script/script.h"
#include "../store/store.h"
#include "deliver.h"
#include "http.h"
#include "metrics.h"

#include <event2/util.h>
#include <jansson.h>
#include <stdint.h>

struct evhttp_request;
struct event;
struct op;
struct node_run;
typedef struct op_guard op_guard_t;

/* op_env_t.draining once the drain time is over: no request starts a platform call any more;
 * the message calls already on the wire finish within the upstream timeout. */
#define OP_DRAIN_OVER 2

#define OP_TOKENS_KEPT_BITS 5 /* 32 slots in op_env_t._tokens */

struct op_env;
struct op_kind;
struct op_outbox;
struct op_kept;

/* The argument of an operation's route (op_start): the worker's op_env_t and the kind. */
typedef struct op_route {
    struct op_env *env;
    const struct op_kind *kind;
} op_route_t;

/* What the requests of one worker share. The worker fills it once and owns it; only the
 * worker's thread touches it. */
typedef struct op_env {
    deliver_env_t deliver;
    http_server_t *http;          /* answers go out through it (http_answer) */
    script_cache_t *scripts;      /* node code, compiled once per worker (op_redirect.c) */
    struct op *ops, *ops_last;    /* in-flight requests, oldest (first due) first */
    struct event *deadline_timer; /* due at the deadline of ops (op.c) */
    size_t in_flight;             /* requests accepted and not yet answered */
    int draining;                 /* 1 after SIGTERM, OP_DRAIN_OVER once the drain time is over */
    void (*done)(void *arg);      /* the last request in flight of a drain was freed */
    void *done_arg;
    op_route_t send_route, redirect_route; /* the route arguments of the two operations */
    const struct op_outbox *outbox;        /* the outbox's part (outbox.c); NULL: it is off */
    struct op_kept *kept; /* Idempotency-Key answers Redis has not taken yet (op_guard_keep) */
    /* Token records decoded, a slot each by the record's address (the last one decoded in that
     * slot), each holding its record (op.c token_decode): a record is never changed in place,
     * so while the cache hands out the same object its decoding holds. */
    auth_token_t _tokens[1 << OP_TOKENS_KEPT_BITS];
} op_env_t;

/* call_cut: the current response's message call was stopped on the wire (outcome unknown). */
typedef void op_drained_fn(struct op *op, int call_cut);
typedef void op_run_fn(struct op *op);

/* OP_WAIT: for the answer of a request with the same Idempotency-Key, or the member's turn. */
typedef enum {
    OP_PARSE,
    OP_RESOLVE,
    OP_RECIPIENT,
    OP_WAIT,
    OP_RUN,
    OP_WRITEBACK,
    OP_DONE
} op_phase_t;

/* What an operation adds to the shared machinery (op_send.c, op_redirect.c). */
typedef struct op_kind {
    metrics_route_t route;
    unsigned scopes; /* the token scopes that allow it (AUTH_ACCEPT_*) */
    /* Parses the body into the operation's part of op and sets op->target; -1 with err. */
    int (*parse)(struct op *op, const char *body, size_t len, bg_error_t *err);
    op_run_fn *run;     /* the operation's own machine, started after resolve */
    op_run_fn *expired; /* the deadline passed while running (NULL: answer 113) */
    op_run_fn *cancel;  /* stops the operation's own calls in flight (NULL: none) */
    /* Frees what the operation added (NULL: nothing); not called when the operation did so
     * itself as it answered (op->kind_freed). */
    op_run_fn *cleanup;
    /* The drain stopped the request while running (op_drain): answer 121 with the elements
     * so far, every response not sent marked 121. Called when no call is out any more. */
    op_drained_fn *drained;
    /* The member is addressed by recipientId, which creates it when it is new: checks first
     * what the operation needs, then calls op_resolve_recipient() or answers. NULL: none. */
    op_run_fn *before_recipient;
    unsigned async : 1; /* Prefer: respond-async: run checks it and queues it (outbox.c) */
    unsigned bulk : 1;  /* a broadcast's message: low priority for the rate limits */
} op_kind_t;

typedef struct op {
    op_env_t *env;
    struct evhttp_request *req;
    const op_kind_t *kind;
    op_phase_t phase;
    char id[40]; /* request id (X-Request-Id) */
    /* what resolve found of each record (store_status_t) */
    unsigned char token_st, channel_st;
    unsigned char member_st : 4; /* store_status_t fits */
    unsigned char turn_held : 1; /* the member's turn was taken with its read: nobody ahead */
    /* order off: an Idempotency-Key's begin sent with the member's read (1), it said run (2) */
    unsigned char begin_early : 2;
    /* One bit each, in the byte before started_us: every request in flight carries them. */
    _Bool token_done : 1, channel_done : 1, member_done : 1;
    _Bool send_ok : 1;      /* sendResponses: every response so far was delivered */
    _Bool drain_cut : 1;    /* the drain time is over: nothing new starts (op_drain) */
    _Bool keyed : 1;        /* it carries an Idempotency-Key (op_guard.c) */
    _Bool resuming : 1;     /* it took over a keyed request whose instance died */
    _Bool kind_freed : 1;   /* the kind freed its part as it answered (op_free) */
    int64_t started_us;     /* monotonic */
    struct op *prev, *next; /* env->ops */

    /* what the request asked: its ids copied from the parsed body into one block of the op's,
     * channel id first (freed by op_free), read until the answer's log line */
    request_target_t target;

    /* resolve */
    auth_token_t token;
    json_t *member;         /* owned */
    uint64_t member_seq;    /* store_write_seq() when the member was read */
    store_call_t *calls[3]; /* token, channel, member: in flight during resolve */
    store_call_t *call;     /* the op's one store call in flight after resolve */
    const char *member_id;  /* borrowed from member, or from target */
    op_guard_t *guard;      /* Idempotency-Key and member turn (op_guard.c), or NULL */

    /* delivery: the adapter, the channel record, the member's address and the deadline
     * (monotonic ms) live in it */
    deliver_t dl;

    /* what only one of the operations has, as kind->route says */
    union {
        struct {
            send_request_t send;
            jsonw_t results; /* the elements written so far, comma-separated */
            /* once resolved, each response as its JSON text, type first (op_send.c); each
             * let go once delivered */
            char **texts;
            /* at most REQUEST_MAX_RESPONSES (50) each: 16 bits keep op_t in its size class
             * with the outbox's pointer below */
            uint16_t count; /* responses */
            uint16_t index; /* the response being delivered */
            uint16_t sent;  /* responses delivered (for a 121 answer's message) */
            /* 0: the member's conversation window is open (or the platform has none, or
             * botgate never saw the member write); else 1 + the hours since the member last
             * wrote, at most UINT16_MAX (op_send.c send_windows) */
            uint16_t window_closed;
            /* the outbox's state of an async or a queued request (outbox.c), or NULL */
            void *outbox;
            /* bit i: response i goes as its fallback, whose text follows the NUL of
             * texts[i] (REQUEST_MAX_RESPONSES <= 64) */
            uint64_t fallbacks;
        };
        struct {
            redirect_request_t redirect;
            struct node_run *node;
            union { /* one after the other: the run takes the target before it sends */
                json_t *target_node; /* loaded by before_recipient, until the run takes it */
                json_t *sending;     /* the response being delivered (a reference of our own) */
            };
            char *sending_text;    /* the same as JSON text, delivery's input */
            net_xfer_t *webhook;   /* the webhook call in flight */
            void *redirect_outbox; /* as outbox above, for a redirect */
        };
    };
} op_t;

/* The kinds of the two operations, and each queued (Prefer: respond-async). */
extern const op_kind_t op_send_kind;
extern const op_kind_t op_send_async_kind;
extern const op_kind_t op_send_bulk_kind;
extern const op_kind_t op_redirect_kind;
extern const op_kind_t op_redirect_async_kind;

/* Macros, not functions: the synchronous path reads them on every request, and a call into
 * another file would count as a crossing (docs/architecture.md). A request to queue: answered
 * 202 once it is in the outbox. An attempt of a queued request: no HTTP request, it answers to
 * the outbox. The outbox's state of op (an lvalue, in the operation's own part of op). */
#define op_is_async(op)  ((op)->kind->async)
#define op_is_queued(op) ((op)->req == NULL)
#define op_outbox(op)                                                                              \
    (*((op)->kind->route == METRICS_ROUTE_SEND ? &(op)->outbox : &(op)->redirect_outbox))

/* The route handler of both operations (http_handler_fn), route an op_route_t: makes the op,
 * takes the token, parses the body with kind->parse, then resolves. */
void op_start(void *route, struct evhttp_request *req);
/* After the body is parsed: looks up token, channel, member, then calls op->kind->run. */
void op_resolve(op_t *op, const char *token_hash);
/* The member of op->target.recipient_id, created when it is new; then op->kind->run. */
void op_resolve_recipient(op_t *op);
/* -1 with a 108 in err when a synchronous request's body (root) names a statusCallback: only a
 * request sent with Prefer: respond-async has a status to call back with; else 0. */
int op_refuse_sync_callback(const op_t *op, const json_t *root, bg_error_t *err);
/* Answers with err (or answer when err is NULL) and frees the op. */
void op_fail(op_t *op, const bg_error_t *err);
void op_fail_code(op_t *op, int code, const char *msg);
void op_fail_store(op_t *op, store_status_t st);
void op_answer(op_t *op, json_t *answer);
/* Answers 200 with JSON text already written (taken over, freed by the op). */
void op_answer_text(op_t *op, char *text, size_t len);
/* Answers 202 with JSON text already written (taken over): a request queued (outbox.c). */
void op_answer_accepted(op_t *op, char *text, size_t len);
/* Answers HTTP 500 with err_code code and a failure body already written (taken over). */
void op_fail_text(op_t *op, int code, char *text, size_t len);
/* The drain stops the request. now = 0: the drain time is over; a message call on the wire
 * is left to finish (within its own timeout) and the request is answered when it has, with
 * nothing started after it; anything else stops at once. now = 1: stop at once. Answered
 * requests are freed; a request in flight is answered err_code 121 with what it delivered
 * (op_kind_t.drained). Returns 1 when the request is still in flight. */
int op_drain(op_t *op, int now);
/* Every request of env: op_drain(op, now) on each; returns how many are still in flight. */
size_t op_drain_all(op_env_t *env, int now);

/* Lets go what the worker's requests kept between them (the last token record, the
 * deliveries' deliver_env_clear). */
void op_env_clear(op_env_t *env);
void op_cancel_all(op_t *op);
/* The deadline timer of env: answers the requests whose deadline passed (the worker makes it
 * with env as argument; op.c arms it). */
void op_on_deadlines(evutil_socket_t fd, short what, void *arg);
/* Runs a queued request (the outbox's attempt): as op_start without an HTTP request, the body
 * as accepted, the token taken as app's with the kind's scopes (it was checked when the
 * request was accepted). The answer goes to env->outbox->answered, with outbox as op->outbox
 * (it may come before this returns). -1 when out of memory: then nothing runs. */
int op_start_queued(op_env_t *env, const op_kind_t *kind, const char *body, size_t len,
                    const char *app, void *outbox);
/* The SHA-256 hex of the request's token (Authorization: Bearer, else accessToken in the
 * query): 0, or -1 when there is none. */
int op_request_token(struct evhttp_request *req, char token_hash[AUTH_HASH_HEX]);

/* What a store failure is called in an answer's message. */
static inline const char *op_store_failure(store_status_t st)
{
    return st == STORE_BUSY ? "store busy: too many commands in flight" : "store unavailable";
}

/* ---- op_guard.c: contract.md section 7 ---- */
/* How a request the guard does not let go on ends, handed up to the op (op.c), which answers:
 * with text NULL, failed with code and msg; else with the Idempotency-Key's stored answer
 * (status, code, text taken over), replayed. The guard is not used after it. */
typedef void op_guard_stop_fn(op_t *op, int code, const char *msg, int status, char *text,
                              size_t len);
/* Makes the guard of a request with an Idempotency-Key, with the request's fingerprint from its
 * body: 0, -1 when the key is not valid (108), -2 when out of memory. The guard ends the
 * request through stop when it does not go on. */
int op_guard_take(op_t *op, const char *key, const char *body, size_t len, op_guard_stop_fn *stop);
/* After the token is accepted: 1 when the request goes on at once (no key: the caller goes
 * on); else 0, and it runs next once the key's record says this request runs, or answers (the
 * stored answer, 123, 124). */
int op_guard_begin(op_t *op, op_run_fn *next);
/* Takes the first message's slots ahead (op.c), an Idempotency-Key's begin riding with them
 * when not NULL: called just before a turn's RPUSH goes, in the same round trip. */
typedef void op_ahead_fn(op_t *op, store_idem_call_t *begin);
/* Once the member is known: 1 when the request goes on at once (member order off, or its turn
 * was taken with op_guard_take_member and nobody was ahead); else 0, and it runs next when the
 * member's turn has come, or answers. Makes the guard when the request has none yet (no
 * Idempotency-Key). A turn taken here (the member was found by recipientId, or read alone)
 * takes the slots ahead with it (ahead, NULL: none). */
int op_guard_turn(op_t *op, op_run_fn *next, op_guard_stop_fn *stop, op_ahead_fn *ahead);
/* What a member read found (st, and the record, taken over: NULL unless STORE_OK). */
typedef void op_member_fn(op_t *op, store_status_t st, json_t *member);
/* Member order on and the member id given: takes the member's turn and reads its record in the
 * same round trip (no script when nobody is ahead), with an Idempotency-Key its begin too, then
 * calls done with the record once the key lets the request run (a request told to wait for the
 * key's answer gives the turn back meanwhile); done goes on with op_guard_turn, which then only
 * waits when someone was ahead. Before them ahead (the caller's op.c) takes the first message's
 * slots ahead, the key's begin riding with them when it can. Or answers. */
void op_guard_take_member(op_t *op, op_member_fn *done, op_guard_stop_fn *stop, op_ahead_fn *ahead);
/* The deadline passed while waiting (OP_WAIT): the answer's error, 123, or 121 for a turn. */
void op_guard_expired(const op_t *op, bg_error_t *err);
/* Stops the guard's store call and waiting. */
void op_guard_cancel(op_t *op);
/* The request answers: its answer is stored for the key (op_guard_keep; or the key dropped
 * when it did not run), its turn passes, and the guard is freed (op->guard NULL). */
void op_guard_end(op_t *op, int status, int code, const char *text, size_t len);
/* Stores the answer (status, code, text: copied) in the Idempotency-Key record of owner_id
 * (store_idem_finish) after the client has it, and while Redis does not take it (a stall, a
 * lost connection) writes it again, the pause doubling from 100 ms to 2 s, until until_ms
 * (clock_mono_us() / 1000): the record's lease end, past which a duplicate may take the record
 * over. request_id names it in the log when it is given up. */
void op_guard_keep(op_env_t *env, const char *request_id, const char *record, const char *owner_id,
                   int status, int code, const char *text, size_t len, int64_t until_ms);
/* Drops the Idempotency-Key record of owner_id (store_idem_abandon: the request did not run,
 * a retry runs afresh), written again as op_guard_keep's answer while Redis does not take it. */
void op_guard_drop(op_env_t *env, const char *request_id, const char *record, const char *owner_id,
                   int64_t until_ms);
/* The worker ends: the answers still to be written are given up (a retry with the key takes
 * its record over at the lease end, as after a crash). */
void op_guard_clear(op_env_t *env);
/* A request that took over one whose instance died: what became of its response i. */
typedef enum {
    OP_RESUMED_NO,        /* not resuming, or not reached: send it */
    OP_RESUMED_DELIVERED, /* delivered: *element is its recorded result element */
    OP_RESUMED_UNKNOWN,   /* its call may have gone out: not sent again, reported 125 */
    OP_RESUMED_EXPIRED,   /* queued past the outbox's TTL: not sent, reported 128 */
} op_resumed_t;
op_resumed_t op_guard_resumed(const op_t *op, unsigned i, const char **element);
/* ok: the record says so; 0: it could not be written (or another request took over). */
typedef void op_progress_fn(op_t *op, int ok);
/* With an Idempotency-Key: records that response done was delivered (element: its result
 * element) before the next one's call goes out, then calls then. Returns 1 when then will be
 * called, 0 when there is nothing to record (go on at once), -1 when it could not be sent. */
int op_guard_progress(op_t *op, unsigned done, const char *element, size_t len,
                      op_progress_fn *then);

/* What the outbox (outbox.c, the layer above) does for the requests, through env->outbox. */
typedef struct op_outbox {
    void *ob; /* the worker's outbox */
    /* A respond-async request passed every check (op->async): queue it and answer 202. */
    void (*accept)(op_t *op);
    /* A queued request's attempt answered (op->queued; text borrowed). */
    void (*answered)(op_t *op, int status, int code, const char *text, size_t len);
    /* op_guard_progress and op_guard_resumed of a queued request: its record is the
     * outbox's, across attempts and instances. */
    int (*progress)(op_t *op, unsigned done, const char *element, size_t len, op_progress_fn *then);
    op_resumed_t (*resumed)(const op_t *op, unsigned i, const char **element);
    void (*cancel)(op_t *op);  /* stops the outbox's call in flight for op */
    void (*release)(op_t *op); /* op is freed: op->outbox is let go */
} op_outbox_t;

#endif
