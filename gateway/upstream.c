/* upstream.c - the curl multi client (model: curl's docs/examples/hiperfifo.c). One libevent
 * event per socket, kept while curl's wish for it stays the same and while its connection
 * waits in the pool between calls (parked), so that a kept-alive connection costs no epoll_ctl
 * per request. Easy handles and transfer records are reused.
 *
 * Transfers are spread over several multi handles ("shards") of at most SHARD_XFERS each:
 * libcurl 7.88 walks its whole connection cache when a finished handle is removed and the
 * host's connections when it looks for one to reuse, so one multi handle with 5000
 * connections spends most of its time in those walks. A shard keeps them short; under light
 * load everything runs on the first shard and reuses its connections. */
#include "upstream.h"

#include "../core/hash.h"
#include "../core/netguard.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define SHARD_XFERS 128 /* transfers in flight per multi handle before the next one is used */
#define SHARDS_MAX 64
#define URL_SLOTS   64 /* parsed URLs kept per worker */
/* A header line of the lists rather than CURLOPT_USERAGENT, which every easy handle would copy
 * and format again into a line of its own: two allocations per transfer in flight. */
#define USER_AGENT "User-Agent: botgate/1.0"

typedef struct upstream_shard upstream_shard_t;

/* A URL parsed for CURLOPT_CURLU, kept for the next calls to the same URL. Owned by its
 * upstream_t (urls, by hash of the text); its transfers in flight hold a reference each, as curl
 * may read it until the transfer ends. */
typedef struct upstream_url {
    char *text;    /* owned; NULL when the slot holds nothing */
    CURLU *parsed; /* owned */
    unsigned refs;
} upstream_url_t;

/* Owned by its upstream_t (socks, by descriptor): created on curl's first wish for a socket,
 * freed on CURL_POLL_REMOVE, or, when parked, when curl closes the socket. What curl wished last
 * is in the event's flags, and one socket per platform call waits at a time. */
typedef struct upstream_sock {
    struct event ev;
    upstream_shard_t *sh;
    /* Curl let the socket go (CURL_POLL_REMOVE) when its connection went back to the pool, and
     * wants it again for the next call on that connection: the event stays registered
     * meanwhile, so that a kept-alive connection costs no epoll_ctl per call (see park). */
    int parked;
} upstream_sock_t;

/* Owned by upstream_t: in flight from upstream_start until its callback or cancel, then kept
 * on the free list with its easy handle. */
struct upstream_xfer {
    upstream_t *up;
    upstream_shard_t *shard; /* the multi handle it runs on, while in flight */
    CURL *easy;
    struct curl_slist *headers; /* owned, unless it is up->json_headers */
    upstream_url_t *url;        /* the parsed URL curl was given, while in flight; or NULL */
    char *body;           /* the request body, owned */
    upstream_cb *cb;
    void *arg;
    char *buf;            /* the answer body */
    size_t len, cap, max;
    char retry_after[32];
    long hop;      /* redirects followed at the last pre-request check, -1 before it */
    long hop_sent; /* request bytes curl had counted when this hop's first attempt began */
    unsigned flags;
    /* as bits: a record per transfer in flight, thousands at once (bench/README.md) */
    unsigned has_retry_after : 1, blocked : 1, too_large : 1;
    unsigned resend_refused : 1; /* curl wanted to send the request again after it went out */
    upstream_xfer_t *next; /* free list */
};

/* Owned by its upstream_t. */
struct upstream_shard {
    upstream_t *up;
    CURLM *multi;
    struct event *timer;
    size_t in_flight;
    int in_curl; /* inside curl_multi_socket_action, called from on_event or on_curl_timeout */
};

