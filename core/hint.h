/* hint.h - the ids a worker remembers for pairs of names (the member id it last found for a
 * channel's sender or recipient), as guesses for a script that must name a record's key before
 * it runs: a wrong or forgotten guess costs a round trip, never a wrong answer. */
#ifndef BOTGATE_CORE_HINT_H
#define BOTGATE_CORE_HINT_H

#include <stdint.h>

/* HINT_SETS sets of two ways (about 0.5 MiB, made at the first put); ids of HINT_ID_MAX bytes
 * or more are not remembered. */
#define HINT_SETS   8192
#define HINT_ID_MAX 28

typedef struct hint_set hint_set_t;

/* Zeroed: empty. Owned by whoever holds it; hint_free frees its sets. */
typedef struct hint_table {
    hint_set_t *_sets; /* HINT_SETS, NULL before the first put */
} hint_table_t;

/* The place of the pair (a, b): their hashes mixed, no two pairs of hashes the same. */
uint64_t hint_hash(const char *a, const char *b);
/* The id last put at x, or NULL (valid until the next put). */
const char *hint_get(const hint_table_t *t, uint64_t x);
/* Remembers id at x; the older of its set's two ways makes room. Out of memory: nothing. */
void hint_put(hint_table_t *t, uint64_t x, const char *id);
void hint_free(hint_table_t *t);

#endif
