/* outbox_feed.c - a worker's outbox entries (contract.md section 12): a blocking XREADGROUP on
 * a connection of its own hands new entries up as the outbox has room, a timer takes over
 * (XAUTOCLAIM) those a dead consumer left, shard after shard, and one worker's timer keeps the
 * depth gauges and prunes the consumers of workers that are gone. */
#include "outbox_feed.h"

#include "../core/clock.h"

#include "outbox_post.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCK_MS        5000 /* a blocking read's wait: the connection shows it is alive */
#define READ_RETRY_MS   1000 /* after a failed read */
#define SEND_RETRY_MS   100  /* after a read not sent (a cluster's slot map not read yet) */
#define DEPTH_EVERY_MS  5000
#define READ_COUNT      8 /* entries one read takes at most */
#define CLAIM_WHEN_FULL 4 /* entries a full worker takes over at a time */

typedef struct outbox_feed outbox_feed_t;

/* One blocking reader: of every shard with one server, of one shard with a cluster. */
typedef struct feed_reader {
    outbox_feed_t *f;
    store_outbox_reader_t *reader;
    unsigned want;    /* entries asked for by its read in flight; 0: not reading */
    int64_t retry_ms; /* after a failure, no read before this (clock_coarse_ms) */
} feed_reader_t;

/* Owned by the outbox (outbox_feed_new, outbox_feed_free). */
struct outbox_feed {
    op_env_t *env;
    outbox_feed_entry_fn *entry;
    outbox_feed_jobs_fn *jobs;
    void *arg;
    unsigned shards;
    feed_reader_t readers[STORE_OUTBOX_SHARDS_MAX];
    unsigned n_readers, next_reader;
    unsigned asked; /* entries the reads in flight may bring */
    unsigned stopped : 1;
    struct event *read_timer;  /* a read that could not be sent goes again */
    struct event *claim_timer; /* takes over entries of dead consumers */
    struct event *depth_timer; /* the depth gauges (one worker) */
    unsigned claim_shard, depth_shard;
    store_outbox_call_t *claim, *depth;
    char consumer[48];
};

static metrics_t *metrics(const outbox_feed_t *f)
{
    return f->env->deliver.metrics;
}

/* ---- reading ---- */

static void on_entries(void *arg, store_status_t st, const store_outbox_entry_t *e, size_t n)
{
    feed_reader_t *fr = arg;
    outbox_feed_t *f = fr->f;

    f->asked -= fr->want;
    fr->want = 0;
    if (f->stopped)
        return;
    for (size_t i = 0; i < n; i++)
        f->entry(f->arg, &e[i], 0);
    if (st != STORE_OK)
        fr->retry_ms = clock_coarse_ms() + READ_RETRY_MS; /* outbox_feed_read arms the timer */
    outbox_feed_read(f);
}

/* Each idle reader reads while the outbox has room for what the reads in flight may bring; a
 * few entries at a time, so that a burst spreads over the workers and instances blocked
 * beside, and with many readers (a cluster's shards) a share of the room each, taken in turn. */
void outbox_feed_read(outbox_feed_t *f)
{
    unsigned room, jobs;
    int64_t now = clock_coarse_ms(), wake = -1;

    if (f == NULL || f->stopped || f->env->draining)
        return;
    room = (unsigned)f->env->deliver.cfg->outbox_jobs;
    jobs = f->jobs(f->arg);
    for (unsigned k = 0; k < f->n_readers && jobs + f->asked < room; k++) {
        feed_reader_t *fr = &f->readers[(f->next_reader + k) % f->n_readers];
        unsigned free_ = room - jobs - f->asked;
        unsigned want = free_ / f->n_readers > 0 ? free_ / f->n_readers : 1;

        if (fr->want > 0)
            continue;
        if (now < fr->retry_ms) { /* the timer wakes it then */
            wake = wake < 0 || fr->retry_ms - now < wake ? fr->retry_ms - now : wake;
            continue;
        }
        want = want < READ_COUNT ? want : READ_COUNT;
        if (store_outbox_read(fr->reader, want, on_entries, fr) < 0) {
            /* soon again: at start a cluster's readers wait for its slot map */
            fr->retry_ms = now + SEND_RETRY_MS;
            wake = wake < 0 || SEND_RETRY_MS < wake ? SEND_RETRY_MS : wake;
            continue;
        }
        fr->want = want;
        f->asked += want;
    }
    f->next_reader = (f->next_reader + 1) % f->n_readers;
    if (wake >= 0)
        outbox_arm(f->read_timer, wake + 1);
}

static void on_read_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    outbox_feed_read(arg);
}

/* ---- taking over ---- */

static void claim_next(outbox_feed_t *f);

static void on_claimed(void *arg, store_status_t st, const store_outbox_entry_t *e, size_t n)
{
    outbox_feed_t *f = arg;

    f->claim = NULL;
    for (size_t i = 0; i < n; i++)
        f->entry(f->arg, &e[i], 1);
    (void)st;
    f->claim_shard++;
    claim_next(f);
}