/* Owned by its worker. */
struct upstream {
    struct event_base *base;
    upstream_config_t cfg;
    upstream_shard_t *shards[SHARDS_MAX];
    int n_shards;
    size_t in_flight;
    upstream_xfer_t *spare;
    int proxy_env; /* the environment names a proxy: let curl use it */
    struct curl_slist *json_headers; /* the usual list, shared: JSON content type, no Expect */
    CURLSH *share;                   /* TLS sessions and DNS answers of all its transfers */
    upstream_sock_t **socks;         /* by descriptor: the sockets curl gave us, parked ones too */
    int n_socks;
    upstream_url_t urls[URL_SLOTS];
};

static void check_done(upstream_shard_t *sh);

/* Lets curl act on a socket (or on its timeout), then hands up what it finished. */
static void multi_act(upstream_shard_t *sh, curl_socket_t fd, int action)
{
    int running;

    sh->in_curl = 1;
    curl_multi_socket_action(sh->multi, fd, action, &running);
    sh->in_curl = 0;
    check_done(sh);
}

static void on_event(evutil_socket_t fd, short what, void *arg)
{
    upstream_sock_t *sk = arg;
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

static void sock_free(upstream_t *up, curl_socket_t s, upstream_sock_t *sk)
{
    event_del(&sk->ev);
    if (s >= 0 && s < up->n_socks && up->socks[s] == sk)
        up->socks[s] = NULL;
    free(sk);
}

/* Whether a socket curl lets go may stay registered until curl wants it again. Only the socket
 * of a connection going back to the pool after an answer, which curl closes through
 * on_close_socket: such a transfer has an HTTP status, and waited only to read. Curl's other
 * sockets (the threaded resolver's wake-up pipe, read-only too) are closed by curl itself,
 * unseen: an event left on one would make libevent believe a later socket of the same number
 * is already registered. A redirect's next hop resolves after the first hop's status, so
 * transfers that follow redirects never park. */
static int can_park(CURL *easy, const upstream_sock_t *sk)
{
    upstream_xfer_t *x = NULL;
    long status = 0;

    if (easy == NULL || (event_get_events(&sk->ev) & (EV_READ | EV_WRITE)) != EV_READ)
        return 0;
    if (curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x) != CURLE_OK || x == NULL ||
        (x->flags & UPSTREAM_FOLLOW))
        return 0;
    return curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status > 0;
}

/* Remembers sk as the socket s, for when curl gives s back (parked) or closes it. */
static int sock_keep(upstream_t *up, curl_socket_t s, upstream_sock_t *sk)
{
    if (s >= up->n_socks) {
        int n = up->n_socks ? up->n_socks : 64;
        upstream_sock_t **socks;
        while (n <= s)
            n *= 2;
        if ((socks = realloc(up->socks, (size_t)n * sizeof(*socks))) == NULL)
            return -1;
        memset(socks + up->n_socks, 0, (size_t)(n - up->n_socks) * sizeof(*socks));
        up->socks = socks;
        up->n_socks = n;
    }
    up->socks[s] = sk;
    return 0;
}

