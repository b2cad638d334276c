/* broadcasts.c - botgatectl broadcast create|status|cancel (contract.md section 13): an
 * operator's broadcast, written to Redis with the scripts POST /broadcasts runs
 * (store/broadcast.c), delivered by the running botgate instances; its counts, once or drawn
 * as a progress bar; its cancel. */
#include "ctl.h"

#include "../adapters/adapter.h"
#include "../core/clock.h"
#include "../core/member.h"
#include "../core/request.h"
#include "../store/broadcast.h"
#include "../store/outbox.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define SLICE          2000
#define RECIPIENTS_MAX 1000000
#define KEEP_MS        "36000000" /* 10 h: the outbox's default TTL and more */
#define CANCEL_WAIT_S  60

static void random_hex(char *out, size_t n)
{
    unsigned char b[32];

    if (getrandom(b, (n + 1) / 2, 0) != (ssize_t)((n + 1) / 2))
        for (size_t i = 0; i < sizeof(b); i++)
            b[i] = (unsigned char)rand();
    for (size_t i = 0; i < n; i++)
        out[i] = "0123456789abcdef"[(b[i / 2] >> (i % 2 ? 0 : 4)) & 15];
    out[n] = '\0';
}

/* The keys of broadcast id of channel: record, todo, taking. */
static int bc_keys(const char *channel, const char *id, char keys[3][STORE_KEY_MAX])
{
    static const char *const sets[] = {"todo", "taking"};

    if (store_key_broadcast(keys[0], STORE_KEY_MAX, ctl_prefix, channel, id) < 0)
        return -1;
    for (int i = 0; i < 2; i++)
        if (store_key_broadcast_set(keys[i + 1], STORE_KEY_MAX, ctl_prefix, channel, id, sets[i]) <
            0)
            return -1;
    return 0;
}

/* An EVAL's reply {n, text}: n, or -2 after printing the error; text copied when asked. */
static long long eval_pair(int argc, const char **argv, char *text, size_t size)
{
    redisReply *r = ctl_redis_command(argc, argv, NULL);
    long long n;

    if (r == NULL)
        return -2;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        ctl_die("Redis: unexpected answer to a broadcast script");
        return -2;
    }
    n = r->element[0]->integer;
    if (text != NULL)
        snprintf(text, size, "%s",
                 r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "");
    freeReplyObject(r);
    return n;
}

/* EVAL script with nkeys keys, head words, then items. */
static long long eval_slice(const char *script, int nkeys, const char *const *keys, int nhead,
                            const char *const *head, size_t n, const char *const *items, char *text,
                            size_t size)
{
    const char **argv = malloc((3 + (size_t)nkeys + (size_t)nhead + n) * sizeof(*argv));
    char nk[8];
    int argc = 0;
    long long rc;

    if (argv == NULL)
        return ctl_die("out of memory"), -2;
    snprintf(nk, sizeof(nk), "%d", nkeys);
    argv[argc++] = "EVAL";
    argv[argc++] = script;
    argv[argc++] = nk;
    for (int i = 0; i < nkeys; i++)
        argv[argc++] = keys[i];
    for (int i = 0; i < nhead; i++)
        argv[argc++] = head[i];
    for (size_t i = 0; i < n; i++)
        argv[argc++] = items[i];
    rc = eval_pair(argc, argv, text, size);
    free(argv);
    return rc;
}

/* The responses of FILE.json: {"response":[...]}. New reference. */
static json_t *load_responses(const char *path)
{
    json_t *file = ctl_load_file(path), *resp;

    if (file == NULL)
        return NULL;
    resp = json_incref(json_object_get(file, "response"));
    json_decref(file);
    if (!json_is_array(resp) || json_array_size(resp) == 0 ||
        json_array_size(resp) > REQUEST_MAX_RESPONSES) {
        json_decref(resp);
        ctl_die("%s: {\"response\":[...]} with 1 to %d responses is needed", path,
                REQUEST_MAX_RESPONSES);
        return NULL;
    }
    return resp;
}

