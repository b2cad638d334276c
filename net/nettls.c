/* nettls.c - see nettls.h. The handshake is shared by botgate's own HTTP/1.1 (h1conn.c) and
 * HTTP/2 (h2conn.c), which differ only in what they wait on and whom they tell. */
#include "nettls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stddef.h>

/* OpenSSL hands over a new session (a TLS 1.3 ticket, or a TLS 1.2 session): the slot the SSL
 * object was made with keeps the newest, for the next connection to resume. */
static int on_tls_session(SSL *ssl, SSL_SESSION *sess)
{
    SSL_SESSION **slot = SSL_get_app_data(ssl);

    if (slot == NULL)
        return 0;
    SSL_SESSION_free(*slot);
    *slot = sess;
    return 1; /* the reference is the slot's */
}

/* The TLS client, as curl sets its own up: the certificate checked against the system's CAs
 * (curl's default bundle, which Debian builds from the same certificates as curl's default CA
 * directory) and BOTGATE_CA_FILE's, partial chains allowed, TLS 1.2 at least, a peer's close
 * without close_notify read as the end. The bundle is read here, at start, never on a request's
 * path. Read-ahead: one recv per answer instead of two per record (h1conn reads until OpenSSL
 * holds nothing). NULL on failure. */
static SSL_CTX *tls_ctx_new(const char *ca_file, const char *default_bundle)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    int loaded = 0;

    if (ctx == NULL)
        return NULL;
    if (default_bundle != NULL && default_bundle[0] != '\0')
        loaded = SSL_CTX_load_verify_locations(ctx, default_bundle, NULL) == 1;
    if (!loaded)
        SSL_CTX_set_default_verify_paths(ctx);
    if (ca_file != NULL && ca_file[0] != '\0' &&
        SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_PARTIAL_CHAIN);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_tls_session);
    return ctx;
}

/* One TLS context for the whole process, made by the first worker's client and freed with the
 * last one's: the CA store it holds (the system's bundle, about 1 MB) is read once, not once
 * per worker. OpenSSL lets every thread make its SSL objects from it; what differs per worker
 * (the session slot an SSL object fills) hangs on the SSL object. */
static pthread_mutex_t tls_lock = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *tls_shared;
static int tls_users;

SSL_CTX *nettls_ctx_take(const char *ca_file, const char *default_bundle)
{
    SSL_CTX *ctx;

    pthread_mutex_lock(&tls_lock);
    if (tls_shared == NULL)
        tls_shared = tls_ctx_new(ca_file, default_bundle);
    if ((ctx = tls_shared) != NULL)
        tls_users++;
    pthread_mutex_unlock(&tls_lock);
    return ctx;
}

void nettls_ctx_give(SSL_CTX *ctx)
{
    if (ctx == NULL)
        return;
    pthread_mutex_lock(&tls_lock);
    if (--tls_users == 0) {
        SSL_CTX_free(tls_shared);
        tls_shared = NULL;
    }
    pthread_mutex_unlock(&tls_lock);
}

SSL *nettls_new(SSL_CTX *ctx, const char *host, int host_is_ip, SSL_SESSION **session, int h2)
{
    static const unsigned char both[] = "\x02h2\x08http/1.1";
    const unsigned char *alpn = h2 ? both : both + 3;
    unsigned alpn_len = h2 ? sizeof(both) - 1 : sizeof(both) - 4;
    SSL *ssl = SSL_new(ctx);

    if (ssl == NULL)
        return NULL;
    SSL_set_app_data(ssl, session);
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if ((host_is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host)
                    : SSL_set1_host(ssl, host)) != 1 ||
        (!host_is_ip && SSL_set_tlsext_host_name(ssl, host) != 1) ||
        SSL_set_alpn_protos(ssl, alpn, alpn_len) != 0) {
        SSL_free(ssl);
        return NULL;
    }
    if (*session != NULL)
        SSL_set_session(ssl, *session);
    SSL_set_connect_state(ssl);
    return ssl;
}

nettls_state_t nettls_handshake(SSL *ssl, nettls_failure_t *failure)
{
    const char *why;
    int k, err;

    ERR_clear_error();
    k = SSL_connect(ssl);
    if (k == 1)
        return NETTLS_DONE;
    err = SSL_get_error(ssl, k);
    if (err == SSL_ERROR_WANT_READ)
        return NETTLS_WANT_READ;
    if (err == SSL_ERROR_WANT_WRITE)
        return NETTLS_WANT_WRITE;
    failure->verify = SSL_get_verify_result(ssl);
    failure->os_errno = 0;
    if (failure->verify != X509_V_OK) {
        failure->why = "";
    } else if (err == SSL_ERROR_SYSCALL) {
        failure->os_errno = errno;
        failure->why = "the connection closed during the TLS handshake";
    } else {
        why = ERR_reason_error_string(ERR_peek_last_error());
        failure->why = why != NULL ? why : "the TLS handshake failed";
    }
    return NETTLS_FAILED;
}
