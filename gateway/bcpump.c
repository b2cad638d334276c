/* bcpump.c - the delivery of broadcasts on one worker (contract.md section 13): a timer takes
 * members of the running broadcasts (every worker of every instance shares the work through
 * Redis), renders the responses' {{member.*}} placeholders for each, and queues one outbox
 * request per member (its order with the member's other traffic kept by the outbox's
 * per-member sequence). Members taken stay in flight at most a window (half a second of the
 * channel's sender limit), so that a broadcast never floods the outbox's streams nor the
 * workers' jobs ahead of the conversational requests that share them; the outbox's scripts count
 * each member's end in the broadcast's hash of its shard and refuse to start one once the cancel
 * reached it. */
#include "bcpump.h"

#include "../core/auth.h"
#include "../core/ratelimit.h"
#include "../core/tmpl.h"
#include "../json/jsonw.h"
#include "../store/broadcast.h"
#include "../store/outbox.h"
#include "log.h"
#include "outbox_post.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#define TAKE_MAX         100 /* members rendered and queued per take: about a millisecond */
#define TAKE_MIN         16  /* per look at least */
#define LOOK_MS          50  /* of the sender limit taken per look at most: twice a look's share */
#define WINDOW_MS        500 /* of the sender limit in flight */
#define WINDOW_MIN       16
#define WINDOW_MAX       4000
#define WINDOW_UNLIMITED 200   /* a channel without a sender limit */
#define TAKE_LEASE_MS    30000 /* a member taken and not queued by then is taken again */
#define PUMP_MS          25    /* between looks at the running broadcasts (a window refilled) */
#define PUMP_IDLE_MS     5000  /* when none runs: a new one is told (store_bc_watch) */
#define PUMP_RETRY_MS    1000  /* after a failed look */

/* Owned by the worker's broadcasts (bcpump_new, bcpump_free). */
struct bcpump {
    op_env_t *env;
    struct event *pump;
    redisc_sub_t *sub;     /* told when a broadcast starts running */
    int any;               /* the last look found a running broadcast */
    store_bc_call_t *call; /* the active list or a take */
    char *active, *next;   /* the running broadcasts' lines, and the next one to take from */
    char channel[STORE_KEY_MAX], id[BCPUMP_ID_LEN + 1]; /* the broadcast being taken from */
    unsigned budget; /* members this look may still take from it (sizes_of) */
    int enqueue_failed;
    const char **taken; /* the members of the take, confirmed once all enqueues answered */
    char **taken_own;
    size_t n_taken;
    /* The take's requests, queued one shard after the other (enqueue_next): reqs is not NULL
     * while they are. */
    store_bc_request_t *reqs;
    char (*ids)[BCPUMP_ID_LEN + 1];
    char **bodies;
    unsigned *shard_of;
    char *app;
    unsigned shard_next;      /* the next shard to queue */
    store_bc_call_t *enqueue; /* its script in flight */
    unsigned shards;
};

static metrics_t *metrics(const bcpump_t *b)
{
    return b->env->deliver.metrics;
}

static void pump_next(bcpump_t *b);

/* How many of a broadcast's members may be in flight (in every instance): WINDOW_MS of the
 * channel's sender limit, as the worker's cache has the channel (else the least). Enough to
 * keep the pace: the ends of members free the window when the shards' counts are summed, every
 * 200 ms (store/broadcast.c), and a look comes every PUMP_MS. Not more: a member in flight is
 * an outbox job, most of the time a started request that waits for its slot in its worker's
 * lane (deliver_lane_join), against its deadline, holding its memory. Such jobs take no room
 * of a worker's BOTGATE_OUTBOX_JOBS (outbox.c, up to its BULK_JOBS_MAX): the window's entries
 * are read at once, and a single async send queued after them is not read after them.
 * And how many one look takes at most (*look): LOOK_MS of the limit, twice what a look every
 * PUMP_MS needs to keep the pace, so that the members an end of the window frees (a sum of
 * the shards' counts frees up to 200 ms of them at once) are queued over a few looks, not in
 * one burst of takes: each take queues its members with a script per shard, and their starts
 * follow as they are read; all at once, they held Redis and the workers for milliseconds, and
 * a conversational send that came then waited for them (the slowest of scenario g's came with
 * 16 to 32 of these scripts in the 20 ms before them, against 3 on average). */
