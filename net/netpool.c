/* netpool.c - see netpool.h. */
#include "netpool.h"

#include "../core/clock.h"
#include "../core/hash.h"
#include "../json/numfmt.h"

#include <stdlib.h>
#include <string.h>

#define URL_SLOTS 64 /* URLs read per pool */
/* HTTP/1.1 connections kept parked per origin, at most this many, and HTTP/1.1 and HTTP/2
 * connections closed rather than reused after this long unused (curl's own maximum age of a
 * pooled connection is 118 s; platforms and proxies close idle ones after a minute or so, and
 * a request written as the peer closes would be lost). */
#define PARKED_MAX  256
#define IDLE_MAX_MS 55000

struct netpool_parked {
    h1conn_t *c;
    int64_t since; /* clock_coarse_ms when it was parked */
};

/* A URL read (netpool_target), kept for the next calls to the same URL: the same platform and
 * token. */
typedef struct url_slot {
    char *text; /* owned; NULL when the slot holds nothing */
    netpool_target_t t;
} url_slot_t;

/* Owned by its client. */
struct netpool {
    struct event_base *base;
    url_slot_t urls[URL_SLOTS];
    netpool_origin_t *origins;
};

netpool_t *netpool_new(struct event_base *base)
{
    netpool_t *p = calloc(1, sizeof(*p));

    if (p != NULL)
        p->base = base;
    return p;
}

static void origin_close_parked(netpool_origin_t *o)
{
    while (o->_n_parked > 0)
        h1conn_free(o->_parked[--o->_n_parked].c);
}

void netpool_free(netpool_t *p)
{
    netpool_origin_t *o;

    if (p == NULL)
        return;
    while ((o = p->origins) != NULL) {
        p->origins = o->_next;
        origin_close_parked(o);
        free(o->_parked);
        for (size_t i = 0; i < o->_n_h2; i++)
            h2conn_free(o->_h2[i]);
        free(o->_h2);
        SSL_SESSION_free(o->session); /* after every connection that could still fill it */
        free(o->host);
        free(o->key);
        free(o);
    }
    for (int i = 0; i < URL_SLOTS; i++)
        free(p->urls[i].text);
    free(p);
}

static netpool_origin_t *origin_find(netpool_t *p, int tls, const char *host, size_t host_len,
                                     unsigned port)
{
    char num[NUMFMT_DEC_SIZE];
    const char *n = numfmt_dec(num, port);
    size_t nlen = strlen(n), klen = host_len + 1 + nlen;
    netpool_origin_t *o;
    char *key = malloc(klen + 1);

    if (key == NULL)
        return NULL;
    for (size_t i = 0; i < host_len; i++)
        key[i] = (char)(host[i] >= 'A' && host[i] <= 'Z' ? host[i] - 'A' + 'a' : host[i]);
    key[host_len] = ':';
    memcpy(key + host_len + 1, n, nlen + 1);
    for (o = p->origins; o != NULL; o = o->_next)
        if (o->tls == tls && strcmp(o->key, key) == 0) {
            free(key);
            return o;
        }
    if ((o = calloc(1, sizeof(*o))) == NULL || (o->host = malloc(host_len + 1)) == NULL) {
        free(o);
        free(key);
        return NULL;
    }
    memcpy(o->host, key, host_len);
    o->host[host_len] = '\0';
    o->host_is_ip = 1;
    for (size_t i = 0; i < host_len; i++)
        if (!((key[i] >= '0' && key[i] <= '9') || key[i] == '.'))
            o->host_is_ip = 0;
    o->tls = tls;
    o->key = key;
    o->h2_streams = -1;
    o->_pool = p;
    o->_next = p->origins;
    p->origins = o;
    return o;
}

