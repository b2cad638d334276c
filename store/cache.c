/* cache.c - a chained hash table of JSON values with an expiry each, bounded in size: when it
 * is full, expired entries go first, and a put that still finds no room is skipped (the cache
 * is an optimisation, never a source of truth). */
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
    size_t n, max;
    int ttl_ms;
};

static unsigned hash(const char *key)
{
    return hash_fnv1a(key, strlen(key)) % BUCKETS;
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

void store_cache_free(store_cache_t *c)
{
    if (c == NULL)
        return;
    for (unsigned i = 0; i < BUCKETS; i++)
        while (c->buckets[i] != NULL) {
            entry_t *e = c->buckets[i];
            c->buckets[i] = e->next;
            entry_free(e);
        }
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
    if (c == NULL)
        return NULL;
    for (entry_t *e = c->buckets[hash(key)]; e != NULL; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e->expires_ms > now_ms ? json_incref(e->value) : NULL;
    return NULL;
}

void store_cache_put(store_cache_t *c, const char *key, json_t *value, int64_t now_ms)
{
    unsigned b;
    entry_t *e;

    if (c == NULL || value == NULL)
        return;
    b = hash(key);
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

void store_cache_drop(store_cache_t *c, const char *key)
{
    if (c == NULL)
        return;
    for (entry_t **pp = &c->buckets[hash(key)]; *pp != NULL; pp = &(*pp)->next)
        if (strcmp((*pp)->key, key) == 0) {
            entry_t *e = *pp;
            *pp = e->next;
            entry_free(e);
            c->n--;
            return;
        }
}
