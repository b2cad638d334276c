/* subscriptions.c - botgatectl's subscription commands: where an app's events go (contract.md
 * section 14). A subscription is a field of the app's hash (store_key_subscriptions): its id
 * -> {"_id","app","url","events":[..]|null,"channel":".."|null,"createdAt":ms}. */
#include "ctl.h"

#include "../core/auth.h"
#include "../core/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define SUBSCRIPTIONS_MAX    20 /* per app: each event is queued once per subscription */
#define SUBSCRIPTION_URL_MAX 2048

static const char *const event_types[] = {"INBOUND", "POSTBACK", "DELIVERED", "READ", "FAILED"};

/* Adds the subscription only while the app has fewer than ARGV[3]: two adds at once cannot
 * pass the bound together. */
static const char ADD_SCRIPT[] =
    "if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end "
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return 1";

/* An http(s) URL with a host, printable ASCII without spaces, at most SUBSCRIPTION_URL_MAX
 * bytes. The gateway guards every post against private addresses as well (SSRF). */
static int url_ok(const char *url)
{
    const char *host;
    size_t n = strlen(url);

    if (n == 0 || n > SUBSCRIPTION_URL_MAX)
        return 0;
    if (strncmp(url, "https://", 8) == 0)
        host = url + 8;
    else if (strncmp(url, "http://", 7) == 0)
        host = url + 7;
    else
        return 0;
    if (*host == '\0' || *host == '/' || *host == ':' || *host == '?' || *host == '#')
        return 0;
    for (const char *p = url; *p; p++)
        if (*p <= ' ' || *p >= 0x7f)
            return 0;
    return 1;
}

