/* store.c - the records of contract.md section 3 over the async client. A store_call_t carries
 * one logical operation (one command, or a GET + compare-and-set loop) and decodes replies
 * into JSON for its callback. The small records (contacts, media, nodes, locks, webhook
 * signatures) and the watches are store_records.c's, on the calls made here (store_call.h). */
#include "store.h"

#include "cache.h"
#include "store_call.h"

#include "../core/clock.h"
#include "../core/hash.h"
#include "../core/hint.h"
#include "../json/jscan.h"
#include "../json/jsonw.h"
#include "../json/numfmt.h"

#include <ctype.h>
#include <errno.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

/* Compare-and-set writes to one key are queued inside a worker (they would only defeat each
 * other on its one connection); what is left are races with other workers and instances,
 * retried after a short random pause. */
#define CAS_ATTEMPTS 64
#define CAS_BUCKETS  256

/* Compare-and-set: writes ARGV[2] only if the key still holds ARGV[1]. */
static const char CAS_SCRIPT[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                                 "redis.call('SET', KEYS[1], ARGV[2]) return 1 end return 0";

/* The same for a member record, and its tags' index (contract.md section 13) in the same step:
 * KEYS the member, then the keys of the tags added, then of those removed (every key it
 * touches among KEYS: a Redis Cluster refuses others while their slot migrates); ARGV[3] the
 * member id, ARGV[4] how many tags were added. The tag keys carry the channel's hash tag, as the
 * member's: one slot. */
static const char MEMBER_CAS_SCRIPT[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[2]) local n = tonumber(ARGV[4]) "
    "for i = 2, 1 + n do redis.call('SADD', KEYS[i], ARGV[3]) end "
    "for i = 2 + n, #KEYS do redis.call('SREM', KEYS[i], ARGV[3]) end return 1";

/* Get-or-create of a member by recipient id, atomic so that two first messages from the same
 * user create one member. KEYS recipient, member (of the guess; the new one's without a
 * guess), member (of the new id); ARGV guess ("" none), new id, new record. Every key it
 * touches is among KEYS (a Redis Cluster refuses others while their slot migrates), so the
 * caller guesses the member's id (the store's hints): -> the member's record (found, or the new
 * one made), or {id}: the recipient is another member's than guessed, nothing was written (run
 * again with that guess). The member keys carry the channel's hash tag, as KEYS[1] does. */
static const char RESOLVE_SCRIPT[] =
    "local id = redis.call('GET', KEYS[1]) "
    "if id and id ~= ARGV[1] then return {id} end "
    "local m = id and redis.call('GET', KEYS[2]) if m then return m end "
    "redis.call('SET', KEYS[1], ARGV[2]) redis.call('SET', KEYS[3], ARGV[3]) "
    "return ARGV[3]";
#define RESOLVE_RUNS 3 /* a guess that was wrong, then one the recipient moved from meanwhile */

#define CACHE_MAX 20000 /* entries per worker */

struct store {
    redisc_t *redis;    /* one server; NULL with a cluster */
    cluster_t *cluster; /* NULL: one server */
    redisc_t *sub;      /* subscriptions, made at the first one */
    /* One server, with the cache: a subscriber that carries the invalidations only. Sharing
     * sub, an invalidation could queue behind another message (a member's turn, a credential)
     * in Redis's output to it, and reach the worker after the writer had its answer (Redis
     * writes the client queued last first); alone, it is written before that answer. */
    redisc_t *trk_sub;
    redisc_config_t redis_cfg;
    store_cache_t *cache; /* NULL when caching is off */
    int tracking;         /* Redis tells sub of every change to what the cache holds */
    struct event_base *base;
    char prefix[STORE_PREFIX_MAX];
    store_call_t *cas_active[CAS_BUCKETS]; /* compare-and-set calls holding their key */
    store_call_t *reading[CAS_BUCKETS];    /* shared reads in flight, by key bucket */
    uint64_t write_seq;                    /* compare-and-set writes done, counted */
    uint64_t bucket_seq[CAS_BUCKETS];      /* write_seq of the last one, by key bucket */
    uint64_t rng;
    hint_table_t recipients; /* the member id last found for a (channel, recipient id) */
};

/* A resolve's words, kept for its next run (another guess). Owned by its call. */
typedef struct resolve_words {
    uint64_t hint; /* the pair's place in st->recipients */
    int runs;
    size_t base_len;
    char *fresh, *record; /* in buf, after the member keys' base */
    char buf[];
} resolve_words_t;

/* Owned by the store from creation until its callback has run or it is cancelled. */
struct store_call {
    store_t *st;
    store_call_kind_t kind;
    store_cb *cb;
    void *arg;
    store_cmd_t *cmd;
    /* compare-and-set loop */
    store_mutate_fn *mutate;
    json_t *change;
    int64_t now_ms;
    int attempts;
    json_t *written;                   /* the record the compare-and-set in flight writes */
    json_t *expected;                  /* the record as the caller read it: tried without a GET */
    char *tagging;                     /* a member's: "<tag key base>\0<member id>", else NULL */
    json_t *tags_added, *tags_removed; /* by the write in flight (arrays; NULL: none) */
    int optimistic;                    /* the write in flight compares against expected */
    int cacheable;                     /* a successful read (or write) refreshes the cache */
    uint64_t ticket;                   /* store_cache_ticket when the read (or write) was sent */
    int brief;                         /* decode only _id and externalId of a member record */
    unsigned bucket;
    int cas_state;             /* CAS_NONE, CAS_WAITING (queued behind the holder), CAS_HOLDING */
    store_call_t *bucket_next; /* next holder in the same bucket */
    store_call_t *queue_next;  /* the next call waiting for the same key */
    /* shared reads (start_shared_get) */
    int shared;              /* in st->reading: later reads of the key join it */
    int dispatching;         /* its answer is being handed to the joined reads */
    store_call_t *read_next; /* next shared read in the same bucket */
    store_call_t *joiners;   /* reads waiting for this one's answer */
    store_call_t *leader;    /* the read this one waits for (a joiner) */
    store_call_t *join_next; /* next joiner of the same leader */
    struct event *pause;     /* the random pause before retrying a lost race */
    resolve_words_t *words;  /* CALL_RESOLVE's, for its next run */
    char key[];              /* as long as it is: thousands of calls may wait at once */
};

enum { CAS_NONE = 0, CAS_WAITING, CAS_HOLDING };

/* The worker's subscriber connection, made at the first call; NULL when out of memory. In a
 * cluster, on any node (a PUBLISH reaches every node), and on another when that one goes. */
redisc_t *store_subscriber(store_t *st)
{
    char anchor[STORE_KEY_MAX];

    if (st->sub == NULL) {
        snprintf(anchor, sizeof(anchor), "%ssubscriber", st->prefix);
        st->sub = st->cluster != NULL ? cluster_new_subscriber(st->cluster, anchor)
                                      : redisc_new_subscriber(st->base, &st->redis_cfg, anchor);
    }
    return st->sub;
}

/* The part of every key key_fn builds that comes before the id, in buf. */
static int key_prefix(char *buf, size_t size, const char *prefix,
                      int (*key_fn)(char *, size_t, const char *, const char *))
{
    char *mark;

    if (key_fn(buf, size, prefix, "\x01") < 0 || (mark = strchr(buf, '\x01')) == NULL)
        return -1;
    *mark = '\0';
    return 0;
}

static void on_tracking(void *arg, int on)
{
    store_t *st = arg;

    st->tracking = on;
    store_cache_set_on(st->cache, on);
}

static void on_invalidate(void *arg, const char *key, size_t len)
{
    store_t *st = arg;

    if (key != NULL)
        store_cache_drop(st->cache, key, len);
    else
        store_cache_drop_all(st->cache);
}

/* Redis tells the worker's subscriber of every write to a token or channel key (BCAST:
 * those keys change rarely, and Redis then keeps no table of who read which key); until it
 * has confirmed that, and whenever either connection is down, the cache is off. In a cluster,
 * each master tells a subscriber of its own. */
static int track(store_t *st)
{
    char token[STORE_KEY_MAX], channel[STORE_KEY_MAX], anchor[STORE_KEY_MAX];
    const char *prefixes[] = {token, channel};

    if (key_prefix(token, sizeof(token), st->prefix, store_key_token) < 0 ||
        key_prefix(channel, sizeof(channel), st->prefix, store_key_channel) < 0)
        return -1;
    if (st->cluster != NULL) {
        snprintf(anchor, sizeof(anchor), "%ssubscriber", st->prefix);
        return cluster_track(st->cluster, anchor, prefixes, 2, on_tracking, on_invalidate, st);
    }
    snprintf(anchor, sizeof(anchor), "%ssubscriber", st->prefix);
    if ((st->trk_sub = redisc_new_subscriber(st->base, &st->redis_cfg, anchor)) == NULL)
        return -1;
    return redisc_track(st->redis, st->trk_sub, prefixes, 2, on_tracking, on_invalidate, st);
}

store_t *store_new(struct event_base *base, const store_config_t *cfg)
{
    store_t *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->base = base;
    st->rng = (uint64_t)(uintptr_t)st ^ 0x9E3779B97F4A7C15ULL;
    st->cache = store_cache_new(CACHE_MAX, cfg->cache_ttl_ms);
    snprintf(st->prefix, sizeof(st->prefix), "%s", cfg->prefix);
    st->redis_cfg = cfg->redis;
    if (cfg->n_cluster > 0) {
        st->cluster = cluster_new(base, &cfg->redis, cfg->cluster, cfg->n_cluster);
    } else {
        st->redis = redisc_new(base, &cfg->redis);
    }
    if ((st->redis == NULL && st->cluster == NULL) || (st->cache != NULL && track(st) < 0)) {
        store_free(st);
        return NULL;
    }
    return st;
}

void store_free(store_t *st)
{
    if (st == NULL)
        return;
    redisc_free(st->sub); /* before the cluster that tells it where to go */
    redisc_free(st->trk_sub);
    redisc_free(st->redis);
    cluster_free(st->cluster);
    store_cache_free(st->cache);
    hint_free(&st->recipients);
    free(st);
}

int store_ready(const store_t *st)
{
    return st->cluster != NULL ? cluster_ready(st->cluster) : redisc_connected(st->redis);
}

void store_set_state_cb(store_t *st, redisc_state_cb *cb, void *arg)
{
    if (st->cluster != NULL)
        cluster_set_state_cb(st->cluster, cb, arg);
    else
        redisc_set_state_cb(st->redis, cb, arg);
}

void store_set_observer(store_t *st, redisc_observe_cb *cb, void *arg)
{
    if (st->cluster != NULL)
        cluster_set_observer(st->cluster, cb, arg);
    else
        redisc_set_observer(st->redis, cb, arg);
}

int store_command(store_t *st, const char *key, redisc_cb *cb, void *arg, int argc,
                  const char **argv, const size_t *argvlen, store_cmd_t **out)
{
    cluster_cmd_t *cc = NULL;
    redisc_cmd_t *rc = NULL;
    int ret;

    if (st->cluster != NULL) {
        ret = cluster_command(st->cluster, key, cb, arg, argc, argv, argvlen, &cc);
        *out = (store_cmd_t *)cc;
    } else {
        ret = redisc_command(st->redis, cb, arg, argc, argv, argvlen, &rc);
        *out = (store_cmd_t *)rc;
    }
    return ret;
}

int store_command_formatted(store_t *st, const char *key, redisc_cb *cb, void *arg, const char *cmd,
                            size_t len, store_cmd_t **out)
{
    cluster_cmd_t *cc = NULL;
    redisc_cmd_t *rc = NULL;
    int ret;

    if (st->cluster != NULL) {
        ret = cluster_command_formatted(st->cluster, key, cb, arg, cmd, len, &cc);
        *out = (store_cmd_t *)cc;
    } else {
        ret = redisc_command_formatted(st->redis, cb, arg, cmd, len, &rc);
        *out = (store_cmd_t *)rc;
    }
    return ret;
}

void store_command_cancel(store_t *st, store_cmd_t *cmd)
{
    if (st->cluster != NULL)
        cluster_cancel((cluster_cmd_t *)cmd);
    else
        redisc_cancel((redisc_cmd_t *)cmd);
}

redisc_t *store_redis(store_t *st)
{
    return st->redis;
}

redisc_t *store_new_connection(store_t *st, int command_timeout_ms)
{
    redisc_config_t cfg;

    if (st->cluster != NULL)
        return NULL;
    cfg = st->redis_cfg;
    cfg.command_timeout_ms = command_timeout_ms;
    return redisc_new(st->base, &cfg);
}

redisc_t *store_new_connection_for(store_t *st, const char *key, const char *host, int port,
                                   int command_timeout_ms)
{
    if (st->cluster == NULL)
        return store_new_connection(st, command_timeout_ms);
    return cluster_new_connection(st->cluster, key, host, port, command_timeout_ms);
}

const char *store_prefix(const store_t *st)
{
    return st->prefix;
}

hint_table_t *store_recipient_hints(store_t *st)
{
    return &st->recipients;
}

static void call_free(store_call_t *c)
{
    json_decref(c->change);
    json_decref(c->written);
    json_decref(c->expected);
    json_decref(c->tags_added);
    json_decref(c->tags_removed);
    free(c->tagging);
    free(c->words);
    if (c->pause != NULL)
        event_free(c->pause);
    free(c);
}

/* ---- one compare-and-set per key at a time in this worker ---- */

static unsigned key_bucket(const char *key)
{
    return hash_fnv1a(key, strlen(key)) % CAS_BUCKETS;
}

/* ---- reads of one record in flight at once share one GET ---- */

/* A shared read leaves st->reading: its answer is coming, later reads send their own GET. */
static void reading_remove(store_call_t *c)
{
    store_call_t **pp = &c->st->reading[key_bucket(c->key)];

    if (!c->shared)
        return;
    while (*pp != c)
        pp = &(*pp)->read_next;
    *pp = c->read_next;
    c->shared = 0;
}

static store_call_t *cas_holder(store_t *st, unsigned bucket, const char *key)
{
    for (store_call_t *h = st->cas_active[bucket]; h != NULL; h = h->bucket_next)
        if (strcmp(h->key, key) == 0)
            return h;
    return NULL;
}

static void cas_hold(store_call_t *c)
{
    c->cas_state = CAS_HOLDING;
    c->bucket_next = c->st->cas_active[c->bucket];
    c->st->cas_active[c->bucket] = c;
}

static store_status_t send_get(store_call_t *c);
static void store_call_finish(store_call_t *c, store_status_t status, json_t *value);

/* The holder c is done (or cancelled): the next call waiting for the key takes over. */
static void cas_release(store_call_t *c)
{
    store_call_t **pp = &c->st->cas_active[c->bucket], *next = c->queue_next;
    store_status_t st;

    while (*pp != c)
        pp = &(*pp)->bucket_next;
    *pp = c->bucket_next;
    c->cas_state = CAS_NONE;
    c->queue_next = NULL;
    if (next == NULL)
        return;
    cas_hold(next);
    if ((st = send_get(next)) != STORE_OK)
        store_call_finish(next, st, NULL); /* which releases the key to the one after it */
}

void store_cancel(store_call_t *call)
{
    if (call == NULL)
        return;
    if (call->leader != NULL) { /* a joined read: it only leaves the list */
        store_call_t **pp = &call->leader->joiners;
        while (*pp != call)
            pp = &(*pp)->join_next;
        *pp = call->join_next;
        call_free(call);
        return;
    }
    if (call->joiners != NULL || call->dispatching) {
        call->cb = NULL; /* others wait for its answer: the GET goes on without its caller */
        return;
    }
    reading_remove(call);
    if (call->cas_state == CAS_WAITING) {
        store_call_t *h = cas_holder(call->st, call->bucket, call->key);
        while (h->queue_next != call)
            h = h->queue_next;
        h->queue_next = call->queue_next;
    } else if (call->cas_state == CAS_HOLDING) {
        cas_release(call);
    }
    store_command_cancel(call->st, call->cmd);
    call_free(call);
}

store_call_t *store_call_new(store_t *st, store_call_kind_t kind, const char *key, store_cb *cb,
                             void *arg)
{
    size_t n = strlen(key);
    store_call_t *c = calloc(1, sizeof(*c) + n + 1);

    if (c == NULL)
        return NULL;
    memcpy(c->key, key, n + 1);
    c->st = st;
    c->kind = kind;
    c->cb = cb;
    c->arg = arg;
    return c;
}

static void store_call_finish(store_call_t *c, store_status_t status, json_t *value)
{
    store_cb *cb;
    void *arg;
    store_call_t *j;

    reading_remove(c);
    /* The joined reads get the same answer, the record shared by reference. A callback may
     * cancel a joined read still in the list, or this one (which then only loses its cb). */
    c->dispatching = 1;
    while ((j = c->joiners) != NULL) {
        c->joiners = j->join_next;
        j->leader = NULL;
        store_call_finish(j, status, json_incref(value));
    }
    cb = c->cb;
    arg = c->arg;
    if (c->cas_state == CAS_HOLDING)
        cas_release(c);
    call_free(c);
    if (cb != NULL)
        cb(arg, status, value);
    else
        json_decref(value);
}

static void store_call_on_reply(redisReply *reply, void *arg);

static store_status_t send_argv(store_call_t *c, int argc, const char **argv, const size_t *lens)
{
    int rc = store_command(c->st, c->key, store_call_on_reply, c, argc, argv, lens, &c->cmd);

    if (rc == REDISC_OK)
        return STORE_OK;
    return rc == REDISC_BUSY ? STORE_BUSY : STORE_UNAVAILABLE;
}

/* Sends and returns the call, or frees it and reports why nothing was sent. */
store_call_t *store_call_start(store_call_t *c, int argc, const char **argv, const size_t *lens,
                               store_status_t *status)
{
    store_status_t st = send_argv(c, argc, argv, lens);

    if (status != NULL)
        *status = st;
    if (st != STORE_OK) {
        call_free(c);
        return NULL;
    }
    return c;
}

store_call_t *store_call_get(store_call_t *c, store_status_t *status)
{
    const char *argv[] = {"GET", c->key};

    return store_call_start(c, 2, argv, NULL, status);
}

/* A GET that a read of the same key already in flight answers: c joins it and sends nothing.
 * For the records the worker caches (token, channel), whose readers take them up to a cache
 * TTL old anyway: when the cache is cold, a burst of requests for one tenant (make bench's d
 * starts 5000 at once) would otherwise send a GET each for the same two records and keep a
 * parsed copy each while it waits for its platform. */
static store_call_t *start_shared_get(store_call_t *c, store_status_t *status)
{
    store_call_t **slot = &c->st->reading[key_bucket(c->key)];

    /* no cache, or no word from Redis of changes: every read sees what was written before it */
    if (c->st->cache == NULL || !c->st->tracking)
        return store_call_get(c, status);
    for (store_call_t *l = *slot; l != NULL; l = l->read_next)
        if (l->ticket == c->ticket && strcmp(l->key, c->key) == 0) { /* not changed since */
            c->leader = l;
            c->join_next = l->joiners;
            l->joiners = c;
            if (status != NULL)
                *status = STORE_OK;
            return c;
        }
    if ((c = store_call_get(c, status)) != NULL) {
        c->shared = 1;
        c->read_next = *slot;
        *slot = c;
    }
    return c;
}

static store_status_t send_get(store_call_t *c)
{
    const char *argv[] = {"GET", c->key};

    c->kind = CALL_CAS_READ;
    return send_argv(c, 2, argv, NULL);
}

/* The call for the key the caller built (key_len, what store_key_* returned), or NULL with
 * *status set: the key did not fit (ids are bounded before this, so it means a bad record),
 * or memory ran out. */
store_call_t *store_call_for(store_t *st, store_call_kind_t kind, int key_len, const char *key,
                             store_cb *cb, void *arg, store_status_t *status)
{
    store_call_t *c = key_len < 0 ? NULL : store_call_new(st, kind, key, cb, arg);

    if (c == NULL && status != NULL)
        *status = key_len < 0 ? STORE_BAD_RECORD : STORE_BUSY;
    return c;
}

/* The indexable tags of a member record in one array and not in the other: strings of at
 * most STORE_TAG_MAX bytes (a longer one, or another value, is not indexed). New reference. */
static json_t *tags_minus(const json_t *a, const json_t *b)
{
    json_t *out = json_array(), *t, *u;
    size_t i, j;

    json_array_foreach(a, i, t) {
        int found = 0;
        if (!json_is_string(t) || !store_tag_indexed(json_string_value(t), json_string_length(t)))
            continue;
        json_array_foreach(b, j, u)
            found |= json_equal(t, u);
        if (!found)
            json_array_append(out, t);
    }
    return out;
}

/* mutate(record) as text in *next; takes record over (kept in c->written, for the callback:
 * what was written is what it gets). Returns STORE_OK, STORE_BAD_RECORD or
 * STORE_UNAVAILABLE. */
static store_status_t cas_next(store_call_t *c, json_t *record, char **next, size_t *next_len)
{
    json_t *was = NULL;

    if (!json_is_object(record)) {
        json_decref(record);
        return STORE_BAD_RECORD;
    }
    if (c->tagging != NULL)
        was = json_deep_copy(json_object_get(record, "tags"));
    if (c->mutate(record, c->change, c->now_ms) < 0) {
        json_decref(was);
        json_decref(record);
        return STORE_BAD_RECORD;
    }
    if (c->tagging != NULL) {
        const json_t *now = json_object_get(record, "tags");
        json_decref(c->tags_added);
        json_decref(c->tags_removed);
        c->tags_added = tags_minus(now, was);
        c->tags_removed = tags_minus(was, now);
        json_decref(was);
    }
    if ((*next = jw_dump(record, next_len)) == NULL) {
        json_decref(record);
        return STORE_UNAVAILABLE;
    }
    json_decref(c->written);
    c->written = record;
    return STORE_OK;
}

/* The script: next is written if raw is still the stored value. */
static store_status_t cas_send(store_call_t *c, const char *raw, size_t len, char *next,
                               size_t next_len)
{
    size_t added = json_array_size(c->tags_added), removed = json_array_size(c->tags_removed);
    size_t n = added + removed, argc = 0, base_len = c->tagging ? strlen(c->tagging) : 0;
    size_t keys_len = 0;
    const char *stack_argv[7 + 16], **argv = stack_argv;
    size_t stack_lens[7 + 16], *lens = stack_lens;
    char count[NUMFMT_DEC_SIZE], nkeys[NUMFMT_DEC_SIZE], *keys = NULL, *k;
    store_status_t st;

    c->kind = CALL_CAS_WRITE;
    if (c->cacheable)
        c->ticket = store_cache_ticket(c->st->cache, c->key);
    for (size_t i = 0; i < n; i++)
        keys_len +=
            base_len +
            strlen(json_string_value(i < added ? json_array_get(c->tags_added, i)
                                               : json_array_get(c->tags_removed, i - added))) +
            1;
    if (n > 16) {
        argv = malloc((7 + n) * sizeof(*argv));
        lens = malloc((7 + n) * sizeof(*lens));
    }
    if (n > 0)
        keys = malloc(keys_len);
    if (argv == NULL || lens == NULL || (n > 0 && keys == NULL)) {
        if (argv != stack_argv) {
            free(argv);
            free(lens);
        }
        free(keys);
        free(next);
        return STORE_BUSY;
    }
    argv[argc++] = "EVAL";
    argv[argc++] = n > 0 ? MEMBER_CAS_SCRIPT : CAS_SCRIPT;
    argv[argc++] = numfmt_dec(nkeys, (long long)(1 + n));
    argv[argc++] = c->key;
    /* the tag keys: the base ("<prefix>tag:{<channel>}:") and the tag */
    k = keys;
    for (size_t i = 0; i < n; i++) {
        const char *tag = json_string_value(i < added ? json_array_get(c->tags_added, i)
                                                      : json_array_get(c->tags_removed, i - added));
        size_t tl = strlen(tag);

        memcpy(k, c->tagging, base_len);
        memcpy(k + base_len, tag, tl + 1);
        argv[argc++] = k;
        k += base_len + tl + 1;
    }
    for (size_t i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    argv[argc] = raw;
    lens[argc++] = len;
    argv[argc] = next;
    lens[argc++] = next_len;
    if (n > 0) { /* the write changes the member's tags: their index changes with it */
        argv[argc] = c->tagging + base_len + 1;
        lens[argc] = strlen(argv[argc]);
        argc++;
        argv[argc] = numfmt_dec(count, (long long)added);
        lens[argc] = strlen(argv[argc]);
        argc++;
    }
    st = send_argv(c, (int)argc, argv, lens); /* hiredis copies the arguments */
    if (argv != stack_argv) {
        free(argv);
        free(lens);
    }
    free(keys);
    free(next);
    return st;
}

/* raw: the stored value just read. */
static void cas_write(store_call_t *c, const char *raw, size_t len)
{
    char *next = NULL;
    size_t next_len = 0;
    store_status_t st = cas_next(c, json_loadb(raw, len, 0, NULL), &next, &next_len);

    if (st == STORE_OK)
        st = cas_send(c, raw, len, next, next_len);
    if (st != STORE_OK)
        store_call_finish(c, st, NULL);
}

/* The first attempt without reading: the record the caller read a moment ago, as botgate
 * writes records (compact, in order), is most likely what is stored. When it is not (another
 * writer came first, or the record was stored in another layout) the script writes nothing
 * and the usual read-then-write follows at once, this attempt not counted. Anything that
 * fails here is left to that usual path, which reports it from a reply callback. */
static store_status_t cas_write_expected(store_call_t *c)
{
    size_t len = 0, next_len = 0;
    char *raw = jw_dump(c->expected, &len), *next = NULL;
    store_status_t st;

    if (raw == NULL || cas_next(c, json_deep_copy(c->expected), &next, &next_len) != STORE_OK) {
        free(raw);
        return send_get(c);
    }
    c->optimistic = 1;
    st = cas_send(c, raw, len, next, next_len);
    free(raw);
    return st;
}

static void on_pause(evutil_socket_t fd, short what, void *arg)
{
    store_call_t *c = arg;
    store_status_t st;

    (void)fd;
    (void)what;
    if ((st = send_get(c)) != STORE_OK)
        store_call_finish(c, st, NULL);
}

static void on_cas_written(store_call_t *c, redisReply *reply)
{
    json_t *record;

    if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) {
        c->st->bucket_seq[c->bucket] = ++c->st->write_seq;
        record = c->written;
        c->written = NULL;
        if (c->cacheable)
            store_cache_put(c->st->cache, c->key, record, clock_coarse_ms(), c->ticket);
        store_call_finish(c, STORE_OK, record);
        return;
    }
    if (c->optimistic) {
        store_status_t st;
        c->optimistic = 0;
        if ((st = send_get(c)) != STORE_OK)
            store_call_finish(c, st, NULL);
        return;
    }
    if (++c->attempts >= CAS_ATTEMPTS) {
        store_call_finish(c, STORE_CONFLICT, NULL);
        return;
    }
    /* Another worker or instance wrote first: read again after 0..31 ms, so that racing
     * writers spread out instead of colliding again. */
    {
        uint64_t x = c->st->rng;
        struct timeval tv;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c->st->rng = x;
        tv = clock_ms_timeval((int64_t)(x % (1u << (c->attempts < 5 ? c->attempts : 5))));
        if (c->pause == NULL && (c->pause = evtimer_new(c->st->base, on_pause, c)) == NULL) {
            store_call_finish(c, STORE_UNAVAILABLE, NULL);
            return;
        }
        evtimer_add(c->pause, &tv);
    }
}

static void on_node_reply(store_call_t *c, redisReply *reply)
{
    json_t *tree, *node, *value;

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
        store_call_finish(c, STORE_UNAVAILABLE, NULL);
        return;
    }
    if (reply->element[0]->type != REDIS_REPLY_STRING ||
        reply->element[1]->type != REDIS_REPLY_STRING) {
        store_call_finish(c, STORE_NOT_FOUND, NULL);
        return;
    }
    tree = json_loadb(reply->element[0]->str, reply->element[0]->len, 0, NULL);
    node = json_loadb(reply->element[1]->str, reply->element[1]->len, 0, NULL);
    if (!json_is_object(tree) || !json_is_object(node)) {
        json_decref(tree);
        json_decref(node);
        store_call_finish(c, STORE_BAD_RECORD, NULL);
        return;
    }
    value = json_object();
    json_object_set_new(value, "tree", tree);
    json_object_set_new(value, "node", node);
    store_call_finish(c, STORE_OK, value);
}

