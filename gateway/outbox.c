/* outbox.c - the outbox of one worker (contract.md section 12). Accepting: a respond-async
 * sendResponses request, checked like any other, is written to a shard's stream and answered
 * 202 (outbox_accept.c). Delivering: a blocking XREADGROUP on a connection of its own hands this
 * worker new entries, a timer takes over (XAUTOCLAIM) those a dead consumer left; each entry
 * is a job, and each try of it an attempt: an op without an HTTP request (op_start_queued) that
 * runs the same resolve, member turn and delivery as a synchronous request, and whose answer
 * comes back here instead of going to a client. The request's record in Redis is its progress
 * across attempts and instances: a response recorded is never sent again; a response whose
 * call may have gone out when an attempt died is reported 125; one that surely reached no
 * platform (a rate limit's wait past the deadline, a 5xx, a refused connection) is tried again
 * after a jittered backoff, until the queue TTL (128). A request's status callback is an entry
 * of the same stream, written by the script that ends the request, and posted signed by
 * outbox_post.c; so is a webhook event (webhook.c queued it, one entry per subscription), once
 * the member's previous event to that subscription is finished. GET /requests/<id> is
 * outbox_status.c's. */
#include "outbox.h"

#include "../core/clock.h"
#include "../core/dlist.h"
#include "../core/rng.h"
#include "../store/broadcast.h"
#include "../store/idem.h"
#include "../store/outbox.h"
#include "log.h"
#include "outbox_accept.h"
#include "outbox_feed.h"
#include "outbox_post.h"
#include "outbox_status.h"

#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_RETRY_MS  1000 /* after a failed read or start */
#define RETRY_AFTER_MS 1000 /* a 429 without Retry-After: as a first backoff */
#define END_AGAIN_MS   100  /* an attempt's end Redis did not take: again after this, doubled */
#define END_AGAIN_MAX  2000 /* ...up to this (redisc's reconnect backoff at its longest) */
#define KEEP_IDS       64   /* entry ids one XCLAIM of keep_held names at most */
/* A broadcast's started requests a worker holds beyond BOTGATE_OUTBOX_JOBS at most (the
 * largest window of a broadcast, bcpump.c): past them they take room as any job does. */
#define BULK_JOBS_MAX 4096
/* Start scripts in flight at most (a read's worth): the entries read next wait for their
 * answers, so that a burst of entries is started a few at a time, not all at once (the
 * conversational commands on the same connection waited behind 15 to 150 of them, 2-3 ms) */
#define STARTS_MAX 8

typedef struct ob_job ob_job_t;

/* Owned by the worker (outbox_new, outbox_free). */
struct outbox {
    op_env_t *env;
    op_outbox_t hooks;
    unsigned shards;
    outbox_feed_t *feed; /* NULL with a cluster: nothing is queued nor read */
    ob_job_t *jobs, *jobs_last;
    unsigned n_jobs;
    /* of them, broadcasts' requests that started (ob_job_t.bulk): they wait for their slot in
     * their lane and take no room, so that the stream holds no backlog of a broadcast that a
     * single async send would be read after (a broadcast's window can be larger than the
     * workers' jobs: 500 at 1,000/s against 256 jobs of one worker) */
    unsigned n_bulk;
    unsigned n_starting;      /* jobs whose start script is out (ob_job_t.starting) */
    outbox_status_t *status;  /* GET /requests in flight */
    struct event *keep_timer; /* keep_held */
    char consumer[48];
};

/* One entry being worked on: a queued request (its attempts, one at a time) or a status
 * callback. Owned by the outbox from job_new to job_free; while an attempt runs, its op points
 * to it (op_outbox(op)) and the job is not freed before the op lets it go (release). */
struct ob_job {
    outbox_t *ob;
    ob_job_t *prev, *next;
    unsigned shard;
    unsigned callback : 1;      /* a status callback (a broadcast's: e.broadcast_channel) */
    unsigned event : 1;         /* a webhook event to a subscription; neither: a request */
    unsigned stale : 1;         /* woken while its start was out: start again */
    unsigned running : 1;       /* an attempt's op holds it */
    unsigned stop : 1;          /* the attempt stopped at a response to try again (stop_at) */
    unsigned abandon : 1;       /* the attempt's progress is unknown: left as if it died */
    unsigned drop : 1;          /* freed at the next wake (after its op let it go) */
    unsigned sub_turn : 1;      /* sub is on the member's turn queue, else on its order */
    unsigned callback_turn : 1; /* a callback whose member's callbacks before it ended */
    unsigned ending : 1;        /* its end is to be written again (end_write) */
    unsigned bulk : 1;          /* a broadcast's request that started (outbox_t.n_bulk) */
    unsigned starting : 1;      /* its start script is out (outbox_t.n_starting) */
    /* its strings in one block, e.entry_id's (an event's url, app and body: below) */
    store_outbox_entry_t e;
    store_outbox_call_t *call;
    struct event *timer;
    redisc_sub_t *sub; /* the member's order or turn, while an earlier request holds it */
    store_idem_call_t *turn_call; /* asking for the member's turn (STORE_OUTBOX_TURN) */
    char owner[17];
    /* the attempt */
    op_t *op; /* while its progress record is out */
    op_progress_fn *then;
    char *app, *bc_hash, *channel;    /* e's, from the start */
    unsigned first, stop_at, resumed; /* first: the first response not finished */
    int crashed, expired;
    int64_t attempts, retry_ms;
    metrics_retry_t reason;
    char *elements[STORE_OUTBOX_ELEMENTS_MAX]; /* of the responses before next */
    char *end_status, *end_result;             /* the attempt's end while it is being written */
    size_t end_len;
    unsigned end_tries;
    int64_t end_by; /* clock_coarse_ms: the end is written again until then (end_failed) */
    /* the progress record in flight: its element is the op's (unchanged while it waits) */
    const char *progress_el;
    size_t progress_len;
    unsigned progress_at;
    /* a delivered element whose progress record did not get through: written before the end */
    char *lost;
    size_t lost_len;
    unsigned lost_at;
    /* a callback or an event */
    outbox_post_t *post;
    store_bc_call_t *bc_call; /* a broadcast's status being read */
    /* an event: posted to url (app: whose secret signs it) as number e.seq of its member's */
    char *url, *body;
};

