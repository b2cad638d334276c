/* idem.c - Idempotency-Key validation and request fingerprints. */
#include "idem.h"

#include <openssl/evp.h>
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
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();

    out[0] = '\0';
    if (ctx == NULL)
        return;
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
        EVP_DigestUpdate(ctx, route, strlen(route) + 1) == 1 &&
        EVP_DigestUpdate(ctx, body, len) == 1 && EVP_DigestFinal_ex(ctx, md, &n) == 1) {
        for (unsigned int i = 0; i < n && i < 32; i++) {
            out[2 * i] = hex[md[i] >> 4];
            out[2 * i + 1] = hex[md[i] & 15];
        }
        out[2 * (n < 32 ? n : 32)] = '\0';
    }
    EVP_MD_CTX_free(ctx);
}