/* One shard after the other, then again after half the claim time. A worker whose every slot
 * holds a request waiting for its member's earlier one still takes a few over (up to twice its
 * slots): the earlier one may be what a dead instance left, and nobody else may have room. */
static void claim_next(outbox_feed_t *f)
{
    const config_t *cfg = f->env->deliver.cfg;
    unsigned room = (unsigned)cfg->outbox_jobs;
    unsigned jobs = f->jobs(f->arg);
    unsigned count = jobs < room ? room - jobs : CLAIM_WHEN_FULL;
    store_status_t st = STORE_OK;

    if (f->claim_shard < f->shards && jobs < 2 * room && !f->env->draining)
        f->claim = store_outbox_claim(f->env->deliver.store, f->claim_shard, f->consumer,
                                      cfg->outbox_claim_ms, count, on_claimed, f, &st);
    if (f->claim != NULL)
        return;
    f->claim_shard = 0;
    outbox_arm(f->claim_timer, cfg->outbox_claim_ms / 2);
}

static void on_claim_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    claim_next(arg);
}

/* ---- the depth gauges ---- */

static void depth_next(outbox_feed_t *f);

static int64_t prune_idle_ms(const outbox_feed_t *f)
{
    int64_t claim = 2 * (int64_t)f->env->deliver.cfg->outbox_claim_ms;

    return claim > 3 * BLOCK_MS ? claim : 3 * BLOCK_MS;
}

static void on_depth(void *arg, store_status_t st, int64_t pending, int64_t age_ms)
{
    outbox_feed_t *f = arg;

    f->depth = NULL;
    /* the group's upkeep goes with it: consumers of workers that are gone (a restarted
     * instance's) go once idle well past a live one's read and the claim time */
    if (st == STORE_OK)
        store_outbox_prune(f->env->deliver.store, f->depth_shard, prune_idle_ms(f));
    if (st == STORE_OK && f->depth_shard < METRICS_SHARDS) {
        atomic_store(&metrics(f)->outbox_depth[f->depth_shard], pending);
        atomic_store(&metrics(f)->outbox_age_ms[f->depth_shard], age_ms);
    }
    f->depth_shard++;
    depth_next(f);
}

static void depth_next(outbox_feed_t *f)
{
    store_status_t st = STORE_OK;

    if (f->depth_shard < f->shards)
        f->depth = store_outbox_depth(f->env->deliver.store, f->depth_shard, on_depth, f, &st);
    if (f->depth != NULL)
        return;
    f->depth_shard = 0;
    outbox_arm(f->depth_timer, DEPTH_EVERY_MS);
}

static void on_depth_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    depth_next(arg);
}

void outbox_feed_watch_depth(outbox_feed_t *f)
{
    if (f == NULL)
        return;
    atomic_store(&metrics(f)->outbox_shards, f->shards);
    outbox_arm(f->depth_timer, 0);
}

/* ---- the feed ---- */

outbox_feed_t *outbox_feed_new(op_env_t *env, unsigned shards, const char *consumer,
                               outbox_feed_entry_fn *entry, outbox_feed_jobs_fn *jobs, void *arg)
{
    outbox_feed_t *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    f->env = env;
    f->entry = entry;
    f->jobs = jobs;
    f->arg = arg;
    f->shards = shards;
    snprintf(f->consumer, sizeof(f->consumer), "%s", consumer);
    f->read_timer = evtimer_new(env->deliver.base, on_read_timer, f);
    f->claim_timer = evtimer_new(env->deliver.base, on_claim_timer, f);
    f->depth_timer = evtimer_new(env->deliver.base, on_depth_timer, f);
    if (f->read_timer == NULL || f->claim_timer == NULL || f->depth_timer == NULL) {
        outbox_feed_free(f);
        return NULL;
    }
    /* one server: one reader of every shard; a cluster: one per shard, on the connection to
     * its slot's master (a blocking read names the streams of one slot only) */
    f->n_readers = store_redis(env->deliver.store) != NULL ? 1 : shards;
    for (unsigned i = 0; i < f->n_readers; i++) {
        f->readers[i].f = f;
        f->readers[i].reader =
            store_outbox_reader_new(env->deliver.store, f->n_readers == 1 ? 0 : i,
                                    f->n_readers == 1 ? shards : 1, f->consumer, BLOCK_MS);
        if (f->readers[i].reader == NULL) {
            outbox_feed_free(f);
            return NULL;
        }
    }
    outbox_arm(f->read_timer, 0);
    outbox_arm(f->claim_timer, 0);
    return f;
}

void outbox_feed_free(outbox_feed_t *f)
{
    if (f == NULL)
        return;
    f->stopped = 1;
    for (unsigned i = 0; i < f->n_readers; i++)
        store_outbox_reader_free(f->readers[i].reader);
    store_outbox_cancel(f->claim);
    store_outbox_cancel(f->depth);
    if (f->read_timer != NULL)
        event_free(f->read_timer);
    if (f->claim_timer != NULL)
        event_free(f->claim_timer);
    if (f->depth_timer != NULL)
        event_free(f->depth_timer);
    free(f);
}
