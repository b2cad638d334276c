/* config.c - defaults, environment and flags, validated once at start-up. */
#include "config.h"

#include "log.h"

#include "../store/rediscfg.h"

#include <botgate_version.h> /* generated in the build tree */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum { T_STR, T_INT, T_BOOL, T_LEVEL } opt_type_t;

typedef struct option_def {
    const char *env;
    opt_type_t type;
    size_t offset;
    size_t size; /* for strings */
    const char *def;
    int min, max;
    const char *help;
} option_def_t;

#define STR(field, env, def, help)                                                                 \
    {                                                                                              \
        env, T_STR, offsetof(config_t, field), sizeof(((config_t *)0)->field), def, 0, 0, help     \
    }
#define INT(field, env, def, lo, hi, help)                                                         \
    {                                                                                              \
        env, T_INT, offsetof(config_t, field), 0, def, lo, hi, help                                \
    }

static const option_def_t options[] = {
    STR(listen, "BOTGATE_LISTEN", "0.0.0.0:8080", "address:port of the HTTP API"),
    STR(admin_listen, "BOTGATE_ADMIN_LISTEN", "",
        "address:port serving /metrics, /healthz and /readyz (empty: the API listener; when "
        "set, /metrics is no longer answered there)"),
    STR(redis_url, "BOTGATE_REDIS_URL", "redis://127.0.0.1:6379/0",
        "redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path/sock (user: "
        "an ACL user)"),
    STR(redis_ca_file, "BOTGATE_REDIS_CA_FILE", "",
        "rediss://: CA bundle (PEM) the Redis servers' certificates are checked against (empty: "
        "the system's CAs)"),
    STR(redis_tls_cert, "BOTGATE_REDIS_TLS_CERT_FILE", "",
        "rediss://: client certificate chain (PEM) for mutual TLS (empty: none)"),
    STR(redis_tls_key, "BOTGATE_REDIS_TLS_KEY_FILE", "",
        "rediss://: the client certificate's private key (PEM)"),
    STR(redis_tls_name, "BOTGATE_REDIS_TLS_NAME", "",
        "rediss://: the name every Redis server's certificate must hold (empty: the URL's host "
        "for one server; each node's or master's address with Cluster or Sentinel)"),
    STR(store.prefix, "BOTGATE_REDIS_PREFIX", "botgate:", "prefix of every Redis key"),
    STR(redis_sentinels, "BOTGATE_REDIS_SENTINELS", "",
        "Redis Sentinel host:port,...: the master is found and followed through them"),
    STR(store.redis.master_name, "BOTGATE_REDIS_MASTER", "mymaster",
        "the master's name known to the sentinels"),
    STR(redis_cluster, "BOTGATE_REDIS_CLUSTER", "",
        "Redis Cluster seed nodes host:port,...: the slot map is read from them (the URL then "
        "gives only the password)"),
    INT(workers, "BOTGATE_WORKERS", "0", 0, 256, "worker threads (0: number of CPUs)"),
    STR(facebook_url, "BOTGATE_FACEBOOK_API_URL", "https://graph.facebook.com/v19.0",
        "base of the Messenger Send API"),
    STR(whatsapp_cloud_url, "BOTGATE_WHATSAPP_CLOUD_API_URL", "https://graph.facebook.com/v19.0",
        "base of the WhatsApp Cloud API"),
    STR(slack_url, "BOTGATE_SLACK_API_URL", "https://slack.com/api", "base of the Slack Web API"),
    STR(wechat_url, "BOTGATE_WECHAT_API_URL", "https://api.weixin.qq.com",
        "base of the WeChat Official Account API"),
    STR(teamwork_url, "BOTGATE_TEAMWORK_API_URL", "https://www.teambition.com/appstore/api",
        "base of the team-collaboration API"),
    STR(ca_file, "BOTGATE_CA_FILE", "", "extra CA bundle for outbound TLS"),
    STR(upstream_http, "BOTGATE_UPSTREAM_HTTP", "2",
        "HTTP version of platform calls over TLS: 2 (botgate's own HTTP/2 where the platform "
        "chooses it by ALPN, calls sharing connections as streams; else HTTP/1.1) or 1.1 "
        "(botgate's own HTTP/1.1, a kept-alive connection per call in flight)"),
    {"BOTGATE_ALLOW_PRIVATE_MEDIA", T_BOOL, offsetof(config_t, allow_private_media), 0, "0", 0, 1,
     "1: fetched URLs may reach loopback/private addresses (tests only)"},
    {"BOTGATE_LOG_LEVEL", T_LEVEL, offsetof(config_t, log_level), 0, "info", 0, 0,
     "error, warn, info, debug"},
    INT(request_timeout_ms, "BOTGATE_REQUEST_TIMEOUT_MS", "10000", 100, 300000,
        "deadline of one request"),
    INT(upstream_timeout_ms, "BOTGATE_UPSTREAM_TIMEOUT_MS", "5000", 50, 300000,
        "timeout of one platform call"),
    INT(store.redis.command_timeout_ms, "BOTGATE_REDIS_TIMEOUT_MS", "1000", 10, 60000,
        "timeout of one Redis command"),
    INT(store.redis.connect_timeout_ms, "BOTGATE_REDIS_CONNECT_TIMEOUT_MS", "1000", 10, 60000,
        "timeout of connecting to Redis"),
    INT(store.redis.max_in_flight, "BOTGATE_REDIS_MAX_IN_FLIGHT", "10000", 1, 1000000,
        "Redis commands in flight per worker"),
    INT(store.cache_ttl_ms, "BOTGATE_CACHE_TTL_MS", "60000", 0, 600000,
        "tokens and channels are cached at most this long per worker (0: off); Redis tells of "
        "every change at once, this is a safety net"),
    INT(max_connections, "BOTGATE_MAX_CONNECTIONS", "10000", 1, 1000000,
        "open client connections per worker"),
    INT(drain_delay_ms, "BOTGATE_DRAIN_DELAY_MS", "0", 0, 600000,
        "on SIGTERM, keep accepting this long while /readyz says 503, so that a load balancer "
        "stops sending first"),
    INT(drain_timeout_ms, "BOTGATE_DRAIN_TIMEOUT_MS", "10000", 0, 600000,
        "on SIGTERM, how long in-flight requests may take"),
    INT(http_timeout_s, "BOTGATE_HTTP_TIMEOUT_S", "30", 1, 3600,
        "reading a request and idle keep-alive, seconds"),
    INT(max_reading_mb, "BOTGATE_MAX_READING_MB", "64", 2, 65536,
        "MiB of requests being read (headers and bodies not yet complete) per worker; past it "
        "new requests are refused with 503"),
    INT(idempotency_ttl_s, "BOTGATE_IDEMPOTENCY_TTL_S", "86400", 1, 31536000,
        "an answer to a request with an Idempotency-Key is replayed this long, seconds"),
    INT(script_max_instructions, "BOTGATE_SCRIPT_MAX_INSTRUCTIONS", "1000000", 1000, 1000000000,
        "Lua VM instructions one run of node code may execute; past it the script fails (126)"),
    INT(script_max_memory_kb, "BOTGATE_SCRIPT_MAX_MEMORY_KB", "1024", 64, 1048576,
        "KiB of memory one run of node code may hold; past it the script fails (126)"),
    INT(script_max_ms, "BOTGATE_SCRIPT_MAX_MS", "50", 1, 10000,
        "ms one run of node code may compute (its http.request waits not counted); past it the "
        "script fails (126); the worker runs nothing else meanwhile"),
    STR(http_status, "BOTGATE_HTTP_STATUS", "interface",
        "HTTP status of failure answers: interface (every failure is 500, as the interface "
        "says) or conventional (400, 401, 404, 409, 413, 429, 502, 503 by err_code; the same "
        "bodies)"),
    {"BOTGATE_MEMBER_ORDER", T_BOOL, offsetof(config_t, member_order), 0, "1", 0, 1,
     "1: the requests for one member run one at a time, in the order they arrived, across "
     "instances; 0: off"},
    INT(outbox_shards, "BOTGATE_OUTBOX_SHARDS", "16", 1, 256,
        "Redis streams the outbox (Prefer: respond-async) is spread over; a member's requests "
        "stay in one; never lower it while requests are queued"),
    INT(outbox_claim_ms, "BOTGATE_OUTBOX_CLAIM_MS", "30000", 100, 3600000,
        "a queued request held by an instance that stopped answering is taken over by another "
        "after this many ms"),
    INT(outbox_ttl_s, "BOTGATE_OUTBOX_TTL_S", "14400", 1, 604800,
        "a queued response not sent within this many seconds fails with err_code 128"),
    INT(outbox_jobs, "BOTGATE_OUTBOX_JOBS", "256", 1, 100000,
        "queued requests one worker delivers or waits on at once (more wait in Redis)"),
};

