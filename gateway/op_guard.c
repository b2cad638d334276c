/* op_guard.c - contract.md section 7 on a request's life: its Idempotency-Key (it runs once;
 * a duplicate waits for the answer or gets the stored one) and its member's turn (one request
 * per member at a time, in the order of their tickets). A request that waits holds no thread
 * and polls nothing: it listens on the record's or the queue's pub/sub channel (the worker's
 * subscriber connection) and keeps one timer at the lease end of whoever is ahead, since a
 * dead instance never publishes. The record is keyed by the token's app, so it is begun once
 * the token is known: with the token and channel cached and the member id given, in the round
 * trip that reads the member and takes its turn; else after resolve, then the turn. */
#include "op.h"

#include "../core/clock.h"
#include "../core/dlist.h"
#include "../core/idem.h"
#include "../core/rng.h"
#include "../store/idem.h"
#include "../store/outbox.h"
#include "log.h"

#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>

/* The answer is written to Redis after the client has it: a duplicate that finds the lease
 * over must not take it a moment before that write lands. A member's turn needs no margin: its
 * holder, alive, gives it back when it answers, at its deadline at the latest (no platform call
 * outlives the deadline); dead, it writes nothing more. */
#define LEASE_MARGIN_MS   2000
#define KEEP_AGAIN_MS     100  /* an answer Redis did not take: written again after this, doubled */
#define KEEP_AGAIN_MAX_MS 2000 /* ...up to this (redisc's reconnect backoff at its longest) */

/* Owned by its op from op_guard_take (or op_guard_turn) to op_guard_end or op_free. */
struct op_guard {
    op_run_fn *next;               /* what runs once the guard lets the request go */
    op_guard_stop_fn *stop;        /* how the request ends when it does not go on (op.c) */
    store_idem_call_t *call;       /* the guard's store call in flight */
    op_progress_fn *progress_done; /* a progress record in flight: its caller */
    store_turn_take_t *take;       /* the member's turn being taken */
    op_member_fn *member_done;     /* the take reads the member too: its caller */
    json_t *member;                /* the take's member, kept until the key's begin answers */
    store_status_t member_st;      /* its status */
    redisc_sub_t *sub;             /* the channel waited on */
    struct event *timer;           /* at the lease end of the request ahead */
    unsigned owner : 1;            /* it runs the key's request: it stores or drops the answer */
    unsigned waiting_turn : 1;     /* waiting for the member's turn (else for the key's answer) */
    unsigned stale : 1;      /* told of a change while a call was out: its answer may be old */
    unsigned queued : 1;     /* turn_id went to the member's queue: it leaves it at the end */
    unsigned taken : 1;      /* the take's answer came: ahead says the rest */
    unsigned ahead : 1;      /* someone was ahead in the queue when it was taken */
    unsigned joined : 1;     /* store_turn_join recorded its lease */
    unsigned begin_sent : 1; /* the key's begin is in flight: it may have made us the owner */
    char turn_id[17];        /* in the member's queue */
    const char *turn_member; /* the member id of the queue: the target's, or turn_member_copy */
    char *turn_member_copy;  /* the record's id (found by recipientId): the record may go first */
    unsigned turn_shard;     /* the member's outbox shard: where a cluster keeps its queue */
    unsigned resume_at;      /* resuming: the response whose call may have gone out */
    char **resumed;          /* resuming: the elements recorded before it (NULL: none) */
    char owner_id[17];
    char fp[IDEM_HEX];
    char *key;    /* the Idempotency-Key, until the record's name is made */
    char *record; /* the record's name (store_key_idem), also its channel */
};

static const char *route_name(const op_t *op)
{
    return op->kind->route == METRICS_ROUTE_SEND ? "sendResponses" : "redirectMemberToNode";
}

/* The request ends here: handed up to op.c, which answers. */
static void stop_code(op_t *op, int code, const char *msg)
{
    op->guard->stop(op, code, msg, 0, NULL, 0);
}

static void stop_store(op_t *op, store_status_t st)
{
    stop_code(op, BG_ERR_STORE, op_store_failure(st));
}

int op_guard_take(op_t *op, const char *key, const char *body, size_t len, op_guard_stop_fn *stop)
{
    if ((op->guard = calloc(1, sizeof(*op->guard))) == NULL)
        return -2;
    op->guard->stop = stop;
    if (!idem_key_valid(key))
        return -1;
    op->keyed = 1;
    if ((op->guard->key = strdup(key)) == NULL)
        return -2;
    idem_fingerprint(route_name(op), body, len, op->guard->fp);
    return 0;
}

