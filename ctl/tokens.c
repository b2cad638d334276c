/* tokens.c - botgatectl's token commands. A token is stored only as its SHA-256 and shown
 * once, when made: afterwards tokens are found by label or hash, never by the token. */
#include "ctl.h"

#include "../core/auth.h"
#include "../core/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static int parse_duration(const char *s, int64_t *ms)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    int64_t unit = 1000;

    if (end == s || v <= 0 || v > 100LL * 365 * 86400)
        return -1;
    if (*end == 'd')
        unit = 86400000;
    else if (*end == 'h')
        unit = 3600000;
    else if (*end == 'm')
        unit = 60000;
    else if (*end != 's' && *end != '\0')
        return -1;
    if (*end != '\0' && end[1] != '\0')
        return -1;
    *ms = (int64_t)v * unit;
    return 0;
}

static const char *str_or(const char *s, const char *otherwise)
{
    return s != NULL ? s : otherwise;
}

static void b64url(const unsigned char *in, size_t n, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i;

    for (i = 0; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
        out[o++] = tbl[v >> 6 & 63];
        out[o++] = tbl[v & 63];
    }
    out[o] = '\0';
}

int ctl_token_create(const ctl_opts_t *o)
{
    int64_t expires = 0;
    unsigned char raw[30];
    char token[64] = "bgt_", hash[AUTH_HASH_HEX], key[STORE_KEY_MAX], *text;
    json_t *record, *scope;
    size_t i;
    int rc;

    if (o->app == NULL || o->scopes == NULL)
        return ctl_die("token create needs --app and at least one --scope (see botgatectl help "
                       "token)");
    if (!auth_app_valid(o->app))
        return ctl_die("--app must be 1-%d bytes without ':' or control characters", AUTH_APP_MAX);
    json_array_foreach(o->scopes, i, scope) {
        if (auth_scope_bit(json_string_value(scope)) == 0)
            return ctl_die("unknown scope %s (see botgatectl help token)",
                           json_string_value(scope));
    }
    if (o->expires != NULL && parse_duration(o->expires, &expires) < 0)
        return ctl_die("--expires-in takes a duration such as 30d, 12h, 90m or 3600s, not %s",
                       o->expires);
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return ctl_die("no randomness: %s", strerror(errno));
    b64url(raw, sizeof(raw), token + 4);
    auth_hash_token(token, strlen(token), hash);
    record = json_pack("{s:s, s:O, s:s, s:o, s:O?, s:I}", "app", o->app, "scopes", o->scopes,
                       "label", o->label ? o->label : "", "expiresAt",
                       expires ? json_integer(clock_wall_ms() + expires) : json_null(), "channels",
                       o->channels, "createdAt", (json_int_t)clock_wall_ms());
    text = json_dumps(record, JSON_COMPACT);
    json_decref(record);
    if (text == NULL)
        return ctl_die("out of memory");
    rc = ctl_redis_connect();
    if (rc == 0 && store_key_token(key, sizeof(key), ctl_prefix, hash) < 0)
        rc = ctl_die("BOTGATE_REDIS_PREFIX is too long");
    if (rc == 0)
        rc = ctl_redis_set(key, text);
    free(text);
    if (rc != 0)
        return rc;
    printf("%s\n", token);
    fprintf(stderr, "token created for app %s (hash %.12s...); it is shown only this once\n",
            o->app, hash);
    return 0;
}

/* DEL of the token stored under hash; 0, or CTL_FAIL ("no such token") */
static int delete_hash(const char *hash, const char *done)
{
    char key[STORE_KEY_MAX];
    const char *argv[] = {"DEL", key};
    redisReply *r;
    long long n;

    if (ctl_redis_connect() != 0)
        return CTL_FAIL;
    if (store_key_token(key, sizeof(key), ctl_prefix, hash) < 0)
        return ctl_die("--hash is too long");
    if ((r = ctl_redis_command(2, argv, NULL)) == NULL)
        return CTL_FAIL;
    n = r->integer;
    freeReplyObject(r);
    if (n == 0)
        return ctl_die("no such token");
    fprintf(stderr, "%s\n", done);
    return 0;
}

