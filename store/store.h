/* store.h - botgate's records in Redis, read and written through the worker's async client.
 * Every function here is asynchronous: it sends its command(s) and returns at once; the
 * callback runs later on the worker's loop, exactly once, unless the call is cancelled. */
#ifndef BOTGATE_STORE_STORE_H
#define BOTGATE_STORE_STORE_H

#include "cluster.h"
#include "keys.h"
#include "redisc.h"

#include <jansson.h>
#include <stdint.h>

struct event_base;

typedef enum {
    STORE_OK = 0,
    STORE_NOT_FOUND,   /* no such key (for a lock: somebody else holds it) */
    STORE_UNAVAILABLE, /* Redis down, timed out or answering errors: 119 */
    STORE_BUSY,        /* too many commands in flight on this worker */
    STORE_BAD_RECORD,  /* the stored value is not what contract.md says */
    STORE_CONFLICT,    /* a compare-and-set kept losing to concurrent writers */
} store_status_t;

typedef struct store store_t;
typedef struct store_call store_call_t;

/* value: a new reference the callback owns (NULL unless st is STORE_OK). */
typedef void store_cb(void *arg, store_status_t st, json_t *value);

/* A change applied to the latest stored record inside a compare-and-set loop; returns -1 to
 * give up (the call then ends with STORE_BAD_RECORD). */
typedef int store_mutate_fn(json_t *record, const json_t *change, int64_t now_ms);

typedef struct store_config {
    redisc_config_t redis; /* with a cluster: the template of every node's connection */
    sentinel_addr_t cluster[CLUSTER_SEEDS_MAX]; /* Redis Cluster's seed nodes */
    int n_cluster;                              /* 0: one server (or Sentinel), no cluster */
    char prefix[STORE_PREFIX_MAX];
    int cache_ttl_ms; /* tokens and channels are kept this long in the worker; 0: never */
} store_config_t;

store_t *store_new(struct event_base *base, const store_config_t *cfg);
void store_free(store_t *st);
int store_ready(const store_t *st);
/* The connection of a single server (or Sentinel's master); NULL with a cluster. */
redisc_t *store_redis(store_t *st);
const char *store_prefix(const store_t *st);
/* The member id this worker found last for each (channel, recipient id): the guesses of the
 * scripts that must name a member's key before they run (a send by recipientId, a broadcast's
 * recipient ids, a webhook's sender: the same ids, normalised alike, so one table). */
struct hint_table *store_recipient_hints(store_t *st);
/* A connection of its own to the single server (or Sentinel's master), with command_timeout_ms
 * for each command: for a command that holds its connection (a blocking read). NULL with a
 * cluster or when out of memory; the caller frees it (redisc_free). */
redisc_t *store_new_connection(store_t *st, int command_timeout_ms);
/* The same for commands on key alone, in every mode: with a cluster, to the master of key's
 * slot, or to host:port when host is not NULL (where a MOVED pointed). NULL when that master
 * is not known yet or out of memory. */
redisc_t *store_new_connection_for(store_t *st, const char *key, const char *host, int port,
                                   int command_timeout_ms);
/* Told when Redis (a single server, or every master of the cluster) comes up or goes down, and
 * of every command that ends: see redisc_set_state_cb and redisc_set_observer. */
void store_set_state_cb(store_t *st, redisc_state_cb *cb, void *arg);
void store_set_observer(store_t *st, redisc_observe_cb *cb, void *arg);

/* One command to the server that holds key (with a cluster, the master of its slot: every key
 * a script or a transaction touches must share key's slot), as redisc_command. For the store's
 * own modules (ratelimit.c): everybody else calls the functions below. */
typedef struct store_cmd store_cmd_t; /* a redisc_cmd_t, or a cluster_cmd_t with a cluster */
int store_command(store_t *st, const char *key, redisc_cb *cb, void *arg, int argc,
                  const char **argv, const size_t *argvlen, store_cmd_t **out);
/* The same, for a command already in Redis's wire format (redisc_command_formatted). */
int store_command_formatted(store_t *st, const char *key, redisc_cb *cb, void *arg, const char *cmd,
                            size_t len, store_cmd_t **out);
void store_command_cancel(store_t *st, store_cmd_t *cmd); /* its callback will not run */

/* The callback will not run. */
void store_cancel(store_call_t *call);

/* The worker's cached copy of a token record or a channel record (a new reference, shared:
 * never change it), or NULL when there is none: then ask with store_get_token/channel. */
json_t *store_cached_token(store_t *st, const char *hash_hex);
json_t *store_cached_channel(store_t *st, const char *channel_id);

/* Each returns the call (NULL with *status set when nothing could be sent: the callback will
 * then never run). A token or channel read started while another of the same record is in
 * flight in this worker takes that one's answer (one GET, the record shared): they are read
 * as the cache has them, up to its TTL old (with the cache off, each read sends its own).
 * store_reread_channel always sends its own GET, for a read that must see what was written
 * before it started. */
store_call_t *store_get_token(store_t *st, const char *hash_hex, store_cb *cb, void *arg,
                              store_status_t *status);
store_call_t *store_get_channel(store_t *st, const char *channel_id, store_cb *cb, void *arg,
                                store_status_t *status);