/* Stops waiting: the subscription and the timer go. */
static void stop_waiting(op_guard_t *g)
{
    store_unwatch(g->sub);
    g->sub = NULL;
    g->stale = 0;
    if (g->timer != NULL)
        evtimer_del(g->timer);
}

void op_guard_cancel(op_t *op)
{
    op_guard_t *g = op->guard;

    if (g == NULL)
        return;
    store_idem_cancel(g->call);
    g->call = NULL;
    store_turn_take_cancel(g->take);
    g->take = NULL;
    stop_waiting(g);
}

static void log_turn(const op_t *op)
{
    if (op->guard->queued && log_enabled(LOG_DEBUG))
        log_msg(LOG_DEBUG, "request %s: the member's turn, id %s", op->id, op->guard->turn_id);
}

/* The guard lets the request go on. */
static void go_on(op_t *op)
{
    op_run_fn *next = op->guard->next;

    log_turn(op);
    stop_waiting(op->guard);
    op->guard->next = NULL;
    op->phase = OP_RESOLVE; /* waits no more (member_ready or the kind set what follows) */
    next(op);
}

static void on_wait_timer(evutil_socket_t fd, short what, void *arg);
static void on_wait_message(void *arg, const char *msg, size_t len);
static void ask_again(op_t *op);

