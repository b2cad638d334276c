/* swar.h - tests on eight bytes at once, for the loops that skip plain text (the zero-byte
 * tests of "Bit Twiddling Hacks"). Each result is not zero exactly when some byte matches.
 * A byte's borrow runs only into the bytes above it, so the lowest flagged byte is a true
 * match and those above it may not be: swar_clear_bytes says how far a loop may skip. */
#ifndef BOTGATE_JSON_SWAR_H
#define BOTGATE_JSON_SWAR_H

#include <stdint.h>
#include <string.h>

#define SWAR_ONES  0x0101010101010101u
#define SWAR_HIGHS 0x8080808080808080u

/* The eight bytes at p, in any order (only "is there a byte that..." is asked of them). */
static inline uint64_t swar_load(const unsigned char *p)
{
    uint64_t w;

    memcpy(&w, p, sizeof(w));
    return w;
}

/* Some byte of w is below n (n at most 128). */
static inline uint64_t swar_below(uint64_t w, unsigned n)
{
    return (w - SWAR_ONES * n) & ~w & SWAR_HIGHS;
}

/* Some byte of w is c. */
static inline uint64_t swar_equal(uint64_t w, unsigned char c)
{
    return swar_below(w ^ (SWAR_ONES * c), 1);
}

/* Some byte of w is a control character, a quote or a backslash: what a JSON string cannot
 * hold as it is. */
static inline uint64_t swar_json_special(uint64_t w)
{
    return swar_below(w, 0x20) | swar_equal(w, '"') | swar_equal(w, '\\');
}

/* How many of the eight bytes a test's result (not zero) came from, in memory order, surely
 * match none: on a little-endian machine the offset of the lowest flagged byte, the first
 * match; elsewhere 0, and the caller looks byte by byte. */
static inline unsigned swar_clear_bytes(uint64_t mask)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (unsigned)__builtin_ctzll(mask) / 8;
#else
    (void)mask;
    return 0;
#endif
}

/* p moved over the plain bytes of [p, end) eight at a time: to the first byte that may end a
 * JSON string's run of them (a control character, a quote or a backslash; with stop_high, a
 * byte of 0x80 or more too), or to the last bytes when fewer than eight are left. */
static inline const unsigned char *swar_json_run(const unsigned char *p, const unsigned char *end,
                                                 int stop_high)
{
    while (end - p >= 8) {
        uint64_t w = swar_load(p);
        uint64_t stop = swar_json_special(w) | (stop_high ? w & SWAR_HIGHS : 0);
        if (stop != 0)
            return p + swar_clear_bytes(stop);
        p += 8;
    }
    return p;
}

#endif