static metrics_t *metrics(const outbox_t *ob)
{
    return ob->env->deliver.metrics;
}

/* A respond-async request passed every check: queued and answered (outbox_accept.c). */
static void ob_accept(op_t *op)
{
    outbox_accept(op, ((outbox_t *)op->env->outbox->ob)->shards);
}

/* ---- jobs ---- */

static void job_start(ob_job_t *job);
static void turn_ask(ob_job_t *job);
static void callback_start(ob_job_t *job);
static void event_start(ob_job_t *job);

static void end_write(ob_job_t *job);

static void job_free(ob_job_t *job)
{
    outbox_t *ob = job->ob;

    store_outbox_cancel(job->call);
    store_idem_cancel(job->turn_call);
    store_bc_cancel(job->bc_call);
    if (job->timer != NULL)
        event_free(job->timer);
    store_unwatch(job->sub);
    outbox_post_cancel(job->post);
    for (unsigned i = 0; i < STORE_OUTBOX_ELEMENTS_MAX; i++)
        free(job->elements[i]);
    free(job->app);
    free(job->bc_hash);
    free(job->channel);
    free(job->url);
    free(job->body);
    free(job->end_status);
    free(job->end_result);
    free(job->lost);
    free((char *)job->e.entry_id);
    DLIST_UNLINK(ob->jobs, ob->jobs_last, job);
    ob->n_jobs--;
    ob->n_bulk -= job->bulk;
    ob->n_starting -= job->starting;
    free(job);
    outbox_feed_read(ob->feed); /* room for one more */
}

static void job_wake(ob_job_t *job)
{
    if (job->drop) {
        job_free(job);
        return;
    }
    if (job->call != NULL || job->turn_call != NULL || job->post != NULL || job->bc_call != NULL) {
        job->stale = 1;
        return;
    }
    if (job->ending) {
        end_write(job);
        return;
    }
    /* shutting down: nothing new starts; what is left is taken over elsewhere */
    if (job->running || job->ob->env->draining)
        return;
    if (job->callback)
        callback_start(job);
    else if (job->event)
        event_start(job);
    else
        job_start(job);
}

static void on_job_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    job_wake(arg);
}

static void job_later(ob_job_t *job, int64_t ms)
{
    outbox_arm(job->timer, ms);
}

/* Frees the job once its op let it go (at the next wake). */
static void job_drop(ob_job_t *job)
{
    job->drop = 1;
    job_later(job, 0);
}

/* Entry ids are a stream's own: two shards have the same ids in the same millisecond. */
static ob_job_t *job_find(const outbox_t *ob, unsigned shard, const char *entry)
{
    for (ob_job_t *j = ob->jobs; j != NULL; j = j->next)
        if (j->shard == shard && strcmp(j->e.entry_id, entry) == 0)
            return j;
    return NULL;
}

/* A copy of s at *p, moved past it; NULL stays NULL. */
static const char *copy_str(char **p, const char *s)
{
    char *out = *p;
    size_t n;

    if (s == NULL)
        return NULL;
    n = strlen(s) + 1;
    memcpy(out, s, n);
    *p += n;
    return out;
}

/* A job for entry e (the request's or the callback's), started at once. */
static void job_add(outbox_t *ob, const store_outbox_entry_t *e)
{
    const char *strs[] = {e->entry_id,     e->request_id,  e->order_key,
                          e->turn_channel, e->turn_member, e->broadcast_channel};
    size_t len = 0;
    ob_job_t *job;
    char *p;

    if (e->request_id == NULL) { /* deleted, or not ours: nothing to do */
        store_outbox_ack(ob->env->deliver.store, e->shard, e->entry_id);
        return;
    }
    if (job_find(ob, e->shard, e->entry_id) != NULL)
        return;
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        len += strs[i] != NULL ? strlen(strs[i]) + 1 : 0;
    if ((job = calloc(1, sizeof(*job))) == NULL)
        return; /* left pending: taken over later */
    p = malloc(len);
    job->timer = evtimer_new(ob->env->deliver.base, on_job_timer, job);
    if (p == NULL || job->timer == NULL) {
        free(p);
        if (job->timer != NULL)
            event_free(job->timer);
        free(job);
        return;
    }
    job->e = *e;
    job->e.entry_id = copy_str(&p, e->entry_id); /* first: the block's start, freed with it */
    job->e.request_id = copy_str(&p, e->request_id);
    job->e.order_key = copy_str(&p, e->order_key);
    job->e.turn_channel = copy_str(&p, e->turn_channel);
    job->e.turn_member = copy_str(&p, e->turn_member);
    job->e.broadcast_channel = copy_str(&p, e->broadcast_channel);
    /* a broadcast's message names its hash from the first start (the entry's "bq") */
    job->e.bc_hash = job->bc_hash = e->bc_hash != NULL ? strdup(e->bc_hash) : NULL;
    /* an event's own strings are the job's (url, app, body), not the entry's */
    job->e.subscription = job->e.url = job->e.app = job->e.body = NULL;
    job->e.body_len = 0;
    job->ob = ob;
    job->shard = e->shard;
    job->callback = e->callback != 0;
    if (e->subscription != NULL) {
        job->event = 1;
        job->app = strdup(e->app);
        job->url = strdup(e->url);
        job->body = strndup(e->body, e->body_len);
        if (job->app == NULL || job->url == NULL || job->body == NULL) {
            free(job->app);
            free(job->url);
            free(job->body);
            free((char *)job->e.entry_id);
            event_free(job->timer);
            free(job);
            return; /* left pending: taken over later */
        }
    }
    DLIST_APPEND(ob->jobs, ob->jobs_last, job);
    ob->n_jobs++;
    job_wake(job);
}

