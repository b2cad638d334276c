/* guess.c - the table of guesses: GUESS_SETS sets of two ways, a way tagged by its pair's hash. */
#include "guess.h"

#include "hash.h"

#include <stdlib.h>
#include <string.h>

typedef struct guess_set {
    uint32_t tag[2]; /* 0: a way never used */
    char value[2][GUESS_VALUE_MAX];
    unsigned char older; /* the way the next new pair takes */
} guess_set_t;

struct guess_table {
    guess_set_t sets[GUESS_SETS];
};

/* The hashes of a and b, mixed (a multiplication by an odd number: no two pairs of hashes the
 * same), pick a set and tag the way. */
uint64_t guess_hash(const char *a, const char *b)
{
    uint64_t x = (uint64_t)hash_fnv1a(a, strlen(a)) << 32 | hash_fnv1a(b, strlen(b));

    return x * 0x9E3779B97F4A7C15u;
}

static uint32_t guess_tag(uint64_t x)
{
    return (uint32_t)(x >> 32) | 1; /* never 0 */
}

const char *guess_get(const guess_table_t *t, uint64_t x)
{
    const guess_set_t *s = t != NULL ? &t->sets[x % GUESS_SETS] : NULL;

    for (int i = 0; s != NULL && i < 2; i++)
        if (s->tag[i] == guess_tag(x))
            return s->value[i];
    return NULL;
}

void guess_put(guess_table_t **t, uint64_t x, const char *value)
{
    size_t len = strlen(value);
    uint32_t tag = guess_tag(x);
    guess_set_t *s;
    int way;

    if (len >= GUESS_VALUE_MAX)
        return;
    if (*t == NULL && (*t = calloc(1, sizeof(**t))) == NULL)
        return;
    s = &(*t)->sets[x % GUESS_SETS];
    way = s->tag[0] == tag ? 0 : s->tag[1] == tag ? 1 : s->older;
    s->tag[way] = tag;
    memcpy(s->value[way], value, len + 1);
    s->older = (unsigned char)!way;
}

void guess_free(guess_table_t *t)
{
    free(t);
}
