/* store_records.c - the store's small records (contract.md section 3): the WhatsApp contact and
 * WeChat media caches, tree nodes, the credential lock, remembered webhook signatures, and the
 * pub/sub watches of keys (store.h), each one call of store.c (store_call.h). */
#include "store_call.h"

#include "keys.h"

#include <stdio.h>
#include <string.h>

/* Releases a lock only if the caller still owns it, and tells those who wait for it on the
 * channel of the key's name (store_watch_credential). */
static const char UNLOCK_SCRIPT[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) "
    "redis.call('PUBLISH', KEYS[1], '') return 1 end return 0";

typedef int channel_key_fn(char *buf, size_t size, const char *prefix, const char *channel_id,
                           const char *id);

static store_call_t *get_remembered(store_t *st, channel_key_fn *key_of, const char *channel_id,
                                    const char *id, store_cb *cb, void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    int len = key_of(key, sizeof(key), store_prefix(st), channel_id, id);
    store_call_t *c = store_call_for(st, CALL_GET_STRING, len, key, cb, arg, status);

    if (c == NULL)
        return NULL;
    return store_call_get(c, status);
}

static void put_remembered(store_t *st, channel_key_fn *key_of, const char *channel_id,
                           const char *id, const char *value, int ttl_s)
{
    char key[STORE_KEY_MAX], ttl[16];
    const char *argv[] = {"SET", key, value, "EX", ttl};
    store_call_t *c;

    if (key_of(key, sizeof(key), store_prefix(st), channel_id, id) < 0 ||
        (c = store_call_new(st, CALL_IGNORE, key, NULL, NULL)) == NULL)
        return;
    snprintf(ttl, sizeof(ttl), "%d", ttl_s);
    store_call_start(c, 5, argv, NULL, NULL);
}

store_call_t *store_get_contact(store_t *st, const char *channel_id, const char *member_id,
                                store_cb *cb, void *arg, store_status_t *status)
{
    return get_remembered(st, store_key_contact, channel_id, member_id, cb, arg, status);
}

void store_put_contact(store_t *st, const char *channel_id, const char *member_id,
                       const char *number, const char *wa_id, int ttl_s)
{
    char value[512];
    int n = snprintf(value, sizeof(value), "%s %s", number, wa_id);

    if (n > 0 && (size_t)n < sizeof(value)) /* else not cached: checked again next time */
        put_remembered(st, store_key_contact, channel_id, member_id, value, ttl_s);
}

const char *store_contact_wa_id(const char *value, const char *number)
{
    size_t n = strlen(number);

    if (value == NULL || strncmp(value, number, n) != 0 || value[n] != ' ' || value[n + 1] == '\0')
        return NULL;
    return value + n + 1;
}

store_call_t *store_get_node(store_t *st, const char *tree_id, const char *node_id, store_cb *cb,
                             void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    int len = store_key_tree(key, sizeof(key), store_prefix(st), tree_id);
    store_call_t *c = store_call_for(st, CALL_NODE, len, key, cb, arg, status);

    if (c == NULL)
        return NULL;
    {
        const char *argv[] = {"HMGET", key, "_tree", node_id};
        return store_call_start(c, 4, argv, NULL, status);
    }
}

store_call_t *store_lock_credential(store_t *st, const char *channel_id, const char *owner,
                                    int ttl_ms, store_cb *cb, void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    char ttl[16];
    int len = store_key_cred_lock(key, sizeof(key), store_prefix(st), channel_id);
    store_call_t *c = store_call_for(st, CALL_LOCK, len, key, cb, arg, status);

    if (c == NULL)
        return NULL;
    snprintf(ttl, sizeof(ttl), "%d", ttl_ms);
    {
        const char *argv[] = {"SET", key, owner, "NX", "PX", ttl};
        return store_call_start(c, 6, argv, NULL, status);
    }
}

store_call_t *store_hook_seen(store_t *st, const char *channel_id, const char *signature,
                              int ttl_ms, store_cb *cb, void *arg, store_status_t *status)
{
    char key[STORE_KEY_MAX];
    char ttl[16];
    int len = store_key_hook_seen(key, sizeof(key), store_prefix(st), channel_id, signature);
    store_call_t *c = store_call_for(st, CALL_LOCK, len, key, cb, arg, status);

    if (c == NULL)
        return NULL;
    snprintf(ttl, sizeof(ttl), "%d", ttl_ms);
    {
        const char *argv[] = {"SET", key, "1", "NX", "PX", ttl};
        return store_call_start(c, 6, argv, NULL, status);
    }
}

void store_hook_forget(store_t *st, const char *channel_id, const char *signature)
{
    char key[STORE_KEY_MAX];
    int len = store_key_hook_seen(key, sizeof(key), store_prefix(st), channel_id, signature);
    store_call_t *c = store_call_for(st, CALL_IGNORE, len, key, NULL, NULL, NULL);

    if (c == NULL)
        return;
    {
        const char *argv[] = {"DEL", key};
        store_call_start(c, 2, argv, NULL, NULL);
    }
}

void store_unlock_credential(store_t *st, const char *channel_id, const char *owner)
{
    char key[STORE_KEY_MAX];
    store_call_t *c = store_call_for(
        st, CALL_IGNORE, store_key_cred_lock(key, sizeof(key), store_prefix(st), channel_id), key,
        NULL, NULL, NULL);

    if (c == NULL)
        return;
    {
        const char *argv[] = {"EVAL", UNLOCK_SCRIPT, "1", key, owner};
        store_call_start(c, 5, argv, NULL, NULL);
    }
}

/* A subscription to the channel named like key, on the worker's subscriber connection. */
static redisc_sub_t *watch(store_t *st, int len, const char *key, redisc_message_cb *cb, void *arg)
{
    if (len < 0 || store_subscriber(st) == NULL)
        return NULL;
    return redisc_subscribe(store_subscriber(st), key, cb, arg);
}

redisc_sub_t *store_watch_credential(store_t *st, const char *channel_id, redisc_message_cb *cb,
                                     void *arg)
{
    char key[STORE_KEY_MAX];

    return watch(st, store_key_cred_lock(key, sizeof(key), store_prefix(st), channel_id), key, cb,
                 arg);
}

redisc_sub_t *store_watch_key(store_t *st, const char *key, redisc_message_cb *cb, void *arg)
{
    return watch(st, (int)strlen(key), key, cb, arg);
}

void store_unwatch(redisc_sub_t *sub)
{
    redisc_unsubscribe(sub);
}

store_call_t *store_get_media(store_t *st, const char *channel_id, const char *url_hash,
                              store_cb *cb, void *arg, store_status_t *status)
{
    return get_remembered(st, store_key_media, channel_id, url_hash, cb, arg, status);
}

void store_put_media(store_t *st, const char *channel_id, const char *url_hash,
                     const char *media_id, int ttl_s)
{
    put_remembered(st, store_key_media, channel_id, url_hash, media_id, ttl_s);
}
