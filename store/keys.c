/* keys.c - key building. The {channelId} braces are Redis Cluster hash tags: all of a
 * channel's keys live on one shard, so a Lua script may touch several of them. An
 * Idempotency-Key's record is touched alone: its tag is its whole (encoded) scope, so that the
 * records spread over every shard. */
#include "keys.h"

#include "../core/numfmt.h"

#include <string.h>

/* The nparts parts joined into buf. Keys are built on every request: a plain copy costs a
 * tenth of vsnprintf. Returns the length, or -1 when a part is missing or the key does not
 * fit. */
static int join(char *buf, size_t size, const char *const *parts, size_t nparts)
{
    size_t n = 0;

    if (size == 0)
        return -1;
    for (size_t i = 0; i < nparts; i++) {
        size_t len;
        if (parts[i] == NULL)
            return -1;
        len = strlen(parts[i]);
        if (len >= size - n)
            return -1;
        memcpy(buf + n, parts[i], len);
        n += len;
    }
    buf[n] = '\0';
    return (int)n;
}

#define key(buf, size, ...)                                                                  \
    join((buf), (size), (const char *const[]){__VA_ARGS__},                                  \
         sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

/* A key of one record of a channel: <prefix><kind>:{<channel>}:<id>. */
static int channel_record(char *buf, size_t size, const char *prefix, const char *kind,
                          const char *channel_id, const char *id)
{
    return key(buf, size, prefix, kind, ":{", channel_id, "}:", id);
}

int store_key_token(char *buf, size_t size, const char *prefix, const char *hash_hex)
{
    return key(buf, size, prefix, "token:", hash_hex);
}

int store_key_channel(char *buf, size_t size, const char *prefix, const char *channel_id)
{
    return key(buf, size, prefix, "channel:{", channel_id, "}");
}

int store_key_member(char *buf, size_t size, const char *prefix, const char *channel_id,
                     const char *member_id)
{
    return channel_record(buf, size, prefix, "member", channel_id, member_id);
}

int store_key_member_base(char *buf, size_t size, const char *prefix, const char *channel_id)
{
    return channel_record(buf, size, prefix, "member", channel_id, "");
}

int store_key_recipient(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *recipient_id)
{
    return channel_record(buf, size, prefix, "recipient", channel_id, recipient_id);
}

int store_key_tree(char *buf, size_t size, const char *prefix, const char *tree_id)
{
    return key(buf, size, prefix, "tree:", tree_id);
}

int store_key_contact(char *buf, size_t size, const char *prefix, const char *channel_id,
                      const char *number)
{
    return channel_record(buf, size, prefix, "wacontact", channel_id, number);
}

int store_key_cred_lock(char *buf, size_t size, const char *prefix, const char *channel_id)
{
    return key(buf, size, prefix, "lock:{", channel_id, "}:credential");
}

int store_key_media(char *buf, size_t size, const char *prefix, const char *channel_id,
                    const char *url_hash)
{
    return channel_record(buf, size, prefix, "media", channel_id, url_hash);
}

int store_key_rate(char *buf, size_t size, const char *prefix, const char *channel_id,
                   const char *recipient_id)
{
    if (recipient_id == NULL)
        return key(buf, size, prefix, "rate:{", channel_id, "}:sender");
    return key(buf, size, prefix, "rate:{", channel_id, "}:pair:", recipient_id);
}

int store_key_rate_pause(char *buf, size_t size, const char *prefix, const char *channel_id,
                         const char *recipient_id)
{
    if (recipient_id == NULL)
        return key(buf, size, prefix, "ratepause:{", channel_id, "}:sender");
    return key(buf, size, prefix, "ratepause:{", channel_id, "}:pair:", recipient_id);
}

int store_key_idem(char *buf, size_t size, const char *prefix, const char *app, const char *route,
                   const char *idem_key)
{
    char app_len[NUMFMT_DEC_SIZE];

    /* The app goes behind its length and the route holds no ':', so the parts read back one
     * way only: app "A" with key "B:sendResponses:Z" and app "A:sendResponses:B" with key "Z"
     * are two records, whatever the app ids hold. */
    if (app == NULL || route == NULL || strchr(route, ':') != NULL)
        return -1;
    return key(buf, size, prefix, "idem:{", numfmt_dec(app_len, (long long)strlen(app)), ":", app,
               ":", route, ":", idem_key, "}");
}

int store_key_turns(char *buf, size_t size, const char *prefix, const char *channel_id,
                    const char *member_id)
{
    return channel_record(buf, size, prefix, "turns", channel_id, member_id);
}

int store_key_leases(char *buf, size_t size, const char *prefix, const char *channel_id,
                     const char *member_id)
{
    return channel_record(buf, size, prefix, "leases", channel_id, member_id);
}