/* Waits for a message on channel, or wait_ms at most. */
static void wait_on(op_t *op, const char *channel, int64_t wait_ms)
{
    op_guard_t *g = op->guard;
    struct timeval tv;

    op->phase = OP_WAIT;
    if (g->timer == NULL &&
        (g->timer = evtimer_new(op->env->deliver.base, on_wait_timer, op)) == NULL) {
        stop_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    tv = clock_ms_timeval(wait_ms < 1 ? 1 : wait_ms);
    evtimer_add(g->timer, &tv);
    if (g->sub != NULL)
        return;
    if ((g->sub = store_watch_key(op->env->deliver.store, channel, on_wait_message, op)) == NULL) {
        stop_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    /* Published between the answer that said "wait" and the subscription: missed. Asked
     * again once subscribed (a subscription that is new says so when Redis confirms it; one
     * that joins a channel already subscribed to is live at once). */
    ask_again(op);
}

/* ---- Idempotency-Key ---- */

static void idem_begin(op_t *op);
static void taken_with_member(op_t *op);
static void turn_give_back(op_t *op);

/* What the request resumed had recorded, kept for the kind (op_guard_resumed). */
static int take_resumed(op_t *op, const store_idem_t *res)
{
    op_guard_t *g = op->guard;

    op->resuming = 1;
    g->resume_at = res->at;
    if (res->at == 0)
        return 0;
    if ((g->resumed = calloc(res->at, sizeof(*g->resumed))) == NULL)
        return -1;
    for (unsigned i = 0; i < res->n_elements; i++)
        if ((g->resumed[i] = strndup(res->elements[i], res->element_lens[i])) == NULL)
            return -1;
    return 0;
}

op_resumed_t op_guard_resumed(const op_t *op, unsigned i, const char **element)
{
    const op_guard_t *g = op->guard;

    *element = NULL;
    if (op_is_queued(op)) /* its progress is the outbox's record */
        return op->env->outbox->resumed(op, i, element);
    if (g == NULL || !op->resuming || i > g->resume_at)
        return OP_RESUMED_NO;
    if (i < g->resume_at && g->resumed[i] != NULL) {
        *element = g->resumed[i];
        return OP_RESUMED_DELIVERED;
    }
    return OP_RESUMED_UNKNOWN;
}

static void on_progress(void *arg, store_status_t st)
{
    op_t *op = arg;
    op_progress_fn *done = op->guard->progress_done;

    op->guard->call = NULL;
    op->guard->progress_done = NULL;
    done(op, st == STORE_OK);
}

int op_guard_progress(op_t *op, unsigned done, const char *element, size_t len,
                      op_progress_fn *then)
{
    op_guard_t *g = op->guard;
    store_status_t st = STORE_OK;

    if (op_is_queued(op))
        return op->env->outbox->progress(op, done, element, len, then);
    if (g == NULL || !g->owner)
        return 0;
    g->progress_done = then;
    g->call = store_idem_progress(op->env->deliver.store, g->record, g->owner_id, done, element,
                                  len, on_progress, op, &st);
    return g->call != NULL ? 1 : -1;
}

static void on_idem(void *arg, store_status_t st, const store_idem_t *res)
{
    op_t *op = arg;
    op_guard_t *g = op->guard;

    g->call = NULL;
    g->begin_sent = 0;
    if (st != STORE_OK) {
        stop_store(op, st == STORE_BAD_RECORD ? STORE_UNAVAILABLE : st);
        return;
    }
    switch (res->state) {
    case STORE_IDEM_RESUME:
        if (take_resumed(op, res) < 0) {
            stop_code(op, BG_ERR_UNAVAILABLE, "out of memory");
            return;
        }
        /* fall through */
    case STORE_IDEM_RUN:
        g->owner = 1;
        if (g->take != NULL)
            return; /* sent with the member's read and the turn: on_taken goes on */
        if (g->taken && g->member_done != NULL) {
            taken_with_member(op);
            return;
        }
        go_on(op);
        return;
    case STORE_IDEM_CONFLICT:
        stop_code(op, BG_ERR_IDEM_MISMATCH,
                  "Idempotency-Key was used for another request: nothing was run");
        return;
    case STORE_IDEM_DONE: {
        char *text = malloc(res->len + 1);
        if (text == NULL) {
            stop_code(op, BG_ERR_UNAVAILABLE, "out of memory");
            return;
        }
        memcpy(text, res->body, res->len);
        text[res->len] = '\0';
        stop_waiting(g);
        g->stop(op, res->code, NULL, res->status, text, res->len);
        return;
    }
    case STORE_IDEM_WAIT:
        g->waiting_turn = 0;
        if (g->member_done != NULL)
            turn_give_back(op); /* taken with the member's read: nobody waits behind a waiter */
        if (g->stale)
            ask_again(op);
        else
            wait_on(op, g->record, res->wait_ms);
        return;
    }
}

/* The key's begin made and held in g->call: the caller sends it (alone, or riding with the
 * slots taken ahead). -1: the request was stopped. */
static int begin_hold(op_t *op)
{
    op_guard_t *g = op->guard;
    store_status_t st = STORE_OK;
    int64_t left = op->dl.deadline_ms - clock_mono_us() / 1000;

    g->call = store_idem_begin_held(op->env->deliver.store, g->record, g->fp, g->owner_id,
                                    (int)(left > 0 ? left : 1) + LEASE_MARGIN_MS,
                                    op->env->deliver.cfg->idempotency_ttl_s, on_idem, op, &st);
    if (g->call == NULL) {
        stop_store(op, st);
        return -1;
    }
    return 0;
}

/* Sends the held begin, unless it rides. -1: the request was stopped. */
static int begin_send(op_t *op)
{
    op_guard_t *g = op->guard;
    store_status_t st = STORE_OK;

    if (store_idem_begin_send(g->call, &st) < 0) {
        g->call = NULL;
        stop_store(op, st);
        return -1;
    }
    g->begin_sent = 1;
    return 0;
}

/* The begin alone: the first (op_guard_begin), or asked again (ask_again). */
static void idem_begin(op_t *op)
{
    if (begin_hold(op) == 0)
        begin_send(op);
}

/* The key's record and its owner's id named, for the begin; next runs once it lets the request
 * go. -1: the request was stopped. */
static int begin_name(op_t *op, op_run_fn *next)
{
    op_guard_t *g = op->guard;
    char record[STORE_KEY_MAX];
    int n = store_idem_key(op->env->deliver.store, record, sizeof(record), op->token.app,
                           route_name(op), g->key);

    g->next = next;
    if (n < 0 || (g->record = strndup(record, (size_t)n)) == NULL) {
        stop_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return -1;
    }
    rng_hex(&op->env->deliver.rng, g->owner_id, 16);
    return 0;
}

int op_guard_begin(op_t *op, op_run_fn *next)
{
    op_guard_t *g = op->guard;

    if (g == NULL || !op->keyed)
        return 1;
    if (begin_name(op, next) == 0)
        idem_begin(op);
    return 0;
}

/* ---- the member's turn ---- */

static void turn_check(op_t *op);

/* The lease of a turn: up to the deadline. Redis adds it to its clock when the command runs,
 * never before the deadline, so a dead holder's turn passes then and not 2 s later (a request
 * sent right after the kill once waited its whole deadline for it). */
static int turn_lease_ms(const op_t *op)
{
    int64_t left = op->dl.deadline_ms - clock_mono_us() / 1000;

    return (int)(left > 0 ? left : 1);
}

static void on_turn(void *arg, store_status_t st, int64_t wait_ms)
{
    op_t *op = arg;
    op_guard_t *g = op->guard;
    char queue[STORE_KEY_MAX];

    g->call = NULL;
    if (st != STORE_OK) {
        stop_store(op, st == STORE_BAD_RECORD ? STORE_UNAVAILABLE : st);
        return;
    }
    g->joined = 1;
    if (wait_ms == 0) {
        go_on(op);
        return;
    }
    g->waiting_turn = 1;
    if (g->stale) {
        ask_again(op);
        return;
    }
    if (store_turn_key(op->env->deliver.store, queue, sizeof(queue), g->turn_shard,
                       op->target.channel_id, g->turn_member) < 0) {
        stop_code(op, BG_ERR_LIMIT, "member key too long");
        return;
    }
    wait_on(op, queue, wait_ms);
}

/* Someone is ahead: records the lease (first) or asks again whether it is the turn. */
static void turn_check(op_t *op)
{
    op_guard_t *g = op->guard;
    store_status_t st = STORE_OK;

    g->call = store_turn_join(op->env->deliver.store, g->turn_shard, op->target.channel_id,
                              g->turn_member, g->turn_id, turn_lease_ms(op), !g->joined, on_turn,
                              op, &st);
    if (g->call == NULL)
        stop_store(op, st);
}

/* The turn and the member's read answered (and the key's begin let the request run). */
static void taken_with_member(op_t *op)
{
    op_guard_t *g = op->guard;
    op_member_fn *member_done = g->member_done;
    json_t *member = g->member;

    g->member_done = NULL;
    g->member = NULL;
    if (!g->ahead) {
        op->turn_held = 1; /* member_ready goes on without asking op_guard_turn */
        log_turn(op);
    }
    member_done(op, g->member_st, member); /* it goes on with op_guard_turn */
}

static void on_taken(void *arg, store_status_t st, int queued, store_status_t member_st,
                     json_t *member)
{
    op_t *op = arg;
    op_guard_t *g = op->guard;

    g->take = NULL;
    if (st != STORE_OK) {
        json_decref(member);
        stop_store(op, st == STORE_BAD_RECORD ? STORE_UNAVAILABLE : st);
        return;
    }
    g->taken = 1;
    g->ahead = queued != 0;
    if (g->member_done != NULL) {
        json_decref(g->member);
        g->member = member;
        g->member_st = member_st;
        if (!g->begin_sent) /* no key, or its begin said run: else on_idem goes on */
            taken_with_member(op);
        return;
    }
    json_decref(member);
    if (g->ahead)
        turn_check(op);
    else
        go_on(op);
}

/* The request's guard, made at its first use. NULL: the request was stopped. */
static op_guard_t *guard_get(op_t *op, op_guard_stop_fn *stop)
{
    op_guard_t *g = op->guard;

    if (g == NULL && (g = op->guard = calloc(1, sizeof(*g))) == NULL) {
        stop(op, BG_ERR_UNAVAILABLE, "out of memory", 0, NULL, 0);
        return NULL;
    }
    g->stop = stop;
    return g;
}

/* Sends the take: brief >= 0 reads the member with it. 0, or -1 when answered (through stop,
 * which a guard made here keeps). */
static int turn_take(op_t *op, int brief, op_guard_stop_fn *stop)
{
    op_guard_t *g = guard_get(op, stop);
    store_status_t st = STORE_OK;

    if (g == NULL)
        return -1;
    rng_hex(&op->env->deliver.rng, g->turn_id, 16);
    /* read with the member: the id asked for; after it: the record's (found by recipientId) */
    if (brief >= 0) {
        g->turn_member = op->target.member_id; /* lives until op_free */
    } else {
        free(g->turn_member_copy);
        if ((g->turn_member = g->turn_member_copy = strdup(op->member_id)) == NULL) {
            stop_code(op, BG_ERR_UNAVAILABLE, "out of memory");
            return -1;
        }
    }
    g->queued = 1; /* given back at the end whatever the answer: the RPUSH may have landed */
    /* the member's queued requests hold places in the same queue (outbox_accept.c) */
    g->turn_shard = store_outbox_shard((unsigned)op->env->deliver.cfg->outbox_shards,
                                       op->target.channel_id, g->turn_member);
    g->take =
        store_turn_take(op->env->deliver.store, g->turn_shard, op->target.channel_id,
                        g->turn_member, g->turn_id, turn_lease_ms(op), brief, on_taken, op, &st);
    if (g->take == NULL) {
        stop_store(op, st);
        return -1;
    }
    return 0;
}

static void retake(op_t *op)
{
    turn_take(op, op->kind->route == METRICS_ROUTE_SEND,
              op->guard->stop); /* member_done is still set */
}

/* The key's record said wait: the turn taken with the member's read goes back at once (a
 * request that waits for another's answer holds up nobody), and is taken again, the member
 * read again, once the key lets this one run. */
static void turn_give_back(op_t *op)
{
    op_guard_t *g = op->guard;

    store_turn_take_cancel(g->take);
    g->take = NULL;
    json_decref(g->member);
    g->member = NULL;
    if (g->queued)
        store_turn_done(op->env->deliver.store, g->turn_shard, op->target.channel_id,
                        g->turn_member, g->turn_id, 0);
    g->queued = 0;
    g->taken = 0;
    g->ahead = 0;
    g->next = retake;
}

void op_guard_take_member(op_t *op, op_member_fn *done, op_guard_stop_fn *stop, op_ahead_fn *ahead)
{
    /* a request without an Idempotency-Key gets its guard here, for its turn alone */
    op_guard_t *g = guard_get(op, stop);

    if (g == NULL)
        return;
    /* with one, its begin goes in the same round trip: the request goes on once both answered.
     * It rides with the slots taken ahead when they are (one script call, not two), which go
     * before the turn's RPUSH: they are not taken when someone holds or waits for the turn */
    if (op->keyed && (begin_name(op, retake) < 0 || begin_hold(op) < 0))
        return;
    ahead(op, g->call);
    if (g->call != NULL && begin_send(op) < 0)
        return;
    if (turn_take(op, op->kind->route == METRICS_ROUTE_SEND, stop) < 0)
        return;
    op->guard->member_done = done;
}

int op_guard_turn(op_t *op, op_run_fn *next, op_guard_stop_fn *stop, op_ahead_fn *ahead)
{
    op_guard_t *g = op->guard;

    if (!op->env->deliver.cfg->member_order)
        return 1;
    if (g != NULL && g->taken) {
        if (!g->ahead)
            return 1; /* taken with the member's read: nobody was ahead */
        g->next = next;
        turn_check(op);
        return 0;
    }
    /* the member found by recipientId (or read alone): its slots go before the RPUSH, which
     * saves the delivery its own round trip for them */
    if (ahead != NULL)
        ahead(op, NULL);
    if (turn_take(op, -1, stop) == 0)
        op->guard->next = next;
    return 0;
}

/* ---- waiting ---- */

static void ask_again(op_t *op)
{
    if (op->guard->call != NULL) {
        op->guard->stale = 1; /* asked again when its answer says "wait" */
        return;
    }
    op->guard->stale = 0;
    if (op->guard->waiting_turn)
        turn_check(op);
    else
        idem_begin(op);
}

static void on_wait_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ask_again(arg);
}

static void on_wait_message(void *arg, const char *msg, size_t len)
{
    op_t *op = arg;
    op_guard_t *g = op->guard;
    if (msg == NULL || !g->waiting_turn) {
        ask_again(op); /* (re)subscribed, or the key's record changed */
        return;
    }
    /* The queue's channel names the id whose turn it is now: only this request can take it
     * out of the queue, so it is the turn whatever a check in flight will say. */
    if (len == strlen(g->turn_id) && memcmp(msg, g->turn_id, len) == 0) {
        store_idem_cancel(g->call);
        g->call = NULL;
        go_on(op);
    }
}

/* ---- the end ---- */

void op_guard_expired(const op_t *op, bg_error_t *err)
{
    if (op->guard != NULL && op->guard->waiting_turn)
        bg_error_set(err, BG_ERR_UNAVAILABLE, "%s",
                     "the member's earlier requests did not finish in time: the request did not "
                     "start, nothing was sent");
    else
        bg_error_set(err, BG_ERR_IDEM_RUNNING, "%s",
                     "a request with this Idempotency-Key is still running");
}

static void guard_free(op_t *op)
{
    if (op->guard == NULL)
        return;
    op_guard_cancel(op);
    if (op->guard->timer != NULL)
        event_free(op->guard->timer);
    for (unsigned i = 0; op->guard->resumed != NULL && i < op->guard->resume_at; i++)
        free(op->guard->resumed[i]);
    free(op->guard->resumed);
    free(op->guard->key);
    free(op->guard->record);
    free(op->guard->turn_member_copy);
    json_decref(op->guard->member);
    free(op->guard);
    op->guard = NULL;
}

/* ---- an answer on its way to the record ---- */

/* An Idempotency-Key's answer (or, drop set, the drop of the record of a request that did not
 * run) from the request's answer until Redis took it or the record's lease ended: the client
 * does not wait for the write, and a write Redis did not take would leave the record
 * answerless, so that a duplicate waited for the lease end and then resumed the request,
 * reporting 125 for what had been delivered (or, for a drop, for what was never sent). At most
 * one write or one timer is out. Owned by env->kept; kept_free frees it. */
typedef struct op_kept {
    op_env_t *env;
    struct op_kept *prev, *next; /* env->kept */
    store_idem_call_t *call;     /* the write in flight */
    struct event *timer;         /* the next write (made at the first that failed) */
    int64_t until_ms;            /* clock_mono_us() / 1000: the record's lease end */
    unsigned tries;
    unsigned drop : 1; /* store_idem_abandon, not store_idem_finish */
    int status, code;
    size_t len;
    char request_id[40], owner_id[17];
    char *record; /* in buf, after the text */
    char buf[];   /* the answer's text, then the record's name */
} op_kept_t;

static void kept_free(op_kept_t *k)
{
    op_kept_t *unused_last = NULL; /* the list is only prepended to */

    store_idem_cancel(k->call);
    if (k->timer != NULL)
        event_free(k->timer);
    DLIST_UNLINK(k->env->kept, unused_last, k);
    (void)unused_last;
    free(k);
}

static void kept_write(op_kept_t *k);

static void on_kept_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    kept_write(arg);
}