/* A lastInboundAt as scanned: ms since the epoch (a JSON integer, or a number written as a
 * real), else the text as it is (an ISO-8601 date: core/window.c reads both). */
static json_t *inbound_value(const char *text)
{
    char *end;
    long long ms;

    errno = 0;
    ms = strtoll(text, &end, 10);
    if (*text != '\0' && *end == '\0' && errno == 0)
        return json_integer(ms);
    if ((*text == '-' || isdigit((unsigned char)*text)) && (strtod(text, &end), *end == '\0'))
        return json_real(strtod(text, NULL));
    return json_string(text);
}

/* {"_id":..,"externalId":..,"lastInboundAt":..} of a member record (what a send needs: its
 * address, and its conversation window), or NULL when it is not a valid record. */
static json_t *decode_brief(const char *raw, size_t len)
{
    static const char *const keys[] = {"_id", "externalId", "lastInboundAt"};
    char *values[3];
    json_t *o = NULL;

    if (jscan_scalars(raw, len, keys, 3, values, 1u << 2) < 0)
        return NULL;
    /* jscan checked the strings' UTF-8 (escapes included) as jansson would: not again */
    if (values[0] != NULL) {
        o = json_object();
        json_object_set_new_nocheck(o, "_id", json_string_nocheck(values[0]));
        if (values[1] != NULL)
            json_object_set_new_nocheck(o, "externalId", json_string_nocheck(values[1]));
        if (values[2] != NULL)
            json_object_set_new_nocheck(o, "lastInboundAt", inbound_value(values[2]));
    }
    for (size_t i = 0; i < 3; i++)
        free(values[i]);
    return o;
}

