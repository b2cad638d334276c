/* jutf8.h - the \uXXXX escape of a JSON string read into a code point and written as UTF-8,
 * one implementation for both readers (jscan.c and jparse.c). Inline: it runs inside their
 * string loops. */
#ifndef BOTGATE_JSON_JUTF8_H
#define BOTGATE_JSON_JUTF8_H

#include <stddef.h>

/* The four hex digits at p as *v; -1 when one is not a hex digit. */
static inline int jutf8_hex4(const char *p, unsigned *v)
{
    unsigned x = 0;

    for (int i = 0; i < 4; i++) {
        char c = p[i];
        x <<= 4;
        if (c >= '0' && c <= '9')
            x |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            x |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            x |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *v = x;
    return 0;
}

/* The code point of the escape whose hex digits start at p (just after "\u"), end the end of
 * the text: a high surrogate takes its low one ("\uD83D\uDE00"). Returns the bytes read from p
 * (4 or 10), or -1 for bad digits, a lone surrogate or U+0000 (jansson refuses it too: no NUL
 * inside C strings). */
static inline int jutf8_escape(const char *p, const char *end, unsigned *cp)
{
    unsigned lo;

    if (end - p < 4 || jutf8_hex4(p, cp) < 0)
        return -1;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF)
        return -1; /* a lone low surrogate */
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        if (end - p < 10 || p[4] != '\\' || p[5] != 'u' || jutf8_hex4(p + 6, &lo) < 0 ||
            lo < 0xDC00 || lo > 0xDFFF)
            return -1;
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
        return 10;
    }
    return *cp == 0 ? -1 : 4;
}

/* Bytes of cp in UTF-8. */
static inline size_t jutf8_len(unsigned cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

/* Writes cp as UTF-8 at d; returns its bytes (jutf8_len). */
static inline size_t jutf8_put(char *d, unsigned cp)
{
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xC0 | cp >> 6);
        d[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | cp >> 12);
        d[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | cp >> 18);
    d[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    d[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
