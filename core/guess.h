/* guess.h - short strings a worker remembers for a pair of ids (a channel's sender's member id, a
 * channel's member's address): a fixed table of two-way sets, made at the first put and never
 * grown. A guess may be stale or another pair's (two pairs can share a place): whoever uses one
 * checks it where the truth is, so that a wrong guess costs a round trip, never a wrong answer. */
#ifndef BOTGATE_CORE_GUESS_H
#define BOTGATE_CORE_GUESS_H

#include <stdint.h>

#define GUESS_SETS      8192 /* sets of two ways: about 0.5 MiB a table */
#define GUESS_VALUE_MAX 28   /* longer values than GUESS_VALUE_MAX - 1 are not remembered */

/* Owned by whoever made it with guess_put; guess_free lets it go. */
typedef struct guess_table guess_table_t;

/* The place of the pair (a, b) in a table. */
uint64_t guess_hash(const char *a, const char *b);
/* The value last put for the place x, or NULL; valid until the next put. t may be NULL. */
const char *guess_get(const guess_table_t *t, uint64_t x);
/* Remembers value for the place x; the older of its set's two makes room. *t is made at the
 * first put (nothing is remembered when memory runs out). */
void guess_put(guess_table_t **t, uint64_t x, const char *value);
void guess_free(guess_table_t *t); /* NULL is fine */

#endif