static void on_order(void *arg, const char *msg, size_t len)
{
    (void)msg; /* a request of the member finished, or the watch (re)started */
    (void)len;
    job_wake(arg);
}

/* Listens on channel (the member's order, or its turn queue: turn 1) until the job runs. */
static void job_watch(ob_job_t *job, const char *channel, int turn)
{
    if (job->sub != NULL && job->sub_turn == turn)
        return;
    store_unwatch(job->sub);
    job->sub_turn = turn != 0;
    job->sub = store_watch_key(job->ob->env->deliver.store, channel, on_order, job);
}

static void on_start(void *arg, store_status_t st, const store_outbox_start_t *s)
{
    ob_job_t *job = arg;
    outbox_t *ob = job->ob;

    job->call = NULL;
    if (job->starting) { /* room for the next read's starts */
        job->starting = 0;
        if (ob->n_starting-- == STARTS_MAX)
            outbox_feed_read(ob->feed);
    }
    if (st != STORE_OK) {
        job_later(job, READ_RETRY_MS);
        return;
    }
    switch (s->state) {
    case STORE_OUTBOX_GONE:
    case STORE_OUTBOX_FINAL:
        store_outbox_ack(ob->env->deliver.store, job->shard, job->e.entry_id);
        job_free(job);
        return;
    case STORE_OUTBOX_ORDER:
        if (job->stale) { /* the member's order may have passed meanwhile */
            job->stale = 0;
            job_start(job);
            return;
        }
        job_watch(job, job->e.order_key, 0);
        /* the request ahead may be held by an instance that died: asked again when it may
         * have been taken over */
        job_later(job, ob->env->deliver.cfg->outbox_claim_ms);
        return;
    case STORE_OUTBOX_TURN:
        turn_ask(job);
        return;
    case STORE_OUTBOX_WAIT:
        job_later(job, s->wait_ms);
        return;
    case STORE_OUTBOX_HASH: /* a broadcast's request: its script is to declare the hash */
    case STORE_OUTBOX_RUN:
        if (job->bc_hash == NULL || strcmp(job->bc_hash, s->bc_hash) != 0) {
            free(job->bc_hash);
            job->e.bc_hash = job->bc_hash = strdup(s->bc_hash);
        }
        if (s->state == STORE_OUTBOX_RUN)
            break;
        if (job->bc_hash != NULL)
            job_start(job);
        else
            job_later(job, READ_RETRY_MS);
        return;
    }
    store_unwatch(job->sub);
    job->sub = NULL;
    evtimer_del(job->timer);
    free(job->app);
    job->app = strdup(s->app);
    free(job->channel);
    job->e.channel = job->channel = strdup(s->channel);
    for (unsigned i = 0; i < STORE_OUTBOX_ELEMENTS_MAX; i++) {
        free(job->elements[i]);
        job->elements[i] = i < s->next ? strndup(s->elements[i], s->element_lens[i]) : NULL;
    }
    job->first = s->next;
    job->crashed = s->crashed;
    job->expired = s->expired;
    job->attempts = s->attempts;
    job->stop = job->abandon = 0;
    job->resumed = 0;
    free(job->lost);
    job->lost = NULL;
    /* While Redis does not take this attempt's end, the end is written again (end_failed)
     * until another attempt may have begun: none starts before this one's lease is over, nor
     * before another instance took the entry over, which it may once the entry was idle for
     * the claim time (it was read, or last kept by keep_held, before now). Past the later of the
     * two, one may have begun and reported the unknown (125) for what this attempt knew; the end's
     * script would then refuse this one's (it checks the owner), so the job gives its slot back. */
    {
        const config_t *cfg = ob->env->deliver.cfg;
        int64_t lease = (int64_t)cfg->request_timeout_ms + OUTBOX_LEASE_MARGIN_MS;
        job->end_by =
            clock_coarse_ms() + (lease > cfg->outbox_claim_ms ? lease : cfg->outbox_claim_ms);
    }
    metrics_count(&metrics(ob)->outbox_attempts);
    if (log_enabled(LOG_DEBUG))
        log_msg(LOG_DEBUG, "outbox: request %s attempt %lld from response %u", job->e.request_id,
                (long long)s->attempts, s->next);
    job->running = 1;
    if (s->bulk && !job->bulk) { /* its room goes to the next entry */
        job->bulk = 1;
        ob->n_bulk++;
        outbox_feed_read(ob->feed);
    }
    /* a broadcast's message (broadcast.c) takes its rate-limit slots after the others' */
    if (job->app == NULL || job->channel == NULL || job->bc_hash == NULL ||
        op_start_queued(ob->env,
                        strcmp(s->kind, "redirect") == 0 ? &op_redirect_kind
                        : s->bulk                        ? &op_send_bulk_kind
                                                         : &op_send_kind,
                        s->body, s->body_len, job->app, job) < 0) {
        job->running = 0;
        job->abandon = 1; /* taken over as after a crash: nothing is sent twice */
        job_drop(job);
    }
}

/* A sync request reached the member's turn queue before this one's place was taken there, and
 * holds the turn: store_turn_join tells how long at most (dropping holders whose lease ran
 * out); the queue's channel says when it passes. */
static void on_turn(void *arg, store_status_t st, int64_t wait_ms)
{
    ob_job_t *job = arg;
    outbox_t *ob = job->ob;
    char queue[STORE_KEY_MAX];

    job->turn_call = NULL;
    if (st != STORE_OK) {
        job_later(job, READ_RETRY_MS);
        return;
    }
    if (wait_ms == 0 || job->stale) {
        job_start(job);
        return;
    }
    if (store_turn_key(ob->env->deliver.store, queue, sizeof(queue), job->e.shard,
                       job->e.turn_channel, job->e.turn_member) < 0) {
        job_later(job, READ_RETRY_MS);
        return;
    }
    job_watch(job, queue, 1);
    job_later(job, wait_ms < ob->env->deliver.cfg->outbox_claim_ms
                       ? wait_ms
                       : ob->env->deliver.cfg->outbox_claim_ms);
}

