/* jsonw.c - the JSON writer. Escaping follows jansson's compact output: ", \ and control
 * characters are escaped, everything else (UTF-8 included) is written as it is. */
#include "jsonw.h"

#include "numfmt.h"
#include "swar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jw_init(jsonw_t *w)
{
    memset(w, 0, sizeof(*w));
}

void jw_init_size(jsonw_t *w, size_t cap)
{
    jw_init(w);
    if ((w->buf = malloc(cap > 0 ? cap : 1)) == NULL)
        w->failed = 1;
    else
        w->cap = cap > 0 ? cap : 1;
}

void jw_free(jsonw_t *w)
{
    free(w->buf);
    jw_init(w);
}

static int reserve(jsonw_t *w, size_t extra)
{
    size_t need = w->len + extra + 1, cap;
    char *buf;

    if (w->failed)
        return -1;
    if (need <= w->cap)
        return 0;
    cap = w->cap ? w->cap : 512;
    while (cap < need)
        cap *= 2;
    if ((buf = realloc(w->buf, cap)) == NULL) {
        w->failed = 1;
        return -1;
    }
    w->buf = buf;
    w->cap = cap;
    return 0;
}

char *jw_steal(jsonw_t *w, size_t *len)
{
    char *out;

    if (reserve(w, 0) < 0) {
        jw_free(w);
        return NULL;
    }
    w->buf[w->len] = '\0';
    out = w->buf;
    if (len != NULL)
        *len = w->len;
    jw_init(w);
    return out;
}

void jw_raw(jsonw_t *w, const char *s, size_t n)
{
    if (reserve(w, n) < 0)
        return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

void jw_str(jsonw_t *w, const char *s)
{
    static const char hex[] = "0123456789ABCDEF"; /* upper case, as jansson writes it */
    const unsigned char *p = (const unsigned char *)s, *run;
    size_t n;

    if (s == NULL) {
        jw_lit(w, "null");
        return;
    }
    /* most strings need no escape: they go as one copy, found eight bytes at a time */
    n = strlen(s);
    run = swar_json_run(p, p + n, 0);
    while (*run >= 0x20 && *run != '"' && *run != '\\')
        run++;
    if (*run == '\0') {
        if (reserve(w, n + 2) < 0)
            return;
        w->buf[w->len++] = '"';
        memcpy(w->buf + w->len, s, n);
        w->len += n;
        w->buf[w->len++] = '"';
        return;
    }
    /* room for exactly what is written: reserving the worst case (every byte as \u00XX) made
     * a short body's buffer six times its size. The plain bytes before run were counted above. */
    n = 2 + (size_t)(run - p);
    for (; *run; run++) {
        if (*run >= 0x20 && *run != '"' && *run != '\\')
            n += 1;
        else if (strchr("\"\\\b\f\n\r\t", *run) != NULL) /* *run is not NUL here */
            n += 2;
        else
            n += 6;
    }
    if (reserve(w, n) < 0)
        return;
    w->buf[w->len++] = '"';
    for (run = p; *p; p++) {
        unsigned char c = *p;
        const char *esc;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        memcpy(w->buf + w->len, run, (size_t)(p - run));
        w->len += (size_t)(p - run);
        run = p + 1;
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        default:
            memcpy(w->buf + w->len, "\\u00", 4);
            w->buf[w->len + 4] = hex[c >> 4];
            w->buf[w->len + 5] = hex[c & 15];
            w->len += 6;
            continue;
        }
        w->buf[w->len++] = esc[0];
        w->buf[w->len++] = esc[1];
    }
    memcpy(w->buf + w->len, run, (size_t)(p - run));
    w->len += (size_t)(p - run);
    w->buf[w->len++] = '"';
}

void jw_int(jsonw_t *w, long long v)
{
    char tmp[NUMFMT_DEC_SIZE];
    const char *p = numfmt_dec(tmp, v);

    jw_raw(w, p, (size_t)(tmp + sizeof(tmp) - 1 - p));
}

__extension__ typedef unsigned __int128 jw_u128;

/* %.17g of d, for 1e-4 <= |d| < 1e17 (a coordinate, an amount): the 17 significant digits
 * of its exact value, rounded half to even as glibc's printf rounds them, in the fixed form
 * %g picks for that range, trailing zeros cut. glibc's printf takes about 4000 instructions
 * for a real and an echoed LOCATION has two. The value is m * 2^e exactly, and m * 10^k
 * (k <= 20) fits in 128 bits. Returns the length written to out, 0 outside the range. */
