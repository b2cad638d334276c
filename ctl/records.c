/* records.c - botgatectl's channel, member and tree commands: records validated the way
 * botgate reads them before they are written, listed by SCAN, printed with secrets masked. */
#include "ctl.h"

#include "../adapters/adapter.h"
#include "../core/auth.h"
#include "../core/clock.h"
#include "../core/member.h"
#include "../core/ratelimit.h"
#include "../core/request.h"
#include "../core/tree.h"
#include "../script/script.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

/* ---- input and output ---- */

/* A file's name in messages. */
static const char *src_name(const char *path)
{
    return strcmp(path, "-") == 0 ? "standard input" : path;
}

json_t *ctl_load_file(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    const char *name = src_name(path);
    struct stat st;
    json_error_t jerr;
    json_t *v;

    if (f == NULL) {
        ctl_die("cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        ctl_die("cannot read %s: it is a directory", path);
        fclose(f);
        return NULL;
    }
    v = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    if (f != stdin)
        fclose(f);
    if (v == NULL) {
        ctl_die("%s: line %d: %s", name, jerr.line, jerr.text);
    } else if (!json_is_object(v)) {
        ctl_die("%s: must hold one JSON object", name);
        json_decref(v);
        v = NULL;
    }
    return v;
}

void ctl_print_record(const ctl_opts_t *o, const json_t *record)
{
    char *text = json_dumps(record, o->json ? JSON_COMPACT : JSON_INDENT(2));

    if (text != NULL)
        printf("%s\n", text);
    free(text);
}

void ctl_print_cell(const char *s, int last)
{
    if (s == NULL || *s == '\0')
        s = "-";
    for (; *s; s++)
        putchar(*s == '\t' || *s == '\n' || *s == '\r' ? ' ' : *s);
    putchar(last ? '\n' : '\t');
}

static size_t list_items; /* records printed by the list running */

void ctl_list_begin(const ctl_opts_t *o, const char *header)
{
    list_items = 0;
    if (o->json)
        putchar('[');
    else
        printf("%s\n", header);
}

void ctl_list_item(const ctl_opts_t *o, const json_t *record)
{
    char *text = json_dumps(record, JSON_COMPACT);

    (void)o;
    if (text != NULL)
        printf("%s\n%s", list_items++ ? "," : "", text);
    free(text);
}

void ctl_list_end(const ctl_opts_t *o, size_t n)
{
    (void)n;
    if (o->json)
        printf("%s]\n", list_items ? "\n" : "");
    fflush(stdout);
}

static const char *str_field(const json_t *o, const char *name)
{
    const char *s = json_string_value(json_object_get(o, name));

    return s && *s ? s : NULL;
}

/* An id a record is stored under: what a request may name (request ids' length and
 * characters), so that nothing is stored that the API could never reach. */
static int id_ok(const char *s)
{
    return s != NULL && strlen(s) <= REQUEST_MAX_ID && request_id_chars_ok(s);
}

/* Field names of channel info that hold secrets (interface.md marks them), matched loosely so
 * that a platform's new secret field is masked too. */
static int secret_name(const char *name)
{
    static const char *const words[] = {"token", "secret", "password", "key", "ticket"};
    char lower[128];
    size_t i;

    for (i = 0; name[i] && i + 1 < sizeof(lower); i++)
        lower[i] = (char)tolower((unsigned char)name[i]);
    lower[i] = '\0';
    for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(lower, words[i]) != NULL)
            return 1;
    return 0;
}

static void mask_secrets(json_t *o)
{
    const char *k;
    json_t *v;

    json_object_foreach(o, k, v) {
        if (json_is_object(v))
            mask_secrets(v);
        else if (secret_name(k) && !json_is_null(v) && !json_is_boolean(v) &&
                 !(json_is_integer(v) && strstr(k, "Expiry")))
            json_object_set_new(o, k, json_string("****"));
    }
}

/* The JSON record stored under key (a string), a new reference; NULL after printing why
 * (what: "channel C1" names it in "no channel C1"), or, when missing is not NULL and there is
 * no such key, after setting *missing only. */
