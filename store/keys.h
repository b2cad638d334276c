/* keys.h - every Redis key botgate reads or writes (contract.md section 3). Nobody else builds
 * a key string. Each function writes into buf and returns the key's length, or -1 when it
 * does not fit. */
#ifndef BOTGATE_STORE_KEYS_H
#define BOTGATE_STORE_KEYS_H

#include <stddef.h>

#define STORE_KEY_MAX    1024
#define STORE_PREFIX_MAX 64

int store_key_token(char *buf, size_t size, const char *prefix, const char *hash_hex);
int store_key_channel(char *buf, size_t size, const char *prefix, const char *channel_id);
int store_key_member(char *buf, size_t size, const char *prefix, const char *channel_id,
                     const char *member_id);
/* The member key without the member id: what a Lua script appends an id to. */
int store_key_member_base(char *buf, size_t size, const char *prefix, const char *channel_id);
int store_key_recipient(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *recipient_id);
int store_key_tree(char *buf, size_t size, const char *prefix, const char *tree_id);
/* Where a tree import is written before it is renamed over the tree: the tree's key braced
 * (its hash tag, so that both share a Redis Cluster slot), ":import:", then suffix (random
 * hex). Never matched by store_key_pattern's tree pattern. */
int store_key_tree_import(char *buf, size_t size, const char *prefix, const char *tree_id,
                          const char *suffix);

/* The kinds of record an admin lists (contract.md section 3). */
typedef enum { STORE_REC_TOKEN, STORE_REC_CHANNEL, STORE_REC_MEMBER, STORE_REC_TREE } store_rec_t;

/* A SCAN MATCH pattern for every key of one kind, glob characters of the prefix (and of
 * channel_id) escaped. channel_id: members of that channel only (the others ignore it); NULL:
 * of every channel. */
int store_key_pattern(char *buf, size_t size, const char *prefix, store_rec_t kind,
                      const char *channel_id);

/* The ids a key of that kind names, copied out: id (a token's hash, a channel, member or tree
 * id) and, for a member, its channel (channel may be NULL for the other kinds). 0, or -1 when
 * key is not a key of that kind or an id does not fit. */
int store_key_ids(const char *key, const char *prefix, store_rec_t kind, char *channel,
                  size_t channel_size, char *id, size_t id_size);
/* whatsapp: the member's number seen valid by /v1/contacts, kept 7 days ("<number> <wa_id>"):
 * kept by the member's id, so that the script that takes the first message's slots with the
 * member's read names it among its KEYS (store/ratelimit.c). */
int store_key_contact(char *buf, size_t size, const char *prefix, const char *channel_id,
                      const char *member_id);
/* The lock that makes a credential refresh single-flight across instances. */
int store_key_cred_lock(char *buf, size_t size, const char *prefix, const char *channel_id);
/* wechat: the media_id of an uploaded URL (url_hash: hex SHA-256 of the URL). */
int store_key_media(char *buf, size_t size, const char *prefix, const char *channel_id,
                    const char *url_hash);
/* The platform rate limits of a channel (contract.md section 8): the limit's state (a GCRA
 * theoretical arrival time) and its pause after a platform refusal. member_id NULL: the
 * channel's sender limit; else the limit of the pair channel + recipient, kept by the member's
 * id ("pairm"): known before the member's record is read, so that a script that takes the
 * first message's slots with that read names the pair's keys among its KEYS. */
int store_key_rate(char *buf, size_t size, const char *prefix, const char *channel_id,
                   const char *member_id);
int store_key_rate_pause(char *buf, size_t size, const char *prefix, const char *channel_id,
                         const char *member_id);
/* An Idempotency-Key's record (contract.md section 7), a hash: app is the token's app, route
 * the operation (no ':' in it: -1), key the Idempotency-Key as given (printable ASCII). Named
 * "idem:{<length of app>:<app>:<route>:<key>}": the length makes the name of each (app, route,
 * key) its own, even for app ids with ':' in them. The hash tag is the whole scope: every
 * script touches this one key, so the records spread over the cluster's slots instead of
 * putting an app's on one shard (a '}' in app or key only ends the tag early: the key stays
 * one slot's). Its name is also the pub/sub channel told when the record is answered or
 * dropped. */
int store_key_idem(char *buf, size_t size, const char *prefix, const char *app, const char *route,
                   const char *key);
/* Per-member order: the member's queue of turn ids (a list, the first holds the turn; also the
 * pub/sub channel told when the turn passes to a request that waits) and its leases (a hash:
 * turn id -> lease end, kept only while someone waits). On one server both are under the
 * channel's hash tag; with a Redis Cluster under the tag of the member's outbox shard
 * (store_key_outbox_turns: the outbox's scripts name them with the shard's keys). Which one a
 * member's are: store_turn_keys (idem.h). Named turnq/turnlease: the sorted set and hash of
 * earlier versions (turns/leases) are other keys, never read as these. */
int store_key_turns(char *buf, size_t size, const char *prefix, const char *channel_id,
                    const char *member_id);
int store_key_leases(char *buf, size_t size, const char *prefix, const char *channel_id,
                     const char *member_id);

