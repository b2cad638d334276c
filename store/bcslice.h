/* bcslice.h - the words of a broadcast's accepting scripts for a slice of ids (broadcast.h):
 * every key a script touches among its KEYS, the members' too, for botgatectl's blocking client
 * and the gateway's calls alike. */
#ifndef BOTGATE_STORE_BCSLICE_H
#define BOTGATE_STORE_BCSLICE_H

#include "../core/hint.h"
#include "store.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_BROADCAST_SLICE_MAX 4096 /* ids one accepting call carries at most */

/* The scripts that add a slice of member ids and of recipient ids to an accepting broadcast
 * (their KEYS and ARGV are written above each in bcslice.c), for botgatectl's blocking client. */
extern const char store_bc_add_members_script[], store_bc_add_recipients_script[];

/* The KEYS of store_bc_add_members_script: record_key, todo_key, then the key of each member
 * id (the script checks them, so a Redis Cluster is told of each), in one block to free; NULL
 * when out of memory or the base does not fit. */
const char **store_bc_member_keys(const char *prefix, const char *channel_id,
                                  const char *record_key, const char *todo_key,
                                  const char *const *members, size_t n);
/* A slice of recipient ids on its way to an accepting broadcast, for the caller that runs
 * store_bc_add_recipients_script itself (botgatectl; store_bc_add_recipients runs it so). The
 * script names every key it touches among its KEYS, the member's too, so each recipient goes
 * with a guess of its member's id (from guesses, the ids a worker found last: NULL, none); one
 * that turns out to be another member's is not added but named, and goes again with that id.
 * The words are copied. NULL when out of memory, n is 0 or over STORE_BROADCAST_SLICE_MAX. */
typedef struct store_bc_rslice store_bc_rslice_t;
store_bc_rslice_t *store_bc_rslice_new(const char *prefix, const char *channel_id,
                                       const char *record_key, const char *todo_key,
                                       const char *const *recipients, const char *const *new_ids,
                                       const char *const *new_records, size_t n,
                                       const hint_table_t *guesses);
/* The next run's words (EVAL, the script, ...; argv[3] is the record's key, which routes it),
 * valid until the next call: their number, or -1 when out of memory. */
int store_bc_rslice_words(store_bc_rslice_t *s, const char ***argv);
/* Reads the run's reply; the ids it names are put in learn (NULL: nowhere). STORE_OK, with
 * *again 1 when some recipients go again (store_bc_rslice_words); STORE_BAD_RECORD for a reply
 * that is not the script's; STORE_CONFLICT when they still moved after 3 runs. */
store_status_t store_bc_rslice_reply(store_bc_rslice_t *s, const redisReply *reply,
                                     hint_table_t *learn, int *again);
/* The members added by the runs so far; -1 when the broadcast was not accepting. */
int64_t store_bc_rslice_added(const store_bc_rslice_t *s);
void store_bc_rslice_free(store_bc_rslice_t *s);
#endif
