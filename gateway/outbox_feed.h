/* outbox_feed.h - what hands a worker's outbox its entries (contract.md section 12): the
 * blocking read of new entries, the taking over (XAUTOCLAIM) of those a dead consumer left,
 * and the depth gauges with the consumer group's upkeep. Entries go up by callback. */
#ifndef BOTGATE_GATEWAY_OUTBOX_FEED_H
#define BOTGATE_GATEWAY_OUTBOX_FEED_H

#include "../store/outbox.h"
#include "op.h"

typedef struct outbox_feed outbox_feed_t;

/* An entry for the outbox (valid during the call); claimed: taken over from another consumer. */
typedef void outbox_feed_entry_fn(void *arg, const store_outbox_entry_t *e, int claimed);
/* The outbox's entries in work now: the feed reads while there is room for more. */
typedef unsigned outbox_feed_jobs_fn(void *arg);

/* The feed of consumer (in env's worker) over shards streams; it starts reading and taking over
 * once the loop runs. With one server (or Sentinel) one blocking connection reads every
 * shard; with a Redis Cluster there is one per shard, to its slot's master. NULL when out of
 * memory. */
outbox_feed_t *outbox_feed_new(op_env_t *env, unsigned shards, const char *consumer,
                               outbox_feed_entry_fn *entry, outbox_feed_jobs_fn *jobs, void *arg);
/* Stops what is in flight and frees it; no callback after. */
void outbox_feed_free(outbox_feed_t *f);
/* The outbox has room again: reads if it is not reading. */
void outbox_feed_read(outbox_feed_t *f);
/* Refreshes the queue depth gauges from now on (one worker does it for the process). */
void outbox_feed_watch_depth(outbox_feed_t *f);

#endif
