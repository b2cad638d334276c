/* outbox_read.c - the outbox's blocking reader (outbox.h): XREADGROUP ... BLOCK on a connection
 * of its own, over every shard with one server, over one shard on its slot's master with a
 * Redis Cluster (following MOVED). The entries are decoded as outbox.c decodes a claim's. */
#include "outbox.h"
#include "outbox_entries.h"

#include "../json/numfmt.h"
#include "eval.h"

#include <stdlib.h>
#include <string.h>

#define ENTRIES_MAX STORE_OUTBOX_ENTRIES_MAX

struct store_outbox_reader {
    redisc_t *redis; /* NULL while a new one is to be made (cluster: a MOVED, a lost node) */
    store_t *st;
    unsigned first, shards; /* it reads shards first .. first + shards - 1 */
    int block_ms;
    int groups_made;     /* XGROUP CREATE sent on this connection since it was (re)made */
    int reconnect;       /* the connection is to be made again before the next read */
    char moved_host[64]; /* where a MOVED pointed (empty: the slot's master in the map) */
    int moved_port;
    char consumer[64];
    redisc_cmd_t *cmd;
    store_outbox_entries_cb *cb;
    void *arg;
};

/* The reader's connection, made again when the last read said so: with a cluster, to the
 * node a MOVED named, or to the master of the shard's slot in the map as known now. */
static int reader_connect(store_outbox_reader_t *r)
{
    char key[STORE_KEY_MAX / 8];

    if (r->redis != NULL && !r->reconnect)
        return 0;
    if (store_key_outbox(key, sizeof(key), store_prefix(r->st), r->first) < 0)
        return -1;
    redisc_free(r->redis);
    r->groups_made = 0;
    /* the command timeout is past the BLOCK time: an answer that takes longer is lost */
    r->redis = store_new_connection_for(r->st, key, r->moved_host[0] ? r->moved_host : NULL,
                                        r->moved_port, r->block_ms + 5000);
    r->reconnect = 0;
    r->moved_host[0] = '\0';
    return r->redis != NULL ? 0 : -1;
}

store_outbox_reader_t *store_outbox_reader_new(store_t *st, unsigned first, unsigned shards,
                                               const char *consumer, int block_ms)
{
    store_outbox_reader_t *r;

    if (shards == 0 || first + shards > STORE_OUTBOX_SHARDS_MAX ||
        strlen(consumer) >= sizeof(r->consumer))
        return NULL;
    if ((r = calloc(1, sizeof(*r))) == NULL)
        return NULL;
    r->st = st;
    r->first = first;
    r->shards = shards;
    r->block_ms = block_ms;
    strcpy(r->consumer, consumer);
    /* one server: connected now or never (out of memory); a cluster's slot may not be mapped
     * yet: connected at the first read */
    if (reader_connect(r) < 0 && store_redis(st) != NULL) {
        free(r);
        return NULL;
    }
    return r;
}

void store_outbox_reader_free(store_outbox_reader_t *r)
{
    if (r == NULL)
        return;
    if (r->cmd != NULL)
        redisc_cancel(r->cmd);
    redisc_free(r->redis);
    free(r);
}

/* A read's error with a cluster: MOVED (the shard's slot went to another node during a
 * resharding or a failover) moves the reader there; ASK, TRYAGAIN and CLUSTERDOWN are read
 * again later on the same node, which then answers MOVED or the entries. */
static void reader_redirected(store_outbox_reader_t *r, const redisReply *reply)
{
    const char *addr, *colon;

    if (reply == NULL) { /* the connection went: the node may have gone with it */
        r->reconnect = store_redis(r->st) == NULL;
        return;
    }
    if (reply->type != REDIS_REPLY_ERROR || strncmp(reply->str, "MOVED ", 6) != 0)
        return;
    /* MOVED <slot> <host>:<port> */
    if ((addr = strchr(reply->str + 6, ' ')) == NULL || (colon = strrchr(addr, ':')) == NULL ||
        (size_t)(colon - addr - 1) >= sizeof(r->moved_host))
        return;
    memcpy(r->moved_host, addr + 1, (size_t)(colon - addr - 1));
    r->moved_host[colon - addr - 1] = '\0';
    r->moved_port = atoi(colon + 1);
    r->reconnect = 1;
}