static json_t *get_record(const char *key, const char *what, int *missing)
{
    const char *argv[] = {"GET", key};
    redisReply *r = ctl_redis_command(2, argv, NULL);
    json_t *v;

    if (r == NULL)
        return NULL;
    if (r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        if (missing != NULL)
            *missing = 1; /* the caller says it */
        else
            ctl_die("no %s", what);
        return NULL;
    }
    v = json_loadb(r->str, r->len, 0, NULL);
    freeReplyObject(r);
    if (!json_is_object(v)) {
        ctl_die("the stored %s is not a JSON object", what);
        json_decref(v);
        return NULL;
    }
    return v;
}

/* DEL key; 0, or CTL_FAIL after "no <what>". */
static int delete_key(const char *key, const char *what)
{
    const char *argv[] = {"DEL", key};
    redisReply *r = ctl_redis_command(2, argv, NULL);
    long long n;

    if (r == NULL)
        return CTL_FAIL;
    n = r->integer;
    freeReplyObject(r);
    if (n == 0)
        return ctl_die("no %s", what);
    fprintf(stderr, "%s deleted\n", what);
    return 0;
}

static const ctl_fetch_t fetch_get = {2, {"GET", NULL}};

/* The key builders need ids that fit; a longer one cannot name a record. */
static int key_or_die(int len, const char *what)
{
    return len < 0 ? ctl_die("%s: too long for a key", what) : 0;
}

/* ---- channel ---- */

int ctl_channel_put(const ctl_opts_t *o)
{
    const char *path = src_name(o->args[0]);
    json_t *ch = ctl_load_file(o->args[0]), *info;
    char key[STORE_KEY_MAX], *text;
    ratelimit_policy_t limits;
    bg_error_t err = {0};
    const char *id, *type;
    int rc = CTL_FAIL;

    if (ch == NULL)
        return CTL_FAIL;
    id = str_field(ch, "_id");
    type = str_field(ch, "type");
    info = json_object_get(ch, "info");
    if (!id_ok(id))
        ctl_die("%s: _id must be a non-empty id of at most %d bytes without control characters "
                "or braces",
                path, REQUEST_MAX_ID);
    else if (!auth_app_valid(str_field(ch, "app")))
        ctl_die("%s: app must be a string of 1-%d bytes without ':' or control characters", path,
                AUTH_APP_MAX);
    else if (type == NULL)
        ctl_die("%s: type must be a non-empty string", path);
    else if (adapter_find(type) == NULL) /* botgate would answer 117 to every send */
        ctl_die("%s: type %s is not a channel type botgate knows (facebook, whatsapp, "
                "whatsapp-cloud, slack, wechat, teamwork)",
                path, type);
    else if (!json_is_object(info))
        ctl_die("%s: info must be an object", path);
    else if (json_object_get(ch, "on") != NULL && !json_is_boolean(json_object_get(ch, "on")))
        ctl_die("%s: on must be a boolean", path);
    else if (ratelimit_for_channel(ch, &limits, &err) < 0)
        ctl_die("%s: %s", path, err.msg);
    else if (ctl_redis_connect() == 0 &&
             key_or_die(store_key_channel(key, sizeof(key), ctl_prefix, id), "_id") == 0) {
        text = json_dumps(ch, JSON_COMPACT);
        rc = ctl_redis_set(key, text);
        free(text);
        if (rc == 0)
            fprintf(stderr, "channel %s stored\n", id);
    }
    json_decref(ch);
    return rc;
}

/* A channel record as list and get show it: secrets masked. */
static int channel_seen(void *arg, const char *key, redisReply **replies)
{
    const ctl_opts_t *o = arg;
    json_t *ch = json_loadb(replies[0]->str, replies[0]->len, 0, NULL);
    const char *app = json_string_value(json_object_get(ch, "app"));
    char id[STORE_KEY_MAX];

    if (!json_is_object(ch) || replies[0]->type != REDIS_REPLY_STRING ||
        store_key_ids(key, ctl_prefix, STORE_REC_CHANNEL, NULL, 0, id, sizeof(id)) < 0 ||
        (o->app != NULL && (app == NULL || strcmp(app, o->app) != 0))) {
        json_decref(ch);
        return 0;
    }
    mask_secrets(ch);
    if (o->json) {
        ctl_list_item(o, ch);
    } else {
        ctl_print_cell(id, 0);
        ctl_print_cell(app, 0);
        ctl_print_cell(json_string_value(json_object_get(ch, "type")), 0);
        ctl_print_cell(json_is_false(json_object_get(ch, "on")) ? "off" : "on", 0);
        ctl_print_cell(json_string_value(json_object_get(ch, "name")), 1);
    }
    json_decref(ch);
    return 0;
}

