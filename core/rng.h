/* rng.h - random hex ids from a caller-held xorshift64* state: pure, no I/O. Not
 * cryptographic: unique and unguessable enough for request, member and lock owner ids. */
#ifndef BOTGATE_CORE_RNG_H
#define BOTGATE_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Writes n random hex characters and a NUL to out (n < its size), advancing *state. */
static inline void rng_hex(uint64_t *state, char *out, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t bits = 0;

    for (size_t i = 0; i < n; i++) {
        if (i % 16 == 0) {
            /* xorshift64* */
            uint64_t x = *state;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            *state = x;
            bits = x * 0x2545F4914F6CDD1DULL;
        }
        out[i] = hex[bits & 15];
        bits >>= 4;
    }
    out[n] = '\0';
}

#endif