/* The outbox (contract.md section 12), sharded by hash tag "{outbox:<shard>}" so that Redis
 * Cluster spreads the shards: the shard's stream of entries, a request's record (a hash: its
 * body, status and progress) and a member's order counters (a hash: "n" the last sequence
 * number given, "done" the last one finished), all of one shard's slot. A member's entries
 * all go to one shard (the caller picks it from the channel and member), so that one script
 * sees its order. The channel id goes behind its length: the parts read back one way only. */
int store_key_outbox(char *buf, size_t size, const char *prefix, unsigned shard);
int store_key_outbox_request(char *buf, size_t size, const char *prefix, unsigned shard,
                             const char *request_id);
int store_key_outbox_order(char *buf, size_t size, const char *prefix, unsigned shard,
                           const char *channel_id, const char *member_id);
/* A member's turn queue and leases (as store_key_turns) in its outbox shard's slot, for a Redis
 * Cluster; the channel id behind its length, as the order key. */
int store_key_outbox_turns(char *buf, size_t size, const char *prefix, unsigned shard,
                           const char *channel_id, const char *member_id);
int store_key_outbox_leases(char *buf, size_t size, const char *prefix, unsigned shard,
                            const char *channel_id, const char *member_id);
/* Broadcasts (contract.md section 13). A tag's index: a set of the member ids of the channel
 * whose record lists the tag, kept by every member write botgate makes ("tag:{<channel>}:");
 * the base is what a Lua script appends a tag to. A broadcast's record (a hash: its body,
 * state and counts) and its sets (which: "todo" the member ids not queued yet, "taking" those
 * being queued, a hash of when), under the channel's hash tag so that one script reaches them
 * and the channel's member keys; the index of broadcast ids to their channel (a string,
 * "broadcastch:<id>"); and the set of the running broadcasts ("<channel>\t<id>"), which every
 * instance's delivery reads. */
#define STORE_TAG_MAX 256 /* bytes of a tag that is indexed: longer ones are not */
/* 1 when a member's tag of len bytes is indexed: at most STORE_TAG_MAX bytes, no NUL (a key
 * ends there). Every writer of the index (the gateway, botgatectl) tests tags by it. */
int store_tag_indexed(const char *tag, size_t len);
int store_key_tag(char *buf, size_t size, const char *prefix, const char *channel_id,
                  const char *tag);
/* Where botgatectl rebuilds a tag's set before renaming it over the tag's key (same slot). */
int store_key_tag_build(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *tag);
int store_key_tag_base(char *buf, size_t size, const char *prefix, const char *channel_id);
/* A SCAN MATCH pattern for every tag key of the channel (glob characters escaped). */
int store_key_tag_pattern(char *buf, size_t size, const char *prefix, const char *channel_id);
int store_key_broadcast(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *id);
int store_key_broadcast_set(char *buf, size_t size, const char *prefix, const char *channel_id,
                            const char *id, const char *which);
int store_key_broadcasts_active(char *buf, size_t size, const char *prefix);
int store_key_broadcast_channel(char *buf, size_t size, const char *prefix, const char *id);
/* A broadcast's part in one outbox shard (a hash in the shard's slot, so that the outbox's
 * scripts reach it with the request's record): its requests' ends counted ("sent", "failed",
 * "unknown", "cancelled"), the attempts running ("r:<record key>" -> lease end), "x" once it
 * was cancelled (no attempt starts then), "cbq" once its status callback was queued (shard 0). */
int store_key_outbox_broadcast(char *buf, size_t size, const char *prefix, unsigned shard,
                               const char *id);
/* Webhook events in the outbox (contract.md section 14): an event already queued (its id, for
 * the platform's retries), and the order of a member's events to one subscription (a hash: "n"
 * the last sequence number given, "done" the last one posted). */
int store_key_outbox_event_seen(char *buf, size_t size, const char *prefix, unsigned shard,
                                const char *event_id);
int store_key_outbox_event_order(char *buf, size_t size, const char *prefix, unsigned shard,
                                 const char *subscription, const char *channel_id,
                                 const char *member_id);
/* Receipts: the queued request (and the index of its response) that sent a platform message, a
 * string "<requestId> <index>", kept as long as the request's record. The base is the key
 * without its channel and message id (a script appends "<length of channelId>:<channelId>:<id>"
 * to it). */
int store_key_outbox_message(char *buf, size_t size, const char *prefix, unsigned shard,
                             const char *channel_id, const char *message_id);
int store_key_outbox_message_base(char *buf, size_t size, const char *prefix, unsigned shard);
/* An app's signing secret for status callbacks (a string, hex; botgatectl app secret). */
int store_key_app_secret(char *buf, size_t size, const char *prefix, const char *app);
/* An app's event subscriptions (contract.md section 14): a hash, subscription id -> its
 * record {"_id","app","url","events":[..]|null,"channel":".."|null,"createdAt":ms}. */
int store_key_subscriptions(char *buf, size_t size, const char *prefix, const char *app);
/* Webhooks in: a slack signature already taken (replays refused), kept for the time its
 * timestamp is accepted, under the channel's hash tag. */
int store_key_hook_seen(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *signature);

#endif