store_status_t store_member_from_reply(const redisReply *reply, int brief, json_t **out)
{
    json_t *value;

    *out = NULL;
    if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
        return STORE_UNAVAILABLE;
    if (reply->type == REDIS_REPLY_NIL)
        return STORE_NOT_FOUND;
    if (reply->type != REDIS_REPLY_STRING)
        return STORE_BAD_RECORD;
    value =
        brief ? decode_brief(reply->str, reply->len) : json_loadb(reply->str, reply->len, 0, NULL);
    if (!json_is_object(value)) {
        json_decref(value);
        return STORE_BAD_RECORD;
    }
    *out = value;
    return STORE_OK;
}

/* Runs the resolve script with guess ("": none) as the member's id. */
static store_status_t resolve_send(store_call_t *c, const char *guess)
{
    resolve_words_t *w = c->words;
    char guessed[STORE_KEY_MAX], fresh[STORE_KEY_MAX];
    const char *argv[] = {"EVAL", RESOLVE_SCRIPT, "3",      c->key,   guessed,
                          fresh,  guess,          w->fresh, w->record};
    int base = (int)w->base_len;

    if (snprintf(guessed, sizeof(guessed), "%.*s%s", base, w->buf, *guess ? guess : w->fresh) >=
            (int)sizeof(guessed) ||
        snprintf(fresh, sizeof(fresh), "%.*s%s", base, w->buf, w->fresh) >= (int)sizeof(fresh))
        return STORE_BAD_RECORD;
    w->runs++;
    return send_argv(c, 9, argv, NULL);
}

