/* redistls.c - TLS to Redis under hiredis 0.14 (see redistls.h). hiredis 0.14 reads and writes
 * its socket itself with read(2)/write(2) (redisBufferRead/redisBufferWrite): no hook lets a TLS
 * library in. So hiredis gets one end of a socketpair, and a relay moves bytes between the other
 * end and an OpenSSL bufferevent on the TCP socket. The cost: two more descriptors and one
 * more read and write per batch each way, on the same loop, never blocking it. */
#include "redistls.h"

#include "../core/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <fcntl.h>
#include <hiredis/async.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Bytes a relay holds for a side that does not read: past it the other side is not read
 * until half is written (libevent's sample/le-proxy.c does the same). */
#define RELAY_MAX (512 * 1024)

/* Owned by whoever made it (redistls_free); a blocking client's relay frees itself. */
struct redistls {
    struct event_base *base;
    SSL_CTX *ctx;
    char name[256];            /* what the certificate must name */
    int tcp;                   /* the socket to Redis until tls owns it; -1 after */
    struct event *connecting;  /* waits for the TCP connect */
    struct bufferevent *tls;   /* NULL until connected; owns tcp and its SSL */
    struct bufferevent *plain; /* hiredis's peer; owns its descriptor */
    redistls_cb *cb;           /* NULL: a blocking client's relay, which frees itself */
    void *arg;
    int up;  /* the handshake is done */
    int eof; /* Redis closed: shut the cleartext side once written */
};

/* The context of redistls_ctx_new: one per process, referenced by every relay until exit. */
static SSL_CTX *kept;

SSL_CTX *redistls_ctx_new(const char *ca_file, const char *cert_file, const char *key_file,
                          char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    const char *what = "out of memory";

    if (ctx == NULL || kept != NULL)
        goto fail;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* a server that closes without close_notify (Redis at shutdown) is an EOF, not an error */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    what = ca_file;
    if (ca_file[0] != '\0' ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1
                           : SSL_CTX_set_default_verify_paths(ctx) != 1)
        goto fail;
    what = cert_file;
    if (cert_file[0] != '\0' && SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1)
        goto fail;
    what = key_file;
    if (key_file[0] != '\0' && (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1 ||
                                SSL_CTX_check_private_key(ctx) != 1))
        goto fail;
    kept = ctx;
    return ctx;
fail:
    if (kept != NULL)
        what = "made twice";
    snprintf(err, errlen, "%s: %s", what[0] ? what : "the system's CA certificates",
             ERR_reason_error_string(ERR_peek_last_error())
                 ? ERR_reason_error_string(ERR_peek_last_error())
                 : "cannot be used");
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return NULL;
}

void redistls_free(redistls_t *t)
{
    if (t == NULL)
        return;
    if (t->connecting != NULL)
        event_free(t->connecting);
    if (t->tcp >= 0)
        close(t->tcp);
    if (t->tls != NULL)
        bufferevent_free(t->tls); /* safe from inside its own callbacks: libevent defers it */
    if (t->plain != NULL)
        bufferevent_free(t->plain);
    free(t);
}

/* The relay cannot go on: its owner is told why (and frees it), or it frees itself. */
static void relay_fail(redistls_t *t, const char *why)
{
    redistls_cb *cb = t->cb;

    t->cb = NULL;
    if (cb != NULL)
        cb(t->arg, 0, why); /* t may be gone now */
    else
        redistls_free(t);
}

/* Moves what from has read to to's output; a side that does not read stops the other. */
static void pump(struct bufferevent *from, struct bufferevent *to)
{
    struct evbuffer *out = bufferevent_get_output(to);

    evbuffer_add_buffer(out, bufferevent_get_input(from));
    if (evbuffer_get_length(out) >= RELAY_MAX) {
        bufferevent_disable(from, EV_READ);
        bufferevent_setwatermark(to, EV_WRITE, RELAY_MAX / 2, 0);
    }
}

/* to has written down to its low watermark: the other side may be read again. */
static void drained(struct bufferevent *to, struct bufferevent *from)
{
    bufferevent_setwatermark(to, EV_WRITE, 0, 0);
    if (from != NULL)
        bufferevent_enable(from, EV_READ);
}

static void on_plain_read(struct bufferevent *bev, void *arg)
{
    redistls_t *t = arg;

    if (t->tls != NULL) /* else it waits in bev's input for the TCP connect */
        pump(bev, t->tls);
}

static void on_tls_read(struct bufferevent *bev, void *arg)
{
    pump(bev, ((redistls_t *)arg)->plain);
}

static void on_plain_written(struct bufferevent *bev, void *arg)
{
    redistls_t *t = arg;

    drained(bev, t->tls);
    /* Redis closed after its last reply: hiredis reads that reply, then the end */
    if (t->eof && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        shutdown(bufferevent_getfd(bev), SHUT_WR);
}

static void on_tls_written(struct bufferevent *bev, void *arg)
{
    drained(bev, ((redistls_t *)arg)->plain);
}

static void on_plain_event(struct bufferevent *bev, short what, void *arg)
{
    redistls_t *t = arg;

    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        relay_fail(t, "the client closed"); /* hiredis's context is being freed */
}

/* Why the handshake or the connection failed, from what OpenSSL and the socket say. */
static void tls_why(redistls_t *t, char *why, size_t size)
{
    SSL *ssl = bufferevent_openssl_get_ssl(t->tls);
    long verify = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    unsigned long e = bufferevent_get_openssl_error(t->tls);
    int os = EVUTIL_SOCKET_ERROR();

    if (!t->up && verify != X509_V_OK)
        snprintf(why, size, "TLS: certificate verify failed: %s%s%.80s",
                 X509_verify_cert_error_string(verify),
                 verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH
                     ? ", expected "
                     : "",
                 verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH
                     ? t->name
                     : "");
    else if (e != 0)
        snprintf(why, size, "TLS: %s",
                 ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "error");
    else if (os != 0)
        snprintf(why, size, "TLS: %s", evutil_socket_error_to_string(os));
    else
        snprintf(why, size, "TLS: the server closed the connection%s",
                 t->up ? "" : " during the handshake");
    while (bufferevent_get_openssl_error(t->tls) != 0)
        ; /* the rest of the queue: not this connection's next error */
}

static void on_tls_event(struct bufferevent *bev, short what, void *arg)
{
    redistls_t *t = arg;
    char why[200];

    if (what & BEV_EVENT_CONNECTED) {
        t->up = 1;
        if (t->cb != NULL)
            t->cb(t->arg, 1, "");
        return;
    }
    if ((what & BEV_EVENT_EOF) && t->up) {
        t->eof = 1;
        bufferevent_disable(bev, EV_READ);
        on_plain_written(t->plain, t);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        tls_why(t, why, sizeof(why));
        relay_fail(t, why);
    }
}

static int is_ip(const char *name)
{
    unsigned char buf[16];

    return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

/* The TCP connect ended: start the handshake, with the certificate to be checked for name. */
static void on_connected(evutil_socket_t fd, short what, void *arg)
{
    redistls_t *t = arg;
    int err = 0;
    socklen_t len = sizeof(err);
    char why[200];
    SSL *ssl;

    (void)what;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err != 0) {
        snprintf(why, sizeof(why), "%s", strerror(err));
        relay_fail(t, why);
        return;
    }
    if ((ssl = SSL_new(t->ctx)) == NULL) {
        relay_fail(t, "out of memory");
        return;
    }
    /* an IP address is checked against the certificate's IP addresses, a name against its
     * DNS names (and sent as SNI, which a proxy in front of managed Redis may route by) */
    if (is_ip(t->name)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), t->name);
    } else {
        SSL_set_tlsext_host_name(ssl, t->name);
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        SSL_set1_host(ssl, t->name);
    }
    t->tls = bufferevent_openssl_socket_new(t->base, t->tcp, ssl, BUFFEREVENT_SSL_CONNECTING,
                                            BEV_OPT_CLOSE_ON_FREE);
    if (t->tls == NULL) {
        SSL_free(ssl);
        relay_fail(t, "out of memory");
        return;
    }
    t->tcp = -1;
    bufferevent_openssl_set_allow_dirty_shutdown(t->tls, 1);
    bufferevent_setcb(t->tls, on_tls_read, on_tls_written, on_tls_event, t);
    bufferevent_enable(t->tls, EV_READ | EV_WRITE);
    pump(t->plain, t->tls); /* hiredis's first commands, sent while the connect went on */
}