/* Checks the responses as POST /broadcasts does: 0, or CTL_FAIL after printing why. */
static int check_responses(const json_t *resp, const adapter_ops_t *ops)
{
    const json_t *r;
    size_t i;

    json_array_foreach(resp, i, r) {
        char where[32], msg[BG_ERROR_MSG_MAX];
        bg_error_t err;
        const json_t *checked = r, *fb;
        int code;
        snprintf(where, sizeof(where), "response[%zu]", i);
        if (request_check_response_flags(r, where, REQUEST_CHECK_TEMPLATED, &err) < 0)
            return ctl_die("%s (err_code %d)", err.msg, err.code);
        code = adapter_check_response(ops, r, NULL, 0);
        if (code == BG_ERR_UNSUPPORTED && (fb = json_object_get(r, "fallback")) != NULL) {
            checked = fb;
            code = adapter_check_response(ops, fb, NULL, 0);
        }
        if (code != 0) {
            adapter_check_response(ops, checked, msg, sizeof(msg));
            return ctl_die("%s: %s (err_code %d)", where, msg, code);
        }
    }
    return 0;
}

/* A slice of recipient ids added (store_bc_rslice_t: a second run for those whose member it
 * did not guess; botgatectl guesses none): the members added, or -2 after printing why. */
static long long add_rslice(const char *channel, char k[3][STORE_KEY_MAX], const char *const *rids,
                            const char *const *nids, const char *const *recs, size_t m)
{
    store_bc_rslice_t *rs =
        store_bc_rslice_new(ctl_prefix, channel, k[0], k[1], rids, nids, recs, m, NULL);
    store_status_t st = STORE_OK;
    long long got = -2;
    int again = 1;

    if (rs == NULL)
        return ctl_die("out of memory"), -2;
    while (st == STORE_OK && again) {
        const char **argv;
        int argc = store_bc_rslice_words(rs, &argv);
        redisReply *r = argc < 0 ? NULL : ctl_redis_command(argc, argv, NULL);
        if (r == NULL) {
            if (argc < 0)
                ctl_die("out of memory");
            break;
        }
        st = store_bc_rslice_reply(rs, r, NULL, &again);
        freeReplyObject(r);
        if (st != STORE_OK)
            ctl_die("Redis: unexpected answer to a broadcast script");
        else if (!again)
            got = store_bc_rslice_added(rs);
    }
    store_bc_rslice_free(rs);
    return got;
}