/* Not taken: again after a pause, while the lease lasts. Past it another request may hold the
 * record (the script would write nothing then), and a retry resumes the request as after a
 * crash: it sends nothing again. */
static void kept_failed(op_kept_t *k)
{
    int64_t ms = clock_doubling_ms(KEEP_AGAIN_MS, KEEP_AGAIN_MAX_MS, k->tries);
    struct timeval tv;

    k->tries++;
    if (clock_mono_us() / 1000 + ms < k->until_ms &&
        (k->timer != NULL ||
         (k->timer = evtimer_new(k->env->deliver.base, on_kept_timer, k)) != NULL)) {
        tv = clock_ms_timeval(ms);
        evtimer_add(k->timer, &tv);
        return;
    }
    log_msg(LOG_WARN,
            "request %s: Redis did not take the %s for its Idempotency-Key (%u tries): a "
            "retry with the key resumes the request",
            k->request_id, k->drop ? "drop of the record" : "answer", k->tries);
    kept_free(k);
}

static void on_kept(void *arg, store_status_t st)
{
    op_kept_t *k = arg;

    k->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY)
        kept_failed(k);
    else
        kept_free(k);
}

static void kept_write(op_kept_t *k)
{
    store_status_t st = STORE_OK;

    if (k->drop)
        k->call =
            store_idem_abandon(k->env->deliver.store, k->record, k->owner_id, on_kept, k, &st);
    else
        k->call = store_idem_finish(k->env->deliver.store, k->record, k->owner_id, k->status,
                                    k->code, k->buf, k->len, on_kept, k, &st);
    if (k->call == NULL)
        kept_failed(k);
}

