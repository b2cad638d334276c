/* netcurl.c - see netcurl.h. The model is curl's docs/examples/hiperfifo.c: one libevent event
 * per socket, kept while curl's wish for it stays the same and while its connection waits in the
 * pool between calls (parked), so that a kept-alive connection costs no epoll_ctl per request.
 * Easy handles and job records are reused.
 *
 * Jobs are spread over several multi handles ("shards") of at most SHARD_XFERS each: libcurl
 * 7.88 walks its whole connection cache when a finished handle is removed and the host's
 * connections when it looks for one to reuse, so one multi handle with 5000 connections spends
 * most of its time in those walks. A shard keeps them short; under light load everything runs on
 * the first shard and reuses its connections. */
#include "netcurl.h"

#include "neterr.h"
#include "netguard.h"

#include "../core/clock.h"
#include "../core/hash.h"

#include <curl/curl.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define SHARD_XFERS 128 /* jobs in flight per multi handle before the next one is used */
#define SHARDS_MAX  64
#define URL_SLOTS   64 /* parsed URLs kept per client */
#define SPARE_EASY  16 /* easy handles kept for the next connects of botgate's own HTTP */
/* The header line of a JSON body (adapters' usual one): its calls share one list. */
#define JSON_TYPE "Content-Type: application/json"

typedef struct shard shard_t;

/* A URL parsed for CURLOPT_CURLU, kept for the next calls to the same URL. Owned by its
 * netcurl_t (urls, by hash of the text); its jobs in flight hold a reference each, as curl may
 * read it until the job ends. */
typedef struct url_slot {
    char *text;    /* owned; NULL when the slot holds nothing */
    CURLU *parsed; /* owned */
    unsigned refs;
} url_slot_t;

/* Owned by its netcurl_t (socks, by descriptor): created on curl's first wish for a socket,
 * freed on CURL_POLL_REMOVE, or, when parked, when curl closes the socket. What curl wished last
 * is in the event's flags, and one socket per call waits at a time. */
typedef struct curl_sock {
    struct event ev;
    shard_t *sh;
    /* Curl let the socket go (CURL_POLL_REMOVE) when its connection went back to the pool, and
     * wants it again for the next call on that connection: the event stays registered
     * meanwhile, so that a kept-alive connection costs no epoll_ctl per call (see can_park). */
    int parked;
} curl_sock_t;

/* Owned by netcurl_t: in flight from netcurl_start or netcurl_dial until its callback or
 * cancel, then kept on the free list, with its easy handle when it carried a call. */
struct netcurl_job {
    netcurl_t *nc;
    shard_t *shard; /* the multi handle it runs on, while in flight */
    CURL *easy;
    struct curl_slist *headers; /* owned, unless it is nc->json_headers */
    url_slot_t *url;            /* the parsed URL curl was given, while in flight; or NULL */
    char *body;                 /* the request body, owned */
    net_cb *cb;                 /* a call's */
    netcurl_dial_cb *dialed;    /* a connect's */
    void *arg;
    char *buf; /* the answer body */
    size_t len, cap, max;
    char retry_after[32];
    long hop;      /* redirects followed at the last pre-request check, -1 before it */
    long hop_sent; /* request bytes curl had counted when this hop's first attempt began */
    unsigned flags;
    /* as bits: a record per call in flight, thousands at once (bench/README.md) */
    unsigned has_retry_after : 1, blocked : 1, too_large : 1;
    unsigned resend_refused : 1; /* curl wanted to send the request again after it went out */
    netcurl_job_t *next;         /* free list */
};

/* Owned by its netcurl_t. */
struct shard {
    netcurl_t *nc;
    CURLM *multi;
    struct event *timer;
    size_t in_flight;
    int in_curl; /* inside curl_multi_socket_action, called from on_sock_event or on_curl_timeout */
};

/* Owned by its client (net.c). */
struct netcurl {
    struct event_base *base;
    net_config_t cfg;
    shard_t *shards[SHARDS_MAX];
    int n_shards;
    netcurl_job_t *spare;
    int proxy_env;                   /* the environment names a proxy: let curl use it */
    struct curl_slist *json_headers; /* the usual list, shared: JSON content type, no Expect */
    CURLSH *share;                   /* TLS sessions and DNS answers of all its jobs */
    curl_sock_t **socks;             /* by descriptor: the sockets curl gave us, parked ones too */
    int n_socks;
    url_slot_t urls[URL_SLOTS];
    CURL *spare_easy[SPARE_EASY];
    int n_spare_easy;
    curl_socket_t adopting; /* the socket curl connected for a dial, while curl lets it go */
    int adopted;            /* curl "closed" it meanwhile, leaving it open for us */
};