/* Adds the recipients a slice at a time; 0, or CTL_FAIL after printing why. */
static int add_recipients(const char *channel, char k[3][STORE_KEY_MAX], const char *kind,
                          const json_t *list, const char *app, const adapter_ops_t *ops)
{
    size_t n = json_array_size(list);
    const char *keys[] = {k[0], k[1], NULL};
    char text[512];

    for (size_t pos = 0; pos < n;) {
        size_t m = n - pos < SLICE ? n - pos : SLICE;
        long long got;
        if (strcmp(kind, "tag") == 0) {
            char tkey[STORE_KEY_MAX], cursor[sizeof(text)] = "0";
            const char *tag = json_string_value(json_array_get(list, pos));
            if (store_key_tag(tkey, sizeof(tkey), ctl_prefix, channel, tag) < 0)
                return ctl_die("tag %s is too long", tag);
            keys[2] = tkey;
            do {
                const char *head[] = {"3600000", cursor, "2000"};
                if (eval_slice(store_bc_add_tag_script, 3, keys, 3, head, 0, NULL, text,
                               sizeof(text)) < 0)
                    return CTL_FAIL;
                snprintf(cursor, sizeof(cursor), "%s", text);
            } while (strcmp(cursor, "0") != 0);
            pos++;
            continue;
        }
        if (strcmp(kind, "member") == 0) {
            const char *ids[SLICE], *head[] = {"3600000"}, **mkeys;
            for (size_t i = 0; i < m; i++)
                ids[i] = json_string_value(json_array_get(list, pos + i));
            if ((mkeys = store_bc_member_keys(ctl_prefix, channel, k[0], k[1], ids, m)) == NULL)
                return ctl_die("out of memory");
            got = eval_slice(store_bc_add_members_script, (int)(2 + m), mkeys, 1, head, m, ids,
                             text, sizeof(text));
            free(mkeys);
            if (got >= 0 && text[0] != '\0')
                return ctl_die("member %s of channel %s does not exist (err_code 114)", text,
                               channel);
        } else {
            char(*nid)[25] = malloc(m * 25);
            char(*num)[REQUEST_MAX_RECIPIENT + 1] = malloc(m * sizeof(*num));
            const char **rids = malloc(m * sizeof(*rids)), **nids = malloc(m * sizeof(*nids));
            char **recs = calloc(m, sizeof(*recs));
            got = -2;
            if (nid != NULL && num != NULL && rids != NULL && nids != NULL && recs != NULL) {
                size_t i;
                for (i = 0; i < m; i++) {
                    const char *rid = json_string_value(json_array_get(list, pos + i));
                    json_t *fresh;
                    if (ops->phone_recipients) {
                        request_normalize_phone(rid, num[i], sizeof(num[i]));
                        rid = num[i];
                    }
                    random_hex(nid[i], 24);
                    fresh = member_new(nid[i], channel, app, rid, ops->type, clock_wall_ms());
                    recs[i] = fresh != NULL ? json_dumps(fresh, JSON_COMPACT) : NULL;
                    json_decref(fresh);
                    if (recs[i] == NULL || rid[0] == '\0')
                        break;
                    rids[i] = rid;
                    nids[i] = nid[i];
                }
                if (i == m)
                    got = add_rslice(channel, k, rids, nids, (const char *const *)recs, m);
                else
                    ctl_die("recipient %s is not usable",
                            json_string_value(json_array_get(list, pos + i)));
            }
            for (size_t i = 0; recs != NULL && i < m; i++)
                free(recs[i]);
            free(recs);
            free(rids);
            free(nids);
            free(nid);
            free(num);
        }
        if (got < 0)
            return CTL_FAIL;
        pos += m;
    }
    return 0;
}