/* The recipient is another member's than guessed ({id}): remembered, and asked again. */
static void resolve_moved(store_call_t *c, const redisReply *reply)
{
    const redisReply *id = reply->elements == 1 ? reply->element[0] : NULL;
    store_status_t st;

    if (id == NULL || id->type != REDIS_REPLY_STRING || id->len == 0 || id->len >= 64 ||
        strlen(id->str) != id->len) {
        store_call_finish(c, STORE_BAD_RECORD, NULL);
        return;
    }
    hint_put(&c->st->recipients, c->words->hint, id->str);
    if (c->words->runs >= RESOLVE_RUNS)
        st = STORE_CONFLICT;
    else
        st = resolve_send(c, id->str);
    if (st != STORE_OK)
        store_call_finish(c, st, NULL);
}

static void store_call_on_reply(redisReply *reply, void *arg)
{
    store_call_t *c = arg;
    json_t *value;

    c->cmd = NULL;
    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        store_call_finish(c, STORE_UNAVAILABLE, NULL);
        return;
    }
    switch (c->kind) {
    case CALL_IGNORE:
        store_call_finish(c, STORE_OK, NULL);
        return;
    case CALL_LOCK:
        store_call_finish(c, reply->type == REDIS_REPLY_STATUS ? STORE_OK : STORE_NOT_FOUND, NULL);
        return;
    case CALL_NODE:
        on_node_reply(c, reply);
        return;
    case CALL_CAS_WRITE:
        on_cas_written(c, reply);
        return;
    case CALL_RESOLVE:
        if (reply->type == REDIS_REPLY_ARRAY) {
            resolve_moved(c, reply);
            return;
        }
        break;
    default:
        break;
    }
    if (reply->type == REDIS_REPLY_NIL) {
        store_call_finish(c, STORE_NOT_FOUND, NULL);
        return;
    }
    if (reply->type != REDIS_REPLY_STRING) {
        store_call_finish(c, STORE_BAD_RECORD, NULL);
        return;
    }
    if (c->kind == CALL_CAS_READ) {
        cas_write(c, reply->str, reply->len);
        return;
    }
    if (c->kind == CALL_GET_STRING)
        value = json_stringn(reply->str, reply->len);
    else if (c->brief)
        value = decode_brief(reply->str, reply->len);
    else
        value = json_loadb(reply->str, reply->len, 0, NULL);
    if (!json_is_object(value) && !json_is_string(value)) {
        json_decref(value);
        store_call_finish(c, STORE_BAD_RECORD, NULL);
        return;
    }
    if (c->cacheable)
        store_cache_put(c->st->cache, c->key, value, clock_coarse_ms(), c->ticket);
    if (c->kind == CALL_RESOLVE && json_is_string(json_object_get(value, "_id")))
        hint_put(&c->st->recipients, c->words->hint,
                 json_string_value(json_object_get(value, "_id")));
    store_call_finish(c, STORE_OK, value);
}

