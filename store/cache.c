/* cache.c - a chained hash table of JSON values with an expiry each, bounded in size: when it
 * is full, expired entries go first, and a put that still finds no room is skipped (the cache
 * is an optimisation, never a source of truth). Each bucket counts the drops of its keys: a
 * put whose ticket (the count when its read was sent) is no longer current is stale. */
#include "cache.h"

#include "../core/hash.h"

#include <stdlib.h>
#include <string.h>

#define BUCKETS 1024

typedef struct entry {
    char *key;
    json_t *value;
    int64_t expires_ms;
    struct entry *next;
} entry_t;

/* Owned by the store of one worker. */
struct store_cache {
    entry_t *buckets[BUCKETS];
    uint64_t drops[BUCKETS]; /* drops of the bucket's keys so far: the tickets */
    size_t n, max;
    int ttl_ms;
    int on;
};

static unsigned hashn(const char *key, size_t len)
{
    return hash_fnv1a(key, len) % BUCKETS;
}

static unsigned hash(const char *key)
{
    return hashn(key, strlen(key));
}

store_cache_t *store_cache_new(size_t max_entries, int ttl_ms)
{
    store_cache_t *c;

    if (ttl_ms <= 0 || max_entries == 0 || (c = calloc(1, sizeof(*c))) == NULL)
        return NULL;
    c->max = max_entries;
    c->ttl_ms = ttl_ms;
    return c;
}

static void entry_free(entry_t *e)
{
    free(e->key);
    json_decref(e->value);
    free(e);
}

static void empty(store_cache_t *c)
{
    for (unsigned i = 0; i < BUCKETS; i++) {
        while (c->buckets[i] != NULL) {
            entry_t *e = c->buckets[i];
            c->buckets[i] = e->next;
            entry_free(e);
        }
        c->drops[i]++;
    }
    c->n = 0;
}

void store_cache_free(store_cache_t *c)
{
    if (c == NULL)
        return;
    empty(c);
    free(c);
}

/* Removes expired entries of one bucket (all buckets when b == BUCKETS). */
static void expire(store_cache_t *c, unsigned b, int64_t now_ms)
{
    unsigned first = b == BUCKETS ? 0 : b, last = b == BUCKETS ? BUCKETS : b + 1;

    for (unsigned i = first; i < last; i++)
        for (entry_t **pp = &c->buckets[i]; *pp != NULL;) {
            entry_t *e = *pp;
            if (e->expires_ms > now_ms) {
                pp = &e->next;
                continue;
            }
            *pp = e->next;
            entry_free(e);
            c->n--;
        }
}

json_t *store_cache_get(store_cache_t *c, const char *key, int64_t now_ms)
{
    if (c == NULL || !c->on)
        return NULL;
    for (entry_t *e = c->buckets[hash(key)]; e != NULL; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e->expires_ms > now_ms ? json_incref(e->value) : NULL;
    return NULL;
}

uint64_t store_cache_ticket(const store_cache_t *c, const char *key)
{
    return c == NULL ? 0 : c->drops[hash(key)];
}

void store_cache_put(store_cache_t *c, const char *key, json_t *value, int64_t now_ms,
                     uint64_t ticket)
{
    unsigned b;
    entry_t *e;

    if (c == NULL || value == NULL || !c->on)
        return;
    b = hash(key);
    if (c->drops[b] != ticket)
        return; /* dropped since it was read: the value may be older than the drop */
    expire(c, b, now_ms);
    for (e = c->buckets[b]; e != NULL; e = e->next)
        if (strcmp(e->key, key) == 0) {
            json_decref(e->value);
            e->value = json_incref(value);
            e->expires_ms = now_ms + c->ttl_ms;
            return;
        }
    if (c->n >= c->max)
        expire(c, BUCKETS, now_ms);
    if (c->n >= c->max || (e = calloc(1, sizeof(*e))) == NULL)
        return;
    if ((e->key = strdup(key)) == NULL) {
        free(e);
        return;
    }
    e->value = json_incref(value);
    e->expires_ms = now_ms + c->ttl_ms;
    e->next = c->buckets[b];
    c->buckets[b] = e;
    c->n++;
}

void store_cache_drop(store_cache_t *c, const char *key, size_t len)
{
    unsigned b;

    if (c == NULL)
        return;
    b = hashn(key, len);
    c->drops[b]++;
    for (entry_t **pp = &c->buckets[b]; *pp != NULL; pp = &(*pp)->next)
        if (strlen((*pp)->key) == len && memcmp((*pp)->key, key, len) == 0) {
            entry_t *e = *pp;
            *pp = e->next;
            entry_free(e);
            c->n--;
            return;
        }
}

void store_cache_drop_all(store_cache_t *c)
{
    if (c != NULL)
        empty(c);
}

void store_cache_set_on(store_cache_t *c, int on)
{
    if (c == NULL)
        return;
    if (!on)
        empty(c);
    c->on = on;
}