/* curl's socket callback: never returns -1 (that would abort every transfer). */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    upstream_shard_t *sh = userp;
    upstream_t *up = sh->up;
    upstream_sock_t *sk = socketp;
    short kind;

    if (what == CURL_POLL_REMOVE) {
        if (sk != NULL && can_park(easy, sk))
            sk->parked = 1;
        else if (sk != NULL)
            sock_free(up, s, sk);
        return 0;
    }
    kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
           ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    if (sk == NULL && s >= 0 && s < up->n_socks && up->socks[s] != NULL) {
        sk = up->socks[s]; /* a parked connection's socket, back in use */
        sk->parked = 0;
        curl_multi_assign(sh->multi, s, sk);
        if (sk->sh == sh && event_get_events(&sk->ev) == kind &&
            event_pending(&sk->ev, EV_READ | EV_WRITE, NULL))
            return 0; /* registered as curl wants it: no epoll_ctl */
        event_del(&sk->ev);
    } else if (sk == NULL) {
        if ((sk = calloc(1, sizeof(*sk))) == NULL)
            return 0;
        if (sock_keep(up, s, sk) < 0) {
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
    event_assign(&sk->ev, up->base, s, kind, on_event, sk);
    event_add(&sk->ev, NULL);
    return 0;
}

/* Curl closes a connection's socket: a parked event goes first, while the descriptor is still
 * this socket's. */
static int on_close_socket(void *arg, curl_socket_t s)
{
    upstream_t *up = arg;

    if (s >= 0 && s < up->n_socks && up->socks[s] != NULL)
        sock_free(up, s, up->socks[s]);
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
    upstream_shard_t *sh = userp;
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
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    event_add(sh->timer, &tv);
    return 0;
}

static size_t on_write(char *data, size_t size, size_t n, void *arg)
{
    upstream_xfer_t *x = arg;
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

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
    upstream_xfer_t *x = arg;
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

static curl_socket_t open_socket(upstream_t *up, const struct curl_sockaddr *addr)
{
    curl_socket_t s = socket(addr->family, addr->socktype, addr->protocol);

    /* A record under this number would be of a socket curl closed without telling: never
     * take it for this one. */
    if (s >= 0 && s < up->n_socks && up->socks[s] != NULL)
        sock_free(up, s, up->socks[s]);
    return s;
}

static curl_socket_t on_open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    upstream_xfer_t *x = arg;

    (void)purpose;
    return open_socket(x->up, addr);
}

static curl_socket_t on_open_guarded(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    upstream_xfer_t *x = arg;

    (void)purpose;
    if (netguard_blocked(&addr->addr)) {
        x->blocked = 1;
        return CURL_SOCKET_BAD;
    }
    return open_socket(x->up, addr);
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
static int on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port,
                     int local_port)
{
    upstream_xfer_t *x = arg;
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

static CURL *easy_new(upstream_t *up, upstream_xfer_t *x)
{
    CURL *e = curl_easy_init();

    if (e == NULL)
        return NULL;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 3L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    /* curl allocates this receive buffer for every transfer in flight: 16 KiB by default,
     * far more than a platform's answer needs when thousands wait at once. */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, up->cfg.buffer_size > 0 ? up->cfg.buffer_size : 16384L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, up);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
    /* Without a share every easy handle gets its own TLS session cache, allocated on its
     * first transfer even for plain HTTP (about 900 bytes per handle, and there is a handle
     * per transfer in flight), and a new connection resumes a TLS session only when the
     * handle that happens to open it made one before. The share holds one cache for all. */
    curl_easy_setopt(e, CURLOPT_SHARE, up->share);
    if (up->cfg.ca_file != NULL && up->cfg.ca_file[0] != '\0')
        curl_easy_setopt(e, CURLOPT_CAINFO, up->cfg.ca_file);
    if (up->cfg.http1)
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    /* Platform calls use the proxy the environment names. URLs users give never do: the SSRF
     * guard would see the proxy's address instead of the one the proxy then reaches, and a
     * proxy would fetch cloud metadata for anyone who asks. Without proxy variables, tell
     * curl so: it would otherwise read them and parse the URL for them on every transfer.
     * An empty no-proxy list too: without one, libcurl 7.88 reads no_proxy and NO_PROXY from
     * the environment on every transfer (a walk of the whole environment each, which a
     * container's injected service variables make long), only to find there is no proxy to
     * skip. With a proxy in use, NO_PROXY is left for curl to read, as the user set it. */
    if (!up->proxy_env || up->cfg.direct) {
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    }
    return e;
}

static void shard_free(upstream_shard_t *sh)
{
    if (sh == NULL)
        return;
    if (sh->multi != NULL)
        curl_multi_cleanup(sh->multi);
    if (sh->timer != NULL)
        event_free(sh->timer);
    free(sh);
}

static upstream_shard_t *shard_new(upstream_t *up)
{
    upstream_shard_t *sh = calloc(1, sizeof(*sh));

    if (sh == NULL)
        return NULL;
    sh->up = up;
    sh->multi = curl_multi_init();
    sh->timer = evtimer_new(up->base, on_curl_timeout, sh);
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
static upstream_shard_t *pick_shard(upstream_t *up)
{
    upstream_shard_t *least = NULL;

    for (int i = 0; i < up->n_shards; i++) {
        upstream_shard_t *sh = up->shards[i];
        if (sh->in_flight < SHARD_XFERS)
            return sh;
        if (least == NULL || sh->in_flight < least->in_flight)
            least = sh;
    }
    if (up->n_shards < SHARDS_MAX) {
        upstream_shard_t *sh = shard_new(up);
        if (sh != NULL) {
            up->shards[up->n_shards++] = sh;
            return sh;
        }
    }
    return least;
}

static const char *const proxy_vars[] = {"http_proxy",  "HTTP_PROXY", "https_proxy",
                                          "HTTPS_PROXY", "all_proxy",  "ALL_PROXY"};

upstream_t *upstream_new(struct event_base *base, const upstream_config_t *cfg)
{
    upstream_t *up = calloc(1, sizeof(*up));

    if (up == NULL)
        return NULL;
    up->base = base;
    up->cfg = *cfg;
    for (size_t i = 0; i < sizeof(proxy_vars) / sizeof(proxy_vars[0]); i++)
        if (getenv(proxy_vars[i]) != NULL && getenv(proxy_vars[i])[0] != '\0')
            up->proxy_env = 1;
    if ((up->json_headers = curl_slist_append(NULL, ADAPTER_JSON_HEADER)) != NULL &&
        (curl_slist_append(up->json_headers, "Expect:") == NULL ||
         curl_slist_append(up->json_headers, USER_AGENT) == NULL)) {
        curl_slist_free_all(up->json_headers);
        up->json_headers = NULL;
    }
    /* Only this worker's thread uses the share: no lock callbacks. */
    if ((up->share = curl_share_init()) != NULL &&
        (curl_share_setopt(up->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK ||
         curl_share_setopt(up->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK)) {
        curl_share_cleanup(up->share);
        up->share = NULL;
    }
    if (up->json_headers == NULL || up->share == NULL || pick_shard(up) == NULL) {
        upstream_free(up);
        return NULL;
    }
    return up;
}

static void xfer_release(upstream_xfer_t *x)
{
    upstream_t *up = x->up;

    x->shard->in_flight--;
    x->shard = NULL;
    if (x->headers != up->json_headers)
        curl_slist_free_all(x->headers);
    x->headers = NULL;
    if (x->url != NULL)
        x->url->refs--;
    x->url = NULL;
    free(x->body);
    x->body = NULL;
    x->cb = NULL;
    x->len = 0;
    /* The answer buffer goes with the answer: a transfer that waits for its platform holds
     * none (thousands wait at once), and a media answer's megabytes are not kept. */
    free(x->buf);
    x->buf = NULL;
    x->cap = 0;
    x->next = up->spare;
    up->spare = x;
    up->in_flight--;
}

void upstream_free(upstream_t *up)
{
    upstream_xfer_t *x;

    if (up == NULL)
        return;
    /* Transfers still in flight are the owners' to cancel first; free only the spares. */
    while ((x = up->spare) != NULL) {
        up->spare = x->next;
        if (x->easy != NULL)
            curl_easy_cleanup(x->easy);
        free(x->buf);
        free(x);
    }
    for (int i = 0; i < up->n_shards; i++)
        shard_free(up->shards[i]); /* closes the pool's connections: on_close_socket */
    for (int s = 0; s < up->n_socks; s++)
        if (up->socks[s] != NULL)
            sock_free(up, s, up->socks[s]); /* curl leaked it, or never told of its close */
    free(up->socks);
    if (up->share != NULL)
        curl_share_cleanup(up->share); /* after every easy handle that used it */
    for (int i = 0; i < URL_SLOTS; i++) {
        curl_url_cleanup(up->urls[i].parsed); /* after the easy handles that point to them */
        free(up->urls[i].text);
    }
    curl_slist_free_all(up->json_headers);
    free(up);
}

/* The call's URL parsed, for CURLOPT_CURLU, or NULL to let curl parse it (and report what is
 * wrong with it). Given only CURLOPT_URL, libcurl 7.88 parses the URL on every transfer and
 * then prints it back into a normalized string (curl_url_set, then curl_url_get with its
 * printf engine: about 17,000 instructions of a call's 80,000 in curl). Given both, it copies
 * the parsed URL instead and keeps CURLOPT_URL's text as the transfer's URL; a redirect's
 * target is parsed as before. A parse is kept for the next calls to the same URL (the same
 * platform and token), shared by all the transfers in flight to it: a copy per transfer would
 * cost a few hundred bytes per send in flight. A slot held by another URL's transfers leaves
 * the call to curl's own parse. */
static CURLU *parsed_url(upstream_t *up, upstream_xfer_t *x, const char *url)
{
    size_t len = strlen(url), tail = len < 24 ? len : 24;
    /* the slot by the URL's end, where calls to one platform differ (the token, the page) */
    upstream_url_t *u = &up->urls[(hash_fnv1a(url + len - tail, tail) ^ len) % URL_SLOTS];

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

static upstream_xfer_t *xfer_start(upstream_t *up, adapter_call_t *call, long timeout_ms,
                                   size_t max_answer, unsigned flags, upstream_cb *cb, void *arg)
{
    upstream_xfer_t *x = up->spare;
    CURL *e;

    if (x != NULL) {
        up->spare = x->next;
    } else {
        if ((x = calloc(1, sizeof(*x))) == NULL)
            return NULL;
        x->up = up;
        if ((x->easy = easy_new(up, x)) == NULL) {
            free(x);
            return NULL;
        }
    }
    if ((x->shard = pick_shard(up)) == NULL) {
        x->next = up->spare;
        up->spare = x;
        return NULL;
    }
    x->shard->in_flight++;
    up->in_flight++;
    e = x->easy;
    x->cb = cb;
    x->arg = arg;
    x->max = max_answer;
    x->len = 0;
    x->blocked = x->too_large = x->has_retry_after = x->resend_refused = 0;
    x->hop = -1;
    x->hop_sent = 0;
    x->flags = flags;
    if (call->headers[0] != NULL && strcmp(call->headers[0], ADAPTER_JSON_HEADER) == 0 &&
        call->headers[1] == NULL) {
        x->headers = up->json_headers; /* most calls: five allocations fewer */
    } else {
        for (int i = 0; i < ADAPTER_MAX_HEADERS && call->headers[i]; i++)
            x->headers = curl_slist_append(x->headers, call->headers[i]);
        /* No "Expect: 100-continue" round trip for larger bodies. */
        x->headers = curl_slist_append(x->headers, "Expect:");
        x->headers = curl_slist_append(x->headers, USER_AGENT);
    }
    curl_easy_setopt(e, CURLOPT_URL, call->url);
    curl_easy_setopt(e, CURLOPT_CURLU, parsed_url(up, x, call->url));
    /* Platforms that speak HTTP/2 (over TLS) get one connection for a shard's transfers:
     * transfers started before the first connection knows whether it multiplexes wait for it
     * (ALPN tells at the end of the handshake) instead of each opening a TLS connection of its
     * own. Not over cleartext: there curl learns that a host does not multiplex only from its
     * first answer, and every transfer would wait for that. */
    curl_easy_setopt(e, CURLOPT_PIPEWAIT,
                     !up->cfg.http1 && strncasecmp(call->url, "https:", 6) == 0 ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    if (strcmp(call->method, "GET") == 0) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        x->body = call->body;
        call->body = NULL;
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)(x->body ? call->body_len : 0));
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body ? x->body : "");
        if (strcmp(call->method, "POST") != 0)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, call->method);
        else
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
    }
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, (flags & UPSTREAM_FOLLOW) ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION,
                     up->cfg.guard ? on_open_guarded : on_open_socket);
    if (curl_multi_add_handle(x->shard->multi, e) != CURLM_OK) {
        xfer_release(x);
        return NULL;
    }
    return x;
}