/* The --events list ("INBOUND,READ") as a JSON array, NULL after printing why. */
static json_t *parse_events(const char *list)
{
    json_t *out = json_array();
    const char *p = list;

    while (out != NULL) {
        size_t n = strcspn(p, ","), k = 0;
        while (k < sizeof(event_types) / sizeof(event_types[0]) &&
               (strlen(event_types[k]) != n || strncmp(event_types[k], p, n) != 0))
            k++;
        if (k == sizeof(event_types) / sizeof(event_types[0])) {
            ctl_die("--events: %.*s is not an event type (INBOUND, POSTBACK, DELIVERED, READ, "
                    "FAILED)",
                    (int)n, p);
            json_decref(out);
            return NULL;
        }
        int seen = 0;
        for (size_t i = 0; i < json_array_size(out); i++)
            seen |= strcmp(json_string_value(json_array_get(out, i)), event_types[k]) == 0;
        if (!seen)
            json_array_append_new(out, json_string(event_types[k]));
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    return out;
}

/* The app's hash key, or CTL_FAIL after printing why (the app checked first). */
static int app_key(const ctl_opts_t *o, const char *verb, char *key, size_t size)
{
    if (o->app == NULL)
        return ctl_die("subscription %s needs --app (see botgatectl help subscription)", verb);
    if (!auth_app_valid(o->app))
        return ctl_die("--app must be 1-%d bytes without ':' or control characters", AUTH_APP_MAX);
    if (store_key_subscriptions(key, size, ctl_prefix, o->app) < 0)
        return ctl_die("BOTGATE_REDIS_PREFIX is too long");
    return 0;
}

int ctl_subscription_add(const ctl_opts_t *o)
{
    char key[STORE_KEY_MAX], id[4 + 16 + 1] = "sub_", max[8];
    unsigned char raw[8];
    json_t *events = NULL, *rec;
    const char *channel = NULL;
    redisReply *r;
    char *text;
    int rc;

    if ((rc = app_key(o, "add", key, sizeof(key))) != 0)
        return rc;
    if (o->url == NULL)
        return ctl_die("subscription add needs --url (see botgatectl help subscription)");
    if (!url_ok(o->url))
        return ctl_die("--url must be an http:// or https:// URL with a host, printable and at "
                       "most %d bytes",
                       SUBSCRIPTION_URL_MAX);
    if (json_array_size(o->channels) > 1)
        return ctl_die("--channel: one channel per subscription (add one subscription each)");
    if (json_array_size(o->channels) == 1) {
        channel = json_string_value(json_array_get(o->channels, 0));
        if (*channel == '\0' || strlen(channel) > 128)
            return ctl_die("--channel must be a channel id of 1-128 bytes");
    }
    if (o->events != NULL && (events = parse_events(o->events)) == NULL)
        return CTL_FAIL;
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        json_decref(events);
        return ctl_die("no randomness: %s", strerror(errno));
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(id + 4 + 2 * i, 3, "%02x", raw[i]);
    rec = json_pack("{s:s,s:s,s:s,s:o,s:s?,s:I}", "_id", id, "app", o->app, "url", o->url, "events",
                    events ? events : json_null(), "channel", channel, "createdAt",
                    (json_int_t)clock_wall_ms());
    text = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    if (text == NULL)
        return ctl_die("out of memory");
    if ((rc = ctl_redis_connect()) != 0) {
        free(text);
        return rc;
    }
    snprintf(max, sizeof(max), "%d", SUBSCRIPTIONS_MAX);
    {
        const char *argv[] = {"EVAL", ADD_SCRIPT, "1", key, id, text, max};
        r = ctl_redis_command(7, argv, NULL);
    }
    free(text);
    if (r == NULL)
        return CTL_FAIL;
    rc = r->type == REDIS_REPLY_INTEGER && r->integer == 1
             ? 0
             : ctl_die("app %s has %d subscriptions already: delete one first", o->app,
                       SUBSCRIPTIONS_MAX);
    freeReplyObject(r);
    if (rc == 0)
        printf("%s\n", id);
    return rc;
}

static void print_events(const json_t *events)
{
    size_t i;
    json_t *e;

    if (!json_is_array(events)) {
        ctl_print_cell("all", 0);
        return;
    }
    json_array_foreach(events, i, e) {
        printf("%s%s", i ? "," : "", json_string_value(e) ? json_string_value(e) : "?");
    }
    putchar('\t');
}

int ctl_subscription_list(const ctl_opts_t *o)
{
    char key[STORE_KEY_MAX];
    redisReply *r;
    size_t n = 0;
    int rc;

    if ((rc = app_key(o, "list", key, sizeof(key))) != 0 || (rc = ctl_redis_connect()) != 0)
        return rc;
    {
        const char *argv[] = {"HGETALL", key};
        if ((r = ctl_redis_command(2, argv, NULL)) == NULL)
            return CTL_FAIL;
    }
    ctl_list_begin(o, "ID\tURL\tEVENTS\tCHANNEL");
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        json_t *rec = json_loads(r->element[i + 1]->str ? r->element[i + 1]->str : "", 0, NULL);
        if (!json_is_object(rec)) {
            fprintf(stderr, "botgatectl: subscription %s: not a valid record (skipped)\n",
                    r->element[i]->str ? r->element[i]->str : "?");
            json_decref(rec);
            continue;
        }
        if (o->json) {
            ctl_list_item(o, rec);
        } else {
            ctl_print_cell(json_string_value(json_object_get(rec, "_id")), 0);
            ctl_print_cell(json_string_value(json_object_get(rec, "url")), 0);
            print_events(json_object_get(rec, "events"));
            ctl_print_cell(json_string_value(json_object_get(rec, "channel")), 1);
        }
        json_decref(rec);
        n++;
    }
    ctl_list_end(o, n);
    freeReplyObject(r);
    return 0;
}

int ctl_subscription_delete(const ctl_opts_t *o)
{
    char key[STORE_KEY_MAX];
    redisReply *r;
    int rc;

    if (o->nargs != 1)
        return ctl_die("subscription delete takes SUBSCRIPTION_ID (see botgatectl help "
                       "subscription)");
    if ((rc = app_key(o, "delete", key, sizeof(key))) != 0 || (rc = ctl_redis_connect()) != 0)
        return rc;
    {
        const char *argv[] = {"HDEL", key, o->args[0]};
        if ((r = ctl_redis_command(3, argv, NULL)) == NULL)
            return CTL_FAIL;
    }
    rc = r->type == REDIS_REPLY_INTEGER && r->integer == 1
             ? 0
             : ctl_die("no subscription %s of app %s", o->args[0], o->app);
    freeReplyObject(r);
    return rc;
}
