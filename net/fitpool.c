/* fitpool.c - exact-fit blocks for the 1-8 KiB sizes (see fitpool.h). */
#include "fitpool.h"

#include <stdint.h>

/* Each block is preceded by its size class, in a header that keeps the block 16-aligned. */
#define HEADER 16

static size_t class_of(size_t size)
{
    return (size - FITPOOL_MIN) / FITPOOL_STEP;
}

static size_t size_of_class(size_t c)
{
    return FITPOOL_MIN - 1 + (c + 1) * FITPOOL_STEP;
}

void fitpool_init(fitpool_t *p, void *base, size_t len)
{
    uintptr_t b = ((uintptr_t)base + HEADER - 1) & ~(uintptr_t)(HEADER - 1);

    *p = (fitpool_t){0};
    if (base == NULL || len < (size_t)(b - (uintptr_t)base) + HEADER)
        return; /* owns nothing, hands out nothing */
    p->base = (char *)b;
    p->next = p->base;
    p->end = (char *)base + len;
}

void *fitpool_alloc(fitpool_t *p, size_t size)
{
    size_t c, need;
    char *block;

    if (size < FITPOOL_MIN || size > FITPOOL_MAX)
        return NULL;
    c = class_of(size);
    if ((block = p->free[c]) != NULL) {
        p->free[c] = *(void **)block;
        return block;
    }
    need = HEADER + size_of_class(c);
    if (p->next == NULL || (size_t)(p->end - p->next) < need)
        return NULL;
    block = p->next + HEADER;
    *(size_t *)(void *)p->next = c;
    p->next += need;
    return block;
}

size_t fitpool_size(const void *block)
{
    return size_of_class(*(const size_t *)(const void *)((const char *)block - HEADER));
}

void fitpool_free(fitpool_t *p, void *block)
{
    size_t c = *(size_t *)(void *)((char *)block - HEADER);

    *(void **)block = p->free[c];
    p->free[c] = block;
}