json_t *store_cached_token(store_t *st, const char *hash_hex)
{
    char key[STORE_KEY_MAX];

    if (st->cache == NULL || store_key_token(key, sizeof(key), st->prefix, hash_hex) < 0)
        return NULL;
    return store_cache_get(st->cache, key, clock_coarse_ms());
}

json_t *store_cached_channel(store_t *st, const char *channel_id)
{
    char key[STORE_KEY_MAX];

    if (st->cache == NULL || store_key_channel(key, sizeof(key), st->prefix, channel_id) < 0)
        return NULL;
    return store_cache_get(st->cache, key, clock_coarse_ms());
}

/* A GET of a record the worker caches (token, channel): its answer refreshes the cache, and a
 * shared one may join a read of the key already in flight (start_shared_get). */
static store_call_t *cached_get(store_t *st, int key_len, const char *key, int shared, store_cb *cb,
                                void *arg, store_status_t *status)
{
    store_call_t *c = store_call_for(st, CALL_GET_JSON, key_len, key, cb, arg, status);

    if (c == NULL)
        return NULL;
    c->cacheable = 1;
    c->ticket = store_cache_ticket(st->cache, c->key);
    return shared ? start_shared_get(c, status) : store_call_get(c, status);
}

store_call_t *store_get_token(store_t *st, const char *hash_hex, store_cb *cb, void *arg,
                              store_status_t *status)
{
    char key[STORE_KEY_MAX];
    int len = store_key_token(key, sizeof(key), st->prefix, hash_hex);

    return cached_get(st, len, key, 1, cb, arg, status);
}