/* Scans the keys of kind (members: of channel, NULL for all) with the fetches, printing
 * with fn under header. */
static int list(const ctl_opts_t *o, store_rec_t kind, const char *channel, const char *header,
                const ctl_fetch_t *fetch, int nfetch, ctl_scan_fn *fn)
{
    char pattern[STORE_KEY_MAX * 2];
    int rc;

    if (ctl_redis_connect() != 0)
        return CTL_FAIL;
    if (store_key_pattern(pattern, sizeof(pattern), ctl_prefix, kind, channel) < 0)
        return ctl_die("the channel id is too long");
    ctl_list_begin(o, header);
    rc = ctl_redis_scan(pattern, fetch, nfetch, fn, (void *)o);
    ctl_list_end(o, 0);
    return rc;
}

int ctl_channel_list(const ctl_opts_t *o)
{
    return list(o, STORE_REC_CHANNEL, NULL, "ID\tAPP\tTYPE\tON\tNAME", &fetch_get, 1, channel_seen);
}

int ctl_channel_get(const ctl_opts_t *o)
{
    char key[STORE_KEY_MAX], what[STORE_KEY_MAX + 16];
    json_t *ch;

    snprintf(what, sizeof(what), "channel %s", o->args[0]);
    if (ctl_redis_connect() != 0 ||
        key_or_die(store_key_channel(key, sizeof(key), ctl_prefix, o->args[0]), what) != 0 ||
        (ch = get_record(key, what, NULL)) == NULL)
        return CTL_FAIL;
    mask_secrets(ch);
    ctl_print_record(o, ch);
    json_decref(ch);
    return 0;
}

/* DEL of the record of kind ("channel", "tree") whose id is the operand; build: its key. */
static int delete_by_id(const ctl_opts_t *o, const char *kind,
                        int (*build)(char *, size_t, const char *, const char *))
{
    char key[STORE_KEY_MAX], what[STORE_KEY_MAX + 16];

    snprintf(what, sizeof(what), "%s %s", kind, o->args[0]);
    if (ctl_redis_connect() != 0 ||
        key_or_die(build(key, sizeof(key), ctl_prefix, o->args[0]), what) != 0)
        return CTL_FAIL;
    return delete_key(key, what);
}

int ctl_channel_delete(const ctl_opts_t *o)
{
    return delete_by_id(o, "channel", store_key_channel);
}

/* ---- member ---- */

/* The types of a member record's fields as botgate reads and writes them (contract.md
 * section 3, core/member.c): a record botgate would stumble on is refused. */
static const struct {
    const char *parent, *name; /* parent NULL: a field of the record */
    unsigned types;            /* JSON types allowed: bits 1 << json_type */
    const char *what;
} member_fields[] = {
    {NULL, "externalId", 1u << JSON_STRING, "a string"},
    {NULL, "platform", 1u << JSON_STRING, "a string"},
    {NULL, "firstName", 1u << JSON_STRING, "a string"},
    {NULL, "lastName", 1u << JSON_STRING, "a string"},
    {NULL, "locale", 1u << JSON_STRING, "a string"},
    {NULL, "customLocale", 1u << JSON_STRING | 1u << JSON_NULL, "a string or null"},
    {NULL, "tags", 1u << JSON_ARRAY, "an array"},
    {NULL, "meta", 1u << JSON_OBJECT, "an object"},
    {NULL, "botMeta", 1u << JSON_OBJECT, "an object"},
    {NULL, "createdAt", 1u << JSON_INTEGER, "an integer (ms)"},
    {NULL, "updatedAt", 1u << JSON_INTEGER, "an integer (ms)"},
    {"botMeta", "tree", 1u << JSON_STRING | 1u << JSON_NULL, "a string or null"},
    {"botMeta", "nodeCompositeId", 1u << JSON_STRING | 1u << JSON_NULL, "a string or null"},
    {"botMeta", "liveChat", 1u << JSON_TRUE | 1u << JSON_FALSE, "true or false"},
    {"botMeta", "subscribed", 1u << JSON_TRUE | 1u << JSON_FALSE, "true or false"},
    {"botMeta", "tempData", 1u << JSON_OBJECT, "an object"},
};