/* Writes k (its parts copied) until Redis takes it or until_ms. */
static void kept_start(op_env_t *env, const op_kept_t *k, const char *request_id,
                       const char *record, const char *owner_id, const char *text)
{
    size_t record_len = strlen(record);
    op_kept_t *copy = malloc(sizeof(*k) + k->len + record_len + 1), *unused_last = NULL;

    if (copy == NULL) { /* a retry with the key resumes the request, as after a crash */
        log_msg(LOG_WARN, "request %s: out of memory: its Idempotency-Key's %s is not kept",
                request_id, k->drop ? "drop" : "answer");
        return;
    }
    *copy = *k;
    copy->env = env;
    snprintf(copy->request_id, sizeof(copy->request_id), "%s", request_id);
    snprintf(copy->owner_id, sizeof(copy->owner_id), "%s", owner_id);
    memcpy(copy->buf, text, k->len);
    copy->record = memcpy(copy->buf + k->len, record, record_len + 1);
    DLIST_PREPEND(env->kept, unused_last, copy);
    (void)unused_last;
    kept_write(copy);
}

void op_guard_keep(op_env_t *env, const char *request_id, const char *record, const char *owner_id,
                   int status, int code, const char *text, size_t len, int64_t until_ms)
{
    kept_start(env, &(op_kept_t){.until_ms = until_ms, .status = status, .code = code, .len = len},
               request_id, record, owner_id, text);
}

