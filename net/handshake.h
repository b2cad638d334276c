/* handshake.h - a step of a TLS client handshake on a non-blocking socket, and, when it fails,
 * what stopped it, in the words botgate's answers use. */
#ifndef BOTGATE_NET_HANDSHAKE_H
#define BOTGATE_NET_HANDSHAKE_H

#include <openssl/ssl.h>

typedef enum handshake_state {
    HANDSHAKE_DONE,
    HANDSHAKE_WANT_READ,  /* wait until the socket is readable, then step again */
    HANDSHAKE_WANT_WRITE, /* wait until the socket is writable, then step again */
    HANDSHAKE_FAILED,
} handshake_state_t;

typedef struct handshake_failure {
    long verify;     /* the certificate check's X509_V_* result (X509_V_OK: it was not that) */
    int os_errno;    /* the system's error when the socket failed, else 0 */
    const char *why; /* "" when the certificate check failed (verify says why), else static text */
} handshake_failure_t;

handshake_state_t handshake_step(SSL *ssl, handshake_failure_t *failure);

#endif