static store_call_t *get_channel(store_t *st, const char *channel_id, int shared, store_cb *cb,
                                 void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    int len = store_key_channel(key, sizeof(key), st->prefix, channel_id);

    return cached_get(st, len, key, shared, cb, arg, status);
}

store_call_t *store_get_channel(store_t *st, const char *channel_id, store_cb *cb, void *arg,
                                store_status_t *status)
{
    return get_channel(st, channel_id, 1, cb, arg, status);
}

store_call_t *store_reread_channel(store_t *st, const char *channel_id, store_cb *cb, void *arg,
                                   store_status_t *status)
{
    return get_channel(st, channel_id, 0, cb, arg, status);
}

store_call_t *store_get_member(store_t *st, const char *channel_id, const char *member_id,
                               int brief, store_cb *cb, void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    int len = store_key_member(key, sizeof(key), st->prefix, channel_id, member_id);
    store_call_t *c = store_call_for(st, CALL_GET_JSON, len, key, cb, arg, status);

    if (c == NULL)
        return NULL;
    c->brief = brief;
    return store_call_get(c, status);
}

store_call_t *store_member_for_recipient(store_t *st, const char *channel_id,
                                         const char *recipient_id, const json_t *new_member,
                                         int brief, store_cb *cb, void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX], base[STORE_KEY_MAX], *record;
    const char *id = json_string_value(json_object_get(new_member, "_id"));
    int len = id == NULL || store_key_member_base(base, sizeof(base), st->prefix, channel_id) < 0
                  ? -1
                  : store_key_recipient(key, sizeof(key), st->prefix, channel_id, recipient_id);
    store_call_t *c = store_call_for(st, CALL_RESOLVE, len, key, cb, arg, status);
    size_t nb, ni, nr;
    resolve_words_t *w;
    const char *guess;
    store_status_t sst;

    if (c == NULL)
        return NULL; /* id is not NULL, base is made */
    c->brief = brief;
    nb = strlen(base);
    ni = strlen(id);
    if ((record = json_dumps(new_member, JSON_COMPACT)) == NULL ||
        (w = c->words = malloc(sizeof(*w) + nb + ni + (nr = strlen(record)) + 2)) == NULL) {
        free(record);
        call_free(c);
        if (status != NULL)
            *status = STORE_BUSY;
        return NULL;
    }
    w->hint = hint_hash(channel_id, recipient_id);
    w->runs = 0;
    w->base_len = nb;
    memcpy(w->buf, base, nb);
    w->fresh = memcpy(w->buf + nb, id, ni + 1);
    w->record = memcpy(w->buf + nb + ni + 1, record, nr + 1);
    free(record);
    /* the member this worker found last for the recipient: one round trip when it still is,
     * or when the recipient is new */
    guess = hint_get(&st->recipients, w->hint);
    sst = resolve_send(c, guess != NULL ? guess : "");
    if (status != NULL)
        *status = sst;
    if (sst != STORE_OK) {
        call_free(c);
        return NULL;
    }
    return c;
}

