/* idem.c - Idempotency-Key validation and request fingerprints. */
#include "idem.h"

#include "auth.h"

#include <string.h>

int idem_key_valid(const char *key)
{
    size_t n = 0;

    if (key == NULL)
        return 0;
    for (; key[n] != '\0'; n++)
        if ((unsigned char)key[n] < 0x20 || (unsigned char)key[n] > 0x7e || n >= IDEM_KEY_MAX)
            return 0;
    return n > 0;
}

void idem_fingerprint(const char *route, const char *body, size_t len, char out[IDEM_HEX])
{
    auth_hash_parts(route, strlen(route) + 1, body, len, out);
}