static void turn_ask(ob_job_t *job)
{
    outbox_t *ob = job->ob;
    store_status_t st = STORE_OK;

    job->stale = 0;
    /* first 0: its place and lease were set when it was accepted */
    job->turn_call = store_turn_join(
        ob->env->deliver.store, job->e.shard, job->e.turn_channel, job->e.turn_member,
        job->e.request_id, ob->env->deliver.cfg->request_timeout_ms, 0, on_turn, job, &st);
    if (job->turn_call == NULL)
        job_later(job, READ_RETRY_MS);
}

static void job_start(ob_job_t *job)
{
    outbox_t *ob = job->ob;
    const config_t *cfg = ob->env->deliver.cfg;
    store_status_t st = STORE_OK;

    job->stale = 0;
    rng_hex(&ob->env->deliver.rng, job->owner, 16);
    job->call =
        store_outbox_start(ob->env->deliver.store, &job->e, job->owner,
                           cfg->request_timeout_ms + OUTBOX_LEASE_MARGIN_MS, on_start, job, &st);
    if (job->call == NULL)
        job_later(job, READ_RETRY_MS);
    else if (!job->starting) {
        job->starting = 1;
        ob->n_starting++;
    }
}

/* ---- an attempt's op (op_outbox_t) ---- */

/* Whether a failed element may be tried again: it surely reached no platform (unsent, or a
 * rate limit's 120), and its failure may pass. Sets the delay and the reason. */
static int element_retry(outbox_t *ob, const json_t *el, int unsent, int64_t attempts,
                         int64_t *delay_ms, metrics_retry_t *reason)
{
    const json_t *e = json_object_get(el, "error");
    int code = (int)json_integer_value(json_object_get(e, "err_code"));

    if (e == NULL)
        return 0;
    if (code == BG_ERR_RATE_LIMITED) {
        json_int_t after = json_integer_value(json_object_get(e, "retryAfterMs"));
        *delay_ms = (after > 0 ? after : RETRY_AFTER_MS) + outbox_backoff_ms(ob->env, 1) / 10;
        *reason = METRICS_RETRY_RATE_LIMITED;
        return 1;
    }
    if (unsent && (code == BG_ERR_PLATFORM || code == BG_ERR_STORE)) {
        *delay_ms = outbox_backoff_ms(ob->env, attempts);
        *reason = code == BG_ERR_STORE ? METRICS_RETRY_STORE : METRICS_RETRY_PLATFORM;
        return 1;
    }
    return 0;
}

/* The progress record of a delivered response did not get through (Redis did not answer, or
 * the deadline came first): the attempt stops there, nothing of it after that response went
 * out, and its element is kept to be written again before the attempt's end (end_write), so
 * that a later attempt reports it delivered, not unknown. Out of memory: left as it is (the
 * attempt then ends as if this instance died: 125 for that response). */
static void progress_lost(ob_job_t *job)
{
    job->abandon = 1;
    if (job->lost == NULL && job->progress_el != NULL &&
        (job->lost = strndup(job->progress_el, job->progress_len)) != NULL) {
        job->lost_len = job->progress_len;
        job->lost_at = job->progress_at;
    }
    job->progress_el = NULL;
}

static void on_progress(void *arg, store_status_t st)
{
    ob_job_t *job = arg;
    op_progress_fn *then = job->then;

    job->call = NULL;
    job->then = NULL;
    if (st == STORE_CONFLICT) /* another attempt holds the request: its outcome is its own */
        job->abandon = 1;
    else if (st != STORE_OK)
        progress_lost(job);
    job->progress_el = NULL;
    then(job->op, st == STORE_OK);
}

static int ob_progress(op_t *op, unsigned done, const char *element, size_t len,
                       op_progress_fn *then)
{
    ob_job_t *job = op_outbox(op);
    outbox_t *ob = job->ob;
    json_t *el = json_loadb(element, len, 0, NULL);
    store_status_t st = STORE_OK;
    int retry = el != NULL && element_retry(ob, el, op->dl.last_unsent, job->attempts,
                                            &job->retry_ms, &job->reason);

    json_decref(el);
    if (retry) {
        /* the responses after it wait for it: order within the request holds */
        job->stop = 1;
        job->stop_at = done;
        return -1;
    }
    job->op = op;
    job->then = then;
    job->progress_el = element;
    job->progress_len = len;
    job->progress_at = done;
    job->call = store_outbox_progress(ob->env->deliver.store, &job->e, job->owner, done, element,
                                      len, on_progress, job, &st);
    if (job->call == NULL) {
        job->then = NULL;
        progress_lost(job);
        return -1;
    }
    return 1;
}

static op_resumed_t ob_resumed(const op_t *op, unsigned i, const char **element)
{
    ob_job_t *job = op_outbox(op);
    op_resumed_t how = OP_RESUMED_NO;

    if (i < job->first) {
        *element = job->elements[i] != NULL && job->elements[i][0] ? job->elements[i] : NULL;
        how = *element != NULL ? OP_RESUMED_DELIVERED : OP_RESUMED_UNKNOWN;
    } else if (i == job->first && job->crashed) {
        how = OP_RESUMED_UNKNOWN;
    } else if (job->expired) {
        how = OP_RESUMED_EXPIRED;
    }
    if (how != OP_RESUMED_NO && i + 1 > job->resumed)
        job->resumed = i + 1;
    return how;
}

