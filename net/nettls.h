/* nettls.h - TLS for botgate's own HTTP/1.1 and HTTP/2: the client context (one per process),
 * an SSL object per connection, and a step of the handshake on a non-blocking socket with,
 * when it fails, what stopped it in the words botgate's answers use. */
#ifndef BOTGATE_NET_NETTLS_H
#define BOTGATE_NET_NETTLS_H

#include <openssl/ssl.h>

/* The process's TLS client context, made by its first user: the certificate checked against
 * default_bundle (libcurl's, or else OpenSSL's default paths) and ca_file's (NULL or "": none).
 * NULL when ca_file cannot be read. Give it back with nettls_ctx_give. */
SSL_CTX *nettls_ctx_take(const char *ca_file, const char *default_bundle);
void nettls_ctx_give(SSL_CTX *ctx);

/* An SSL object for a new connection to host (an address when host_is_ip): the host checked in
 * the certificate, named by SNI (a name only), HTTP/1.1 offered by ALPN (and first HTTP/2 with
 * h2). It resumes *session when there is one, and stores there the newest session the
 * connection gets (*session must outlive the SSL object). NULL when out of memory. */
SSL *nettls_new(SSL_CTX *ctx, const char *host, int host_is_ip, SSL_SESSION **session, int h2);

typedef enum nettls_state {
    NETTLS_DONE,
    NETTLS_WANT_READ,  /* wait until the socket is readable, then step again */
    NETTLS_WANT_WRITE, /* wait until the socket is writable, then step again */
    NETTLS_FAILED,
} nettls_state_t;

typedef struct nettls_failure {
    long verify;     /* the certificate check's X509_V_* result (X509_V_OK: it was not that) */
    int os_errno;    /* the system's error when the socket failed, else 0 */
    const char *why; /* "" when the certificate check failed (verify says why), else static text */
} nettls_failure_t;

nettls_state_t nettls_handshake(SSL *ssl, nettls_failure_t *failure);

#endif
