/* handshake.c - see handshake.h. Shared by botgate's own HTTP/1.1 (upstream.c) and HTTP/2
 * (h2conn.c), which differ only in what they wait on and whom they tell. */
#include "handshake.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509.h>

handshake_state_t handshake_step(SSL *ssl, handshake_failure_t *failure)
{
    const char *why;
    int k, err;

    ERR_clear_error();
    k = SSL_connect(ssl);
    if (k == 1)
        return HANDSHAKE_DONE;
    err = SSL_get_error(ssl, k);
    if (err == SSL_ERROR_WANT_READ)
        return HANDSHAKE_WANT_READ;
    if (err == SSL_ERROR_WANT_WRITE)
        return HANDSHAKE_WANT_WRITE;
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
    return HANDSHAKE_FAILED;
}
