/* fitpool.h - blocks of 1-8 KiB carved at their own size (to 32 bytes, and a 16-byte header)
 * from one region the caller provides. mimalloc serves such sizes from classes a quarter apart:
 * libcurl's easy handle, 5360 bytes with Debian 12's libcurl and one per transfer in flight,
 * takes a 6144-byte block there, its 1025-byte receive buffer a 1280-byte one. Freed blocks wait on
 * a list per size for the next block of that size; nothing goes back to the region. Not
 * thread-safe: the caller locks. */
#ifndef BOTGATE_NET_FITPOOL_H
#define BOTGATE_NET_FITPOOL_H

#include <stddef.h>
#include <stdint.h>

#define FITPOOL_MIN   1025 /* smaller sizes fit the allocator's classes well */
#define FITPOOL_MAX   8192
#define FITPOOL_STEP  32
#define FITPOOL_SIZES ((FITPOOL_MAX - FITPOOL_MIN + 1) / FITPOOL_STEP)

typedef struct fitpool {
    char *base, *next, *end; /* the region; next: its first byte never handed out */
    void *free[FITPOOL_SIZES];
} fitpool_t;

/* The pool carves from len bytes at base (never touched before a block needs them). */
void fitpool_init(fitpool_t *p, void *base, size_t len);

/* A block of at least size bytes, not zeroed; NULL when size is outside FITPOOL_MIN..MAX or the
 * region is used up (the caller then asks its allocator). */
void *fitpool_alloc(fitpool_t *p, size_t size);

/* Whether ptr is a block of this pool. */
static inline int fitpool_owns(const fitpool_t *p, const void *ptr)
{
    /* as integers: ptr may point anywhere, not only into the region */
    return (uintptr_t)ptr >= (uintptr_t)p->base && (uintptr_t)ptr < (uintptr_t)p->end;
}

/* The usable size of a block of this pool. */
size_t fitpool_size(const void *block);

/* Gives a block of this pool back for the next of its size. */
void fitpool_free(fitpool_t *p, void *block);

#endif