static store_call_t *start_cas(store_call_t *c, store_mutate_fn *mutate, const json_t *change,
                               int64_t now_ms, store_status_t *status)
{
    store_call_t *h;
    store_status_t st;

    c->kind = CALL_CAS_READ;
    c->mutate = mutate;
    c->change = json_deep_copy(change);
    c->now_ms = now_ms;
    c->bucket = key_bucket(c->key);
    if ((h = cas_holder(c->st, c->bucket, c->key)) != NULL) {
        /* wait behind the calls already writing this key */
        while (h->queue_next != NULL)
            h = h->queue_next;
        h->queue_next = c;
        c->cas_state = CAS_WAITING;
        if (status != NULL)
            *status = STORE_OK;
        return c;
    }
    cas_hold(c);
    st = c->expected != NULL ? cas_write_expected(c) : send_get(c);
    if (st != STORE_OK) {
        cas_release(c);
        call_free(c);
        c = NULL;
    }
    if (status != NULL)
        *status = st;
    return c;
}

static int merge_info(json_t *channel, const json_t *fields, int64_t now_ms)
{
    json_t *info = json_object_get(channel, "info");

    (void)now_ms;
    if (info == NULL) {
        info = json_object();
        json_object_set_new(channel, "info", info);
    }
    if (!json_is_object(info))
        return -1;
    return json_object_update(info, (json_t *)fields);
}