static unsigned sizes_of(const bcpump_t *b, const char *channel_id, unsigned *look)
{
    json_t *ch = store_cached_channel(b->env->deliver.store, channel_id);
    ratelimit_policy_t p;
    bg_error_t err;
    int64_t w = WINDOW_MIN, n = TAKE_MIN;

    if (ch != NULL && ratelimit_for_channel(ch, &p, &err) == 0) {
        w = p.sender.interval_us > 0 ? WINDOW_MS * 1000 / p.sender.interval_us : WINDOW_UNLIMITED;
        n = p.sender.interval_us > 0 ? LOOK_MS * 1000 / p.sender.interval_us : WINDOW_UNLIMITED;
    }
    json_decref(ch);
    *look = (unsigned)(n < TAKE_MIN ? TAKE_MIN : n > WINDOW_MAX ? WINDOW_MAX : n);
    return (unsigned)(w < WINDOW_MIN ? WINDOW_MIN : w > WINDOW_MAX ? WINDOW_MAX : w);
}

/* Lets go of a take's members and calls (cancelling those in flight). */
static void take_clear(bcpump_t *b)
{
    store_bc_cancel(b->enqueue);
    b->enqueue = NULL;
    for (size_t i = 0; i < b->n_taken; i++) {
        free(b->taken_own[i]);
        free(b->bodies != NULL ? b->bodies[i] : NULL);
    }
    free(b->taken_own);
    free(b->taken);
    free(b->reqs);
    free(b->ids);
    free(b->bodies);
    free(b->shard_of);
    free(b->app);
    b->taken_own = NULL;
    b->taken = NULL;
    b->reqs = NULL;
    b->ids = NULL;
    b->bodies = NULL;
    b->shard_of = NULL;
    b->app = NULL;
    b->n_taken = 0;
}

static void take_done(bcpump_t *b)
{
    if (!b->enqueue_failed)
        store_bc_taken(b->env->deliver.store, b->channel, b->id, b->taken, b->n_taken);
    take_clear(b);
    /* the same broadcast again: its window may have room for more, this look for its budget */
    if (b->budget == 0)
        b->id[0] = '\0';
    pump_next(b);
}

static void enqueue_next(bcpump_t *b);

static void on_enqueued(void *arg, store_status_t st, int64_t n, const char *text)
{
    bcpump_t *b = arg;

    (void)n;
    (void)text;
    b->enqueue = NULL;
    if (st != STORE_OK)
        b->enqueue_failed = 1; /* taken again after the lease */
    enqueue_next(b);
}

/* The take's requests of the next shard that has any, one script; after the last, the take
 * is done. One shard at a time: a take's scripts all at once (one per shard) were up to 16
 * commands in flight on the worker's connection, ahead of the conversational commands that
 * came meanwhile. */
static void enqueue_next(bcpump_t *b)
{
    const config_t *cfg = b->env->deliver.cfg;

    while (b->reqs != NULL && b->shard_next < b->shards) {
        unsigned sh = b->shard_next++;
        store_bc_request_t *part;
        size_t n = 0, k = 0;
        store_status_t est = STORE_OK;
        for (size_t i = 0; i < b->n_taken; i++)
            n += b->shard_of[i] == sh;
        if (n == 0)
            continue;
        if ((part = calloc(n, sizeof(*part))) == NULL) {
            b->enqueue_failed = 1;
            continue;
        }
        for (size_t i = 0; i < b->n_taken; i++)
            if (b->shard_of[i] == sh)
                part[k++] = b->reqs[i];
        b->enqueue = store_bc_enqueue(b->env->deliver.store, sh, b->channel, b->id, b->app, part, n,
                                      ((int64_t)cfg->outbox_ttl_s + cfg->idempotency_ttl_s) * 1000,
                                      (int64_t)cfg->outbox_ttl_s * 1000, on_enqueued, b, &est);
        free(part);
        if (b->enqueue != NULL)
            return;
        b->enqueue_failed = 1;
    }
    take_done(b);
}

