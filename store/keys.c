/* keys.c - key building. The {channelId} braces are Redis Cluster hash tags: all of a
 * channel's keys live on one shard, so a Lua script may touch several of them. */
#include "keys.h"

#include <stdarg.h>
#include <stdio.h>

static int key(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int key(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= size ? -1 : n;
}

int store_key_token(char *buf, size_t size, const char *prefix, const char *hash_hex)
{
    return key(buf, size, "%stoken:%s", prefix, hash_hex);
}

int store_key_channel(char *buf, size_t size, const char *prefix, const char *channel_id)
{
    return key(buf, size, "%schannel:{%s}", prefix, channel_id);
}

int store_key_member(char *buf, size_t size, const char *prefix, const char *channel_id,
                     const char *member_id)
{
    return key(buf, size, "%smember:{%s}:%s", prefix, channel_id, member_id);
}

int store_key_member_base(char *buf, size_t size, const char *prefix, const char *channel_id)
{
    return key(buf, size, "%smember:{%s}:", prefix, channel_id);
}

int store_key_recipient(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *recipient_id)
{
    return key(buf, size, "%srecipient:{%s}:%s", prefix, channel_id, recipient_id);
}

int store_key_tree(char *buf, size_t size, const char *prefix, const char *tree_id)
{
    return key(buf, size, "%stree:%s", prefix, tree_id);
}

int store_key_contact(char *buf, size_t size, const char *prefix, const char *channel_id,
                      const char *number)
{
    return key(buf, size, "%swacontact:{%s}:%s", prefix, channel_id, number);
}

int store_key_cred_lock(char *buf, size_t size, const char *prefix, const char *channel_id)
{
    return key(buf, size, "%slock:{%s}:credential", prefix, channel_id);
}

int store_key_media(char *buf, size_t size, const char *prefix, const char *channel_id,
                    const char *url_hash)
{
    return key(buf, size, "%smedia:{%s}:%s", prefix, channel_id, url_hash);
}