static void check_done(shard_t *sh);

/* Lets curl act on a socket (or on its timeout), then hands up what it finished. */
static void multi_act(shard_t *sh, curl_socket_t fd, int action)
{
    int running;

    sh->in_curl = 1;
    curl_multi_socket_action(sh->multi, fd, action, &running);
    sh->in_curl = 0;
    check_done(sh);
}

static void on_sock_event(evutil_socket_t fd, short what, void *arg)
{
    curl_sock_t *sk = arg;
    int action = 0;

    if (sk->parked) {
        /* an idle connection became readable: the peer closed it (or sent what nobody asked
         * for). Curl finds it dead before it reuses it; until then the event is off, or it
         * would wake the loop on every turn. */
        event_del(&sk->ev);
        return;
    }
    if (what & EV_READ)
        action |= CURL_CSELECT_IN;
    if (what & EV_WRITE)
        action |= CURL_CSELECT_OUT;
    multi_act(sk->sh, fd, action); /* may free sk */
}

static void on_curl_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    multi_act(arg, CURL_SOCKET_TIMEOUT, 0);
}

static void sock_free(netcurl_t *nc, curl_socket_t s, curl_sock_t *sk)
{
    event_del(&sk->ev);
    if (s >= 0 && s < nc->n_socks && nc->socks[s] == sk)
        nc->socks[s] = NULL;
    free(sk);
}

/* Whether a socket curl lets go may stay registered until curl wants it again. Only the socket
 * of a connection going back to the pool after an answer, which curl closes through
 * on_close_socket: such a transfer has an HTTP status, and waited only to read. Curl's other
 * sockets (the threaded resolver's wake-up pipe, read-only too) are closed by curl itself,
 * unseen: an event left on one would make libevent believe a later socket of the same number
 * is already registered. A redirect's next hop resolves after the first hop's status, so
 * transfers that follow redirects never park. */
static int can_park(CURL *easy, const curl_sock_t *sk)
{
    netcurl_job_t *x = NULL;
    long status = 0;

    if (easy == NULL || (event_get_events(&sk->ev) & (EV_READ | EV_WRITE)) != EV_READ)
        return 0;
    if (curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x) != CURLE_OK || x == NULL ||
        (x->flags & NET_FOLLOW))
        return 0;
    return curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status > 0;
}

/* Remembers sk as the socket s, for when curl gives s back (parked) or closes it. */
static int sock_keep(netcurl_t *nc, curl_socket_t s, curl_sock_t *sk)
{
    if (s >= nc->n_socks) {
        int n = nc->n_socks ? nc->n_socks : 64;
        curl_sock_t **socks;
        while (n <= s)
            n *= 2;
        if ((socks = realloc(nc->socks, (size_t)n * sizeof(*socks))) == NULL)
            return -1;
        memset(socks + nc->n_socks, 0, (size_t)(n - nc->n_socks) * sizeof(*socks));
        nc->socks = socks;
        nc->n_socks = n;
    }
    nc->socks[s] = sk;
    return 0;
}

/* curl's socket callback: never returns -1 (that would abort every transfer). */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    shard_t *sh = userp;
    netcurl_t *nc = sh->nc;
    curl_sock_t *sk = socketp;
    short kind;

    if (what == CURL_POLL_REMOVE) {
        if (sk != NULL && can_park(easy, sk))
            sk->parked = 1;
        else if (sk != NULL)
            sock_free(nc, s, sk);
        return 0;
    }
    kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
           ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    if (sk == NULL && s >= 0 && s < nc->n_socks && nc->socks[s] != NULL) {
        sk = nc->socks[s]; /* a parked connection's socket, back in use */
        sk->parked = 0;
        curl_multi_assign(sh->multi, s, sk);
        if (sk->sh == sh && event_get_events(&sk->ev) == kind &&
            event_pending(&sk->ev, EV_READ | EV_WRITE, NULL))
            return 0; /* registered as curl wants it: no epoll_ctl */
        event_del(&sk->ev);
    } else if (sk == NULL) {
        if ((sk = calloc(1, sizeof(*sk))) == NULL)
            return 0;
        if (sock_keep(nc, s, sk) < 0) {
            free(sk);
            return 0;
        }
        curl_multi_assign(sh->multi, s, sk);
    } else if (event_get_events(&sk->ev) == kind) {
        return 0; /* unchanged: keep the event as it is */
    } else {
        event_del(&sk->ev); /* event_assign on a pending event corrupts libevent */
    }
    sk->sh = sh;
    event_assign(&sk->ev, nc->base, s, kind, on_sock_event, sk);
    event_add(&sk->ev, NULL);
    return 0;
}

