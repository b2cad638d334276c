/* outbox_feed.c - a worker's outbox entries (contract.md section 12): a blocking XREADGROUP on
 * a connection of its own hands new entries up as the outbox has room, a timer takes over
 * (XAUTOCLAIM) those a dead consumer left, shard after shard, and one worker's timer keeps the
 * depth gauges and prunes the consumers of workers that are gone. */
#include "outbox_feed.h"

#include "outbox_post.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCK_MS        5000 /* a blocking read's wait: the connection shows it is alive */
#define READ_RETRY_MS   1000 /* after a failed read */
#define DEPTH_EVERY_MS  5000
#define READ_COUNT      8 /* entries one read takes at most */
#define CLAIM_WHEN_FULL 4 /* entries a full worker takes over at a time */

/* Owned by the outbox (outbox_feed_new, outbox_feed_free). */
struct outbox_feed {
    op_env_t *env;
    outbox_feed_entry_fn *entry;
    outbox_feed_jobs_fn *jobs;
    void *arg;
    unsigned shards;
    store_outbox_reader_t *reader;
    unsigned reading : 1, stopped : 1;
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
    outbox_feed_t *f = arg;

    f->reading = 0;
    if (f->stopped)
        return;
    for (size_t i = 0; i < n; i++)
        f->entry(f->arg, &e[i], 0);
    if (st != STORE_OK)
        outbox_arm(f->read_timer, READ_RETRY_MS);
    else
        outbox_feed_read(f);
}

void outbox_feed_read(outbox_feed_t *f)
{
    unsigned room, jobs;

    if (f == NULL || f->reading || f->stopped || f->env->draining)
        return;
    room = (unsigned)f->env->deliver.cfg->outbox_jobs;
    if ((jobs = f->jobs(f->arg)) >= room)
        return;
    /* a few at a time: a burst spreads over the workers and instances blocked beside */
    if (store_outbox_read(f->reader, room - jobs < READ_COUNT ? room - jobs : READ_COUNT,
                          on_entries, f) < 0) {
        outbox_arm(f->read_timer, READ_RETRY_MS);
        return;
    }
    f->reading = 1;
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
                               outbox_feed_entry_fn *entry, outbox_feed_jobs_fn *jobs, void *arg,
                               int *no_reader)
{
    outbox_feed_t *f = calloc(1, sizeof(*f));

    *no_reader = 0;
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
    f->reader = store_outbox_reader_new(env->deliver.store, shards, f->consumer, BLOCK_MS);
    if (f->reader == NULL) {
        *no_reader = store_redis(env->deliver.store) == NULL;
        outbox_feed_free(f);
        return NULL;
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
    store_outbox_reader_free(f->reader);
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