static int hash_ok(const char *h)
{
    return h != NULL && strlen(h) == AUTH_HASH_HEX - 1 && strspn(h, "0123456789abcdef") == 64;
}

int ctl_token_revoke(const ctl_opts_t *o)
{
    char hash[AUTH_HASH_HEX];

    if ((o->nargs == 1) == (o->hash != NULL))
        return ctl_die("token revoke takes TOKEN or --hash SHA256_HEX (see botgatectl help "
                       "token)");
    if (o->hash != NULL && !hash_ok(o->hash))
        return ctl_die("--hash takes the 64 lower-case hex digits of a SHA-256, not %s", o->hash);
    if (o->hash != NULL)
        snprintf(hash, sizeof(hash), "%s", o->hash);
    else
        auth_hash_token(o->args[0], strlen(o->args[0]), hash);
    return delete_hash(hash, "token revoked");
}

/* ---- list, get, delete ---- */

/* The token record of a key with its hash in it, for display; NULL when not a token. */
static json_t *token_view(const char *key, const redisReply *value)
{
    char hash[AUTH_HASH_HEX];
    json_t *rec, *out;

    if (value->type != REDIS_REPLY_STRING ||
        store_key_ids(key, ctl_prefix, STORE_REC_TOKEN, NULL, 0, hash, sizeof(hash)) < 0 ||
        (rec = json_loadb(value->str, value->len, 0, NULL)) == NULL)
        return NULL;
    if (!json_is_object(rec)) {
        json_decref(rec);
        return NULL;
    }
    out = json_pack("{s:s}", "hash", hash);
    json_object_update(out, rec);
    json_decref(rec);
    return out;
}

static void print_expiry(const json_t *at)
{
    char buf[64];
    time_t t;
    struct tm tm;

    if (!json_is_integer(at)) {
        ctl_print_cell("never", 0);
        return;
    }
    t = (time_t)(json_integer_value(at) / 1000);
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    if (json_integer_value(at) <= clock_wall_ms())
        strcat(buf, " (expired)");
    ctl_print_cell(buf, 0);
}

/* What a scan of the tokens collects: the ones that match, or all (list prints them as they
 * come). */
typedef struct token_scan {
    const ctl_opts_t *o;
    const char *label; /* NULL: every token (of --app) */
    json_t *found;     /* matches, when label is set */
    size_t n;
} token_scan_t;

static int token_seen(void *arg, const char *key, redisReply **replies)
{
    token_scan_t *ts = arg;
    json_t *view = token_view(key, replies[0]);
    const char *app = json_string_value(json_object_get(view, "app"));
    const char *label = json_string_value(json_object_get(view, "label"));
    json_t *scope;
    size_t i;

    if (view == NULL || (ts->o->app != NULL && (app == NULL || strcmp(app, ts->o->app) != 0)) ||
        (ts->label != NULL && (label == NULL || strcmp(label, ts->label) != 0))) {
        json_decref(view);
        return 0;
    }
    ts->n++;
    if (ts->label != NULL) {
        json_array_append_new(ts->found, view);
        return 0;
    }
    if (ts->o->json) {
        ctl_list_item(ts->o, view);
    } else {
        ctl_print_cell(json_string_value(json_object_get(view, "hash")), 0);
        ctl_print_cell(app, 0);
        ctl_print_cell(label, 0);
        json_array_foreach(json_object_get(view, "scopes"), i, scope) {
            printf("%s%s", i ? "," : "", str_or(json_string_value(scope), "?"));
        }
        putchar('\t');
        print_expiry(json_object_get(view, "expiresAt"));
        ctl_print_cell(json_is_array(json_object_get(view, "channels")) ? "some" : "all", 1);
    }
    json_decref(view);
    return 0;
}

static const ctl_fetch_t fetch_get = {2, {"GET", NULL}};

