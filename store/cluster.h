/* cluster.h - Redis Cluster for one worker: the slot map, one async connection (a redisc) per
 * master, each command sent to the master of its key's slot, MOVED and ASK followed. */
#ifndef BOTGATE_STORE_CLUSTER_H
#define BOTGATE_STORE_CLUSTER_H

#include "redisc.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;

#define CLUSTER_SLOTS     16384
#define CLUSTER_SEEDS_MAX SENTINEL_MAX

typedef struct cluster cluster_t;
typedef struct cluster_cmd cluster_cmd_t;

/* The slot of a key, as CLUSTER KEYSLOT says: CRC16 (XMODEM) of the key, or of its hash tag
 * (what lies between the first '{' and the next '}', when not empty), modulo 16384. */
unsigned cluster_keyslot(const char *key, size_t len);

/* node is the template of every connection (password, timeouts, in-flight cap; its host and
 * port are ignored); seeds are where the slot map is first asked for (IP addresses). */
cluster_t *cluster_new(struct event_base *base, const redisc_config_t *node,
                       const sentinel_addr_t *seeds, int n_seeds);
void cluster_free(cluster_t *cl); /* pending callbacks are called with NULL */

/* Told when every slot has a master and every master's connection is up (up = 1), and when
 * that stops (up = 0, why says why). */
void cluster_set_state_cb(cluster_t *cl, redisc_state_cb *cb, void *arg);
/* Told of every command that ends on a node (a redirection counts as one that failed). */
void cluster_set_observer(cluster_t *cl, redisc_observe_cb *cb, void *arg);
/* Whether commands can be served: 1 while one master of the map is connected, once the
 * cluster has been up (every slot's master connected) since cluster_new or, if it never
 * was, a connect and a command timeout after the first map was read.
 * A failover (a slot without a master for a few seconds) leaves every client of the
 * cluster the same: its slots answer REDISC_DOWN at once, and the others go on. */
int cluster_ready(const cluster_t *cl);

/* Sends one command to the master of key's slot, as redisc_command does (same returns, same
 * promise: cb runs once unless cancelled, or never when the return is not REDISC_OK). A MOVED
 * answer is followed (and the map refreshed), an ASK answer once with ASKING first; cb sees
 * the final answer. A slot whose master is unknown or down answers REDISC_DOWN. */
int cluster_command(cluster_t *cl, const char *key, redisc_cb *cb, void *arg, int argc,
                    const char **argv, const size_t *argvlen, cluster_cmd_t **out);
/* The same, for a command already in Redis's wire format (redisc_command_formatted). */
int cluster_command_formatted(cluster_t *cl, const char *key, redisc_cb *cb, void *arg,
                              const char *cmd, size_t len, cluster_cmd_t **out);
void cluster_cancel(cluster_cmd_t *cmd);

/* A subscriber (redisc_new_subscriber) for the cluster's pub/sub: a PUBLISH on any node
 * reaches every node, so it connects to any, the first seed first. When its node goes (or
 * refuses it), it moves at once to a master that is up, else to the next node known (seeds,
 * then every node of the maps read), and subscribes again there. Owned by the caller, and
 * freed (redisc_free) before the cluster. */
redisc_t *cluster_new_subscriber(cluster_t *cl, const char *anchor);

/* A connection of its own (the template's settings, command_timeout_ms) to the master of
 * key's slot in the map known now, or to host:port when host is not NULL (where a MOVED
 * points; the map is then read again). For a command that holds its connection (a blocking
 * read), which the shared connections must not carry. NULL when the slot has no master known
 * (the map is read again) or out of memory. Owned by the caller, freed before the cluster. */
redisc_t *cluster_new_connection(cluster_t *cl, const char *key, const char *host, int port,
                                 int command_timeout_ms);

/* Client-side caching on every master (redisc_track per node: each master's connection
 * paired with a subscriber on the same node). tracking is told 1 once every master's pair
 * tracks, 0 as soon as one does not (a pair down, a new master not yet tracked).
 * anchor: the channel each subscriber stays subscribed to (redisc_new_subscriber). Call right
 * after cluster_new, before the loop runs. */
int cluster_track(cluster_t *cl, const char *anchor, const char *const *prefixes, int n_prefixes,
                  redisc_tracking_cb *tracking, redisc_invalidate_cb *invalidate, void *arg);

#endif
