/* rediscfg.h - a Redis deployment's settings from its URL and TLS files (redisc_config_t), and
 * the blocking connection botgatectl uses; the event-loop client is redisc.h's. */
#ifndef BOTGATE_STORE_REDISCFG_H
#define BOTGATE_STORE_REDISCFG_H

#include "redisc.h"

#include <hiredis/hiredis.h>

/* Parses redis[s]://[[user]:password@]host[:port][/db] or unix:///path[?db=N]; user and
 * password may be percent-encoded (as redis-cli -u reads them); host names are resolved here,
 * once (rediss:// keeps the name as tls_name). -1 with a message in errbuf on failure. */
int rediscfg_parse_url(const char *url, redisc_config_t *cfg, char *errbuf, size_t errlen);

/* TLS for a rediss:// URL parsed into cfg: the shared context from ca_file, cert_file and
 * key_file ("": the system's CAs, no client certificate), and the name every server's
 * certificate must hold: name when given, else the URL's host for a single server
 * (by_address 0), else each server's address (Sentinel, Cluster). Any of them without
 * rediss:// is an error. -1 with a message in errbuf. */
int rediscfg_tls_setup(redisc_config_t *cfg, const char *ca_file, const char *cert_file,
                       const char *key_file, const char *name, int by_address, char *errbuf,
                       size_t errlen);

/* A blocking connection for botgatectl to host:port (an IP address; NULL: cfg's unix socket),
 * TLS when cfg says so, authenticated and on cfg's database, with timeout_ms for the connect
 * and every command. NULL with why in errbuf. */
redisContext *rediscfg_connect_blocking(const redisc_config_t *cfg, const char *host, int port,
                                        int timeout_ms, char *errbuf, size_t errlen);

#endif