store_call_t *store_update_channel_info(store_t *st, const char *channel_id, const json_t *fields,
                                        store_cb *cb, void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    int len = store_key_channel(key, sizeof(key), st->prefix, channel_id);
    store_call_t *c = store_call_for(st, CALL_CAS_READ, len, key, cb, arg, status);

    if (c == NULL)
        return NULL;
    c->cacheable = 1;
    return start_cas(c, merge_info, fields, 0, status);
}

uint64_t store_write_seq(const store_t *st)
{
    return st->write_seq;
}

store_call_t *store_update_member(store_t *st, const char *channel_id, const char *member_id,
                                  const json_t *current, uint64_t current_seq,
                                  store_mutate_fn *mutate, const json_t *change, int64_t now_ms,
                                  store_cb *cb, void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    int len = store_key_member(key, sizeof(key), st->prefix, channel_id, member_id);
    store_call_t *c = store_call_for(st, CALL_CAS_READ, len, key, cb, arg, status);

    char base[STORE_KEY_MAX];
    size_t lb, lm;

    if (c == NULL)
        return NULL;
    if (store_key_tag_base(base, sizeof(base), st->prefix, channel_id) < 0 ||
        (c->tagging = malloc((lb = strlen(base) + 1) + (lm = strlen(member_id) + 1))) == NULL) {
        call_free(c);
        if (status != NULL)
            *status = STORE_BUSY;
        return NULL;
    }
    memcpy(c->tagging, base, lb);
    memcpy(c->tagging + lb, member_id, lm);
    /* Not when this worker wrote the key (or one of its bucket) since current was read: the
     * compare would surely fail, and cost a round trip where it should save one. */
    if (json_is_object(current) && st->bucket_seq[key_bucket(c->key)] <= current_seq)
        c->expected = json_incref((json_t *)current);
    return start_cas(c, mutate, change, now_ms, status);
}

/* The remembered strings of a channel (a contact's wa_id, an upload's media_id): a plain GET
 * of the key key_of builds, answered as a JSON string, and a SET with a time to live. */
