/* numfmt.h - decimal numbers into text without the printf family: snprintf("%lld") costs about
 * ten times as much, and the request path writes several numbers per platform call (Redis
 * script arguments, TTLs). */
#ifndef BOTGATE_JSON_NUMFMT_H
#define BOTGATE_JSON_NUMFMT_H

#define NUMFMT_DEC_SIZE 24 /* "-9223372036854775808" and its NUL, with room to spare */

/* v in decimal at the end of buf; returns where it starts (inside buf), NUL-terminated. */
static inline const char *numfmt_dec(char buf[NUMFMT_DEC_SIZE], long long v)
{
    char *p = buf + NUMFMT_DEC_SIZE - 1;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

    *p = '\0';
    do
        *--p = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        *--p = '-';
    return p;
}

#endif