static void usage(void)
{
    printf("usage: botgate [--flag value ...]\n\n"
           "Every setting is an environment variable; the flag of the same name in lower case\n"
           "without BOTGATE_ (e.g. --listen, --redis_url or --redis-url) overrides it.\n"
           "--version prints the version, --help this text.\n\n");
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
        printf("  %-34s %s (default: %s)\n", options[i].env, options[i].help,
               options[i].def[0] ? options[i].def : "none");
}

static int set_option(config_t *cfg, const option_def_t *o, const char *value)
{
    char *end;
    long v;
    void *field = (char *)cfg + o->offset;

    switch (o->type) {
    case T_STR:
        if (strlen(value) >= o->size) {
            fprintf(stderr, "botgate: %s is too long\n", o->env);
            return -1;
        }
        memcpy(field, value, strlen(value) + 1);
        return 0;
    case T_BOOL:
        if (strcmp(value, "1") != 0 && strcmp(value, "0") != 0 && strcmp(value, "true") != 0 &&
            strcmp(value, "false") != 0) {
            fprintf(stderr, "botgate: %s must be 0 or 1\n", o->env);
            return -1;
        }
        *(int *)field = value[0] == '1' || value[0] == 't';
        return 0;
    case T_LEVEL:
        if ((*(int *)field = log_parse_level(value)) < 0) {
            fprintf(stderr, "botgate: %s must be error, warn, info or debug\n", o->env);
            return -1;
        }
        return 0;
    case T_INT:
        v = strtol(value, &end, 10);
        if (*value == '\0' || *end != '\0' || v < o->min || v > o->max) {
            fprintf(stderr, "botgate: %s must be an integer from %d to %d\n", o->env, o->min,
                    o->max);
            return -1;
        }
        *(int *)field = (int)v;
        return 0;
    }
    return -1;
}