static void ob_cancel(op_t *op)
{
    if (op_is_async(op)) {
        outbox_accept_cancel(op);
        return;
    }
    {
        ob_job_t *job = op_outbox(op);
        if (job->then != NULL) { /* a progress record not confirmed: written again */
            store_outbox_cancel(job->call);
            job->call = NULL;
            job->then = NULL;
            progress_lost(job);
        }
    }
}

static void ob_release(op_t *op)
{
    if (op_is_async(op)) {
        outbox_accept_release(op);
    } else {
        ob_job_t *job = op_outbox(op);
        job->running = 0;
        job->op = NULL;
    }
    op_outbox(op) = NULL;
}

/* Redis did not take the attempt's end (not reached, timed out, or with a Redis Cluster
 * refused while the shard's slot migrates: the script then wrote nothing). The attempt knows
 * how it ended, so the end is written again, on the job's timer with a growing pause, until
 * end_by (set at the start, where it says why); each try's script checks that this attempt
 * still owns the record, so a late one changes nothing another attempt wrote. Given up, the
 * record says an attempt is out, and whoever takes the entry over finds it as after a crash. */
static void end_failed(ob_job_t *job)
{
    int64_t ms = clock_doubling_ms(END_AGAIN_MS, END_AGAIN_MAX, job->end_tries);

    if (clock_coarse_ms() + ms < job->end_by) {
        job->end_tries++;
        job->ending = 1;
        job_later(job, ms);
        return;
    }
    log_msg(LOG_WARN,
            "outbox: request %s: Redis did not take the end of its attempt (%u tries): left "
            "to be taken over",
            job->e.request_id, job->end_tries + 1);
    job_drop(job);
}

/* A write of the attempt's end answered: the lost progress record (then the end), or the
 * end. */
static void on_end(void *arg, store_status_t st)
{
    ob_job_t *job = arg;

    job->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        end_failed(job);
        return;
    }
    job->ending = 0;
    if (job->lost != NULL) {
        free(job->lost);
        job->lost = NULL;
        if (st == STORE_OK) {
            end_write(job);
            return;
        }
    } else if ((st == STORE_OK || st == STORE_CONFLICT) && job->retry_ms >= 0) {
        /* to be tried again: also when the script found another owner, which is this end's
         * earlier try whose answer was lost, or an attempt that took over; the start tells */
        job_later(job, job->retry_ms);
        return;
    }
    /* final (the entry was acknowledged with it, now or by an earlier try), or another
     * attempt owns the record */
    job_free(job);
}

/* The attempt's end as job_end recorded it: first a delivered element whose progress record
 * did not get through, then the end's script. */
static void end_write(ob_job_t *job)
{
    outbox_t *ob = job->ob;
    const config_t *cfg = ob->env->deliver.cfg;
    store_outbox_end_t end = {job->end_status != NULL, job->end_status, job->end_result,
                              job->end_len, job->retry_ms, (int64_t)cfg->idempotency_ttl_s * 1000,
                              /* its callback is tried that long, behind the member's others */
                              OUTBOX_POST_FOR_MS + (int64_t)cfg->outbox_claim_ms * 4};
    store_status_t st = STORE_OK;

    job->ending = 0;
    if (job->lost != NULL)
        job->call = store_outbox_progress(ob->env->deliver.store, &job->e, job->owner, job->lost_at,
                                          job->lost, job->lost_len, on_end, job, &st);
    else
        job->call =
            store_outbox_end(ob->env->deliver.store, &job->e, job->owner, &end, on_end, job, &st);
    if (job->call == NULL)
        end_failed(job);
}

/* The attempt's end in Redis: final with status and result, or tried again after retry_ms. */
static void job_end(ob_job_t *job, const char *status, const char *result, size_t len)
{
    outbox_t *ob = job->ob;

    if (status != NULL) {
        job->retry_ms = -1;
        metrics_count(&metrics(ob)->outbox_ended[strcmp(status, "done") == 0 ? 0 : 1]);
    } else {
        metrics_count(&metrics(ob)->outbox_retries[job->reason]);
    }
    free(job->end_status);
    free(job->end_result);
    job->end_status = status != NULL ? strdup(status) : NULL;
    job->end_result = result != NULL ? strndup(result, len) : NULL;
    job->end_len = len;
    job->end_tries = 0;
    if (status != NULL && (job->end_status == NULL || job->end_result == NULL)) {
        job_drop(job); /* out of memory: taken over later */
        return;
    }
    end_write(job);
}

/* The final result: what GET /requests/<id> and the callback show besides the status, as the
 * members of an object: "sendResult":{...} and, when the request failed whole, "error". */
static char *final_result(const json_t *answer, int status, int code, const char *member_id,
                          size_t *len)
{
    const json_t *sr = json_object_get(answer, "sendResult");
    json_t *out = json_object();
    char *text;

    if (out == NULL)
        return NULL;
    /* a request that failed whole has none: an empty one keeps the status's shape */
    if (sr != NULL)
        json_object_set(out, "sendResult", (json_t *)sr);
    else
        json_object_set_new(
            out, "sendResult",
            json_pack("{s:i,s:s,s:[]}", "ok", 0, "member", member_id != NULL ? member_id : ""));
    if (status != 200) {
        json_t *e = json_object();
        json_object_set_new(e, "err_code", code > 0 ? json_integer(code) : json_null());
        json_object_set(e, "err", json_object_get(answer, "err"));
        json_object_set_new(out, "error", e);
    }
    text = jw_dump(out, len);
    json_decref(out);
    if (text != NULL && *len >= 2) { /* the members without the braces */
        memmove(text, text + 1, *len - 2);
        *len -= 2;
        text[*len] = '\0';
    }
    return text;
}

/* A drain's answer (contract.md: 121 marks what surely was not sent): 1 when the response at
 * which it stopped the attempt (at: the first not finished) was not sent at all (121), or the
 * attempt had not started; 0 when it was the one whose call the drain cut (113: it may have
 * been delivered). The responses before it were recorded as they finished. */
