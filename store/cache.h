/* cache.h - a worker's copy of records read often and changed rarely (tokens, channels): a hit
 * saves a Redis round trip and a JSON parse. Redis keeps it coherent (client-side caching,
 * redisc_track): the owner drops an entry when Redis says its key changed, and turns the cache
 * off (nothing served, nothing kept) while it cannot be sure to hear of every change. Entries
 * also expire after ttl_ms, a safety net. */
#ifndef BOTGATE_STORE_CACHE_H
#define BOTGATE_STORE_CACHE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store_cache store_cache_t;

/* Starts off (see store_cache_set_on). */
store_cache_t *store_cache_new(size_t max_entries, int ttl_ms);
void store_cache_free(store_cache_t *c);

/* A new reference to the cached value, or NULL. Values are shared: never change one. */
json_t *store_cache_get(store_cache_t *c, const char *key, int64_t now_ms);

/* Taken when the read (or write) of key is sent to Redis; the put of its answer is skipped
 * when key was dropped in between: Redis may deliver the invalidation of a write that
 * followed the read before the read's own answer (they come on two connections). */
uint64_t store_cache_ticket(const store_cache_t *c, const char *key);
/* Keeps a reference to value until it expires, is replaced or dropped. */
void store_cache_put(store_cache_t *c, const char *key, json_t *value, int64_t now_ms,
                     uint64_t ticket);
/* key changed in Redis (len bytes, not NUL-terminated): its entry goes, puts of reads sent
 * before are skipped. */
void store_cache_drop(store_cache_t *c, const char *key, size_t len);
/* Everything goes, as above. */
void store_cache_drop_all(store_cache_t *c);
/* on 0: everything goes and the cache serves and keeps nothing until turned on again. */
void store_cache_set_on(store_cache_t *c, int on);

#endif