/* 0 when every field of m has its type; else prints which does not (path names the file). */
static int member_check(const char *path, const json_t *m)
{
    const json_t *tag;
    size_t i;

    for (i = 0; i < sizeof(member_fields) / sizeof(member_fields[0]); i++) {
        const json_t *in =
            member_fields[i].parent ? json_object_get(m, member_fields[i].parent) : m;
        const json_t *v = json_object_get(in, member_fields[i].name);
        if (v != NULL && !(member_fields[i].types & 1u << json_typeof(v)))
            return ctl_die("%s: %s%s%s must be %s", path,
                           member_fields[i].parent ? member_fields[i].parent : "",
                           member_fields[i].parent ? "." : "", member_fields[i].name,
                           member_fields[i].what);
    }
    json_array_foreach(json_object_get(m, "tags"), i, tag) {
        if (!json_is_string(tag))
            return ctl_die("%s: tags[%zu] must be a string", path, i);
    }
    return 0;
}

/* The member of the file, with what botgate fills in for a member it creates (core's
 * member_new: botMeta, tags, meta, locale, times) where the file has nothing, and app and
 * platform from its channel when absent. A new reference. */
static json_t *member_filled(const json_t *m, const json_t *channel)
{
    const char *app = str_field(m, "app"), *platform = str_field(m, "platform");
    json_t *full, *bot_default, *v;
    const char *k;

    full = member_new(str_field(m, "_id"), str_field(m, "channel"),
                      app ? app : str_field(channel, "app"), str_field(m, "externalId"),
                      platform ? platform : str_field(channel, "type"), clock_wall_ms());
    bot_default = json_incref(json_object_get(full, "botMeta"));
    json_object_foreach((json_t *)m, k, v) {
        if ((strcmp(k, "app") == 0 && app == NULL) || (strcmp(k, "platform") == 0 && !platform))
            continue; /* "" or null: the channel's */
        if (strcmp(k, "botMeta") == 0 && json_is_object(v)) {
            json_t *bot = json_deep_copy(v);
            json_object_update_missing(bot, bot_default);
            json_object_set_new(full, k, bot);
        } else {
            json_object_set(full, k, v);
        }
    }
    json_decref(bot_default);
    return full;
}

int ctl_member_put(const ctl_opts_t *o)
{
    const char *path = src_name(o->args[0]);
    json_t *file = ctl_load_file(o->args[0]), *m = NULL, *ch = NULL;
    char key[STORE_KEY_MAX], rkey[STORE_KEY_MAX], phone[256], what[STORE_KEY_MAX + 16], *text;
    const char *id, *channel, *ext, *app, *type;
    const adapter_ops_t *ops;
    int rc = CTL_FAIL, missing = 0;

    if (file == NULL)
        return CTL_FAIL;
    id = str_field(file, "_id");
    channel = str_field(file, "channel");
    if (!id_ok(id) || !id_ok(channel)) {
        ctl_die("%s: _id and channel must be non-empty ids of at most %d bytes without control "
                "characters or braces",
                path, REQUEST_MAX_ID);
        goto out;
    }
    if (json_object_get(file, "botMeta") != NULL &&
        !json_is_object(json_object_get(file, "botMeta"))) {
        ctl_die("%s: botMeta must be an object", path);
        goto out;
    }
    snprintf(what, sizeof(what), "channel %s", channel);
    if (ctl_redis_connect() != 0 ||
        key_or_die(store_key_channel(key, sizeof(key), ctl_prefix, channel), what) != 0)
        goto out;
    if ((ch = get_record(key, what, &missing)) == NULL) {
        if (missing)
            ctl_die("%s: channel %s does not exist: store it first (channel put)", path, channel);
        goto out;
    }
    app = str_field(file, "app");
    if (app != NULL && (str_field(ch, "app") == NULL || strcmp(app, str_field(ch, "app")) != 0)) {
        ctl_die("%s: app %s is not the app of channel %s (%s)", path, app, channel,
                str_field(ch, "app") ? str_field(ch, "app") : "none");
        goto out;
    }
    m = member_filled(file, ch);
    if (member_check(path, m) != 0)
        goto out;
    /* botgate finds a member by its platform address as it normalises a recipientId: phone
     * numbers on the whatsapp kinds */
    ext = str_field(m, "externalId");
    type = str_field(ch, "type");
    ops = adapter_find(type);
    if (ext != NULL && ops != NULL && ops->phone_recipients) {
        request_normalize_phone(ext, phone, sizeof(phone));
        ext = phone[0] ? phone : NULL;
    }
    if (key_or_die(store_key_member(key, sizeof(key), ctl_prefix, channel, id), "_id") != 0)
        goto out;
    text = json_dumps(m, JSON_COMPACT);
    rc = ctl_member_write(channel, id, key, text);
    free(text);
    if (rc == 0 && ext != NULL &&
        store_key_recipient(rkey, sizeof(rkey), ctl_prefix, channel, ext) >= 0)
        rc = ctl_redis_set(rkey, id);
    if (rc == 0)
        fprintf(stderr, "member %s of channel %s stored\n", id, channel);
out:
    json_decref(ch);
    json_decref(m);
    json_decref(file);
    return rc;
}