int ctl_token_list(const ctl_opts_t *o)
{
    char pattern[STORE_KEY_MAX];
    token_scan_t ts = {o, NULL, NULL, 0};
    int rc;

    if (ctl_redis_connect() != 0)
        return CTL_FAIL;
    if (store_key_pattern(pattern, sizeof(pattern), ctl_prefix, STORE_REC_TOKEN, NULL) < 0)
        return ctl_die("BOTGATE_REDIS_PREFIX is too long");
    ctl_list_begin(o, "HASH\tAPP\tLABEL\tSCOPES\tEXPIRES\tCHANNELS");
    rc = ctl_redis_scan(pattern, &fetch_get, 1, token_seen, &ts);
    ctl_list_end(o, ts.n);
    return rc;
}

/* The one token --hash or the label operand names (with --app: of that app); a new reference,
 * or NULL after printing why. */
static json_t *find_token(const ctl_opts_t *o, const char *verb)
{
    char key[STORE_KEY_MAX], pattern[STORE_KEY_MAX];
    token_scan_t ts = {o, NULL, NULL, 0};
    json_t *one = NULL;

    if ((o->nargs == 1) == (o->hash != NULL)) {
        ctl_die("token %s takes LABEL or --hash SHA256_HEX (see botgatectl help token)", verb);
        return NULL;
    }
    if (o->hash != NULL && !hash_ok(o->hash)) {
        ctl_die("--hash takes the 64 lower-case hex digits of a SHA-256, not %s", o->hash);
        return NULL;
    }
    if (o->hash == NULL && o->args[0][0] == '\0') {
        ctl_die("token %s: the label must not be empty", verb);
        return NULL;
    }
    if (ctl_redis_connect() != 0)
        return NULL;
    if (o->hash != NULL) {
        const char *argv[] = {"GET", key};
        redisReply *r;
        if (store_key_token(key, sizeof(key), ctl_prefix, o->hash) < 0 ||
            (r = ctl_redis_command(2, argv, NULL)) == NULL)
            return NULL;
        one = token_view(key, r);
        freeReplyObject(r);
        if (one == NULL)
            ctl_die("no token has the hash %s", o->hash);
        else if (o->app != NULL &&
                 strcmp(str_or(json_string_value(json_object_get(one, "app")), ""), o->app) != 0) {
            ctl_die("no token of app %s has the hash %s", o->app, o->hash);
            json_decref(one);
            one = NULL;
        }
        return one;
    }
    ts.label = o->args[0];
    ts.found = json_array();
    if (store_key_pattern(pattern, sizeof(pattern), ctl_prefix, STORE_REC_TOKEN, NULL) < 0 ||
        ctl_redis_scan(pattern, &fetch_get, 1, token_seen, &ts) != 0) {
        json_decref(ts.found);
        return NULL;
    }
    if (ts.n == 1) {
        one = json_incref(json_array_get(ts.found, 0));
    } else if (ts.n == 0) {
        ctl_die("no token%s%s is labelled %s", o->app ? " of app " : "", o->app ? o->app : "",
                ts.label);
    } else {
        json_t *t;
        size_t i;
        ctl_die("%zu tokens are labelled %s; choose one with --hash (or narrow with --app):", ts.n,
                ts.label);
        json_array_foreach(ts.found, i, t) {
            fprintf(stderr, "  %s  app %s\n", json_string_value(json_object_get(t, "hash")),
                    str_or(json_string_value(json_object_get(t, "app")), "?"));
        }
    }
    json_decref(ts.found);
    return one;
}

int ctl_token_get(const ctl_opts_t *o)
{
    json_t *t = find_token(o, "get");

    if (t == NULL)
        return CTL_FAIL;
    ctl_print_record(o, t);
    json_decref(t);
    return 0;
}

int ctl_token_delete(const ctl_opts_t *o)
{
    json_t *t = find_token(o, "delete");
    int rc;

    if (t == NULL)
        return CTL_FAIL;
    rc = delete_hash(json_string_value(json_object_get(t, "hash")), "token deleted");
    json_decref(t);
    return rc;
}