static int is_alnum(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

static int is_hex(unsigned char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* A byte of a path or query that goes out as it is (RFC 3986: unreserved, sub-delims, ":",
 * "@", "/", "?", and "%" before two hex digits, checked by the caller). */
static int is_target_char(unsigned char ch)
{
    return is_alnum(ch) || (ch != '\0' && strchr("-._~!$&'()*+,;=:@/?%", ch) != NULL);
}

/* Whether the path has a "." or ".." segment, which curl would remove before sending. */
static int has_dot_segment(const char *t, size_t len)
{
    size_t i = 0;

    while (i < len && t[i] != '?') {
        size_t j = i + 1; /* t[i] is '/' */
        while (j < len && t[j] != '/' && t[j] != '?')
            j++;
        if ((j - i == 2 && t[i + 1] == '.') || (j - i == 3 && t[i + 1] == '.' && t[i + 2] == '.'))
            return 1;
        i = j;
    }
    return 0;
}

/* Reads the slot's text (see netpool_target); origin stays NULL when it is not such a URL. */
static void url_read(netpool_t *p, url_slot_t *u)
{
    int tls = u->text[4] == 's';
    const char *t = u->text + (tls ? 8 : 7), *host = t, *c;
    unsigned port = tls ? 443 : 80;
    size_t host_len, len;

    u->t.origin = NULL;
    while (is_alnum((unsigned char)*t) || *t == '.' || *t == '-')
        t++;
    host_len = (size_t)(t - host);
    if (host_len == 0 || host_len > 253)
        return;
    if (*t == ':') {
        const char *d = ++t;
        port = 0;
        while (*t >= '0' && *t <= '9' && t - d < 5)
            port = port * 10 + (unsigned)(*t++ - '0');
        if (t == d || port == 0 || port > 65535 || (*t >= '0' && *t <= '9'))
            return;
    }
    if (*t != '\0' && *t != '/' && *t != '?')
        return;
    len = strlen(t);
    for (c = t; *c != '\0'; c++) {
        if (!is_target_char((unsigned char)*c))
            return;
        if (*c == '%' && (!is_hex((unsigned char)c[1]) || !is_hex((unsigned char)c[2])))
            return;
    }
    if (*t == '/' && has_dot_segment(t, len))
        return;
    u->t.target = t;
    /* curl names the port in Host only when it is not the scheme's own */
    u->t.host = host;
    u->t.host_len = port == (tls ? 443u : 80u) ? host_len : (size_t)(t - host);
    u->t.origin = origin_find(p, tls, host, host_len, port);
}

const netpool_target_t *netpool_target(netpool_t *p, const char *url)
{
    size_t len = strlen(url), tail = len < 24 ? len : 24;
    /* the slot by the URL's end, where calls to one platform differ (the token, the page) */
    url_slot_t *u = &p->urls[(hash_fnv1a(url + len - tail, tail) ^ len) % URL_SLOTS];

    if (u->text == NULL || strcmp(u->text, url) != 0) {
        free(u->text);
        u->t.origin = NULL;
        if ((u->text = malloc(len + 1)) == NULL)
            return NULL;
        memcpy(u->text, url, len + 1);
        url_read(p, u);
    }
    return u->t.origin != NULL ? &u->t : NULL;
}

/* ---- HTTP/1.1: parked connections, newest last ---- */

/* A parked connection of the origin became readable: closed by its peer. */
static void on_parked_readable(void *arg, h1conn_t *c)
{
    netpool_origin_t *o = arg;

    for (size_t i = 0; i < o->_n_parked; i++)
        if (o->_parked[i].c == c) {
            memmove(o->_parked + i, o->_parked + i + 1,
                    (o->_n_parked - i - 1) * sizeof(*o->_parked));
            o->_n_parked--;
            break;
        }
    h1conn_free(c);
}

h1conn_t *netpool_h1_new(netpool_origin_t *o, int fd, SSL *ssl)
{
    return h1conn_new(o->_pool->base, fd, ssl, on_parked_readable, o);
}

void netpool_h1_park(netpool_origin_t *o, h1conn_t *c)
{
    if (o->_n_parked == o->_cap_parked) {
        size_t cap = o->_cap_parked ? 2 * o->_cap_parked : 4;
        struct netpool_parked *parked;
        if (cap > PARKED_MAX || (parked = realloc(o->_parked, cap * sizeof(*parked))) == NULL) {
            h1conn_free(c);
            return;
        }
        o->_parked = parked;
        o->_cap_parked = cap;
    }
    h1conn_park(c);
    o->_parked[o->_n_parked].c = c;
    o->_parked[o->_n_parked++].since = clock_coarse_ms();
}

h1conn_t *netpool_h1_take(netpool_origin_t *o)
{
    int64_t now = clock_coarse_ms();

    while (o->_n_parked > 0) {
        struct netpool_parked *newest = &o->_parked[--o->_n_parked];
        if (now - newest->since <= IDLE_MAX_MS)
            return newest->c;
        h1conn_free(newest->c); /* and the older ones before it, one by one */
    }
    return NULL;
}

/* ---- HTTP/2 ----
 *
 * An origin's HTTP/2 connections each carry up to as many streams at once as the platform
 * allows (H2CONN_STREAMS_MAX at most); a call goes on the first that takes one, and a new
 * connection is made only when none does. */

static void h2_forget(netpool_origin_t *o, h2conn_t *c)
{
    for (size_t i = 0; i < o->_n_h2; i++)
        if (o->_h2[i] == c) {
            o->_h2[i] = o->_h2[--o->_n_h2];
            return;
        }
}

/* A connection of o ended and every stream's end was handed up. */
static void on_h2_gone(void *arg, h2conn_t *c)
{
    h2_forget(arg, c);
    h2conn_free(c);
}

int netpool_h2_allows_none(const netpool_origin_t *o)
{
    for (size_t i = 0; i < o->_n_h2; i++)
        if (h2conn_allows_none(o->_h2[i]))
            return 1;
    return 0;
}

void netpool_h2_close(netpool_origin_t *o, h2conn_t *c)
{
    h2_forget(o, c);
    h2conn_free(c);
}

h2conn_t *netpool_h2_pick(netpool_origin_t *o)
{
    int64_t now = clock_coarse_ms();

    for (size_t i = 0; i < o->_n_h2;) {
        h2conn_t *c = o->_h2[i];
        int64_t idle = h2conn_idle_since(c);
        if (idle != 0 && now - idle > IDLE_MAX_MS) {
            o->_h2[i] = o->_h2[--o->_n_h2];
            h2conn_free(c);
            continue;
        }
        if (h2conn_takes(c))
            return c;
        i++;
    }
    return NULL;
}

h2conn_t *netpool_h2_add(netpool_origin_t *o)
{
    h2conn_t *c;

    if (o->_n_h2 == o->_cap_h2) {
        size_t cap = o->_cap_h2 ? 2 * o->_cap_h2 : 4;
        h2conn_t **h2 = realloc(o->_h2, cap * sizeof(*h2));
        if (h2 == NULL)
            return NULL;
        o->_h2 = h2;
        o->_cap_h2 = cap;
    }
    /* a new connection sends at most as many streams as the platform allowed on the others,
     * rather than having them refused before its own SETTINGS come */
    if ((c = h2conn_new(o->_pool->base, o->h2_streams > 0 ? (uint32_t)o->h2_streams : 0, on_h2_gone,
                        o)) != NULL)
        o->_h2[o->_n_h2++] = c;
    return c;
}

void netpool_h2_fall_back(netpool_origin_t *o, h2conn_t *c)
{
    SSL *ssl = NULL;
    int fd = h2conn_take_socket(c, &ssl);
    h1conn_t *h1;

    if (fd < 0 || (h1 = netpool_h1_new(o, fd, ssl)) == NULL)
        return; /* h1conn_new closed both */
    h1conn_shaken(h1);
    netpool_h1_park(o, h1);
}