static int drained_unsent(const json_t *answer, int status, size_t at)
{
    const json_t *results = json_object_get(json_object_get(answer, "sendResult"), "result");
    const json_t *e = json_object_get(json_array_get(results, at), "error");

    if (status != 200 && results == NULL)
        return json_integer_value(json_object_get(answer, "err_code")) == BG_ERR_UNAVAILABLE;
    return json_integer_value(json_object_get(e, "err_code")) == BG_ERR_UNAVAILABLE;
}

/* The end of an attempt, final: with the status and result of answer. */
static void job_final(ob_job_t *job, const op_t *op, const json_t *answer, int status, int code)
{
    size_t len = 0;
    char *result = final_result(answer, status, code, op->target.member_id, &len);
    int ok = status == 200 &&
             json_integer_value(json_object_get(json_object_get(answer, "sendResult"), "ok"));

    if (result == NULL) {
        job_drop(job); /* out of memory: taken over later */
        return;
    }
    job_end(job, ok ? "done" : "failed", result, len);
    free(result);
}

/* A redirect's attempt answered. Its node runs whole or not at all (its actions and templates
 * read the member it changes; nothing records a run's progress): tried again only when the
 * run had not begun, else final with what it did. */
static void redirect_answered(op_t *op, ob_job_t *job, const json_t *answer, int status, int code)
{
    if (op->phase < OP_RUN && op->drain_cut) {
        job->retry_ms = 0; /* another instance runs it, at once */
        job->reason = METRICS_RETRY_STORE;
        job_end(job, NULL, NULL, 0);
    } else if (op->phase < OP_RUN && status != 200 &&
               (code == BG_ERR_STORE || code == BG_ERR_UNAVAILABLE)) {
        job->retry_ms = outbox_backoff_ms(job->ob->env, job->attempts);
        job->reason = METRICS_RETRY_STORE;
        job_end(job, NULL, NULL, 0);
    } else {
        job_final(job, op, answer, status, code);
    }
}

/* The common end of a send, every response delivered by this attempt: final, done, with the
 * answer's "sendResult" member as the op wrote it (result.c: {"ok":1,"member":..,"sendResult":
 * {"ok":1,...}}), neither parsed nor written again (that was about 5 % of a delivery's CPU in
 * bench scenario f). 0 when the answer is another one. */
static int delivered_whole(ob_job_t *job, const op_t *op, int status, const char *text, size_t len)
{
    static const char key[] = ",\"sendResult\":{\"ok\":1,";
    const char *at;

    if (status != 200 || text == NULL || len < 2 || text[len - 1] != '}' || job->abandon ||
        job->stop || job->resumed > 0 || op->drain_cut || op->dl.failed > 0 ||
        op->kind->route != METRICS_ROUTE_SEND || strncmp(text, "{\"ok\":1,", 8) != 0 ||
        (at = memmem(text, len, key, sizeof(key) - 1)) == NULL)
        return 0;
    at++; /* past the comma; a string's quotes are escaped: the first match is the member */
    job_end(job, "done", at, (size_t)(text + len - 1 - at));
    return 1;
}

static void ob_answered(op_t *op, int status, int code, const char *text, size_t len)
{
    ob_job_t *job = op_outbox(op);
    outbox_t *ob = job->ob;
    json_t *answer;
    const json_t *results;
    size_t n;
    /* the first response this attempt did not finish */
    size_t at = job->resumed + (size_t)(deliver_sent(&op->dl) + op->dl.failed);

    if (delivered_whole(job, op, status, text, len))
        return;
    answer = text != NULL ? json_loadb(text, len, 0, NULL) : NULL;
    results = json_object_get(json_object_get(answer, "sendResult"), "result");
    n = json_array_size(results);
    if (op->kind->route == METRICS_ROUTE_REDIRECT && !job->abandon) {
        redirect_answered(op, job, answer, status, code);
    } else if (job->abandon && job->lost != NULL) {
        /* stopped at a progress record that did not get through: nothing of it after that
         * response went out; the record is written with the end (end_write), and the next
         * attempt goes on from the response after it, at once */
        job->retry_ms = 0;
        job->reason = METRICS_RETRY_STORE;
        job_end(job, NULL, NULL, 0);
    } else if (job->abandon || (op->drain_cut && !drained_unsent(answer, status, at))) {
        /* a call may be out whose outcome nobody recorded: left as if this instance died,
         * for a later attempt to find (125 for that response, never sent twice) */
        job_drop(job);
    } else if (op->drain_cut) {
        /* shut down with nothing of it on the wire: another instance goes on from the first
         * response not sent, at once (this one takes nothing new) */
        job->retry_ms = 0;
        job->reason = METRICS_RETRY_STORE;
        job_end(job, NULL, NULL, 0);
    } else if (job->stop) {
        job_end(job, NULL, NULL, 0);
    } else if (status != 200 && (code == BG_ERR_STORE || code == BG_ERR_UNAVAILABLE ||
                                 (code == BG_ERR_PLATFORM && op->dl.last_unsent))) {
        /* the request failed whole before anything was sent: tried again */
        job->retry_ms = outbox_backoff_ms(ob->env, job->attempts);
        job->reason = code == BG_ERR_PLATFORM ? METRICS_RETRY_PLATFORM : METRICS_RETRY_STORE;
        job_end(job, NULL, NULL, 0);
    } else if (status == 200 && n > 0 &&
               (unsigned)(deliver_sent(&op->dl) + op->dl.failed) == n - job->resumed &&
               element_retry(ob, json_array_get(results, n - 1), op->dl.last_unsent, job->attempts,
                             &job->retry_ms, &job->reason)) {
        job_end(job, NULL, NULL, 0); /* the last response, which no progress record names */
    } else {
        job_final(job, op, answer, status, code);
    }
    json_decref(answer);
}

/* ---- status callbacks ---- */

