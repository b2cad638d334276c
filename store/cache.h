/* cache.h - a worker's short-lived copy of records read often and changed rarely (tokens,
 * channels): a hit saves a Redis round trip and a JSON parse. Entries live ttl_ms; a change
 * made through this worker replaces its entry at once, other changes are seen within ttl_ms. */
#ifndef BOTGATE_STORE_CACHE_H
#define BOTGATE_STORE_CACHE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store_cache store_cache_t;

store_cache_t *store_cache_new(size_t max_entries, int ttl_ms);
void store_cache_free(store_cache_t *c);

/* A new reference to the cached value, or NULL. Values are shared: never change one. */
json_t *store_cache_get(store_cache_t *c, const char *key, int64_t now_ms);
/* Keeps a reference to value until it expires or is replaced. */
void store_cache_put(store_cache_t *c, const char *key, json_t *value, int64_t now_ms);
void store_cache_drop(store_cache_t *c, const char *key);

#endif