/* Redis Cluster: seeds resolved here, at start-up; a key's hash tag is its first {...}, so a
 * prefix with braces would put a channel's keys in different slots. */
static int check_cluster(config_t *cfg)
{
    char err[256];

    if (cfg->redis_sentinels[0] != '\0') {
        fprintf(stderr, "botgate: BOTGATE_REDIS_CLUSTER and BOTGATE_REDIS_SENTINELS exclude "
                        "each other\n");
        return -1;
    }
    if (cfg->store.redis.db != 0 || cfg->store.redis.unix_path[0] != '\0') {
        fprintf(stderr, "botgate: BOTGATE_REDIS_CLUSTER: a cluster has database 0 only, over "
                        "TCP (BOTGATE_REDIS_URL gives its password)\n");
        return -1;
    }
    if (strpbrk(cfg->store.prefix, "{}") != NULL) {
        fprintf(stderr, "botgate: BOTGATE_REDIS_PREFIX must not contain { or } with "
                        "BOTGATE_REDIS_CLUSTER\n");
        return -1;
    }
    if (sentinel_parse_list(cfg->redis_cluster, cfg->store.cluster, CLUSTER_SEEDS_MAX,
                            &cfg->store.n_cluster, err, sizeof(err)) < 0) {
        fprintf(stderr, "botgate: BOTGATE_REDIS_CLUSTER: %s\n", err);
        return -1;
    }
    return 0;
}

