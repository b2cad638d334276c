/* tags.c - botgatectl's side of the tag index (contract.md section 13): a member written with
 * its tags' sets, and `member reindex --channel C`, which rebuilds a channel's index from its
 * member records after writers that do not keep it. */
#include "ctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 1000 /* members per SADD when the index is rebuilt */

/* The record replaced: out of its old tags' sets, into its new ones', with it, in one step. */
static const char member_write_lua[] =
    CTL_TAG_CHECK_LUA "for i = first, first + nold - 1 do redis.call('SREM', KEYS[i], ARGV[3]) end "
                      "redis.call('SET', KEYS[1], ARGV[5]) "
                      "for i = first + nold, #KEYS do redis.call('SADD', KEYS[i], ARGV[3]) end "
                      "return 1";

/* The index keys of the tags of member record text that botgate indexes (store_tag_indexed),
 * appended to keys. */
static void tag_keys(json_t *keys, const char *channel, const char *text, size_t len)
{
    json_t *m = text != NULL ? json_loadb(text, len, 0, NULL) : NULL, *t;
    char k[STORE_KEY_MAX];
    size_t i;

    json_array_foreach(json_object_get(m, "tags"), i, t) {
        if (json_is_string(t) && store_tag_indexed(json_string_value(t), json_string_length(t)) &&
            store_key_tag(k, sizeof(k), ctl_prefix, channel, json_string_value(t)) >= 0)
            json_array_append_new(keys, json_string(k));
    }
    json_decref(m);
}

redisReply *ctl_tag_script(const char *script, const char *channel, const char *member_id,
                           const char *key, const char *const *extra_keys, size_t n_extra,
                           const char *text)
{
    char base[STORE_KEY_MAX], nkeys[24], nold[24], nextra[24];

    if (store_key_tag_base(base, sizeof(base), ctl_prefix, channel) < 0) {
        ctl_die("channel id %s is too long for a key", channel);
        return NULL;
    }
    for (int tries = 0; tries < CTL_TAG_TRIES; tries++) {
        const char *get[] = {"GET", key};
        redisReply *was = ctl_redis_command(2, get, NULL), *r = NULL;
        json_t *keys = json_array();
        const char **argv = NULL;
        size_t *lens = NULL, old, argc = 0, n;

        if (was == NULL || keys == NULL) {
            freeReplyObject(was);
            json_decref(keys);
            return NULL;
        }
        tag_keys(keys, channel, was->type == REDIS_REPLY_STRING ? was->str : NULL, was->len);
        old = json_array_size(keys);
        if (text != NULL)
            tag_keys(keys, channel, text, strlen(text));
        n = json_array_size(keys);
        argv = malloc((3 + 1 + n_extra + n + 6) * sizeof(*argv));
        lens = malloc((3 + 1 + n_extra + n + 6) * sizeof(*lens));
        if (argv != NULL && lens != NULL) {
            snprintf(nkeys, sizeof(nkeys), "%zu", 1 + n_extra + n);
            snprintf(nold, sizeof(nold), "%zu", old);
            snprintf(nextra, sizeof(nextra), "%zu", n_extra);
            argv[argc++] = "EVAL";
            argv[argc++] = script;
            argv[argc++] = nkeys;
            argv[argc++] = key;
            for (size_t i = 0; i < n_extra; i++)
                argv[argc++] = extra_keys[i];
            for (size_t i = 0; i < n; i++)
                argv[argc++] = json_string_value(json_array_get(keys, i));
            for (size_t i = 0; i < argc; i++)
                lens[i] = strlen(argv[i]);
            lens[argc] = was->type == REDIS_REPLY_STRING ? was->len : 0;
            argv[argc++] = was->type == REDIS_REPLY_STRING ? was->str : "";
            argv[argc++] = was->type == REDIS_REPLY_STRING ? "1" : "0";
            argv[argc++] = member_id;
            argv[argc++] = nold;
            argv[argc++] = text != NULL ? text : "";
            argv[argc++] = nextra;
            for (size_t i = argc - 5; i < argc; i++)
                lens[i] = strlen(argv[i]);
            r = ctl_redis_command((int)argc, argv, lens);
        } else {
            ctl_die("out of memory");
        }
        free(argv);
        free(lens);
        json_decref(keys);
        freeReplyObject(was);
        if (r == NULL || r->type != REDIS_REPLY_STRING || strcmp(r->str, "changed") != 0)
            return r;
        freeReplyObject(r); /* written by another meanwhile: read it again */
    }
    ctl_die("member %s changed %d times while it was written; try again", member_id, CTL_TAG_TRIES);
    return NULL;
}

int ctl_member_write(const char *channel, const char *member_id, const char *key, const char *text)
{
    redisReply *r = ctl_tag_script(member_write_lua, channel, member_id, key, NULL, 0, text);

    if (r == NULL)
        return CTL_FAIL;
    freeReplyObject(r);
    return 0;
}

/* ---- member reindex ---- */