int ctl_broadcast_create(const ctl_opts_t *o)
{
    const json_t *lists[] = {o->members, o->recipients, o->tags};
    const char *kinds[] = {"member", "recipient", "tag"};
    const char *channel, *app, *kind = NULL;
    const json_t *list = NULL;
    json_t *resp = NULL, *ch = NULL, *body = NULL;
    const adapter_ops_t *ops;
    char k[3][STORE_KEY_MAX], key[STORE_KEY_MAX], idx[STORE_KEY_MAX], act[STORE_KEY_MAX],
        entry[2 * STORE_KEY_MAX], id[25], text[64], shards[16], *btext = NULL;
    int rc = CTL_FAIL, n = 0;
    redisReply *r;

    for (int i = 0; i < 3; i++)
        if (lists[i] != NULL) {
            n++;
            list = lists[i];
            kind = kinds[i];
        }
    if (json_array_size(o->channels) != 1 || n != 1)
        return ctl_die("broadcast create needs one --channel and --member, --recipient or --tag "
                       "(repeatable, one kind)");
    if (json_array_size(list) > RECIPIENTS_MAX)
        return ctl_die("more than %d recipients", RECIPIENTS_MAX);
    channel = json_string_value(json_array_get(o->channels, 0));
    if ((resp = load_responses(o->args[0])) == NULL || ctl_redis_connect() != 0)
        goto out;
    if (store_key_channel(key, sizeof(key), ctl_prefix, channel) < 0)
        goto out;
    {
        const char *argv[] = {"GET", key};
        if ((r = ctl_redis_command(2, argv, NULL)) == NULL)
            goto out;
        ch = r->type == REDIS_REPLY_STRING ? json_loads(r->str, 0, NULL) : NULL;
        freeReplyObject(r);
    }
    app = ch != NULL ? json_string_value(json_object_get(ch, "app")) : NULL;
    if (app == NULL) {
        ctl_die("channel %s does not exist", channel);
        goto out;
    }
    if ((ops = adapter_find(json_string_value(json_object_get(ch, "type")))) == NULL) {
        ctl_die("channel %s: its type is not supported", channel);
        goto out;
    }
    if (check_responses(resp, ops) != 0)
        goto out;
    random_hex(id, 24);
    body = json_pack("{s:O}", "response", resp);
    btext = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    if (btext == NULL || bc_keys(channel, id, k) < 0 ||
        store_key_broadcast_channel(idx, sizeof(idx), ctl_prefix, id) < 0 ||
        store_key_broadcasts_active(act, sizeof(act), ctl_prefix) < 0) {
        ctl_die("channel id %s is too long for a key", channel);
        goto out;
    }
    snprintf(entry, sizeof(entry), "%s\t%s", channel, id);
    /* the outbox's shards, where the status sums the counts: the instances' setting */
    snprintf(shards, sizeof(shards), "%s",
             getenv("BOTGATE_OUTBOX_SHARDS") ? getenv("BOTGATE_OUTBOX_SHARDS") : "16");
    {
        const char *argv[] = {"EVAL",    store_bc_create_script,
                              "3",       k[0],
                              k[1],      k[2],
                              app,       btext,
                              "",        channel,
                              "3600000", shards};
        if (eval_pair(12, argv, NULL, 0) < 0)
            goto out;
    }
    if (add_recipients(channel, k, kind, list, app, ops) != 0) {
        const char *argv[] = {"DEL", k[0], k[1]};
        if ((r = ctl_redis_command(3, argv, NULL)) != NULL)
            freeReplyObject(r);
        goto out;
    }
    {
        /* as store_bc_finish: its index and its running line first, each in its own slot */
        const char *set[] = {"SET", idx, channel, "PX", KEEP_MS}, *add[] = {"SADD", act, entry},
                   *fin[] = {"EVAL", store_bc_finish_script, "2", k[0], k[1], KEEP_MS},
                   *pub[] = {"PUBLISH", act, entry};
        long long total = -1;
        if ((r = ctl_redis_command(5, set, NULL)) != NULL) {
            freeReplyObject(r);
            if ((r = ctl_redis_command(3, add, NULL)) != NULL) {
                freeReplyObject(r);
                total = eval_pair(6, fin, text, sizeof(text));
            }
        }
        if (total < 0)
            goto out;
        if ((r = ctl_redis_command(3, pub, NULL)) != NULL)
            freeReplyObject(r);
        if (o->json)
            printf("{\"broadcastId\":\"%s\",\"total\":%lld}\n", id, total);
        else
            printf("%s\n", id);
        fprintf(stderr, "broadcast %s of channel %s: %lld members\n", id, channel, total);
    }
    rc = 0;
out:
    free(btext);
    json_decref(body);
    json_decref(resp);
    json_decref(ch);
    return rc;
}

/* ---- status and cancel ---- */

typedef struct bc_counts {
    char state[16];
    long long total, sent, failed, unknown, cancelled, sending;
} bc_counts_t;

/* The channel of broadcast id into channel: 0, or CTL_FAIL after printing why. */
static int find_channel(const char *id, char *channel, size_t size)
{
    char idx[STORE_KEY_MAX];
    const char *argv[] = {"GET", idx};
    redisReply *r;
    int rc = CTL_FAIL;

    if (ctl_redis_connect() != 0)
        return CTL_FAIL;
    if (store_key_broadcast_channel(idx, sizeof(idx), ctl_prefix, id) < 0)
        return ctl_die("no broadcast %s", id);
    if ((r = ctl_redis_command(2, argv, NULL)) == NULL)
        return CTL_FAIL;
    if (r->type == REDIS_REPLY_STRING && r->len < size) {
        memcpy(channel, r->str, r->len + 1);
        rc = 0;
    } else {
        ctl_die("no broadcast %s", id);
    }
    freeReplyObject(r);
    return rc;
}