/* {"channelId":..,"memberId":..,"response":[...]} with the member's placeholders rendered. */
static char *render(const bcpump_t *b, const json_t *responses, const json_t *channel,
                    const char *member_id, const char *record, size_t len, size_t *out_len)
{
    json_t *member = len > 0 ? json_loadb(record, len, 0, NULL) : NULL;
    json_t *scope = tmpl_scope(NULL, member, channel);
    json_t *body = json_object();
    char *text = NULL;

    if (scope != NULL && body != NULL &&
        json_object_set_new(body, "channelId", json_string(b->channel)) == 0 &&
        json_object_set_new(body, "memberId", json_string(member_id)) == 0 &&
        json_object_set_new(body, "response", tmpl_render_json(responses, scope)) == 0)
        text = jw_dump(body, out_len);
    json_decref(member);
    json_decref(scope);
    json_decref(body);
    return text;
}

/* The request id of a member's message: the same whoever takes it (a member taken again after
 * its taker died is queued once): the shard, then 22 hex of SHA-256(broadcast id, member). */
static void request_id(const bcpump_t *b, unsigned shard, const char *member_id,
                       char out[BCPUMP_ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    char hash[AUTH_HASH_HEX];

    auth_hash_parts(b->id, strlen(b->id), member_id, strlen(member_id) + 1, hash);
    out[0] = hex[(shard >> 4) & 15]; /* shards are at most 256 (store/outbox.h) */
    out[1] = hex[shard & 15];
    memcpy(out + 2, hash, BCPUMP_ID_LEN - 2);
    out[BCPUMP_ID_LEN] = '\0';
}

static void on_taken(void *arg, store_status_t st, const store_bc_take_t *t)
{
    bcpump_t *b = arg;
    json_t *root = NULL, *channel = NULL;
    const json_t *responses;

    b->call = NULL;
    if (st == STORE_OK && strcmp(t->state, "take") == 0)
        b->budget -= t->n < b->budget ? (unsigned)t->n : b->budget;
    if (st != STORE_OK || strcmp(t->state, "take") != 0) {
        if (st == STORE_OK && t->ended && strcmp(t->state, "done") == 0) {
            metrics_count(&metrics(b)->broadcasts[1]);
            log_msg(LOG_INFO, "broadcast %s of channel %s done", b->id, b->channel);
            /* this take dropped it from the running ones, and queued its callback */
        }
        b->id[0] = '\0'; /* the next running broadcast */
        pump_next(b);
        return;
    }
    root = json_loads(t->body, 0, NULL);
    responses = json_object_get(root, "response");
    channel = t->channel[0] ? json_loads(t->channel, 0, NULL) : NULL;
    b->reqs = calloc(t->n, sizeof(*b->reqs));
    b->ids = calloc(t->n, sizeof(*b->ids));
    b->bodies = calloc(t->n, sizeof(*b->bodies));
    b->shard_of = calloc(t->n, sizeof(*b->shard_of));
    b->taken = calloc(t->n, sizeof(*b->taken));
    b->taken_own = calloc(t->n, sizeof(*b->taken_own));
    b->app = strdup(t->app);
    b->n_taken = 0;
    b->shard_next = 0;
    b->enqueue_failed = 0;
    if (root == NULL || b->reqs == NULL || b->ids == NULL || b->bodies == NULL ||
        b->shard_of == NULL || b->taken == NULL || b->taken_own == NULL || b->app == NULL) {
        b->enqueue_failed = 1;
        goto out;
    }
    for (size_t i = 0; i < t->n; i++) {
        b->shard_of[i] = store_outbox_shard(b->shards, b->channel, t->members[i]);
        request_id(b, b->shard_of[i], t->members[i], b->ids[i]);
        b->bodies[i] = render(b, responses, channel, t->members[i], t->records[i],
                              t->record_lens[i], &b->reqs[i].body_len);
        if (b->bodies[i] == NULL || (b->taken_own[i] = strdup(t->members[i])) == NULL) {
            free(b->bodies[i]);
            b->bodies[i] = NULL;
            b->enqueue_failed = 1;
            goto out;
        }
        b->taken[i] = b->taken_own[i];
        b->n_taken++;
        b->reqs[i].request_id = b->ids[i];
        b->reqs[i].member_id = b->taken_own[i];
        b->reqs[i].body = b->bodies[i];
    }
out:
    json_decref(root);
    json_decref(channel);
    if (b->enqueue_failed) { /* nothing queued: taken again after the lease */
        take_clear(b);
        take_done(b);
        return;
    }
    enqueue_next(b);
}

/* The next take: from the broadcast taken from last while it has room, else the next line of
 * the running ones; after the last, a pause. */
static void pump_next(bcpump_t *b)
{
    store_status_t st = STORE_OK;
    unsigned look;

    if (b->env->draining || b->env->outbox == NULL)
        return;
    if (b->id[0] == '\0') {
        char *tab, *end;
        if (b->next == NULL || *b->next == '\0') {
            free(b->active);
            b->active = b->next = NULL;
            outbox_arm(b->pump, b->any ? PUMP_MS : PUMP_IDLE_MS);
            return;
        }
        end = b->next + strcspn(b->next, "\n");
        tab = memchr(b->next, '\t', (size_t)(end - b->next));
        if (tab != NULL && (size_t)(tab - b->next) < sizeof(b->channel) &&
            (size_t)(end - tab - 1) == BCPUMP_ID_LEN) {
            memcpy(b->channel, b->next, (size_t)(tab - b->next));
            b->channel[tab - b->next] = '\0';
            memcpy(b->id, tab + 1, BCPUMP_ID_LEN);
            b->id[BCPUMP_ID_LEN] = '\0';
        }
        b->next = *end ? end + 1 : end;
        if (b->id[0] == '\0') {
            pump_next(b);
            return;
        }
        sizes_of(b, b->channel, &b->budget);
    }
    b->call = store_bc_take(b->env->deliver.store, b->channel, b->id,
                            b->budget < TAKE_MAX ? b->budget : TAKE_MAX,
                            sizes_of(b, b->channel, &look), TAKE_LEASE_MS, on_taken, b, &st);
    if (b->call == NULL) {
        b->id[0] = '\0';
        free(b->active);
        b->active = b->next = NULL;
        outbox_arm(b->pump, PUMP_RETRY_MS);
    }
}

/* A take found the window full or nothing to take: the next broadcast. */
static void on_active(void *arg, store_status_t st, int64_t n, const char *text)
{
    bcpump_t *b = arg;

    (void)n;
    b->call = NULL;
    if (st != STORE_OK || (b->active = strdup(text)) == NULL) {
        outbox_arm(b->pump, PUMP_RETRY_MS);
        return;
    }
    b->next = b->active;
    b->id[0] = '\0';
    b->any = n > 0;
    pump_next(b);
}

static void on_started(void *arg, const char *msg, size_t len)
{
    bcpump_t *b = arg;

    (void)msg;
    (void)len;
    /* a look now, unless one is under way (it finds the new one, or the next look does) */
    if (b->call == NULL && b->active == NULL && b->reqs == NULL) {
        evtimer_del(b->pump);
        event_active(b->pump, EV_TIMEOUT, 0);
    }
}

static void on_pump(evutil_socket_t fd, short what, void *arg)
{
    bcpump_t *b = arg;
    store_status_t st = STORE_OK;

    (void)fd;
    (void)what;
    /* one look at a time: a wake-up while one is under way is left to it */
    if (b->env->draining || b->env->outbox == NULL || b->call != NULL || b->active != NULL ||
        b->reqs != NULL)
        return;
    b->call = store_bc_active(b->env->deliver.store, on_active, b, &st);
    if (b->call == NULL)
        outbox_arm(b->pump, PUMP_RETRY_MS);
}

bcpump_t *bcpump_new(op_env_t *env)
{
    bcpump_t *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->env = env;
    b->shards = (unsigned)env->deliver.cfg->outbox_shards;
    if ((b->pump = evtimer_new(env->deliver.base, on_pump, b)) == NULL) {
        free(b);
        return NULL;
    }
    if (env->outbox != NULL) {
        b->sub = store_bc_watch(env->deliver.store, on_started, b);
        outbox_arm(b->pump, PUMP_MS);
    }
    return b;
}

void bcpump_free(bcpump_t *b)
{
    if (b == NULL)
        return;
    store_unwatch(b->sub);
    store_bc_cancel(b->call);
    take_clear(b);
    free(b->active);
    event_free(b->pump);
    free(b);
}