/* Curl closes a connection's socket: a parked event goes first, while the descriptor is still
 * this socket's. */
static int on_close_socket(void *arg, curl_socket_t s)
{
    netcurl_t *nc = arg;

    if (s >= 0 && s < nc->n_socks && nc->socks[s] != NULL)
        sock_free(nc, s, nc->socks[s]);
    if (s == nc->adopting) {
        nc->adopted = 1; /* ours now: h1conn closes it */
        return 0;
    }
    return close(s);
}

/* curl's timer callback: only arms a libevent timer, never calls curl itself. "Now" for a
 * new transfer makes the timer active at once, so that curl runs at the end of this loop
 * iteration, after the callbacks already due, instead of in the next one: one pass of
 * epoll_wait less between a request's Redis answer and its platform call. Asked from inside
 * curl's own run, "now" waits for the next iteration as before, so that a transfer that
 * keeps asking cannot keep the loop from polling its sockets. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    shard_t *sh = userp;
    struct timeval tv;

    (void)multi;
    if (timeout_ms < 0) {
        event_del(sh->timer);
        return 0;
    }
    if (timeout_ms == 0 && !sh->in_curl) {
        event_del(sh->timer);
        event_active(sh->timer, EV_TIMEOUT, 0);
        return 0;
    }
    tv = clock_ms_timeval(timeout_ms);
    event_add(sh->timer, &tv);
    return 0;
}

static size_t on_curl_body(char *data, size_t size, size_t n, void *arg)
{
    netcurl_job_t *x = arg;
    size_t bytes = size * n;

    if (x->len + bytes > x->max) {
        x->too_large = 1;
        return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
    }
    if (x->len + bytes + 1 > x->cap) {
        /* from 256 bytes: a platform's usual answer is a hundred or two, and the buffer stays
         * with the transfer record, one per send in flight */
        size_t cap = x->cap ? x->cap : 256;
        char *buf;
        while (cap < x->len + bytes + 1)
            cap *= 2;
        if ((buf = realloc(x->buf, cap)) == NULL)
            return 0;
        x->buf = buf;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, data, bytes);
    x->len += bytes;
    return bytes;
}

static size_t on_curl_header(char *line, size_t size, size_t n, void *arg)
{
    netcurl_job_t *x = arg;
    size_t bytes = size * n, vlen;

    /* A new status line (redirect, 100 Continue) starts a new header block. */
    if (bytes > 5 && strncmp(line, "HTTP/", 5) == 0)
        x->has_retry_after = 0;
    if (bytes > 12 && strncasecmp(line, "Retry-After:", 12) == 0) {
        const char *v = line + 12;
        while (v < line + bytes && (*v == ' ' || *v == '\t'))
            v++;
        vlen = (size_t)(line + bytes - v);
        while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
            vlen--;
        if (vlen < sizeof(x->retry_after)) {
            memcpy(x->retry_after, v, vlen);
            x->retry_after[vlen] = '\0';
            x->has_retry_after = 1;
        }
    }
    return bytes;
}

static curl_socket_t open_socket(netcurl_t *nc, const struct curl_sockaddr *addr)
{
    curl_socket_t s = socket(addr->family, addr->socktype, addr->protocol);

    /* A record under this number would be of a socket curl closed without telling: never
     * take it for this one. */
    if (s >= 0 && s < nc->n_socks && nc->socks[s] != NULL)
        sock_free(nc, s, nc->socks[s]);
    return s;
}

static curl_socket_t on_open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    netcurl_job_t *x = arg;

    (void)purpose;
    return open_socket(x->nc, addr);
}

static curl_socket_t on_open_guarded(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    netcurl_job_t *x = arg;

    (void)purpose;
    if (netguard_blocked(&addr->addr)) {
        x->blocked = 1;
        return CURL_SOCKET_BAD;
    }
    return open_socket(x->nc, addr);
}