static void on_callback_posted(void *arg, int delivered)
{
    ob_job_t *job = arg;

    job->post = NULL;
    metrics_count(&metrics(job->ob)->callbacks[delivered ? 0 : 1]);
    store_outbox_callback_done(job->ob->env->deliver.store, &job->e); /* the next one's turn */
    job_free(job);
}

/* Posts body (taken over; NULL: the status was not read, or out of memory: tried again after
 * a backoff). */
static void callback_post(ob_job_t *job, const char *app, const char *url, char *body,
                          const char *event_id, int64_t since_ms)
{
    outbox_t *ob = job->ob;

    if (body != NULL) {
        outbox_post_req_t req = {app,      url,      body,
                                 event_id, since_ms, &metrics(ob)->callback_retries};
        job->post = outbox_post_start(ob->env, &req, on_callback_posted, job);
        free(body);
    }
    if (job->post == NULL)
        job_later(job, outbox_backoff_ms(ob->env, ++job->attempts));
}

static void on_callback_status(void *arg, store_status_t st, const store_outbox_status_t *s)
{
    ob_job_t *job = arg;
    char event_id[80];
    char *body;
    size_t len = 0;

    job->call = NULL;
    if (st == STORE_NOT_FOUND || (st == STORE_OK && s->callback[0] == '\0')) {
        on_callback_posted(job, 0); /* the record is gone: nothing to tell */
        return;
    }
    /* one per callback, the same on each try: the receiver's de-duplication key */
    snprintf(event_id, sizeof(event_id), "%s.%s", job->e.request_id, job->e.entry_id);
    body = st == STORE_OK ? outbox_status_text(job->e.request_id, s, event_id, &len) : NULL;
    callback_post(job, st == STORE_OK ? s->app : NULL, st == STORE_OK ? s->callback : NULL, body,
                  event_id, st == STORE_OK ? s->updated_ms : 0);
}

static void on_callback_turn(void *arg, store_status_t st, int turn)
{
    ob_job_t *job = arg;

    job->call = NULL;
    if (st != STORE_OK) {
        job_later(job, READ_RETRY_MS);
        return;
    }
    if (!turn && job->stale) { /* the one before may have ended meanwhile */
        callback_start(job);
        return;
    }
    if (!turn) {
        job_watch(job, job->e.order_key, 0);
        /* the one before may be held by an instance that died: asked again when it may have
         * been taken over */
        job_later(job, job->ob->env->deliver.cfg->outbox_claim_ms);
        return;
    }
    store_unwatch(job->sub);
    job->sub = NULL;
    evtimer_del(job->timer);
    job->callback_turn = 1;
    callback_start(job);
}

/* A broadcast's: its status as GET /broadcasts/<id> tells it, with eventId "<id>.<state>". A
 * cancelled one's waits (as the DELETE's answer does) until no attempt of it may still send. */
static void on_broadcast_status(void *arg, store_status_t st, const store_bc_status_t *s)
{
    ob_job_t *job = arg;
    outbox_t *ob = job->ob;
    const config_t *cfg = ob->env->deliver.cfg;
    char event_id[80], *body = NULL;
    size_t len = 0;

    job->bc_call = NULL;
    if (st == STORE_NOT_FOUND || (st == STORE_OK && s->callback[0] == '\0')) {
        on_callback_posted(job, 0); /* the record is gone: nothing to tell */
        return;
    }
    if (st == STORE_OK && s->sending > 0 &&
        clock_wall_ms() < strtoll(job->e.entry_id, NULL, 10) + cfg->request_timeout_ms + 5000) {
        job_later(job, 100);
        return;
    }
    if (st == STORE_OK) {
        snprintf(event_id, sizeof(event_id), "%s.%s", job->e.request_id, s->state);
        body = outbox_broadcast_status_text(job->e.request_id, s, event_id, &len);
    }
    callback_post(job, st == STORE_OK ? s->app : NULL, st == STORE_OK ? s->callback : NULL, body,
                  event_id, st == STORE_OK ? s->updated_ms : 0);
}

/* A member's callbacks go out in the order their requests ended: each waits for the one
 * before to be taken (or given up), then reads the status and posts it. A broadcast's has no
 * member: it is posted at once. */
static void callback_start(ob_job_t *job)
{
    store_status_t st = STORE_OK;

    job->stale = 0;
    if (job->e.broadcast_channel != NULL) {
        job->bc_call = store_bc_status(job->ob->env->deliver.store, job->e.broadcast_channel,
                                       job->e.request_id, on_broadcast_status, job, &st);
        if (job->bc_call == NULL)
            job_later(job, READ_RETRY_MS);
        return;
    }
    if (job->e.callback_seq > 0 && !job->callback_turn) {
        job->call = store_outbox_callback_turn(job->ob->env->deliver.store, &job->e,
                                               on_callback_turn, job, &st);
        if (job->call == NULL)
            job_later(job, READ_RETRY_MS);
        return;
    }
    job->call = store_outbox_status(job->ob->env->deliver.store, job->shard, job->e.request_id,
                                    on_callback_status, job, &st);
    if (job->call == NULL)
        job_later(job, READ_RETRY_MS);
}

/* ---- webhook events to subscriptions ---- */

/* The job's entry as the store names it. */
static store_outbox_entry_t event_entry(const ob_job_t *job)
{
    return job->e;
}

static void on_event_posted(void *arg, int delivered)
{
    ob_job_t *job = arg;
    store_outbox_entry_t e = event_entry(job);

    job->post = NULL;
    metrics_count(&metrics(job->ob)->webhook_posts[delivered ? 0 : 1]);
    /* delivered, or given up after 24 h: either way the member's next event may go */
    store_outbox_event_end(job->ob->env->deliver.store, &e);
    job_free(job);
}