static int real17(char *out, double d)
{
    static const uint64_t pow10[20] = {1u,
                                       10u,
                                       100u,
                                       1000u,
                                       10000u,
                                       100000u,
                                       1000000u,
                                       10000000u,
                                       100000000u,
                                       1000000000u,
                                       10000000000u,
                                       100000000000u,
                                       1000000000000u,
                                       10000000000000u,
                                       100000000000000u,
                                       1000000000000000u,
                                       10000000000000000u,
                                       100000000000000000u,
                                       1000000000000000000u,
                                       10000000000000000000u};
    double a = d < 0 ? -d : d;
    uint64_t bits, m, n;
    int e, x, s, len = 0, digits, point;
    char num[24];

    if (!(a >= 1e-4 && a < 1e17))
        return 0;
    memcpy(&bits, &a, sizeof(bits));
    m = (bits & ((1ull << 52) - 1)) | (1ull << 52); /* normal: a >= 1e-4 */
    e = (int)(bits >> 52) - 1075;
    /* x: the decimal exponent of a's first digit, guessed here and checked on the digits */
    x = a >= 1 ? 0 : a >= 0.1 ? -1 : a >= 0.01 ? -2 : a >= 0.001 ? -3 : -4;
    while (x >= 0 && x < 16 && a >= (double)pow10[x + 1])
        x++;
    for (;;) {
        int k = 16 - x;
        jw_u128 v, rest = 0, half = 0;
        if (k < 0 || k > 20) /* not reached: 1e-4 <= a < 1e17 */
            return 0;
        v = (jw_u128)m * (k < 20 ? pow10[k] : (jw_u128)pow10[19] * 10);
        if (e >= 0) {
            v <<= e; /* e <= 4 here: a < 2^57 */
        } else {
            s = -e; /* at most 70: a >= 1e-4 */
            rest = v & (((jw_u128)1 << s) - 1);
            half = (jw_u128)1 << (s - 1);
            v >>= s;
        }
        if (v < pow10[16]) {
            x--;
            continue;
        }
        if (v >= pow10[17]) {
            x++;
            continue;
        }
        n = (uint64_t)v;
        if (e < 0 && (rest > half || (rest == half && (n & 1))))
            n++;
        if (n == pow10[17]) {
            n = pow10[16];
            x++;
        }
        break;
    }
    for (int i = 16; i >= 0; i--, n /= 10)
        num[i] = (char)('0' + n % 10);
    for (digits = 17; digits > 1 && num[digits - 1] == '0'; digits--)
        ;
    if (d < 0)
        out[len++] = '-';
    if (x < 0) {
        out[len++] = '0';
        out[len++] = '.';
        for (int i = -1; i > x; i--)
            out[len++] = '0';
        memcpy(out + len, num, (size_t)digits);
        return len + digits;
    }
    point = x + 1; /* digits before the point */
    for (int i = 0; i < point; i++)
        out[len++] = num[i];
    if (digits > point) {
        out[len++] = '.';
        memcpy(out + len, num + point, (size_t)(digits - point));
        len += digits - point;
    }
    return len;
}

/* A real as jansson writes it: the shortest of %.17g, with ".0" when it would read back as
 * an integer. */
void jw_real(jsonw_t *w, double d)
{
    char tmp[40];
    int n = real17(tmp, d);

    if (n > 0) {
        if (memchr(tmp, '.', (size_t)n) == NULL) {
            tmp[n++] = '.';
            tmp[n++] = '0';
        }
        jw_raw(w, tmp, (size_t)n);
        return;
    }
    n = snprintf(tmp, sizeof(tmp), "%.17g", d);

    if (n < 0 || n >= (int)sizeof(tmp) - 3) {
        w->failed = 1;
        return;
    }
    if (strpbrk(tmp, ".eEni") == NULL) { /* "inf"/"nan" cannot occur: jansson refuses them */
        tmp[n++] = '.';
        tmp[n++] = '0';
        tmp[n] = '\0';
    }
    /* like jansson: no '+' and no leading zeros in the exponent (1e+300 -> 1e300, 1e-05 -> 1e-5) */
    {
        char *e = strchr(tmp, 'e'), *start, *end;
        if (e != NULL) {
            start = e + 1;
            end = start + 1;
            if (*start == '-')
                start++;
            while (*end == '0')
                end++;
            if (end != start) {
                memmove(start, end, (size_t)(tmp + n - end) + 1);
                n -= (int)(end - start);
            }
        }
    }
    jw_raw(w, tmp, (size_t)n);
}

static void value(jsonw_t *w, const json_t *v, int depth)
{
    const char *key;
    json_t *item;
    size_t i;
    int first = 1;

    if (depth > 2048) { /* jansson's own parser limit: nothing botgate holds is deeper */
        w->failed = 1;
        return;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        jw_lit(w, "{");
        json_object_foreach((json_t *)v, key, item) {
            if (!first)
                jw_lit(w, ",");
            first = 0;
            jw_str(w, key);
            jw_lit(w, ":");
            value(w, item, depth + 1);
        }
        jw_lit(w, "}");
        return;
    case JSON_ARRAY:
        jw_lit(w, "[");
        json_array_foreach(v, i, item) {
            if (i > 0)
                jw_lit(w, ",");
            value(w, item, depth + 1);
        }
        jw_lit(w, "]");
        return;
    case JSON_STRING:
        jw_str(w, json_string_value(v));
        return;
    case JSON_INTEGER:
        jw_int(w, json_integer_value(v));
        return;
    case JSON_REAL:
        jw_real(w, json_real_value(v));
        return;
    case JSON_TRUE:
        jw_lit(w, "true");
        return;
    case JSON_FALSE:
        jw_lit(w, "false");
        return;
    case JSON_NULL:
        jw_lit(w, "null");
        return;
    }
}

void jw_json(jsonw_t *w, const json_t *v)
{
    if (v == NULL) {
        w->failed = 1;
        return;
    }
    value(w, v, 0);
}

char *jw_dump(const json_t *v, size_t *len)
{
    jsonw_t w;

    jw_init(&w);
    jw_json(&w, v);
    return jw_steal(&w, len);
}

void jw_addr(jsonw_t *w, const char *addr)
{
    size_t n;

    if (addr == NULL) {
        jw_lit(w, "null");
        return;
    }
    n = strlen(addr);
    if (n == 0 || n > 15 || strspn(addr, "0123456789") != n || (addr[0] == '0' && n > 1))
        jw_str(w, addr);
    else
        jw_raw(w, addr, n);
}
