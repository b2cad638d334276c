/* outbox_entries.h - the outbox's stream entries as Redis hands them over (XREADGROUP,
 * XAUTOCLAIM), for the files of store/outbox only. */
#ifndef BOTGATE_STORE_OUTBOX_ENTRIES_H
#define BOTGATE_STORE_OUTBOX_ENTRIES_H

#include "outbox.h"

#include <hiredis/hiredis.h>

#define STORE_OUTBOX_ENTRIES_MAX 256 /* entries one read or claim hands over at most */

/* The entries of one stream's reply ([[id, [field, value, ...]], ...]) into out (at most room):
 * their strings are the reply's. */
size_t store_outbox_decode_entries(const redisReply *list, unsigned shard,
                                   store_outbox_entry_t *out, size_t room);

#endif