void op_guard_drop(op_env_t *env, const char *request_id, const char *record, const char *owner_id,
                   int64_t until_ms)
{
    kept_start(env, &(op_kept_t){.until_ms = until_ms, .drop = 1}, request_id, record, owner_id,
               "");
}

void op_guard_clear(op_env_t *env)
{
    size_t n = 0;

    for (; env->kept != NULL; n++)
        kept_free(env->kept);
    if (n > 0)
        log_msg(LOG_WARN,
                "%zu Idempotency-Key answers not taken by Redis given up at exit: a retry with "
                "such a key resumes its request",
                n);
}

/* Stores the answer for replays, or, past STORE_IDEM_ANSWER_MAX, a 118 that says so: the
 * request is still never run again, and a replay says how it ended. The record's lease ends
 * LEASE_MARGIN_MS after the deadline (idem_begin). */
static void keep_answer(op_t *op, int status, int code, const char *text, size_t len)
{
    op_guard_t *g = op->guard;
    int64_t until_ms = op->dl.deadline_ms + LEASE_MARGIN_MS;
    bg_error_t err;
    json_t *body;
    char *marker;
    size_t marker_len = 0;

    if (len <= STORE_IDEM_ANSWER_MAX) {
        op_guard_keep(op->env, op->id, g->record, g->owner_id, status, code, text, len, until_ms);
        return;
    }
    bg_error_set(&err, BG_ERR_LIMIT,
                 "the answer to this Idempotency-Key was %zu bytes (HTTP %d, err_code %d), over "
                 "the %d kept for a replay: the request ran once and is not run again",
                 len, status, code, STORE_IDEM_ANSWER_MAX);
    body = bg_error_to_json(&err);
    marker = body != NULL ? jw_dump(body, &marker_len) : NULL;
    json_decref(body);
    /* out of memory: nothing is kept, and a retry resumes the record as after a crash (its
     * delivered responses are not sent again) */
    if (marker != NULL)
        op_guard_keep(op->env, op->id, g->record, g->owner_id, 500, BG_ERR_LIMIT, marker,
                      marker_len, until_ms);
    free(marker);
}