/* Called before each attempt of a request, once the connection (and a proxy's CONNECT) is up.
 * libcurl 7.88 sends a request again, up to five times, when a reused connection dies before
 * the answer starts ("Connection died, retrying a fresh connect"), even when the request went
 * out whole: the platform may have received it, and a second attempt would deliver the message
 * twice. Request bytes written since this hop's first attempt began mean exactly that: the
 * attempt is refused.
 *
 * curl's request size adds up over the whole transfer: every redirect hop's request and every
 * proxy CONNECT (lib/http_proxy.c) count in it, and only curl_multi_add_handle resets it. A
 * followed redirect raises the redirect count (Curl_follow, FOLLOW_REDIR) and a resend does
 * not (FOLLOW_RETRY), so a changed count starts a new hop whose bytes so far are the baseline.
 * A resend on a new connection through a proxy counts that connection's CONNECT too: such an
 * attempt is refused even when nothing of the request had gone out, never sent twice. */
static int on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    netcurl_job_t *x = arg;
    long sent = 0, hop = 0;

    (void)primary_ip;
    (void)local_ip;
    (void)primary_port;
    (void)local_port;
    curl_easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &sent);
    curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_COUNT, &hop);
    if (hop != x->hop) {
        x->hop = hop;
        x->hop_sent = sent;
        return CURL_PREREQFUNC_OK;
    }
    if (sent > x->hop_sent) {
        x->resend_refused = 1;
        return CURL_PREREQFUNC_ABORT;
    }
    return CURL_PREREQFUNC_OK;
}

static CURL *easy_new(netcurl_t *nc, netcurl_job_t *x)
{
    CURL *e = curl_easy_init();

    if (e == NULL)
        return NULL;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_curl_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_curl_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 3L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    /* curl allocates this receive buffer for every transfer in flight: 16 KiB by default,
     * far more than a platform's answer needs when thousands wait at once. */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, nc->cfg.buffer_size > 0 ? nc->cfg.buffer_size : 16384L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, nc);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
    /* Without a share every easy handle gets its own TLS session cache, allocated on its
     * first transfer even for plain HTTP (about 900 bytes per handle, and there is a handle
     * per transfer in flight), and a new connection resumes a TLS session only when the
     * handle that happens to open it made one before. The share holds one cache for all. */
    curl_easy_setopt(e, CURLOPT_SHARE, nc->share);
    if (nc->cfg.ca_file != NULL && nc->cfg.ca_file[0] != '\0')
        curl_easy_setopt(e, CURLOPT_CAINFO, nc->cfg.ca_file);
    if (nc->cfg.http1)
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    /* Platform calls use the proxy the environment names. URLs users give never do: the SSRF
     * guard would see the proxy's address instead of the one the proxy then reaches, and a
     * proxy would fetch cloud metadata for anyone who asks. Without proxy variables, tell
     * curl so: it would otherwise read them and parse the URL for them on every transfer.
     * An empty no-proxy list too: without one, libcurl 7.88 reads no_proxy and NO_PROXY from
     * the environment on every transfer (a walk of the whole environment each, which a
     * container's injected service variables make long), only to find there is no proxy to
     * skip. With a proxy in use, NO_PROXY is left for curl to read, as the user set it. */
    if (!nc->proxy_env || nc->cfg.direct) {
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    }
    return e;
}

/* An easy handle for x: a spare one made over to x, or a new one. A call over botgate's own
 * HTTP needs one only while curl connects its socket, and gives it back then (easy_give):
 * thousands of sends in flight on kept-alive connections hold no easy handle (5 KiB each). */
static CURL *easy_take(netcurl_t *nc, netcurl_job_t *x)
{
    CURL *e = nc->spare_easy[nc->n_spare_easy > 0 ? nc->n_spare_easy - 1 : 0];

    if (nc->n_spare_easy == 0)
        return easy_new(nc, x);
    nc->n_spare_easy--;
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
    return e;
}

static void easy_give(netcurl_t *nc, netcurl_job_t *x)
{
    if (nc->n_spare_easy < SPARE_EASY)
        nc->spare_easy[nc->n_spare_easy++] = x->easy;
    else
        curl_easy_cleanup(x->easy);
    x->easy = NULL;
}

static void shard_free(shard_t *sh)
{
    if (sh == NULL)
        return;
    if (sh->multi != NULL)
        curl_multi_cleanup(sh->multi);
    if (sh->timer != NULL)
        event_free(sh->timer);
    free(sh);
}