static void on_event_turn(void *arg, store_status_t st, int turn)
{
    ob_job_t *job = arg;
    outbox_t *ob = job->ob;

    job->call = NULL;
    if (st != STORE_OK) {
        job_later(job, READ_RETRY_MS);
        return;
    }
    if (turn == 2) { /* posted before (its end was lost): only the entry is left */
        store_outbox_entry_t e = event_entry(job);
        store_outbox_event_end(ob->env->deliver.store, &e);
        job_free(job);
        return;
    }
    if (turn == 0) { /* the member's previous event to this subscription is not finished */
        if (job->stale) {
            event_start(job);
            return;
        }
        if (job->sub == NULL)
            job->sub = store_watch_key(ob->env->deliver.store, job->e.order_key, on_order, job);
        job_later(job, ob->env->deliver.cfg->outbox_claim_ms);
        return;
    }
    store_unwatch(job->sub);
    job->sub = NULL;
    evtimer_del(job->timer);
    {
        /* the 24 h are counted from the event's queuing: its entry id's milliseconds */
        outbox_post_req_t req = {job->app,
                                 job->url,
                                 job->body,
                                 job->e.request_id,
                                 strtoll(job->e.entry_id, NULL, 10),
                                 &metrics(ob)->webhook_post_retries};
        job->post = outbox_post_start(ob->env, &req, on_event_posted, job);
    }
    if (job->post == NULL)
        job_later(job, outbox_backoff_ms(ob->env, ++job->attempts));
}

static void event_start(ob_job_t *job)
{
    store_outbox_entry_t e = event_entry(job);
    store_status_t st = STORE_OK;

    job->stale = 0;
    job->call = store_outbox_event_turn(job->ob->env->deliver.store, &e, on_event_turn, job, &st);
    if (job->call == NULL)
        job_later(job, READ_RETRY_MS);
}

/* ---- the worker's outbox ---- */

/* The entries this worker's jobs hold stay its consumer's: each third of the claim time their
 * idle time goes back to 0, so that no other instance takes over an entry whose job is alive
 * but waits longer than the claim time (a member's earlier request, a retry's backoff, a
 * status callback or an event retried for hours): taken over, it would be posted twice, or a
 * second job would wait beside the first. A job being dropped is left to be taken over. */
static void keep_held(evutil_socket_t fd, short what, void *arg)
{
    outbox_t *ob = arg;
    const char *ids[KEEP_IDS];

    (void)fd;
    (void)what;
    for (unsigned shard = 0; shard < ob->shards && !ob->env->draining; shard++) {
        unsigned n = 0;
        for (ob_job_t *j = ob->jobs; j != NULL; j = j->next) {
            if (j->shard != shard || j->drop)
                continue;
            ids[n++] = j->e.entry_id;
            if (n == KEEP_IDS) {
                store_outbox_keep(ob->env->deliver.store, shard, ob->consumer, ids, n);
                n = 0;
            }
        }
        store_outbox_keep(ob->env->deliver.store, shard, ob->consumer, ids, n);
    }
    outbox_arm(ob->keep_timer, ob->env->deliver.cfg->outbox_claim_ms / 3);
}

void outbox_status_route(void *arg, struct evhttp_request *req)
{
    outbox_t *ob = arg;

    outbox_status_get(ob->status, req);
}

/* An entry the feed read or took over: a job, unless it is one already. */
static void on_feed_entry(void *arg, const store_outbox_entry_t *e, int claimed)
{
    outbox_t *ob = arg;

    if (claimed && e->request_id != NULL && job_find(ob, e->shard, e->entry_id) == NULL)
        metrics_count(&metrics(ob)->outbox_claimed);
    job_add(ob, e);
}

/* The jobs that take room: a broadcast's started requests only past BULK_JOBS_MAX; all of it
 * while STARTS_MAX start scripts are out. */
static unsigned feed_jobs(void *arg)
{
    const outbox_t *ob = arg;
    unsigned n =
        ob->n_jobs - ob->n_bulk + (ob->n_bulk > BULK_JOBS_MAX ? ob->n_bulk - BULK_JOBS_MAX : 0);
    unsigned room = (unsigned)ob->env->deliver.cfg->outbox_jobs;

    return ob->n_starting >= STARTS_MAX && n < room ? room : n;
}

void outbox_watch_depth(outbox_t *ob)
{
    if (ob != NULL)
        outbox_feed_watch_depth(ob->feed);
}

outbox_t *outbox_new(op_env_t *env, int worker_id)
{
    outbox_t *ob = calloc(1, sizeof(*ob));

    if (ob == NULL)
        return NULL;
    ob->env = env;
    ob->shards = (unsigned)env->deliver.cfg->outbox_shards;
    /* one name per worker and process: a restarted instance is a new consumer, and the old
     * one's entries are taken over once idle for the claim time */
    snprintf(ob->consumer, sizeof(ob->consumer), "%s-%d", env->deliver.cfg->instance, worker_id);
    ob->hooks =
        (op_outbox_t){ob, ob_accept, ob_answered, ob_progress, ob_resumed, ob_cancel, ob_release};
    if ((ob->status = outbox_status_new(env)) == NULL ||
        (ob->keep_timer = evtimer_new(env->deliver.base, keep_held, ob)) == NULL) {
        outbox_free(ob);
        return NULL;
    }
    outbox_arm(ob->keep_timer, env->deliver.cfg->outbox_claim_ms / 3);
    ob->feed = outbox_feed_new(env, ob->shards, ob->consumer, on_feed_entry, feed_jobs, ob);
    if (ob->feed == NULL) {
        outbox_free(ob);
        return NULL;
    }
    env->outbox = &ob->hooks;
    return ob;
}

void outbox_free(outbox_t *ob)
{
    if (ob == NULL)
        return;
    ob->env->outbox = NULL;
    outbox_feed_free(ob->feed);
    ob->feed = NULL;
    outbox_status_free(ob->status);
    if (ob->keep_timer != NULL)
        event_free(ob->keep_timer);
    /* what is not finished stays pending in Redis: another consumer takes it over */
    while (ob->jobs != NULL)
        job_free(ob->jobs);
    free(ob);
}