/* A relay between plain (cleartext, the client's peer) and tcp (connect in progress); both
 * descriptors are its own from now on, also on failure. */
static redistls_t *relay_new(struct event_base *base, SSL_CTX *ctx, const char *name, int tcp,
                             int plain, redistls_cb *cb, void *arg)
{
    redistls_t *t = calloc(1, sizeof(*t));

    if (t == NULL) {
        close(tcp);
        close(plain);
        return NULL;
    }
    t->base = base;
    t->ctx = ctx;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->tcp = tcp;
    t->cb = cb;
    t->arg = arg;
    t->plain = bufferevent_socket_new(base, plain, BEV_OPT_CLOSE_ON_FREE);
    t->connecting = event_new(base, tcp, EV_WRITE, on_connected, t);
    if (t->plain == NULL || t->connecting == NULL || evutil_make_socket_nonblocking(plain) < 0) {
        if (t->plain == NULL)
            close(plain);
        redistls_free(t);
        return NULL;
    }
    bufferevent_setcb(t->plain, on_plain_read, on_plain_written, on_plain_event, t);
    bufferevent_enable(t->plain, EV_READ | EV_WRITE);
    event_add(t->connecting, NULL); /* the owner's connect timeout bounds it */
    return t;
}

redistls_t *redistls_wrap(redisAsyncContext *ac, struct event_base *base, SSL_CTX *ctx,
                          const char *name, redistls_cb *cb, void *arg, char *err, size_t errlen)
{
    int pair[2], tcp;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return NULL;
    }
    /* The TCP socket moves to a new number for the relay; hiredis's number then names the
     * socketpair's end (dup2 swaps it in one step), which hiredis finds connected at once. */
    if ((tcp = fcntl(ac->c.fd, F_DUPFD_CLOEXEC, 0)) < 0 || dup2(pair[0], ac->c.fd) < 0) {
        snprintf(err, errlen, "dup: %s", strerror(errno));
        if (tcp >= 0)
            close(tcp);
        close(pair[0]);
        close(pair[1]);
        return NULL;
    }
    close(pair[0]);
    redistls_t *t = relay_new(base, ctx, name, tcp, pair[1], cb, arg);
    if (t == NULL)
        snprintf(err, errlen, "out of memory");
    return t;
}

