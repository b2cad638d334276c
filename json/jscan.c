/* jscan.c - a validating JSON scanner that allocates only the strings asked for. Recursion
 * is bounded by JSCAN_MAX_DEPTH. */
#include "jscan.h"

#include "jutf8.h"
#include "swar.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JSCAN_MAX_DEPTH 64

typedef struct scan {
    const unsigned char *p, *end;
} scan_t;

static void skip_ws(scan_t *s)
{
    /* a stored record has no white space: one comparison finds that */
    while (s->p < s->end && *s->p <= ' ' &&
           (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* The length of the valid UTF-8 sequence at p (at most avail bytes), 0 when invalid. */
static size_t utf8_len(const unsigned char *p, size_t avail)
{
    unsigned char c = p[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else
        return 0;
    if (avail < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* A string at s->p (the opening quote). When dst is not NULL the decoded text goes there
 * (it needs as many bytes as the raw string has). Returns the decoded length or -1. */
static long scan_string(scan_t *s, unsigned char *dst)
{
    size_t len = 0;

    s->p++; /* the quote */
    while (s->p < s->end) {
        const unsigned char *run = s->p;
        unsigned char c;
        /* plain ASCII, the bulk of every record, goes as one run: eight bytes at a time while
         * none ends it, then straight to the byte that does (the quote of a short string) */
        s->p = swar_json_run(s->p, s->end, 1);
        while (s->p < s->end && *s->p >= 0x20 && *s->p < 0x80 && *s->p != '"' && *s->p != '\\')
            s->p++;
        if (s->p > run) {
            if (dst != NULL)
                memcpy(dst + len, run, (size_t)(s->p - run));
            len += (size_t)(s->p - run);
            if (s->p >= s->end)
                break;
        }
        c = *s->p;
        if (c == '"') {
            s->p++;
            return (long)len;
        }
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            unsigned cp;
            if (s->end - s->p < 2)
                return -1;
            c = s->p[1];
            s->p += 2;
            switch (c) {
            case '"':
            case '\\':
            case '/':
                cp = c;
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'n':
                cp = '\n';
                break;
            case 'r':
                cp = '\r';
                break;
            case 't':
                cp = '\t';
                break;
            case 'u': {
                int n = jutf8_escape((const char *)s->p, (const char *)s->end, &cp);
                if (n < 0)
                    return -1;
                s->p += n;
                break;
            }
            default:
                return -1;
            }
            if (dst != NULL)
                jutf8_put((char *)dst + len, cp);
            len += jutf8_len(cp);
            continue;
        }
        {
            size_t n = utf8_len(s->p, (size_t)(s->end - s->p));
            if (n == 0)
                return -1;
            if (dst != NULL)
                memcpy(dst + len, s->p, n);
            len += n;
            s->p += n;
        }
    }
    return -1;
}

static int skip_value(scan_t *s, int depth);

static int skip_number(scan_t *s)
{
    const unsigned char *start = s->p;

    if (s->p < s->end && *s->p == '-')
        s->p++;
    if (s->p >= s->end)
        return -1;
    if (*s->p == '0')
        s->p++;
    else if (*s->p >= '1' && *s->p <= '9')
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    else
        return -1;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return -1;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return -1;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    return s->p > start ? 0 : -1;
}

static int skip_literal(scan_t *s, const char *word)
{
    size_t n = strlen(word);

    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return -1;
    s->p += n;
    return 0;
}

/* An object or array at s->p, its elements skipped. */
static int skip_container(scan_t *s, int depth, int object)
{
    unsigned char close = object ? '}' : ']';

    if (depth > JSCAN_MAX_DEPTH)
        return -1;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    for (;;) {
        skip_ws(s);
        if (object) {
            if (s->p >= s->end || *s->p != '"' || scan_string(s, NULL) < 0)
                return -1;
            skip_ws(s);
            if (s->p >= s->end || *s->p++ != ':')
                return -1;
            skip_ws(s);
        }
        if (skip_value(s, depth + 1) < 0)
            return -1;
        skip_ws(s);
        if (s->p >= s->end)
            return -1;
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p++ == close)
            return 0;
        return -1;
    }
}

static int skip_value(scan_t *s, int depth)
{
    if (s->p >= s->end)
        return -1;
    switch (*s->p) {
    case '"':
        return scan_string(s, NULL) < 0 ? -1 : 0;
    case '{':
        return skip_container(s, depth, 1);
    case '[':
        return skip_container(s, depth, 0);
    case 't':
        return skip_literal(s, "true");
    case 'f':
        return skip_literal(s, "false");
    case 'n':
        return skip_literal(s, "null");
    default:
        return skip_number(s);
    }
}

static void clear(char **out, size_t nkeys)
{
    for (size_t i = 0; i < nkeys; i++) {
        free(out[i]);
        out[i] = NULL;
    }
}

/* jscan_strings, and a number value of key i copied as its text when bit i of numbers is set
 * (jscan_scalars). */
static int scan_object(const char *text, size_t n, const char *const *keys, size_t nkeys,
                       char **out, unsigned numbers)
{
    scan_t s = {(const unsigned char *)text, (const unsigned char *)text + n};
    size_t klens[JSCAN_MAX_KEYS];

    memset(out, 0, nkeys * sizeof(*out));
    if (nkeys > JSCAN_MAX_KEYS)
        return -1;
    for (size_t i = 0; i < nkeys; i++)
        klens[i] = strlen(keys[i]);
    skip_ws(&s);
    if (s.p >= s.end || *s.p != '{')
        return -1;
    s.p++;
    skip_ws(&s);
    if (s.p < s.end && *s.p == '}') {
        s.p++;
        goto tail;
    }
    for (;;) {
        const unsigned char *key;
        long klen;
        size_t which = nkeys;
        skip_ws(&s);
        if (s.p >= s.end || *s.p != '"')
            goto fail;
        key = s.p + 1;
        if ((klen = scan_string(&s, NULL)) < 0)
            goto fail;
        /* keys asked for are plain ASCII: compare the raw bytes (an escaped key never matches) */
        for (size_t i = 0; i < nkeys; i++)
            if ((size_t)(s.p - 1 - key) == klens[i] && memcmp(key, keys[i], klens[i]) == 0) {
                which = i;
                break;
            }
        skip_ws(&s);
        if (s.p >= s.end || *s.p++ != ':')
            goto fail;
        skip_ws(&s);
        if (which < nkeys) {
            free(out[which]);
            out[which] = NULL;
        }
        if (which < nkeys && s.p < s.end && *s.p == '"') {
            const unsigned char *start = s.p;
            scan_t probe = s;
            long len = scan_string(&probe, NULL);
            unsigned char *dst;
            if (len < 0 || (dst = malloc((size_t)(probe.p - start))) == NULL)
                goto fail;
            scan_string(&s, dst);
            dst[len] = '\0';
            out[which] = (char *)dst;
        } else if (which < nkeys && (numbers >> which & 1) && s.p < s.end &&
                   (*s.p == '-' || isdigit(*s.p))) {
            const unsigned char *start = s.p;
            if (skip_number(&s) < 0 || (out[which] = malloc((size_t)(s.p - start) + 1)) == NULL)
                goto fail;
            memcpy(out[which], start, (size_t)(s.p - start));
            out[which][s.p - start] = '\0';
        } else if (skip_value(&s, 1) < 0) {
            goto fail;
        }
        skip_ws(&s);
        if (s.p >= s.end)
            goto fail;
        if (*s.p == ',') {
            s.p++;
            continue;
        }
        if (*s.p++ == '}')
            break;
        goto fail;
    }
tail:
    skip_ws(&s);
    if (s.p != s.end)
        goto fail;
    return 0;
fail:
    clear(out, nkeys);
    return -1;
}

int jscan_strings(const char *text, size_t n, const char *const *keys, size_t nkeys, char **out)
{
    return scan_object(text, n, keys, nkeys, out, 0);
}

int jscan_scalars(const char *text, size_t n, const char *const *keys, size_t nkeys, char **out,
                  unsigned numbers)
{
    return scan_object(text, n, keys, nkeys, out, numbers);
}
