/* idem.h - the pure half of Idempotency-Key (contract.md section 7): which keys are valid and
 * what identifies a request (its fingerprint). */
#ifndef BOTGATE_CORE_IDEM_H
#define BOTGATE_CORE_IDEM_H

#include <stddef.h>

#define IDEM_KEY_MAX 255
#define IDEM_HEX     65 /* SHA-256 as lower-case hex, with its NUL */

/* 1 when key is 1-255 printable ASCII characters (space to '~'). */
int idem_key_valid(const char *key);
/* SHA-256 of the route name, a NUL, and the body, as hex: two requests are the same request
 * when they agree on it. */
void idem_fingerprint(const char *route, const char *body, size_t len, char out[IDEM_HEX]);

#endif