/* The index as the member records say it: tag -> array of member ids. */
typedef struct reindex {
    const char *channel;
    json_t *tags;
    size_t members;
} reindex_t;

static int on_member(void *arg, const char *key, redisReply **replies)
{
    reindex_t *ri = arg;
    char channel[STORE_KEY_MAX], id[STORE_KEY_MAX];
    json_t *m, *t;
    size_t i;

    if (replies[0]->type != REDIS_REPLY_STRING ||
        store_key_ids(key, ctl_prefix, STORE_REC_MEMBER, channel, sizeof(channel), id, sizeof(id)) <
            0 ||
        strcmp(channel, ri->channel) != 0)
        return 0;
    if ((m = json_loadb(replies[0]->str, replies[0]->len, 0, NULL)) == NULL)
        return 0; /* not a member record: nothing of it is indexed */
    ri->members++;
    json_array_foreach(json_object_get(m, "tags"), i, t) {
        json_t *ids;
        if (!json_is_string(t) || !store_tag_indexed(json_string_value(t), json_string_length(t)))
            continue;
        if ((ids = json_object_get(ri->tags, json_string_value(t))) == NULL) {
            ids = json_array();
            json_object_set_new(ri->tags, json_string_value(t), ids);
        }
        json_array_append_new(ids, json_string(id));
    }
    json_decref(m);
    return 0;
}

/* Tag keys of the channel found in Redis: those the records no longer name are deleted. */
static int on_tag_key(void *arg, const char *key, redisReply **replies)
{
    reindex_t *ri = arg;
    char base[STORE_KEY_MAX];
    size_t n = (size_t)store_key_tag_base(base, sizeof(base), ctl_prefix, ri->channel);

    (void)replies;
    if (strncmp(key, base, n) == 0 && json_object_get(ri->tags, key + n) == NULL) {
        const char *argv[] = {"DEL", key};
        redisReply *r = ctl_redis_command(2, argv, NULL);
        if (r == NULL)
            return CTL_FAIL;
        freeReplyObject(r);
    }
    return 0;
}

/* One tag's set rebuilt aside (same slot: the channel's hash tag), then renamed over it: a
 * broadcast by tag never sees it half-built. */
static int write_tag(const char *channel, const char *tag, const json_t *ids)
{
    char key[STORE_KEY_MAX], tmp[STORE_KEY_MAX];
    const char *argv[2 + BATCH];
    size_t n = json_array_size(ids);
    redisReply *r;

    if (store_key_tag(key, sizeof(key), ctl_prefix, channel, tag) < 0 ||
        store_key_tag_build(tmp, sizeof(tmp), ctl_prefix, channel, tag) < 0)
        return ctl_die("tag %s of channel %s is too long for a key", tag, channel);
    argv[0] = "DEL";
    argv[1] = tmp;
    if ((r = ctl_redis_command(2, argv, NULL)) == NULL)
        return CTL_FAIL;
    freeReplyObject(r);
    for (size_t i = 0; i < n; i += BATCH) {
        int argc = 2;
        argv[0] = "SADD";
        argv[1] = tmp;
        for (size_t k = i; k < n && k < i + BATCH; k++)
            argv[argc++] = json_string_value(json_array_get(ids, k));
        if ((r = ctl_redis_command(argc, argv, NULL)) == NULL)
            return CTL_FAIL;
        freeReplyObject(r);
    }
    {
        const char *rn[] = {"RENAME", tmp, key};
        if ((r = ctl_redis_command(3, rn, NULL)) == NULL)
            return CTL_FAIL;
        freeReplyObject(r);
    }
    return 0;
}

int ctl_member_reindex(const ctl_opts_t *o)
{
    reindex_t ri = {0};
    static const ctl_fetch_t fetch_get = {2, {"GET", NULL}};
    char pattern[2 * STORE_KEY_MAX];
    const char *tag;
    json_t *ids;
    int rc;

    if (json_array_size(o->channels) != 1)
        return ctl_die("member reindex needs one --channel CHANNEL_ID");
    ri.channel = json_string_value(json_array_get(o->channels, 0));
    if ((ri.tags = json_object()) == NULL)
        return ctl_die("out of memory");
    if (store_key_pattern(pattern, sizeof(pattern), ctl_prefix, STORE_REC_MEMBER, ri.channel) < 0) {
        json_decref(ri.tags);
        return ctl_die("channel id %s is too long for a key", ri.channel);
    }
    rc = ctl_redis_scan(pattern, &fetch_get, 1, on_member, &ri);
    json_object_foreach(ri.tags, tag, ids) {
        if (rc == 0)
            rc = write_tag(ri.channel, tag, ids);
    }
    if (rc == 0 && store_key_tag_pattern(pattern, sizeof(pattern), ctl_prefix, ri.channel) >= 0)
        rc = ctl_redis_scan(pattern, NULL, 0, on_tag_key, &ri);
    if (rc == 0)
        fprintf(stderr, "channel %s: %zu members, %zu tags indexed\n", ri.channel, ri.members,
                json_object_size(ri.tags));
    json_decref(ri.tags);
    return rc;
}
