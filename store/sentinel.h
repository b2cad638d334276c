/* sentinel.h - asking Redis Sentinel, asynchronously, where the master of a name is. */
#ifndef BOTGATE_STORE_SENTINEL_H
#define BOTGATE_STORE_SENTINEL_H

struct event_base;

#define SENTINEL_MAX 8

typedef struct sentinel_addr {
    char host[64]; /* an IP address */
    int port;
} sentinel_addr_t;

/* ok 0 when no sentinel answered with an address; host is an IP address then valid for the
 * call only. The query is freed right after this callback. */
typedef void sentinel_cb(void *arg, int ok, const char *host, int port);

typedef struct sentinel_query sentinel_query_t;

/* Asks the sentinels in turn, from *next on, until one knows the master (each with
 * timeout_ms); *next is advanced so that the following query starts with the sentinel that
 * answered. NULL when nothing could be started (cb is then never called). */
sentinel_query_t *sentinel_ask(struct event_base *base, const sentinel_addr_t *sentinels, int n,
                               int *next, const char *master, int timeout_ms, sentinel_cb *cb,
                               void *arg);

/* Stops the query; its callback will not run. */
void sentinel_cancel(sentinel_query_t *q);

/* Parses "host:port,host:port" (names resolved here, once). -1 with a message on failure. */
int sentinel_parse_list(const char *spec, sentinel_addr_t *out, int max, int *n, char *errbuf,
                        unsigned long errlen);

#endif