static int member_seen(void *arg, const char *key, redisReply **replies)
{
    const ctl_opts_t *o = arg;
    json_t *m = json_loadb(replies[0]->str, replies[0]->len, 0, NULL), *bot;
    char channel[STORE_KEY_MAX], id[STORE_KEY_MAX];

    if (!json_is_object(m) || store_key_ids(key, ctl_prefix, STORE_REC_MEMBER, channel,
                                            sizeof(channel), id, sizeof(id)) < 0) {
        json_decref(m);
        return 0;
    }
    if (o->json) {
        ctl_list_item(o, m);
    } else {
        bot = json_object_get(m, "botMeta");
        ctl_print_cell(channel, 0);
        ctl_print_cell(id, 0);
        ctl_print_cell(json_string_value(json_object_get(m, "externalId")), 0);
        ctl_print_cell(json_string_value(json_object_get(m, "platform")), 0);
        ctl_print_cell(json_string_value(json_object_get(bot, "tree")), 0);
        ctl_print_cell(json_string_value(json_object_get(bot, "nodeCompositeId")), 1);
    }
    json_decref(m);
    return 0;
}

int ctl_member_list(const ctl_opts_t *o)
{
    return list(o, STORE_REC_MEMBER, o->nargs ? o->args[0] : NULL,
                "CHANNEL\tID\tEXTERNALID\tPLATFORM\tTREE\tNODE", &fetch_get, 1, member_seen);
}

/* The key of the member the operands name (CHANNEL_ID MEMBER_ID) and its name for messages. */
static int member_key(const ctl_opts_t *o, char *key, char *what, size_t what_size)
{
    snprintf(what, what_size, "member %s of channel %s", o->args[1], o->args[0]);
    if (ctl_redis_connect() != 0)
        return CTL_FAIL;
    return key_or_die(store_key_member(key, STORE_KEY_MAX, ctl_prefix, o->args[0], o->args[1]),
                      what);
}

int ctl_member_get(const ctl_opts_t *o)
{
    char key[STORE_KEY_MAX], what[2 * STORE_KEY_MAX];
    json_t *m;

    if (member_key(o, key, what, sizeof(what)) != 0 || (m = get_record(key, what, NULL)) == NULL)
        return CTL_FAIL;
    ctl_print_record(o, m);
    json_decref(m);
    return 0;
}

/* The member and the recipient key that leads to it, in one script (both share the channel's
 * slot): a recipient key that botgate has meanwhile given to another member stays. */
static const char member_delete_lua[] =
    CTL_TAG_CHECK_LUA "for i = first, first + nold - 1 do redis.call('SREM', KEYS[i], ARGV[3]) end "
                      "local n = redis.call('DEL', KEYS[1]) "
                      "if ARGV[6] == '1' and redis.call('GET', KEYS[2]) == ARGV[3] then "
                      "redis.call('DEL', KEYS[2]) end return n";