static long long num(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER  ? r->integer
           : r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10)
                                           : 0;
}

/* Every shard's hash of broadcast id (store_bc_shard_script; cancel: told of the cancel): the
 * counts summed into sum (sent, failed, unknown, cancelled, attempts running). */
static int sum_shards(const char *id, long long shards, int cancel, long long sum[5])
{
    char key[STORE_KEY_MAX];

    if (shards <= 0 || shards > STORE_OUTBOX_SHARDS_MAX)
        shards = 16;
    memset(sum, 0, 5 * sizeof(*sum));
    for (long long k = 0; k < shards; k++) {
        const char *argv[] = {"EVAL", store_bc_shard_script, "1",
                              key,    cancel ? "1" : "0",    "100800000"};
        redisReply *r;
        if (store_key_outbox_broadcast(key, sizeof(key), ctl_prefix, (unsigned)k, id) < 0)
            return ctl_die("no broadcast %s", id);
        if ((r = ctl_redis_command(6, argv, NULL)) == NULL)
            return CTL_FAIL;
        for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && i < 5; i++)
            sum[i] += num(r->element[i]);
        freeReplyObject(r);
    }
    return 0;
}

/* The counts as GET /broadcasts/<id> has them: unless it is done, every shard's summed into
 * the record first (store_bc_status). */
static int read_counts(const char *channel, const char *id, bc_counts_t *c)
{
    char k[3][STORE_KEY_MAX], n[4][24];
    long long sum[5] = {0};
    redisReply *r;

    if (bc_keys(channel, id, k) < 0)
        return ctl_die("no broadcast %s", id);
    {
        const char *argv[] = {"EVAL", store_bc_status_script, "1", k[0]};
        if ((r = ctl_redis_command(4, argv, NULL)) == NULL)
            return CTL_FAIL;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 12 &&
        r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, "done") != 0 &&
        strcmp(r->element[1]->str, "accepting") != 0) {
        long long shards = num(r->element[11]);
        freeReplyObject(r);
        if (sum_shards(id, shards, 0, sum) != 0)
            return CTL_FAIL;
        for (int i = 0; i < 4; i++)
            snprintf(n[i], sizeof(n[i]), "%lld", sum[i]);
        {
            const char *argv[] = {"EVAL", store_bc_merge_script, "2", k[0], k[1], n[0], n[1], n[2],
                                  n[3]};
            if ((r = ctl_redis_command(9, argv, NULL)) == NULL)
                return CTL_FAIL;
        }
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 12) {
        freeReplyObject(r);
        return ctl_die("no broadcast %s", id);
    }
    snprintf(c->state, sizeof(c->state), "%s",
             r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "?");
    if (strcmp(c->state, "accepting") == 0)
        strcpy(c->state, "running");
    c->total = num(r->element[2]);
    c->sent = num(r->element[3]);
    c->failed = num(r->element[4]);
    c->unknown = num(r->element[5]);
    c->cancelled = num(r->element[6]) + num(r->element[10]);
    c->sending = sum[4];
    freeReplyObject(r);
    return 0;
}

static long long queued(const bc_counts_t *c)
{
    long long q = c->total - c->sent - c->failed - c->unknown - c->cancelled;

    return q > 0 ? q : 0;
}

static void print_counts(const ctl_opts_t *o, const char *id, const bc_counts_t *c)
{
    if (o->json)
        printf("{\"broadcastId\":\"%s\",\"state\":\"%s\",\"total\":%lld,\"queued\":%lld,"
               "\"sent\":%lld,\"failed\":%lld,\"unknown\":%lld,\"cancelled\":%lld}\n",
               id, c->state, c->total, queued(c), c->sent, c->failed, c->unknown, c->cancelled);
    else
        printf("%s %s total %lld queued %lld sent %lld failed %lld unknown %lld cancelled %lld\n",
               id, c->state, c->total, queued(c), c->sent, c->failed, c->unknown, c->cancelled);
}