static shard_t *shard_new(netcurl_t *nc)
{
    shard_t *sh = calloc(1, sizeof(*sh));

    if (sh == NULL)
        return NULL;
    sh->nc = nc;
    sh->multi = curl_multi_init();
    sh->timer = evtimer_new(nc->base, on_curl_timeout, sh);
    if (sh->multi == NULL || sh->timer == NULL) {
        shard_free(sh);
        return NULL;
    }
    curl_multi_setopt(sh->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(sh->multi, CURLMOPT_SOCKETDATA, sh);
    curl_multi_setopt(sh->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(sh->multi, CURLMOPT_TIMERDATA, sh);
    /* idle connections kept for reuse; a little more than the shard runs at once */
    curl_multi_setopt(sh->multi, CURLMOPT_MAXCONNECTS, (long)(SHARD_XFERS * 2));
    /* HTTP/2: a shard's transfers fit on one connection when the platform allows as many
     * streams (curl's own limit is 100). libcurl 7.88 gives every transfer past a full
     * connection a new one while the next is still connecting, one per transfer. */
    curl_multi_setopt(sh->multi, CURLMOPT_MAX_CONCURRENT_STREAMS, (long)SHARD_XFERS);
    return sh;
}

/* The first shard with room, so that light load stays on one connection pool; a new shard
 * when all are full; the least busy one past SHARDS_MAX. */
static shard_t *pick_shard(netcurl_t *nc)
{
    shard_t *least = NULL;

    for (int i = 0; i < nc->n_shards; i++) {
        shard_t *sh = nc->shards[i];
        if (sh->in_flight < SHARD_XFERS)
            return sh;
        if (least == NULL || sh->in_flight < least->in_flight)
            least = sh;
    }
    if (nc->n_shards < SHARDS_MAX) {
        shard_t *sh = shard_new(nc);
        if (sh != NULL) {
            nc->shards[nc->n_shards++] = sh;
            return sh;
        }
    }
    return least;
}

static const char *const proxy_vars[] = {"http_proxy",  "HTTP_PROXY", "https_proxy",
                                         "HTTPS_PROXY", "all_proxy",  "ALL_PROXY"};
netcurl_t *netcurl_new(struct event_base *base, const net_config_t *cfg)
{
    netcurl_t *nc = calloc(1, sizeof(*nc));

    if (nc == NULL)
        return NULL;
    nc->base = base;
    nc->cfg = *cfg;
    for (size_t i = 0; i < sizeof(proxy_vars) / sizeof(proxy_vars[0]); i++)
        if (getenv(proxy_vars[i]) != NULL && getenv(proxy_vars[i])[0] != '\0')
            nc->proxy_env = 1;
    nc->adopting = CURL_SOCKET_BAD;
    if ((nc->json_headers = curl_slist_append(NULL, JSON_TYPE)) != NULL &&
        (curl_slist_append(nc->json_headers, "Expect:") == NULL ||
         curl_slist_append(nc->json_headers, NET_USER_AGENT) == NULL)) {
        curl_slist_free_all(nc->json_headers);
        nc->json_headers = NULL;
    }
    /* Only this worker's thread uses the share: no lock callbacks. */
    if ((nc->share = curl_share_init()) != NULL &&
        (curl_share_setopt(nc->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK ||
         curl_share_setopt(nc->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK)) {
        curl_share_cleanup(nc->share);
        nc->share = NULL;
    }
    if (nc->json_headers == NULL || nc->share == NULL || pick_shard(nc) == NULL) {
        netcurl_free(nc);
        return NULL;
    }
    return nc;
}

void netcurl_free(netcurl_t *nc)
{
    netcurl_job_t *x;

    if (nc == NULL)
        return;
    while ((x = nc->spare) != NULL) {
        nc->spare = x->next;
        if (x->easy != NULL)
            curl_easy_cleanup(x->easy);
        free(x->buf);
        free(x);
    }
    while (nc->n_spare_easy > 0)
        curl_easy_cleanup(nc->spare_easy[--nc->n_spare_easy]);
    for (int i = 0; i < nc->n_shards; i++)
        shard_free(nc->shards[i]); /* closes the pool's connections: on_close_socket */
    for (int s = 0; s < nc->n_socks; s++)
        if (nc->socks[s] != NULL)
            sock_free(nc, s, nc->socks[s]); /* curl leaked it, or never told of its close */
    free(nc->socks);
    if (nc->share != NULL)
        curl_share_cleanup(nc->share); /* after every easy handle that used it */
    for (int i = 0; i < URL_SLOTS; i++) {
        curl_url_cleanup(nc->urls[i].parsed); /* after the easy handles that point to them */
        free(nc->urls[i].text);
    }
    curl_slist_free_all(nc->json_headers);
    free(nc);
}

int netcurl_proxied(const netcurl_t *nc)
{
    return nc->proxy_env && !nc->cfg.direct;
}

void netcurl_ca_bundle(char *buf, size_t size)
{
    CURL *e = curl_easy_init();
    char *cainfo = NULL;

    buf[0] = '\0';
    if (e == NULL)
        return;
    if (curl_easy_getinfo(e, CURLINFO_CAINFO, &cainfo) == CURLE_OK && cainfo != NULL)
        snprintf(buf, size, "%s", cainfo);
    curl_easy_cleanup(e);
}

/* A job record, its flags clear; NULL when out of memory. */
static netcurl_job_t *job_take(netcurl_t *nc)
{
    netcurl_job_t *x = nc->spare;

    if (x != NULL) {
        nc->spare = x->next;
    } else {
        if ((x = calloc(1, sizeof(*x))) == NULL)
            return NULL;
        x->nc = nc;
    }
    x->len = 0;
    x->blocked = x->too_large = x->has_retry_after = x->resend_refused = 0;
    x->hop = -1;
    x->hop_sent = 0;
    return x;
}

/* Back to the free list, with its easy handle (a call's), without what the call held. */
static void job_release(netcurl_job_t *x)
{
    netcurl_t *nc = x->nc;

    if (x->shard != NULL)
        x->shard->in_flight--;
    x->shard = NULL;
    if (x->headers != nc->json_headers)
        curl_slist_free_all(x->headers);
    x->headers = NULL;
    if (x->url != NULL)
        x->url->refs--;
    x->url = NULL;
    free(x->body);
    x->body = NULL;
    x->cb = NULL;
    x->dialed = NULL;
    x->len = 0;
    /* The answer buffer goes with the answer: a call that waits for its platform holds none
     * (thousands wait at once), and a media answer's megabytes are not kept. */
    free(x->buf);
    x->buf = NULL;
    x->cap = 0;
    x->next = nc->spare;
    nc->spare = x;
}

/* The slot of a URL, parsed for CURLOPT_CURLU, held by x until it ends; NULL when a slot held by
 * another URL's jobs leaves the call to curl's own parse.
 *
 * Given only CURLOPT_URL, libcurl 7.88 parses the URL on every transfer and then prints it back
 * into a normalized string (curl_url_set, then curl_url_get with its printf engine: about
 * 17,000 instructions of a call's 80,000 in curl). Given both, it copies the parsed URL instead
 * and keeps CURLOPT_URL's text as the transfer's URL; a redirect's target is parsed as before.
 * A parse is kept for the next calls to the same URL, shared by all the jobs in flight to it: a
 * copy per job would cost a few hundred bytes per send in flight. */
static CURLU *parsed_url(netcurl_t *nc, netcurl_job_t *x, const char *url)
{
    size_t len = strlen(url), tail = len < 24 ? len : 24;
    /* the slot by the URL's end, where calls to one platform differ (the token, the page) */
    url_slot_t *u = &nc->urls[(hash_fnv1a(url + len - tail, tail) ^ len) % URL_SLOTS];

    if (u->text == NULL || strcmp(u->text, url) != 0) {
        if (u->refs > 0)
            return NULL;
        free(u->text);
        u->text = NULL;
        if (u->parsed == NULL && (u->parsed = curl_url()) == NULL)
            return NULL;
        /* the flags curl itself parses a URL of CURLOPT_URL with (lib/url.c) */
        if (curl_url_set(u->parsed, CURLUPART_URL, url,
                         CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
            (u->text = malloc(len + 1)) == NULL)
            return NULL;
        memcpy(u->text, url, len + 1);
    }
    u->refs++;
    x->url = u;
    return u->parsed;
}

netcurl_job_t *netcurl_start(netcurl_t *nc, net_request_t *req, net_cb *cb, void *arg)
{
    netcurl_job_t *x = job_take(nc);
    const char *const *lines = req->headers;
    CURL *e;

    if (x == NULL) {
        free(req->body);
        req->body = NULL;
        return NULL;
    }
    x->body = req->body;
    req->body = NULL;
    x->cb = cb;
    x->arg = arg;
    x->max = req->max_answer;
    x->flags = req->flags;
    if (x->easy == NULL)
        x->easy = easy_take(nc, x);
    e = x->easy;
    if (e == NULL || (x->shard = pick_shard(nc)) == NULL) {
        job_release(x);
        return NULL;
    }
    x->shard->in_flight++;
    if (lines != NULL && lines[0] != NULL && strcmp(lines[0], JSON_TYPE) == 0 && lines[1] == NULL) {
        x->headers = nc->json_headers; /* most calls: five allocations fewer */
    } else {
        for (int i = 0; lines != NULL && lines[i] != NULL; i++)
            x->headers = curl_slist_append(x->headers, lines[i]);
        /* No "Expect: 100-continue" round trip for larger bodies. */
        x->headers = curl_slist_append(x->headers, "Expect:");
        x->headers = curl_slist_append(x->headers, NET_USER_AGENT);
    }
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_CURLU, parsed_url(nc, x, req->url));
    /* Platforms that speak HTTP/2 (over TLS) get one connection for a shard's calls: calls
     * started before the first connection knows whether it multiplexes wait for it (ALPN tells
     * at the end of the handshake) instead of each opening a TLS connection of its own. Not over
     * cleartext: there curl learns that a host does not multiplex only from its first answer,
     * and every call would wait for that. */
    curl_easy_setopt(e, CURLOPT_PIPEWAIT,
                     !nc->cfg.http1 && strncasecmp(req->url, "https:", 6) == 0 ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    if (strcmp(req->method, "GET") == 0) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)(x->body ? req->body_len : 0));
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body ? x->body : "");
        if (strcmp(req->method, "POST") != 0)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
        else
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
    }
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, req->timeout_ms > 0 ? req->timeout_ms : 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, (req->flags & NET_FOLLOW) ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION,
                     nc->cfg.guard ? on_open_guarded : on_open_socket);
    if (curl_multi_add_handle(x->shard->multi, e) != CURLM_OK) {
        job_release(x);
        return NULL;
    }
    return x;
}

