/* rediscfg.c - a Redis URL (redis://, rediss://, unix://) and the TLS files into a
 * redisc_config_t, and botgatectl's blocking connection made from one. */
#include "rediscfg.h"

#include "redistls.h"

#include "../core/clock.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int hex_digit(int c)
{
    return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* The n bytes at in, %XX decoded, into out; -1 when an escape is bad or out is too small. */
static int url_decode(const char *in, size_t n, char *out, size_t size)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)in[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex_digit((unsigned char)in[i + 1]) : -1;
            int lo = i + 2 < n ? hex_digit((unsigned char)in[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (k + 1 >= size || c == 0)
            return -1;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return 0;
}

int rediscfg_parse_url(const char *url, redisc_config_t *cfg, char *errbuf, size_t errlen)
{
    char hostbuf[256] = "", *p;
    const char *rest;
    struct addrinfo hints, *res = NULL;

    cfg->host[0] = cfg->unix_path[0] = cfg->user[0] = cfg->password[0] = '\0';
    cfg->tls_name[0] = '\0';
    cfg->tls = 0;
    cfg->port = 6379;
    cfg->db = 0;
    if (strncmp(url, "unix://", 7) == 0) {
        snprintf(cfg->unix_path, sizeof(cfg->unix_path), "%s", url + 7);
        if ((p = strchr(cfg->unix_path, '?')) != NULL) {
            *p++ = '\0';
            if (strncmp(p, "db=", 3) == 0)
                cfg->db = atoi(p + 3);
        }
        if (cfg->unix_path[0] != '/') {
            snprintf(errbuf, errlen, "unix socket path must be absolute");
            return -1;
        }
        return 0;
    }
    cfg->tls = strncmp(url, "rediss://", 9) == 0;
    if (strncmp(url, "redis://", 8) != 0 && !cfg->tls) {
        snprintf(errbuf, errlen, "Redis URL must start with redis://, rediss:// or unix://");
        return -1;
    }
    rest = url + 8 + cfg->tls;
    if ((p = strrchr(rest, '@')) != NULL) { /* user:password@, :password@ or password@ */
        const char *colon = memchr(rest, ':', (size_t)(p - rest));
        const char *pw = colon ? colon + 1 : rest;
        if ((colon != NULL &&
             url_decode(rest, (size_t)(colon - rest), cfg->user, sizeof(cfg->user)) < 0) ||
            url_decode(pw, (size_t)(p - pw), cfg->password, sizeof(cfg->password)) < 0) {
            snprintf(errbuf, errlen,
                     "bad user or password in Redis URL (too long, or a bad "
                     "%%-escape)");
            return -1;
        }
        if (cfg->user[0] != '\0' && cfg->password[0] == '\0') {
            snprintf(errbuf, errlen, "a user in the Redis URL needs a password");
            return -1;
        }
        rest = p + 1;
    }
    snprintf(hostbuf, sizeof(hostbuf), "%s", rest);
    if ((p = strchr(hostbuf, '/')) != NULL) {
        *p++ = '\0';
        if (*p)
            cfg->db = atoi(p);
    }
    if (hostbuf[0] == '[') { /* [v6]:port */
        char *end = strchr(hostbuf, ']');
        if (end == NULL) {
            snprintf(errbuf, errlen, "bad IPv6 address in Redis URL");
            return -1;
        }
        *end = '\0';
        if (end[1] == ':')
            cfg->port = atoi(end + 2);
        memmove(hostbuf, hostbuf + 1, strlen(hostbuf + 1) + 1);
    } else if ((p = strrchr(hostbuf, ':')) != NULL) {
        *p = '\0';
        cfg->port = atoi(p + 1);
    }
    if (hostbuf[0] == '\0' || cfg->port <= 0 || cfg->port > 65535) {
        snprintf(errbuf, errlen, "Redis URL needs a host and a valid port");
        return -1;
    }
    if (cfg->tls)
        snprintf(cfg->tls_name, sizeof(cfg->tls_name), "%s", hostbuf);
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(hostbuf, NULL, &hints, &res) != 0 || res == NULL) {
        snprintf(errbuf, errlen, "cannot resolve Redis host %.100s", hostbuf);
        return -1;
    }
    cfg->n_addrs = sentinel_addresses(res, 0, cfg->addrs, REDISC_ADDRS_MAX);
    freeaddrinfo(res);
    if (cfg->n_addrs == 0) {
        snprintf(errbuf, errlen, "Redis host %.100s has no IPv4 or IPv6 address", hostbuf);
        return -1;
    }
    snprintf(cfg->host, sizeof(cfg->host), "%s", cfg->addrs[0]);
    return 0;
}

int rediscfg_tls_setup(redisc_config_t *cfg, const char *ca_file, const char *cert_file,
                       const char *key_file, const char *name, int by_address, char *errbuf,
                       size_t errlen)
{
    if (!cfg->tls) {
        if (ca_file[0] || cert_file[0] || key_file[0] || name[0]) {
            snprintf(errbuf, errlen, "the Redis TLS settings need a rediss:// URL");
            return -1;
        }
        return 0;
    }
    if ((cert_file[0] == '\0') != (key_file[0] == '\0')) {
        snprintf(errbuf, errlen, "a client certificate needs its key, and a key its certificate");
        return -1;
    }
    if ((cfg->tls_ctx = redistls_ctx_new(ca_file, cert_file, key_file, errbuf, errlen)) == NULL)
        return -1;
    if (name[0] != '\0')
        snprintf(cfg->tls_name, sizeof(cfg->tls_name), "%s", name);
    else if (by_address)
        cfg->tls_name[0] = '\0';
    return 0;
}

/* One setup command of a blocking connection; -1 with why when refused. */
static int blocking_setup(redisContext *c, int argc, const char **argv, char *errbuf, size_t errlen)
{
    redisReply *reply = redisCommandArgv(c, argc, argv, NULL);
    int ok = reply != NULL && reply->type != REDIS_REPLY_ERROR;

    if (!ok) /* the command's name only: AUTH's arguments are secrets */
        snprintf(errbuf, errlen, "Redis refused %s: %.120s", argv[0],
                 reply != NULL ? reply->str : c->errstr);
    if (reply != NULL)
        freeReplyObject(reply);
    return ok ? 0 : -1;
}

redisContext *rediscfg_connect_blocking(const redisc_config_t *cfg, const char *host, int port,
                                        int timeout_ms, char *errbuf, size_t errlen)
{
    struct timeval tv = clock_ms_timeval(timeout_ms);
    redisContext *c;
    char db[16], err[200];
    int fd;

    if (host == NULL) {
        c = redisConnectUnixWithTimeout(cfg->unix_path, tv);
    } else if (cfg->tls_ctx != NULL) {
        fd = redistls_connect_blocking(cfg->tls_ctx, cfg->tls_name[0] ? cfg->tls_name : host, host,
                                       port, timeout_ms, err, sizeof(err));
        if (fd < 0) {
            snprintf(errbuf, errlen, "cannot connect to Redis at %.100s:%d: %s", host, port, err);
            return NULL;
        }
        if ((c = redisConnectFd(fd)) == NULL)
            close(fd);
    } else {
        c = redisConnectWithTimeout(host, port, tv);
    }
    if (c == NULL || c->err) {
        snprintf(errbuf, errlen, "cannot connect to Redis: %s", c ? c->errstr : "out of memory");
        goto fail;
    }
    redisSetTimeout(c, tv);
    if (cfg->password[0] != '\0') {
        const char *argv[] = {"AUTH", cfg->user[0] ? cfg->user : cfg->password, cfg->password};
        if (blocking_setup(c, cfg->user[0] ? 3 : 2, argv, errbuf, errlen) < 0)
            goto fail;
    }
    if (cfg->db != 0) {
        const char *argv[] = {"SELECT", db};
        snprintf(db, sizeof(db), "%d", cfg->db);
        if (blocking_setup(c, 2, argv, errbuf, errlen) < 0)
            goto fail;
    }
    return c;
fail:
    if (c != NULL)
        redisFree(c);
    return NULL;
}
