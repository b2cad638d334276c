/* config.h - botgate's configuration: environment variables, each also a --flag (contract.md
 * section 1). Read once in main, then shared read-only by every worker. */
#ifndef BOTGATE_GATEWAY_CONFIG_H
#define BOTGATE_GATEWAY_CONFIG_H

#include "../store/store.h"

#define CONFIG_URL_MAX 512

typedef struct config {
    char listen[300]; /* as given: host:port */
    char listen_host[300];
    int listen_port;
    char admin_listen[300]; /* /metrics, /healthz, /readyz; empty: on the API listener */
    char admin_host[300];
    int admin_port;
    char redis_url[CONFIG_URL_MAX];
    char redis_sentinels[CONFIG_URL_MAX]; /* host:port,... ; empty: no Sentinel */
    char redis_cluster[CONFIG_URL_MAX];   /* seed host:port,... ; empty: no Redis Cluster */
    char redis_ca_file[CONFIG_URL_MAX];   /* rediss://: CA bundle; empty: the system's */
    char redis_tls_cert[CONFIG_URL_MAX];  /* rediss://: client certificate (mutual TLS) */
    char redis_tls_key[CONFIG_URL_MAX];
    char redis_tls_name[256]; /* rediss://: name the certificates must hold */
    store_config_t store;     /* parsed Redis URL, timeouts, key prefix */
    int workers;
    char facebook_url[CONFIG_URL_MAX];
    char whatsapp_cloud_url[CONFIG_URL_MAX];
    char slack_url[CONFIG_URL_MAX];
    char wechat_url[CONFIG_URL_MAX];
    char teamwork_url[CONFIG_URL_MAX];
    char ca_file[CONFIG_URL_MAX];
    char upstream_http[4]; /* platform calls over TLS: "2" or "1.1" */
    int allow_private_media;
    int log_level;
    int request_timeout_ms;  /* deadline of one request, from arrival to answer */
    int upstream_timeout_ms; /* one platform call */
    int max_connections;     /* open client connections per worker */
    int drain_delay_ms;      /* SIGTERM: keep accepting this long (readyz 503) before closing */
    int drain_timeout_ms;    /* SIGTERM: time in-flight requests get to finish */
    int http_timeout_s;      /* reading a request, idle keep-alive */
    int max_reading_mb;      /* bytes of requests being read (not yet complete) per worker */
    int idempotency_ttl_s;   /* an Idempotency-Key's answer is replayed this long */
    char http_status[16];    /* BOTGATE_HTTP_STATUS as given */
    int http_status_conventional; /* BOTGATE_HTTP_STATUS=conventional: 4xx/5xx by err_code */
    int member_order;             /* 1: one member's requests run one at a time, in order */
    int outbox_shards;            /* streams of the outbox (Prefer: respond-async) */
    int outbox_claim_ms;          /* an entry of a dead consumer is taken over after this */
    int outbox_ttl_s;             /* a queued response not sent by then fails with 128 */
    int outbox_jobs;              /* queued requests one worker holds at once */
    int script_max_instructions;  /* VM instructions of one node script run */
    int script_max_memory_kb;     /* memory of one node script run, KiB */
    int script_max_ms;            /* computing time of one node script run, ms */
    /* not configured: random per process (main), the first part of its workers' outbox
     * consumers' names (<instance>-<worker>), so that XINFO CONSUMERS tells instances apart */
    char instance[17];
} config_t;

/* Fills cfg from defaults, the environment, then argv. Returns 0, 1 when --help was printed,
 * or -1 with a message on stderr. */
int config_load(config_t *cfg, int argc, char **argv);
/* botgate's version: `git describe` at build time, or the VERSION file in a tarball. */
const char *config_version(void);
/* Logs a warning for each BOTGATE_* variable of env that names no setting (with the nearest
 * name, a misspelling being the usual cause); returns how many. */
int config_warn_unknown(char *const *env);

#endif