int ctl_member_delete(const ctl_opts_t *o)
{
    char key[STORE_KEY_MAX], rkey[STORE_KEY_MAX], what[2 * STORE_KEY_MAX], phone[256];
    const char *ext;
    const adapter_ops_t *ops = NULL;
    json_t *m, *ch;
    redisReply *r;
    long long n;

    if (member_key(o, key, what, sizeof(what)) != 0 || (m = get_record(key, what, NULL)) == NULL)
        return CTL_FAIL;
    ext = str_field(m, "externalId");
    /* the recipient key is named as member put named it: by the channel's type */
    if (ext != NULL && store_key_channel(rkey, sizeof(rkey), ctl_prefix, o->args[0]) >= 0 &&
        (ch = get_record(rkey, "channel", NULL)) != NULL) {
        ops = adapter_find(str_field(ch, "type"));
        json_decref(ch);
    }
    if (ext != NULL && ops != NULL && ops->phone_recipients) {
        request_normalize_phone(ext, phone, sizeof(phone));
        ext = phone[0] ? phone : NULL;
    }
    {
        const char *extra[] = {rkey};
        int with_rkey = ext != NULL &&
                        store_key_recipient(rkey, sizeof(rkey), ctl_prefix, o->args[0], ext) >= 0;

        json_decref(m);
        if ((r = ctl_tag_script(member_delete_lua, o->args[0], o->args[1], key, extra,
                                with_rkey ? 1 : 0, NULL)) == NULL)
            return CTL_FAIL;
    }
    n = r->integer;
    freeReplyObject(r);
    if (n == 0)
        return ctl_die("no %s", what);
    fprintf(stderr, "%s deleted\n", what);
    return 0;
}

/* ---- tree ---- */

int ctl_tree_import(const ctl_opts_t *o)
{
    const char *path = src_name(o->args[0]);
    json_t *tree = ctl_load_file(o->args[0]), *nodes, *node, *meta;
    bg_error_t err;
    char key[STORE_KEY_MAX], tmp[STORE_KEY_MAX], suffix[24];
    const char *id, *name;
    unsigned char rnd[8];
    size_t argc, i = 0, n = 0;
    const char **argv = NULL;
    char **texts = NULL;
    redisReply *r;
    int rc = CTL_FAIL;

    if (tree == NULL)
        return CTL_FAIL;
    if (tree_validate(tree, &script_nodecode, &err) < 0) {
        ctl_die("%s: %s", path, err.msg);
        goto out;
    }
    if (!auth_app_valid(str_field(tree, "app"))) {
        ctl_die("%s: app must be a string of 1-%d bytes without ':' or control characters", path,
                AUTH_APP_MAX);
        goto out;
    }
    id = str_field(tree, "_id");
    nodes = json_object_get(tree, "nodes");
    n = json_object_size(nodes);
    argc = 2 + 2 * (n + 1);
    argv = calloc(argc, sizeof(*argv));
    texts = calloc(n + 1, sizeof(*texts));
    if (argv == NULL || texts == NULL || ctl_redis_connect() != 0)
        goto out;
    /* Written to a temporary key, then renamed over the tree: readers see the old tree or the
     * new one, never a mix. */
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        ctl_die("no randomness: %s", strerror(errno));
        goto out;
    }
    snprintf(suffix, sizeof(suffix), "%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
             rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    if (key_or_die(store_key_tree(key, sizeof(key), ctl_prefix, id), "_id") != 0 ||
        key_or_die(store_key_tree_import(tmp, sizeof(tmp), ctl_prefix, id, suffix), "_id") != 0)
        goto out;
    argv[0] = "HSET";
    argv[1] = tmp;
    meta = tree_meta_json(tree);
    texts[0] = json_dumps(meta, JSON_COMPACT);
    json_decref(meta);
    argv[2] = "_tree";
    argv[3] = texts[0];
    json_object_foreach(nodes, name, node) {
        texts[++i] = json_dumps(node, JSON_COMPACT);
        argv[2 + 2 * i] = name;
        argv[3 + 2 * i] = texts[i];
    }
    if ((r = ctl_redis_command((int)argc, argv, NULL)) == NULL)
        goto out;
    freeReplyObject(r);
    {
        const char *ren[] = {"RENAME", tmp, key};
        if ((r = ctl_redis_command(3, ren, NULL)) == NULL)
            goto out;
        freeReplyObject(r);
    }
    fprintf(stderr, "tree %s imported: %zu nodes\n", id, n);
    rc = 0;
out:
    if (texts != NULL)
        for (size_t k = 0; k <= n; k++)
            free(texts[k]);
    free(texts);
    free(argv);
    json_decref(tree);
    return rc;
}