/* "--redis-url" and "--redis_url" both name BOTGATE_REDIS_URL. */
static const option_def_t *find_flag(const char *flag)
{
    char name[64] = "BOTGATE_";
    size_t n = strlen(name);

    for (; *flag && n + 1 < sizeof(name); flag++)
        name[n++] = *flag == '-' ? '_' : (char)toupper((unsigned char)*flag);
    name[n] = '\0';
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
        if (strcmp(options[i].env, name) == 0)
            return &options[i];
    return NULL;
}

/* host:port or [v6]:port into host and port; -1 with a message naming the variable. */
static int parse_address(const char *given, const char *env, char *host, size_t host_size,
                         int *port_out)
{
    char spec[300];
    char *colon, *end;
    long port;

    snprintf(spec, sizeof(spec), "%s", given);
    colon = strrchr(spec, ':');
    if (colon == NULL) {
        fprintf(stderr, "botgate: %s must be address:port\n", env);
        return -1;
    }
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535) {
        fprintf(stderr, "botgate: bad port in %s\n", env);
        return -1;
    }
    *colon = '\0';
    snprintf(host, host_size, "%s", spec);
    /* [::]:8080 */
    if (host[0] == '[') {
        size_t n = strlen(host);
        if (n >= 2 && host[n - 1] == ']') {
            memmove(host, host + 1, n - 2);
            host[n - 2] = '\0';
        }
    }
    *port_out = (int)port;
    return 0;
}

static void strip_slash(char *url)
{
    size_t n = strlen(url);

    while (n > 0 && url[n - 1] == '/')
        url[--n] = '\0';
}