/* One line of --watch on a terminal: [#####-----] 42% 1234/s sent ... ETA 0:12:34. */
static void draw_bar(const bc_counts_t *c, double rate)
{
    long long done = c->total - queued(c);
    double part = c->total > 0 ? (double)done / (double)c->total : 1;
    int width = 30, fill = (int)(part * width + 0.5);
    long long left = rate > 0 ? (long long)((double)queued(c) / rate) : -1;

    printf("\r[");
    for (int i = 0; i < width; i++)
        putchar(i < fill ? '#' : '-');
    printf("] %3d%% %7.0f/s sent %lld failed %lld unknown %lld", (int)(part * 100), rate, c->sent,
           c->failed, c->unknown);
    if (left >= 0 && strcmp(c->state, "running") == 0)
        printf(" left %lld:%02lld:%02lld", left / 3600, left / 60 % 60, left % 60);
    else
        printf(" %-12s", c->state);
    printf("\033[K");
    fflush(stdout);
}

int ctl_broadcast_status(const ctl_opts_t *o)
{
    const char *id = o->args[0];
    char channel[STORE_KEY_MAX];
    bc_counts_t c;
    int tty = isatty(STDOUT_FILENO) && !o->json;
    long long last_done = -1;
    int64_t last_ms = 0;
    double rate = 0;

    if (find_channel(id, channel, sizeof(channel)) != 0 || read_counts(channel, id, &c) != 0)
        return CTL_FAIL;
    if (!o->watch) {
        print_counts(o, id, &c);
        return 0;
    }
    for (;;) {
        long long done = c.total - queued(&c);
        int64_t now = clock_mono_us() / 1000;
        if (last_done >= 0 && now > last_ms) {
            /* the send rate, smoothed over the last few seconds */
            double r = (double)(done - last_done) * 1000.0 / (double)(now - last_ms);
            rate = rate > 0 ? 0.7 * rate + 0.3 * r : r;
        }
        last_done = done;
        last_ms = now;
        if (tty)
            draw_bar(&c, rate);
        else
            print_counts(o, id, &c);
        if (strcmp(c.state, "running") != 0 && (queued(&c) == 0 || c.sending == 0))
            break;
        sleep(1);
        if (read_counts(channel, id, &c) != 0)
            return CTL_FAIL;
    }
    if (tty)
        putchar('\n');
    return 0;
}

int ctl_broadcast_cancel(const ctl_opts_t *o)
{
    const char *id = o->args[0];
    char channel[STORE_KEY_MAX], k[3][STORE_KEY_MAX], app[256], text[64];
    long long shards, sum[5];
    bc_counts_t c;
    redisReply *r;

    if (find_channel(id, channel, sizeof(channel)) != 0 || bc_keys(channel, id, k) < 0)
        return CTL_FAIL;
    {
        const char *argv[] = {"HGET", k[0], "app"};
        if ((r = ctl_redis_command(3, argv, NULL)) == NULL)
            return CTL_FAIL;
        snprintf(app, sizeof(app), "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
        freeReplyObject(r);
    }
    {
        /* its statusCallback is queued by the delivery, as a DELETE's is */
        const char *argv[] = {"EVAL", store_bc_cancel_script, "2", k[0], k[1], app};
        if ((shards = eval_pair(6, argv, text, sizeof(text))) < -1)
            return CTL_FAIL;
    }
    /* every shard told: no queued member of it starts there from now on */
    if (shards >= 0 && (strcmp(text, "running") == 0 || strcmp(text, "cancelled") == 0) &&
        sum_shards(id, shards, 1, sum) != 0)
        return CTL_FAIL;
    /* as DELETE /broadcasts/<id>: done once no attempt of it may still send */
    for (int i = 0; i < CANCEL_WAIT_S * 10; i++) {
        if (read_counts(channel, id, &c) != 0)
            return CTL_FAIL;
        if (c.sending == 0)
            break;
        usleep(100000);
    }
    print_counts(o, id, &c);
    return 0;
}