static int tree_seen(void *arg, const char *key, redisReply **replies)
{
    const ctl_opts_t *o = arg;
    json_t *meta = json_loadb(replies[0]->str, replies[0]->len, 0, NULL);
    const char *app = json_string_value(json_object_get(meta, "app"));
    char id[STORE_KEY_MAX], nodes[32];

    if (!json_is_object(meta) || replies[1]->type != REDIS_REPLY_INTEGER ||
        store_key_ids(key, ctl_prefix, STORE_REC_TREE, NULL, 0, id, sizeof(id)) < 0 ||
        (o->app != NULL && (app == NULL || strcmp(app, o->app) != 0))) {
        json_decref(meta);
        return 0;
    }
    if (o->json) {
        json_object_set_new(meta, "_id", json_string(id));
        json_object_set_new(meta, "nodes", json_integer(replies[1]->integer - 1));
        ctl_list_item(o, meta);
    } else {
        snprintf(nodes, sizeof(nodes), "%lld", replies[1]->integer - 1);
        ctl_print_cell(id, 0);
        ctl_print_cell(app, 0);
        ctl_print_cell(json_string_value(json_object_get(meta, "name")), 0);
        ctl_print_cell(nodes, 1);
    }
    json_decref(meta);
    return 0;
}

int ctl_tree_list(const ctl_opts_t *o)
{
    static const ctl_fetch_t fetch[] = {{3, {"HGET", NULL, "_tree"}}, {2, {"HLEN", NULL}}};

    return list(o, STORE_REC_TREE, NULL, "ID\tAPP\tNAME\tNODES", fetch, 2, tree_seen);
}

int ctl_tree_get(const ctl_opts_t *o)
{
    const char *id = o->args[0];
    char key[STORE_KEY_MAX];
    json_t *out, *nodes;
    redisReply *r;

    if (ctl_redis_connect() != 0 ||
        key_or_die(store_key_tree(key, sizeof(key), ctl_prefix, id), "TREE_ID") != 0)
        return CTL_FAIL;
    {
        const char *argv[] = {"HGETALL", key};
        if ((r = ctl_redis_command(2, argv, NULL)) == NULL)
            return CTL_FAIL;
    }
    if (r->elements == 0) {
        freeReplyObject(r);
        return ctl_die("no tree %s", id);
    }
    out = json_object();
    nodes = json_object();
    json_object_set_new(out, "_id", json_string(id));
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        json_t *v = json_loadb(r->element[i + 1]->str, r->element[i + 1]->len, 0, NULL);
        if (v == NULL)
            v = json_stringn(r->element[i + 1]->str, r->element[i + 1]->len);
        if (strcmp(r->element[i]->str, "_tree") == 0 && json_is_object(v)) {
            json_object_update(out, v);
            json_decref(v);
        } else {
            json_object_set_new(nodes, r->element[i]->str, v);
        }
    }
    freeReplyObject(r);
    json_object_set_new(out, "nodes", nodes);
    ctl_print_record(o, out);
    json_decref(out);
    return 0;
}

int ctl_tree_delete(const ctl_opts_t *o)
{
    return delete_by_id(o, "tree", store_key_tree);
}

/* ---- get KIND ID... ---- */

int ctl_get(const ctl_opts_t *o)
{
    ctl_opts_t sub = *o;
    const char *kind = o->args[0];

    sub.args = o->args + 1;
    sub.nargs = o->nargs - 1;
    if (strcmp(kind, "channel") == 0 && sub.nargs == 1)
        return ctl_channel_get(&sub);
    if (strcmp(kind, "member") == 0 && sub.nargs == 2)
        return ctl_member_get(&sub);
    if (strcmp(kind, "tree") == 0 && sub.nargs == 1)
        return ctl_tree_get(&sub);
    if (strcmp(kind, "token") == 0 && sub.nargs == 1) {
        sub.hash = sub.args[0];
        sub.nargs = 0;
        return ctl_token_get(&sub);
    }
    return ctl_die("get takes: channel ID | member CHANNEL_ID MEMBER_ID | token HASH | tree ID "
                   "(see botgatectl help get)");
}