int config_load(config_t *cfg, int argc, char **argv)
{
    char err[256];
    size_t n = sizeof(options) / sizeof(options[0]);

    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < n; i++) {
        const char *env = getenv(options[i].env);
        if (set_option(cfg, &options[i], options[i].def) < 0)
            return -1;
        if (env != NULL && set_option(cfg, &options[i], env) < 0)
            return -1;
    }
    for (int i = 1; i < argc; i++) {
        const option_def_t *o;
        const char *value;
        char *eq;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage();
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "-V") == 0) {
            printf("botgate %s\n", BOTGATE_VERSION);
            return 1;
        }
        if (strncmp(argv[i], "--", 2) != 0) {
            fprintf(stderr, "botgate: unexpected argument %s (see --help)\n", argv[i]);
            return -1;
        }
        /* --flag=value or --flag value */
        char flag[64];
        snprintf(flag, sizeof(flag), "%s", argv[i] + 2);
        if ((eq = strchr(flag, '=')) != NULL) {
            *eq = '\0';
            value = strchr(argv[i], '=') + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            fprintf(stderr, "botgate: --%s needs a value\n", flag);
            return -1;
        }
        if ((o = find_flag(flag)) == NULL) {
            fprintf(stderr, "botgate: unknown flag --%s (see --help)\n", flag);
            return -1;
        }
        if (set_option(cfg, o, value) < 0)
            return -1;
    }
    if (parse_address(cfg->listen, "BOTGATE_LISTEN", cfg->listen_host, sizeof(cfg->listen_host),
                      &cfg->listen_port) < 0)
        return -1;
    if (cfg->admin_listen[0] != '\0' &&
        parse_address(cfg->admin_listen, "BOTGATE_ADMIN_LISTEN", cfg->admin_host,
                      sizeof(cfg->admin_host), &cfg->admin_port) < 0)
        return -1;
    if (cfg->workers == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->workers = cpus > 0 ? (int)cpus : 1;
    }
    if (rediscfg_parse_url(cfg->redis_url, &cfg->store.redis, err, sizeof(err)) < 0) {
        fprintf(stderr, "botgate: BOTGATE_REDIS_URL: %s\n", err);
        return -1;
    }
    /* With sentinels, the URL still gives the password and the database. */
    if (cfg->redis_sentinels[0] != '\0' &&
        sentinel_parse_list(cfg->redis_sentinels, cfg->store.redis.sentinels, SENTINEL_MAX,
                            &cfg->store.redis.n_sentinels, err, sizeof(err)) < 0) {
        fprintf(stderr, "botgate: BOTGATE_REDIS_SENTINELS: %s\n", err);
        return -1;
    }
    if (cfg->redis_cluster[0] != '\0' && check_cluster(cfg) < 0)
        return -1;
    if (rediscfg_tls_setup(&cfg->store.redis, cfg->redis_ca_file, cfg->redis_tls_cert,
                           cfg->redis_tls_key, cfg->redis_tls_name,
                           cfg->redis_cluster[0] != '\0' || cfg->redis_sentinels[0] != '\0', err,
                           sizeof(err)) < 0) {
        fprintf(stderr,
                "botgate: Redis TLS (BOTGATE_REDIS_URL, BOTGATE_REDIS_CA_FILE, "
                "BOTGATE_REDIS_TLS_*): %s\n",
                err);
        return -1;
    }
    if (strcmp(cfg->http_status, "interface") != 0 &&
        strcmp(cfg->http_status, "conventional") != 0) {
        fprintf(stderr, "botgate: BOTGATE_HTTP_STATUS must be interface or conventional\n");
        return -1;
    }
    cfg->http_status_conventional = strcmp(cfg->http_status, "conventional") == 0;
    if (strcmp(cfg->upstream_http, "2") != 0 && strcmp(cfg->upstream_http, "1.1") != 0) {
        fprintf(stderr, "botgate: BOTGATE_UPSTREAM_HTTP must be 2 or 1.1\n");
        return -1;
    }
    /* read at start by every worker's TLS client: a bundle that cannot be read stops the start
     * here, with its reason, rather than every TLS call later */
    if (cfg->ca_file[0] != '\0' && access(cfg->ca_file, R_OK) != 0) {
        fprintf(stderr, "botgate: BOTGATE_CA_FILE %s cannot be read: %s\n", cfg->ca_file,
                strerror(errno));
        return -1;
    }
    strip_slash(cfg->facebook_url);
    strip_slash(cfg->whatsapp_cloud_url);
    strip_slash(cfg->slack_url);
    strip_slash(cfg->wechat_url);
    strip_slash(cfg->teamwork_url);
    return 0;
}

const char *config_version(void)
{
    return BOTGATE_VERSION;
}

/* Edit distance of two short names (a misspelt variable is one or two letters off). */
static size_t name_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];

    if (la >= 63 || lb >= 63)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

int config_warn_unknown(char *const *env)
{
    size_t n = sizeof(options) / sizeof(options[0]);
    int unknown = 0;

    for (; env != NULL && *env != NULL; env++) {
        char name[64];
        const char *eq = strchr(*env, '=');
        size_t len = eq != NULL ? (size_t)(eq - *env) : strlen(*env);
        const char *nearest = NULL;
        size_t best = 4; /* farther than three edits is no longer a misspelling */
        int known = 0;

        if (strncmp(*env, "BOTGATE_", 8) != 0)
            continue;
        if (len >= sizeof(name))
            len = sizeof(name) - 1;
        memcpy(name, *env, len);
        name[len] = '\0';
        for (size_t i = 0; i < n && !known; i++) {
            size_t d = name_distance(name, options[i].env);
            known = d == 0;
            if (d < best) {
                best = d;
                nearest = options[i].env;
            }
        }
        if (known)
            continue;
        unknown++;
        if (nearest != NULL)
            log_msg(LOG_WARN, "unknown variable %s ignored: did you mean %s?", name, nearest);
        else
            log_msg(LOG_WARN, "unknown variable %s ignored (botgate --help lists them all)", name);
    }
    return unknown;
}