upstream_xfer_t *upstream_start(upstream_t *up, adapter_call_t *call, long timeout_ms,
                                size_t max_answer, unsigned flags, upstream_cb *cb, void *arg)
{
    upstream_xfer_t *x = xfer_start(up, call, timeout_ms, max_answer, flags, cb, arg);

    /* curl copied the URL and the header lines, the body is the transfer's: nothing of the
     * call is held while the platform takes its time */
    adapter_call_free(call);
    return x;
}

void upstream_cancel(upstream_xfer_t *x)
{
    if (x == NULL)
        return;
    curl_multi_remove_handle(x->shard->multi, x->easy);
    xfer_release(x);
}

size_t upstream_in_flight(const upstream_t *up)
{
    return up->in_flight;
}

/* What went wrong, from what curl tells of the transfer afterwards. Not curl's error buffer:
 * that is 256 bytes held by every transfer in flight, thousands at once, for the few that
 * fail. Nothing of the URL or the address either: it goes into answers, and a platform URL
 * may hold an access token, a user's media URL may resolve to an address of our network. */
static const char *describe(upstream_xfer_t *x, CURLcode code, long long total_us, char *buf,
                            size_t size)
{
    char os_text[128];
    const char *cert = "", *os = "";
    long os_errno = 0, verify = X509_V_OK;

    if (code == CURLE_PEER_FAILED_VERIFICATION &&
        curl_easy_getinfo(x->easy, CURLINFO_SSL_VERIFYRESULT, &verify) == CURLE_OK &&
        verify != X509_V_OK)
        cert = X509_verify_cert_error_string(verify);
    if (curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &os_errno) == CURLE_OK && os_errno != 0)
        os = strerror_r((int)os_errno, os_text, sizeof(os_text));
    snprintf(buf, size, "%s%s%s%s%s (after %lld ms)", curl_easy_strerror(code), *cert ? ": " : "",
             cert, *os ? ": " : "", os, total_us / 1000);
    return buf;
}