netcurl_job_t *netcurl_dial(netcurl_t *nc, const char *key, long timeout_ms, netcurl_dial_cb *cb,
                            void *arg)
{
    netcurl_job_t *x = job_take(nc);
    size_t klen = strlen(key);
    char url[300];
    CURL *e;

    if (x == NULL)
        return NULL;
    x->dialed = cb;
    x->arg = arg;
    x->flags = 0;
    if (x->easy == NULL)
        x->easy = easy_take(nc, x);
    e = x->easy;
    if (e == NULL || klen + 9 > sizeof(url) || (x->shard = pick_shard(nc)) == NULL) {
        job_release(x);
        return NULL;
    }
    x->shard->in_flight++;
    memcpy(url, "http://", 7);
    memcpy(url + 7, key, klen);
    memcpy(url + 7 + klen, "/", 2);
    curl_easy_setopt(e, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(e, CURLOPT_CURLU, NULL);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, 0L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    if (curl_multi_add_handle(x->shard->multi, e) != CURLM_OK) {
        curl_easy_setopt(e, CURLOPT_CONNECT_ONLY, 0L);
        easy_give(nc, x);
        job_release(x);
        return NULL;
    }
    return x;
}

void netcurl_cancel(netcurl_job_t *x)
{
    if (x == NULL)
        return;
    if (x->shard != NULL)
        curl_multi_remove_handle(x->shard->multi, x->easy);
    if (x->dialed != NULL) {
        curl_easy_setopt(x->easy, CURLOPT_CONNECT_ONLY, 0L);
        easy_give(x->nc, x);
    }
    job_release(x);
}

/* A curl failure in net/'s words; the job's own flags first. */
static net_err_t err_of(const netcurl_job_t *x, CURLcode code)
{
    if (x->blocked)
        return NET_ERR_BLOCKED;
    if (x->resend_refused)
        return NET_ERR_MAYBE_RECEIVED;
    if (x->too_large)
        return NET_ERR_TOO_LARGE;
    switch (code) {
    case CURLE_OK:
        return NET_OK;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return NET_ERR_DNS;
    case CURLE_COULDNT_CONNECT:
        return NET_ERR_CONNECT;
    case CURLE_OPERATION_TIMEDOUT:
        return NET_ERR_TIMEOUT;
    case CURLE_PEER_FAILED_VERIFICATION:
        return NET_ERR_CERT;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
        return NET_ERR_TLS;
    case CURLE_SEND_ERROR:
        return NET_ERR_SEND;
    case CURLE_GOT_NOTHING:
        return NET_ERR_NO_ANSWER;
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
        return NET_ERR_RECV;
    case CURLE_HTTP2_STREAM:
        return NET_ERR_RESET;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_BAD_CONTENT_ENCODING:
        return NET_ERR_PROTOCOL;
    case CURLE_TOO_MANY_REDIRECTS:
        return NET_ERR_REDIRECTS;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return NET_ERR_URL;
    case CURLE_OUT_OF_MEMORY:
    case CURLE_WRITE_ERROR: /* on_curl_body found no memory */
        return NET_ERR_NOMEM;
    default:
        return NET_ERR_OTHER;
    }
}

/* What went wrong, from what curl tells of the job afterwards. Not curl's error buffer: that is
 * 256 bytes held by every job in flight, thousands at once, for the few that fail. Nothing of
 * the URL or the address either: it goes into answers, and a platform URL may hold an access
 * token, a user's media URL may resolve to an address of our network. */
static const char *describe(netcurl_job_t *x, CURLcode code, long long total_us, char *buf,
                            size_t size)
{
    const char *cert = "";
    long os_errno = 0, verify = X509_V_OK;

    if (x->blocked)
        return NETERR_BLOCKED;
    if (x->resend_refused)
        return NETERR_MAYBE_RECEIVED;
    if (x->too_large)
        return NETERR_TOO_LARGE;
    if (code == CURLE_OK)
        return "";
    if (code == CURLE_PEER_FAILED_VERIFICATION &&
        curl_easy_getinfo(x->easy, CURLINFO_SSL_VERIFYRESULT, &verify) == CURLE_OK &&
        verify != X509_V_OK)
        cert = X509_verify_cert_error_string(verify);
    if (curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK)
        os_errno = 0;
    return neterr_format(buf, size, curl_easy_strerror(code), cert, (int)os_errno, total_us);
}

/* A call ended: its answer, or why not, to its callback; then the job goes back. */
static void call_finish(netcurl_job_t *x, CURLcode code)
{
    net_answer_t ans;
    long status = 0;
    char *ctype = NULL;
    curl_off_t total_us = 0;
    char error[256];

    memset(&ans, 0, sizeof(ans));
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ctype);
    curl_easy_getinfo(x->easy, CURLINFO_TOTAL_TIME_T, &total_us);
    if (x->buf == NULL && (x->buf = malloc(1)) != NULL)
        x->cap = 1;
    if (x->buf != NULL)
        x->buf[x->len] = '\0';
    ans.err = err_of(x, code);
    ans.elapsed_us = (long long)total_us;
    ans.status = code == CURLE_OK ? status : 0;
    ans.body = x->buf ? x->buf : "";
    ans.body_len = code == CURLE_OK ? x->len : 0;
    ans.retry_after = x->has_retry_after ? x->retry_after : NULL;
    ans.content_type = ctype;
    ans.not_sent = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                   code == CURLE_COULDNT_RESOLVE_PROXY;
    ans.error = describe(x, code, (long long)total_us, error, sizeof(error));
    if (x->cb != NULL)
        x->cb(x->arg, &ans);
    job_release(x);
}