store_call_t *store_reread_channel(store_t *st, const char *channel_id, store_cb *cb, void *arg,
                                   store_status_t *status);
/* A member record. brief: only {"_id","externalId"} are decoded (what a send needs), without
 * parsing the whole record. */
store_call_t *store_get_member(store_t *st, const char *channel_id, const char *member_id,
                               int brief, store_cb *cb, void *arg, store_status_t *status);
/* A member record from the reply to its GET, as store_get_member decodes it: STORE_OK with *out
 * a new reference, or STORE_NOT_FOUND, STORE_BAD_RECORD, STORE_UNAVAILABLE (*out NULL). For the
 * store's own modules that read a member in a call of theirs (idem.c). */
store_status_t store_member_from_reply(const redisReply *reply, int brief, json_t **out);
/* The member a recipient id points to; when there is none, new_member (with its "_id") is
 * stored with its recipient key, atomically, and returned (brief as above). */
store_call_t *store_member_for_recipient(store_t *st, const char *channel_id,
                                         const char *recipient_id, const json_t *new_member,
                                         int brief, store_cb *cb, void *arg,
                                         store_status_t *status);
/* Merges fields into the channel's info, compare-and-set against concurrent writers. The
 * callback gets the updated channel record. */
store_call_t *store_update_channel_info(store_t *st, const char *channel_id, const json_t *fields,
                                        store_cb *cb, void *arg, store_status_t *status);
/* The count of this worker's compare-and-set writes so far: taken when a member is read, it
 * tells store_update_member whether this worker has written that member since. */
uint64_t store_write_seq(const store_t *st);
/* Applies mutate(record, change) to the latest member record, compare-and-set. current, when
 * not NULL, is the record as the caller read it when store_write_seq was current_seq: unless
 * this worker wrote the member since, the first attempt compares against it without reading
 * again (a round trip less when nobody wrote in between). */
store_call_t *store_update_member(store_t *st, const char *channel_id, const char *member_id,
                                  const json_t *current, uint64_t current_seq,
                                  store_mutate_fn *mutate, const json_t *change, int64_t now_ms,
                                  store_cb *cb, void *arg, store_status_t *status);
/* whatsapp contacts seen valid, one per member (the number its record held then): value is
 * "<number> <wa_id>" as a JSON string (store_contact_wa_id reads it). Kept by the member's id,
 * so that the script that takes the first message's slots names it among its KEYS. */
store_call_t *store_get_contact(store_t *st, const char *channel_id, const char *member_id,
                                store_cb *cb, void *arg, store_status_t *status);
void store_put_contact(store_t *st, const char *channel_id, const char *member_id,
                       const char *number, const char *wa_id, int ttl_s);
/* The wa_id of a contact's value when it was cached for number (a member whose number changed
 * is checked again), else NULL. */
const char *store_contact_wa_id(const char *value, const char *number);
/* A node of a tree: value is {"tree": <_tree field>, "node": <node>}; STORE_NOT_FOUND when the
 * tree or the node is missing. */
store_call_t *store_get_node(store_t *st, const char *tree_id, const char *node_id, store_cb *cb,
                             void *arg, store_status_t *status);
/* The credential lock of a channel: STORE_OK when taken by owner, STORE_NOT_FOUND when held
 * by another. Released only by its owner. */
store_call_t *store_lock_credential(store_t *st, const char *channel_id, const char *owner,
                                    int ttl_ms, store_cb *cb, void *arg, store_status_t *status);
void store_unlock_credential(store_t *st, const char *channel_id, const char *owner);
/* Tells cb whenever the credential lock of the channel is released (its refresh ended, its
 * credential may be new) and whenever the watch (re)starts (a release may have been missed).
 * A lock that expires (its holder died) is not told: watchers keep a slow timer too. NULL
 * when out of memory. */
redisc_sub_t *store_watch_credential(store_t *st, const char *channel_id, redisc_message_cb *cb,
                                     void *arg);
void store_unwatch(redisc_sub_t *sub); /* cb will not be called again */
/* The same for the channel named key (a key of keys.h whose writers publish on it). */
redisc_sub_t *store_watch_key(store_t *st, const char *key, redisc_message_cb *cb, void *arg);
/* Webhooks in: remembers a slack signature for ttl_ms. STORE_OK when it is new, STORE_NOT_FOUND
 * when it was seen before (a replay). */
store_call_t *store_hook_seen(store_t *st, const char *channel_id, const char *signature,
                              int ttl_ms, store_cb *cb, void *arg, store_status_t *status);
/* Forgets a signature store_hook_seen remembered: the request it came with was not taken (a 5xx),
 * so the platform's retry, which may carry the same signature, is not a replay. */
void store_hook_forget(store_t *st, const char *channel_id, const char *signature);
/* wechat media cache: value is the media_id as a JSON string. */
store_call_t *store_get_media(store_t *st, const char *channel_id, const char *url_hash,
                              store_cb *cb, void *arg, store_status_t *status);
void store_put_media(store_t *st, const char *channel_id, const char *url_hash,
                     const char *media_id, int ttl_s);

#endif