/* A blocking client's wait for the handshake. */
typedef struct blocking_wait {
    struct event_base *base;
    int done, up;
    char why[200];
} blocking_wait_t;

static void on_blocking_state(void *arg, int up, const char *why)
{
    blocking_wait_t *w = arg;

    w->done = 1;
    w->up = up;
    snprintf(w->why, sizeof(w->why), "%s", why);
    event_base_loopbreak(w->base);
}

static void on_blocking_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    on_blocking_state(arg, 0, "timed out");
}

/* A blocking client's relays, ended and joined at exit before OpenSSL cleans up (its atexit
 * handler, registered earlier, runs later): a relay still running then would use freed state. */
#define BLOCKING_MAX 128
static struct {
    pthread_t thread;
    int client; /* the client's end of the socketpair */
} blocking[BLOCKING_MAX];
static int n_blocking;

static void blocking_end_all(void)
{
    for (int i = 0; i < n_blocking; i++) {
        shutdown(blocking[i].client, SHUT_RDWR); /* the relay sees the end and frees itself */
        pthread_join(blocking[i].thread, NULL);
    }
    n_blocking = 0;
}

/* The relay's thread: until the client closes its end (the relay then frees itself). */
static void *relay_thread(void *arg)
{
    struct event_base *base = arg;

    event_base_dispatch(base);
    event_base_free(base);
    return NULL;
}

int redistls_connect_blocking(SSL_CTX *ctx, const char *name, const char *host, int port,
                              int timeout_ms, char *err, size_t errlen)
{
    struct sockaddr_storage sa;
    socklen_t salen;
    struct timeval tv = clock_ms_timeval(timeout_ms);
    blocking_wait_t w = {0};
    struct event *timer = NULL;
    redistls_t *t = NULL;
    int pair[2] = {-1, -1}, tcp = -1;
    pthread_t thread;

    signal(SIGPIPE, SIG_IGN);
    memset(&sa, 0, sizeof(sa));
    if (inet_pton(AF_INET, host, &((struct sockaddr_in *)&sa)->sin_addr) == 1) {
        ((struct sockaddr_in *)&sa)->sin_family = AF_INET;
        ((struct sockaddr_in *)&sa)->sin_port = htons((unsigned short)port);
        salen = sizeof(struct sockaddr_in);
    } else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)&sa)->sin6_addr) == 1) {
        ((struct sockaddr_in6 *)&sa)->sin6_family = AF_INET6;
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons((unsigned short)port);
        salen = sizeof(struct sockaddr_in6);
    } else {
        snprintf(err, errlen, "%.100s is not an IP address", host);
        return -1;
    }
    if ((w.base = event_base_new()) == NULL ||
        (timer = evtimer_new(w.base, on_blocking_timeout, &w)) == NULL ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0 ||
        (tcp = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        (connect(tcp, (struct sockaddr *)&sa, salen) < 0 && errno != EINPROGRESS)) {
        snprintf(err, errlen, "%s", strerror(errno));
        goto fail;
    }
    t = relay_new(w.base, ctx, name, tcp, pair[1], on_blocking_state, &w);
    tcp = pair[1] = -1; /* the relay's now */
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    evtimer_add(timer, &tv);
    while (!w.done && event_base_loop(w.base, EVLOOP_ONCE) == 0)
        ;
    event_free(timer);
    timer = NULL;
    if (!w.up) {
        snprintf(err, errlen, "%s", w.done ? w.why : "the relay's loop ended");
        goto fail;
    }
    t->cb = NULL; /* from now on it frees itself, when the client closes or Redis breaks */
    if (n_blocking == BLOCKING_MAX || pthread_create(&thread, NULL, relay_thread, w.base) != 0) {
        snprintf(err, errlen, "cannot start the TLS relay's thread");
        goto fail;
    }
    if (n_blocking == 0)
        atexit(blocking_end_all);
    blocking[n_blocking].thread = thread;
    blocking[n_blocking++].client = pair[0];
    return pair[0];
fail:
    redistls_free(t);
    if (timer != NULL)
        event_free(timer);
    if (w.base != NULL)
        event_base_free(w.base);
    if (tcp >= 0)
        close(tcp);
    if (pair[0] >= 0)
        close(pair[0]);
    if (pair[1] >= 0)
        close(pair[1]);
    return -1;
}