/* curl finished connecting a socket for a dial (CURLOPT_CONNECT_ONLY): it becomes the
 * callback's. Removing the handle makes curl 7.88 drop its connect-only connection, closing the
 * socket through on_close_socket, which leaves this one open. */
static void dial_finish(netcurl_job_t *x, CURLcode code)
{
    netcurl_t *nc = x->nc;
    netcurl_dial_cb *cb = x->dialed;
    void *arg = x->arg;
    curl_socket_t fd = CURL_SOCKET_BAD;
    netcurl_dialed_t d;
    long os_errno = 0;

    if (code == CURLE_OK &&
        (curl_easy_getinfo(x->easy, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK || fd < 0))
        fd = CURL_SOCKET_BAD;
    if (code != CURLE_OK && curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK)
        os_errno = 0;
    nc->adopting = fd;
    nc->adopted = 0;
    curl_multi_remove_handle(x->shard->multi, x->easy);
    curl_easy_setopt(x->easy, CURLOPT_CONNECT_ONLY, 0L);
    nc->adopting = CURL_SOCKET_BAD;
    /* curl kept the socket (a libcurl that no longer drops connect-only connections on
     * removal): a descriptor of our own, so that its close does not end ours */
    if (fd != CURL_SOCKET_BAD && !nc->adopted)
        fd = dup(fd);
    memset(&d, 0, sizeof(d));
    d.fd = fd;
    d.err = err_of(x, code);
    d.why = code != CURLE_OK ? curl_easy_strerror(code) : "";
    d.os_errno = (int)os_errno;
    d.not_sent = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                 code == CURLE_COULDNT_RESOLVE_PROXY;
    easy_give(nc, x);
    job_release(x);
    cb(arg, &d);
}

static void check_done(shard_t *sh)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(sh->multi, &left)) != NULL) {
        netcurl_job_t *x;
        CURLcode code;
        if (msg->msg != CURLMSG_DONE)
            continue;
        code = msg->data.result;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (x->dialed != NULL) {
            dial_finish(x, code);
            continue;
        }
        curl_multi_remove_handle(sh->multi, msg->easy_handle);
        call_finish(x, code);
    }
}