static void xfer_finish(upstream_xfer_t *x, CURLcode code)
{
    upstream_answer_t ans;
    upstream_cb *cb = x->cb;
    void *arg = x->arg;
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
    ans.curl_code = code;
    ans.blocked = x->blocked;
    ans.too_large = x->too_large;
    ans.elapsed_us = (long long)total_us;
    ans.a.status = code == CURLE_OK ? status : 0;
    ans.a.body = x->buf ? x->buf : "";
    ans.a.body_len = code == CURLE_OK ? x->len : 0;
    ans.a.retry_after = x->has_retry_after ? x->retry_after : NULL;
    ans.a.content_type = ctype;
    ans.not_sent = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                   code == CURLE_COULDNT_RESOLVE_PROXY;
    if (x->blocked)
        ans.error = "address not allowed (private, loopback or link-local)";
    else if (x->resend_refused)
        ans.error = "the connection closed after the request was sent; not sent again, as the "
                    "platform may have received it";
    else if (x->too_large)
        ans.error = "answer too large";
    else if (code != CURLE_OK)
        ans.error = describe(x, code, (long long)total_us, error, sizeof(error));
    else
        ans.error = "";
    if (cb != NULL)
        cb(arg, &ans);
    xfer_release(x);
}

static void check_done(upstream_shard_t *sh)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(sh->multi, &left)) != NULL) {
        upstream_xfer_t *x;
        CURLcode code;
        if (msg->msg != CURLMSG_DONE)
            continue;
        code = msg->data.result;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        curl_multi_remove_handle(sh->multi, msg->easy_handle);
        xfer_finish(x, code);
    }
}
