/* keys.c - key building. The {channelId} braces are Redis Cluster hash tags: all of a
 * channel's keys live on one shard, so a Lua script may touch several of them. An
 * Idempotency-Key's record is touched alone: its tag is its whole (encoded) scope, so that the
 * records spread over every shard. */
#include "keys.h"

#include "../json/numfmt.h"

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

#define key(buf, size, ...)                                                                        \
    join((buf), (size), (const char *const[]){__VA_ARGS__},                                        \
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

int store_key_tree_import(char *buf, size_t size, const char *prefix, const char *tree_id,
                          const char *suffix)
{
    return key(buf, size, "{", prefix, "tree:", tree_id, "}:import:", suffix);
}

int store_key_contact(char *buf, size_t size, const char *prefix, const char *channel_id,
                      const char *member_id)
{
    return channel_record(buf, size, prefix, "wacontactm", channel_id, member_id);
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
                   const char *member_id)
{
    if (member_id == NULL)
        return key(buf, size, prefix, "rate:{", channel_id, "}:sender");
    return key(buf, size, prefix, "rate:{", channel_id, "}:pairm:", member_id);
}

int store_key_rate_pause(char *buf, size_t size, const char *prefix, const char *channel_id,
                         const char *member_id)
{
    if (member_id == NULL)
        return key(buf, size, prefix, "ratepause:{", channel_id, "}:sender");
    return key(buf, size, prefix, "ratepause:{", channel_id, "}:pairm:", member_id);
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
    return channel_record(buf, size, prefix, "turnq", channel_id, member_id);
}

int store_key_leases(char *buf, size_t size, const char *prefix, const char *channel_id,
                     const char *member_id)
{
    return channel_record(buf, size, prefix, "turnlease", channel_id, member_id);
}

/* s with Redis's glob characters escaped, appended at buf + *n; -1 when it does not fit. */
static int glob_escaped(char *buf, size_t size, size_t *n, const char *s)
{
    for (; s != NULL && *s; s++) {
        if (*n + 3 > size)
            return -1;
        if (strchr("*?[]\\", *s) != NULL)
            buf[(*n)++] = '\\';
        buf[(*n)++] = *s;
    }
    buf[*n] = '\0';
    return s == NULL ? -1 : 0;
}

/* What follows the prefix in every key of a kind (see the builders above). */
static const char *const rec_head[] = {
    [STORE_REC_TOKEN] = "token:",
    [STORE_REC_CHANNEL] = "channel:{",
    [STORE_REC_MEMBER] = "member:{",
    [STORE_REC_TREE] = "tree:",
};

/* s appended at buf + *n as it is; -1 when it does not fit. */
static int key_append(char *buf, size_t size, size_t *n, const char *s)
{
    size_t len = strlen(s);

    if (len >= size - *n)
        return -1;
    memcpy(buf + *n, s, len + 1);
    *n += len;
    return 0;
}

int store_key_pattern(char *buf, size_t size, const char *prefix, store_rec_t kind,
                      const char *channel_id)
{
    size_t n = 0;
    const char *rest = kind == STORE_REC_CHANNEL ? "*}" : "*";

    if (size == 0 || (unsigned)kind > STORE_REC_TREE)
        return -1;
    buf[0] = '\0';
    if (kind == STORE_REC_MEMBER)
        rest = channel_id == NULL ? "*}:*" : "}:*";
    if (glob_escaped(buf, size, &n, prefix) < 0 || key_append(buf, size, &n, rec_head[kind]) < 0 ||
        (kind == STORE_REC_MEMBER && channel_id != NULL &&
         glob_escaped(buf, size, &n, channel_id) < 0) ||
        key_append(buf, size, &n, rest) < 0)
        return -1;
    return (int)n;
}

static int copy_id(char *out, size_t size, const char *s, size_t len)
{
    if (out == NULL || len == 0 || len >= size)
        return -1;
    memcpy(out, s, len);
    out[len] = '\0';
    return 0;
}

int store_key_ids(const char *key, const char *prefix, store_rec_t kind, char *channel,
                  size_t channel_size, char *id, size_t id_size)
{
    size_t plen, hlen, len;
    const char *p, *end;

    if (key == NULL || prefix == NULL || (unsigned)kind > STORE_REC_TREE)
        return -1;
    plen = strlen(prefix);
    hlen = strlen(rec_head[kind]);
    if (strncmp(key, prefix, plen) != 0 || strncmp(key + plen, rec_head[kind], hlen) != 0)
        return -1;
    p = key + plen + hlen;
    len = strlen(p);
    switch (kind) {
    case STORE_REC_CHANNEL:
        /* channel ids hold no brace (request ids do not) */
        if (len < 2 || p[len - 1] != '}' || memchr(p, '}', len - 1) != NULL)
            return -1;
        return copy_id(id, id_size, p, len - 1);
    case STORE_REC_MEMBER:
        if ((end = strchr(p, '}')) == NULL || end[1] != ':' ||
            copy_id(channel, channel_size, p, (size_t)(end - p)) < 0)
            return -1;
        return copy_id(id, id_size, end + 2, strlen(end + 2));
    default:
        return copy_id(id, id_size, p, len);
    }
}

int store_key_outbox(char *buf, size_t size, const char *prefix, unsigned shard)
{
    char n[NUMFMT_DEC_SIZE];

    return key(buf, size, prefix, "outbox:{", numfmt_dec(n, shard), "}");
}

int store_key_outbox_request(char *buf, size_t size, const char *prefix, unsigned shard,
                             const char *request_id)
{
    char n[NUMFMT_DEC_SIZE];

    return key(buf, size, prefix, "outbox:{", numfmt_dec(n, shard), "}:req:", request_id);
}

/* A key of a member in an outbox shard: <prefix>outbox:{<shard>}:<kind>:<length of
 * channel>:<channel>:<member>. */
static int outbox_member(char *buf, size_t size, const char *prefix, unsigned shard,
                         const char *kind, const char *channel_id, const char *member_id)
{
    char n[NUMFMT_DEC_SIZE], len[NUMFMT_DEC_SIZE];

    if (channel_id == NULL)
        return -1;
    return key(buf, size, prefix, "outbox:{", numfmt_dec(n, shard), "}:", kind, ":",
               numfmt_dec(len, (long long)strlen(channel_id)), ":", channel_id, ":", member_id);
}

int store_key_outbox_order(char *buf, size_t size, const char *prefix, unsigned shard,
                           const char *channel_id, const char *member_id)
{
    return outbox_member(buf, size, prefix, shard, "order", channel_id, member_id);
}

int store_key_outbox_turns(char *buf, size_t size, const char *prefix, unsigned shard,
                           const char *channel_id, const char *member_id)
{
    return outbox_member(buf, size, prefix, shard, "turnq", channel_id, member_id);
}

int store_key_outbox_leases(char *buf, size_t size, const char *prefix, unsigned shard,
                            const char *channel_id, const char *member_id)
{
    return outbox_member(buf, size, prefix, shard, "turnlease", channel_id, member_id);
}

int store_key_outbox_event_seen(char *buf, size_t size, const char *prefix, unsigned shard,
                                const char *event_id)
{
    char n[NUMFMT_DEC_SIZE];

    return key(buf, size, prefix, "outbox:{", numfmt_dec(n, shard), "}:evseen:", event_id);
}

int store_key_outbox_event_order(char *buf, size_t size, const char *prefix, unsigned shard,
                                 const char *subscription, const char *channel_id,
                                 const char *member_id)
{
    char n[NUMFMT_DEC_SIZE], len[NUMFMT_DEC_SIZE];

    if (channel_id == NULL || subscription == NULL || strchr(subscription, ':') != NULL)
        return -1;
    return key(buf, size, prefix, "outbox:{", numfmt_dec(n, shard), "}:evorder:", subscription, ":",
               numfmt_dec(len, (long long)strlen(channel_id)), ":", channel_id, ":", member_id);
}

int store_key_outbox_message_base(char *buf, size_t size, const char *prefix, unsigned shard)
{
    char n[NUMFMT_DEC_SIZE];

    return key(buf, size, prefix, "outbox:{", numfmt_dec(n, shard), "}:msg:");
}

int store_key_outbox_message(char *buf, size_t size, const char *prefix, unsigned shard,
                             const char *channel_id, const char *message_id)
{
    char n[NUMFMT_DEC_SIZE], len[NUMFMT_DEC_SIZE];

    if (channel_id == NULL)
        return -1;
    return key(buf, size, prefix, "outbox:{", numfmt_dec(n, shard),
               "}:msg:", numfmt_dec(len, (long long)strlen(channel_id)), ":", channel_id, ":",
               message_id);
}

int store_key_app_secret(char *buf, size_t size, const char *prefix, const char *app)
{
    return key(buf, size, prefix, "appsecret:", app);
}

int store_key_tag(char *buf, size_t size, const char *prefix, const char *channel_id,
                  const char *tag)
{
    return channel_record(buf, size, prefix, "tag", channel_id, tag);
}

int store_tag_indexed(const char *tag, size_t len)
{
    return len <= STORE_TAG_MAX && memchr(tag, '\0', len) == NULL;
}

int store_key_tag_build(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *tag)
{
    return channel_record(buf, size, prefix, "tagbuild", channel_id, tag);
}

int store_key_tag_base(char *buf, size_t size, const char *prefix, const char *channel_id)
{
    return channel_record(buf, size, prefix, "tag", channel_id, "");
}

int store_key_broadcast(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *id)
{
    return channel_record(buf, size, prefix, "broadcast", channel_id, id);
}

int store_key_broadcast_set(char *buf, size_t size, const char *prefix, const char *channel_id,
                            const char *id, const char *which)
{
    return key(buf, size, prefix, "broadcast:{", channel_id, "}:", id, ":", which);
}

int store_key_broadcasts_active(char *buf, size_t size, const char *prefix)
{
    return key(buf, size, prefix, "broadcasts");
}

int store_key_broadcast_channel(char *buf, size_t size, const char *prefix, const char *id)
{
    return key(buf, size, prefix, "broadcastch:", id);
}

int store_key_outbox_broadcast(char *buf, size_t size, const char *prefix, unsigned shard,
                               const char *id)
{
    char n[NUMFMT_DEC_SIZE];

    return key(buf, size, prefix, "outbox:{", numfmt_dec(n, shard), "}:bc:", id);
}

int store_key_tag_pattern(char *buf, size_t size, const char *prefix, const char *channel_id)
{
    size_t n = 0;

    if (size == 0)
        return -1;
    buf[0] = '\0';
    if (glob_escaped(buf, size, &n, prefix) < 0 || key_append(buf, size, &n, "tag:{") < 0 ||
        glob_escaped(buf, size, &n, channel_id) < 0 || key_append(buf, size, &n, "}:*") < 0)
        return -1;
    return (int)n;
}

int store_key_subscriptions(char *buf, size_t size, const char *prefix, const char *app)
{
    return key(buf, size, prefix, "subscriptions:", app);
}

int store_key_hook_seen(char *buf, size_t size, const char *prefix, const char *channel_id,
                        const char *signature)
{
    return channel_record(buf, size, prefix, "hookseen", channel_id, signature);
}
