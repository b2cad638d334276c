/* hint.c - the ids a worker remembers (hint.h): sets of two ways picked by a hash of the pair,
 * each way tagged, the older of the two making room. */
#include "hint.h"

#include "hash.h"

#include <stdlib.h>
#include <string.h>

struct hint_set {
    uint32_t tag[2]; /* 0: a way never used */
    char id[2][HINT_ID_MAX];
    unsigned char older; /* the way the next new pair takes */
};

/* The hashes of the two names, mixed by a multiplication by an odd number. */
uint64_t hint_hash(const char *a, const char *b)
{
    uint64_t x = (uint64_t)hash_fnv1a(a, strlen(a)) << 32 | hash_fnv1a(b, strlen(b));

    return x * 0x9E3779B97F4A7C15u;
}

static hint_set_t *hint_slot(const hint_table_t *t, uint64_t x, uint32_t *tag)
{
    *tag = (uint32_t)(x >> 32) | 1;
    return t->_sets != NULL ? &t->_sets[x % HINT_SETS] : NULL;
}

const char *hint_get(const hint_table_t *t, uint64_t x)
{
    uint32_t tag;
    const hint_set_t *s = hint_slot(t, x, &tag);

    for (int i = 0; s != NULL && i < 2; i++)
        if (s->tag[i] == tag)
            return s->id[i];
    return NULL;
}

void hint_put(hint_table_t *t, uint64_t x, const char *id)
{
    size_t n = strlen(id);
    uint32_t tag;
    hint_set_t *s;
    int way;

    if (n >= HINT_ID_MAX)
        return;
    if (t->_sets == NULL && (t->_sets = calloc(HINT_SETS, sizeof(*t->_sets))) == NULL)
        return;
    s = hint_slot(t, x, &tag);
    way = s->tag[0] == tag ? 0 : s->tag[1] == tag ? 1 : s->older;
    s->tag[way] = tag;
    memcpy(s->id[way], id, n + 1);
    s->older = (unsigned char)!way;
}

void hint_free(hint_table_t *t)
{
    free(t->_sets);
    t->_sets = NULL;
}
