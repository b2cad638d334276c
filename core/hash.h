/* hash.h - the hash that spreads keys over the buckets of botgate's small in-memory tables
 * (the worker's record cache, the store's per-key queues, a subscriber's channels, the decoded
 * records kept by address). */
#ifndef BOTGATE_CORE_HASH_H
#define BOTGATE_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a of the len bytes at s. */
static inline uint32_t hash_fnv1a(const char *s, size_t len)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The slot of an object, by its address, in a table of 2^bits slots (1 <= bits <= 32):
 * Fibonacci hashing, so that addresses a few allocations apart spread over the slots. */
static inline unsigned hash_ptr(const void *p, unsigned bits)
{
    return (unsigned)(((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15u) >> (64 - bits));
}

#endif
