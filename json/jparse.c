/* jparse.c - JSON text to jansson values, for the response a delivery builds a call from.
 * Every delivery parses its response again (the parsed copy goes while the call is out), and
 * json_loadb's stream reader is made for files and sockets: this reads a buffer directly. It
 * accepts exactly what jansson's decoder accepts by default (one value, any type, duplicate
 * keys keep the last), checks UTF-8 through jansson, and nests at most DEPTH_MAX deep. */
#include "jparse.h"

#include "jutf8.h"

#include <errno.h>
#include <sys/types.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH_MAX  64
#define NUMBER_MAX 64

typedef struct reader {
    const char *p, *end;
    int unique; /* refuse an object that repeats a key */
} reader_t;

static json_t *read_value(reader_t *r, int depth);

static void skip_space(reader_t *r)
{
    const char *p = r->p; /* a local: r->p would be stored and read again at every byte */

    while (p < r->end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    r->p = p;
}

/* The bytes a string's scan stops at: its quote, an escape, a control character (refused) and
 * a byte of a multi-byte character (then the string needs the UTF-8 check). */
static const unsigned char string_stop[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
    [0x80 ... 0xff] = 1,
};

/* An escaped string's contents (r->p just past the opening quote, end at its closing quote)
 * into out, which has room for end - r->p bytes (no escape grows). -1 when malformed. */
static ssize_t unescape(const char *s, const char *end, char *out)
{
    char *o = out;

    while (s < end) {
        unsigned cp;
        if (*s != '\\') {
            *o++ = *s++;
            continue;
        }
        if (++s >= end)
            return -1;
        switch (*s++) {
        case '"':
            *o++ = '"';
            break;
        case '\\':
            *o++ = '\\';
            break;
        case '/':
            *o++ = '/';
            break;
        case 'b':
            *o++ = '\b';
            break;
        case 'f':
            *o++ = '\f';
            break;
        case 'n':
            *o++ = '\n';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'u': {
            int n = jutf8_escape(s, end, &cp);
            if (n < 0)
                return -1;
            s += n;
            o += jutf8_put(o, cp);
            break;
        }
        default:
            return -1;
        }
    }
    return o - out;
}

/* A string (r->p at its opening quote): its bytes in *s and *n, pointing into the text when it
 * has no escape, else into *buf (malloc'd, the caller frees it); *ascii when every byte is
 * (then it needs no UTF-8 check). -1 when malformed. */
static int read_string(reader_t *r, const char **s, size_t *n, char **buf, int *ascii)
{
    const char *start = ++r->p, *q = start;
    int escaped = 0;
    unsigned char high = 0;
    ssize_t len;

    *buf = NULL;
    for (;;) {
        /* plain ASCII four bytes at a time, then byte by byte to the byte that stops it */
        while (r->end - q >= 4 &&
               !(string_stop[(unsigned char)q[0]] | string_stop[(unsigned char)q[1]] |
                 string_stop[(unsigned char)q[2]] | string_stop[(unsigned char)q[3]]))
            q += 4;
        while (q < r->end && !string_stop[(unsigned char)*q])
            q++;
        if (q >= r->end || (unsigned char)*q < 0x20)
            return -1;
        if (*q == '"')
            break;
        if ((unsigned char)*q >= 0x80) {
            high = 0x80;
            q++;
            continue;
        }
        escaped = 1; /* the escaped character is passed over: unescape() reads it */
        if (r->end - q < 2)
            return -1;
        q += 2;
    }
    r->p = q + 1;
    *ascii = high < 0x80 && !escaped; /* an escape may make any character */
    if (!escaped) {
        *s = start;
        *n = (size_t)(q - start);
        return 0;
    }
    if ((*buf = malloc((size_t)(q - start) + 1)) == NULL)
        return -1;
    if ((len = unescape(start, q, *buf)) < 0) {
        free(*buf);
        *buf = NULL;
        return -1;
    }
    *s = *buf;
    *n = (size_t)len;
    return 0;
}

static json_t *read_string_value(reader_t *r)
{
    const char *s;
    size_t n;
    char *buf;
    int ascii;
    json_t *v;

    if (read_string(r, &s, &n, &buf, &ascii) < 0)
        return NULL;
    /* checks UTF-8 unless it is plain ASCII; NULL when invalid */
    v = ascii ? json_stringn_nocheck(s, n) : json_stringn(s, n);
    free(buf);
    return v;
}

static json_t *read_number(reader_t *r)
{
    const char *start = r->p, *q = r->p;
    char text[NUMBER_MAX], *buf = text;
    json_t *v;
    int real = 0;
    size_t n;

    if (q < r->end && *q == '-')
        q++;
    if (q >= r->end || *q < '0' || *q > '9')
        return NULL;
    if (*q == '0')
        q++;
    else
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    if (q < r->end && *q == '.') {
        real = 1;
        if (++q >= r->end || *q < '0' || *q > '9')
            return NULL;
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < r->end && (*q == 'e' || *q == 'E')) {
        real = 1;
        if (++q < r->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= r->end || *q < '0' || *q > '9')
            return NULL;
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    n = (size_t)(q - start);
    /* strtod and strtoll want a terminated copy; a number longer than any botgate writes
     * (jansson reads those too) gets one of its size */
    if (n >= sizeof(text) && (buf = malloc(n + 1)) == NULL)
        return NULL;
    memcpy(buf, start, n);
    buf[n] = '\0';
    r->p = q;
    errno = 0;
    if (real) {
        double d = strtod(buf, NULL);
        v = errno == ERANGE && (d > 1.0 || d < -1.0) ? NULL : json_real(d);
    } else {
        long long i = strtoll(buf, NULL, 10);
        v = errno == ERANGE ? NULL : json_integer((json_int_t)i);
    }
    if (buf != text)
        free(buf);
    return v;
}

static json_t *read_word(reader_t *r, const char *word, json_t *value)
{
    size_t n = strlen(word);

    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return NULL;
    r->p += n;
    return value;
}

/* Takes c (after blanks) when it comes next: 1 when it did. */
static int take(reader_t *r, char c)
{
    skip_space(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return 1;
    }
    return 0;
}

/* After an element of an array or object closed by close: 1 when another follows (its comma
 * taken), 0 when close was taken, -1 when neither comes. */
static int next_element(reader_t *r, char close)
{
    if (take(r, ','))
        return 1;
    return take(r, close) ? 0 : -1;
}

static json_t *read_array(reader_t *r, int depth)
{
    json_t *a = json_array();
    int more;

    r->p++;
    if (take(r, ']'))
        return a;
    for (more = 1; a != NULL && more == 1;) {
        json_t *v = read_value(r, depth + 1);
        if (v == NULL || json_array_append_new(a, v) < 0)
            break;
        if ((more = next_element(r, ']')) == 0)
            return a;
    }
    json_decref(a);
    return NULL;
}

static json_t *read_object(reader_t *r, int depth)
{
    json_t *o = json_object();
    size_t members = 0;
    int more;

    r->p++;
    if (take(r, '}'))
        return o;
    for (more = 1; o != NULL && more == 1;) {
        const char *key;
        size_t n;
        char *buf;
        json_t *v = NULL;
        int bad, ascii;
        skip_space(r);
        if (r->p >= r->end || *r->p != '"' || read_string(r, &key, &n, &buf, &ascii) < 0)
            break;
        if (take(r, ':'))
            v = read_value(r, depth + 1);
        /* both steal v either way; the first checks the key's UTF-8 */
        bad = v == NULL || (ascii ? json_object_setn_new_nocheck(o, key, n, v)
                                  : json_object_setn_new(o, key, n, v)) < 0;
        if (buf != NULL)
            free(buf);
        if (bad)
            break;
        members++;
        /* a repeated key replaced its value, so the object is smaller than its members: seen
         * once at its end, not by a look-up of every key */
        if ((more = next_element(r, '}')) == 0 && (!r->unique || json_object_size(o) == members))
            return o;
    }
    json_decref(o);
    return NULL;
}

static json_t *read_value(reader_t *r, int depth)
{
    if (depth >= DEPTH_MAX) /* depth counts the levels around this value */
        return NULL;
    skip_space(r);
    if (r->p >= r->end)
        return NULL;
    switch (*r->p) {
    case '{':
        return read_object(r, depth);
    case '[':
        return read_array(r, depth);
    case '"':
        return read_string_value(r);
    case 't':
        return read_word(r, "true", json_true());
    case 'f':
        return read_word(r, "false", json_false());
    case 'n':
        return read_word(r, "null", json_null());
    default:
        return read_number(r);
    }
}

static json_t *read_text(const char *text, size_t len, int unique)
{
    reader_t r = {text, text + len, unique};
    json_t *v = read_value(&r, 0);

    skip_space(&r);
    if (v != NULL && r.p != r.end) {
        json_decref(v);
        return NULL;
    }
    return v;
}

json_t *jparse_value(const char *text, size_t len)
{
    return read_text(text, len, 0);
}

json_t *jparse_value_unique(const char *text, size_t len)
{
    return read_text(text, len, 1);
}