static void on_group(redisReply *reply, void *arg)
{
    (void)reply; /* made, or BUSYGROUP: there already */
    (void)arg;
}

static void on_read(redisReply *reply, void *arg)
{
    store_outbox_reader_t *r = arg;
    store_outbox_entry_t *entries = calloc(ENTRIES_MAX, sizeof(*entries));
    store_status_t st =
        reply == NULL || (reply->type == REDIS_REPLY_ERROR) ? STORE_UNAVAILABLE : STORE_OK;
    size_t n = 0;

    r->cmd = NULL;
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
        r->groups_made = 0; /* NOGROUP: the stream or its group was deleted */
    reader_redirected(r, reply);
    if (reply == NULL)
        r->groups_made = 0; /* the connection went: it may be a new server */
    if (entries == NULL)
        st = STORE_UNAVAILABLE;
    for (size_t i = 0; st == STORE_OK && reply->type == REDIS_REPLY_ARRAY && i < reply->elements;
         i++) {
        const redisReply *s = reply->element[i];
        const char *key;
        unsigned shard;
        if (s->type != REDIS_REPLY_ARRAY || s->elements != 2)
            continue;
        key = store_eval_str(s->element[0], NULL);
        /* the shard is the number between the braces of the stream's key */
        if ((key = strrchr(key, '{')) == NULL)
            continue;
        shard = (unsigned)strtoul(key + 1, NULL, 10);
        n += store_outbox_decode_entries(s->element[1], shard, entries + n, ENTRIES_MAX - n);
    }
    r->cb(r->arg, st, entries, n);
    free(entries);
}

int store_outbox_read(store_outbox_reader_t *r, unsigned count, store_outbox_entries_cb *cb,
                      void *arg)
{
    const char *argv[8 + 2 * STORE_OUTBOX_SHARDS_MAX];
    char keys[STORE_OUTBOX_SHARDS_MAX][STORE_KEY_MAX / 8];
    char n[NUMFMT_DEC_SIZE], block[NUMFMT_DEC_SIZE];
    int argc = 0;

    if (reader_connect(r) < 0)
        return -1;
    for (unsigned s = 0; s < r->shards; s++)
        if (store_key_outbox(keys[s], sizeof(keys[s]), store_prefix(r->st), r->first + s) < 0)
            return -1;
    if (!r->groups_made) {
        for (unsigned s = 0; s < r->shards; s++) {
            const char *g[] = {"XGROUP", "CREATE", keys[s], STORE_OUTBOX_GROUP, "0", "MKSTREAM"};
            redisc_cmd_t *cmd;
            if (redisc_command(r->redis, on_group, NULL, 6, g, NULL, &cmd) != REDISC_OK)
                return -1;
        }
        r->groups_made = 1;
    }
    if (count > ENTRIES_MAX)
        count = ENTRIES_MAX;
    argv[argc++] = "XREADGROUP";
    argv[argc++] = "GROUP";
    argv[argc++] = STORE_OUTBOX_GROUP;
    argv[argc++] = r->consumer;
    argv[argc++] = "COUNT";
    argv[argc++] = numfmt_dec(n, count);
    argv[argc++] = "BLOCK";
    argv[argc++] = numfmt_dec(block, r->block_ms);
    argv[argc++] = "STREAMS";
    for (unsigned s = 0; s < r->shards; s++)
        argv[argc++] = keys[s];
    for (unsigned s = 0; s < r->shards; s++)
        argv[argc++] = ">";
    r->cb = cb;
    r->arg = arg;
    if (redisc_command(r->redis, on_read, r, argc, argv, NULL, &r->cmd) != REDISC_OK) {
        r->cmd = NULL;
        return -1;
    }
    return 0;
}