void op_guard_end(op_t *op, int status, int code, const char *text, size_t len)
{
    op_guard_t *g = op->guard;
    store_t *store = op->env->deliver.store;
    int64_t lease_end = op->dl.deadline_ms + LEASE_MARGIN_MS; /* the record's (idem_begin) */

    if (g == NULL)
        return;
    if (g->owner) {
        /* Answers of a request that ran are kept; one that stopped before it ran is dropped,
         * so that a retry runs afresh instead of replaying a refusal. So is a send whose every
         * message was rate limited: nothing went out, and a retry after the wait should send
         * (a redirect's actions ran, so its answer stays). */
        int sent_nothing =
            op->kind->route == METRICS_ROUTE_SEND && deliver_only_rate_limited(&op->dl);
        if ((op->phase == OP_RUN || op->phase == OP_WRITEBACK) && !sent_nothing)
            keep_answer(op, status, code, text ? text : "", text ? len : 0);
        else
            op_guard_drop(op->env, op->id, g->record, g->owner_id, lease_end);
        g->owner = 0;
    } else if (g->begin_sent) {
        /* its begin was still out: it may have made this request the owner, and nobody would
         * give the record back before its lease ran out (the script checks the owner) */
        op_guard_drop(op->env, op->id, g->record, g->owner_id, lease_end);
    }
    if (g->queued) {
        /* the member's id as the take used it: the target's, or the record's */
        store_turn_done(store, g->turn_shard, op->target.channel_id, g->turn_member, g->turn_id,
                        g->joined);
        g->queued = 0;
    }
    guard_free(op);
}
