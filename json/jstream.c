/* jstream.c - a JSON text checked as its pieces come (jstream.h): a state machine over bytes,
 * resumable at any byte, holding a container stack of at most JSTREAM_DEPTH_MAX levels and the
 * string being read when it is a key or an element of the watched array; nothing else of the
 * text is kept. It accepts what jparse accepts but for the checks that need the value: the
 * range of numbers and repeated keys (the caller parses the rest of the text with jparse). */
#include "jstream.h"

#include "jutf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_KEEP 16 /* a key's bytes kept: enough for the names watched */

typedef enum {
    ST_VALUE,  /* a value comes (or ']' for an array's first) */
    ST_AFTER,  /* a value ended: ',' or the container's close */
    ST_KEY,    /* a key's quote comes (or '}' for an object's first) */
    ST_COLON,  /* after a key */
    ST_STR,    /* in a string */
    ST_ESC,    /* after a backslash */
    ST_HEX,    /* in \uXXXX */
    ST_LOW_BS, /* after a high surrogate: its low one's backslash */
    ST_LOW_U,  /* ... and its 'u' */
    ST_UTF8,   /* continuation bytes of a character */
    ST_NUM,    /* in a number (sub: its part) */
    ST_LIT,    /* in true, false or null */
    ST_DONE,   /* the value ended: blanks only */
    ST_FAILED
} state_t;

/* a number's parts; the odd ones may end it */
enum { N_MINUS, N_ZERO, N_DOT, N_INT, N_E, N_FRAC, N_ESIGN, N_EXP };

struct jstream {
    unsigned flags;
    jstream_element_fn *fn;
    void *arg;
    state_t st;
    int sub;                       /* ST_NUM: the part; ST_LIT: the bytes matched; ST_HEX: digits */
    const char *word;              /* ST_LIT */
    unsigned cp, high;             /* ST_HEX: the code point read; a high surrogate waiting */
    unsigned need, lo, hi;         /* ST_UTF8: bytes to come, the next one's range */
    size_t off;                    /* bytes taken */
    int depth;                     /* containers open */
    int first;                     /* the container opened just now: its close may come */
    char stack[JSTREAM_DEPTH_MAX]; /* '{' or '[' */
    int recip_level;               /* the level of "recipients"'s object, 0 none */
    int target_level;              /* the level of the watched array, 0 none */
    int found;                     /* the watched array was opened */
    int which;                     /* its key: 2 memberIds, 3 recipientIds, 0 none (the top) */
    int key_is;                    /* what the last key names: 0, 1 "recipients", 2/3 the ids */
    int in_key, keep;              /* the string is a key; its bytes are kept */
    size_t len;                    /* the string's decoded bytes */
    size_t start, end, count;      /* the watched array */
    char top;
    char key[KEY_KEEP + 1];
    char err[96];
    char buf[JSTREAM_STRING_MAX + 1];
};

static const char *const watched[] = {"memberIds", "recipientIds"};

jstream_t *jstream_new(unsigned flags, jstream_element_fn *fn, void *arg)
{
    jstream_t *s = calloc(1, sizeof(*s));

    if (s != NULL) {
        s->flags = flags;
        s->fn = fn;
        s->arg = arg;
    }
    return s;
}

void jstream_free(jstream_t *s)
{
    free(s);
}

static int fail(jstream_t *s, const char *what)
{
    snprintf(s->err, sizeof(s->err), "%s at byte %zu", what, s->off);
    s->st = ST_FAILED;
    return -1;
}

static void put(jstream_t *s, char c)
{
    if (s->keep) {
        size_t cap = s->in_key ? KEY_KEEP : JSTREAM_STRING_MAX;
        if (s->len < cap)
            (s->in_key ? s->key : s->buf)[s->len] = c;
    }
    s->len++;
}

static void put_cp(jstream_t *s, unsigned cp)
{
    char u[4];
    size_t n = jutf8_put(u, cp);

    for (size_t i = 0; i < n; i++)
        put(s, u[i]);
}

/* A value ended (its last byte taken). */
static void value_done(jstream_t *s)
{
    s->st = s->depth == 0 ? ST_DONE : ST_AFTER;
}

static int is_blank(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The container at the top closes at the byte being taken. */
static void pop(jstream_t *s)
{
    if (s->depth == s->target_level) {
        s->end = s->off + 1;
        s->target_level = -1; /* closed: not watched again */
    }
    if (s->depth == s->recip_level)
        s->recip_level = 0;
    s->depth--;
    value_done(s);
}

static int push(jstream_t *s, char c)
{
    s->stack[s->depth++] = c;
    s->first = 1;
    s->st = c == '{' ? ST_KEY : ST_VALUE;
    return 0;
}

/* A value starts with c (not blank). 1 when an element's call paused (never here), -1 bad. */
static int value_start(jstream_t *s, unsigned char c)
{
    int key_is = s->key_is, element = s->depth > 0 && s->depth == s->target_level;

    s->key_is = 0;
    if (s->depth >= JSTREAM_DEPTH_MAX)
        return fail(s, "nested too deep");
    if (s->top == 0)
        s->top = (char)c;
    if (element) {
        s->count++;
        if (c != '"' && s->fn != NULL)
            s->fn(s->arg, s->count - 1, NULL, 0);
    }
    switch (c) {
    case '{':
        push(s, '{');
        if (key_is == 1)
            s->recip_level = s->depth;
        return 0;
    case '[':
        push(s, '[');
        if (!s->found && (key_is >= 2 || (s->depth == 1 && (s->flags & JSTREAM_TOP_ARRAY)))) {
            s->found = 1;
            s->target_level = s->depth;
            s->start = s->off;
            s->which = key_is;
        }
        return 0;
    case '"':
        s->st = ST_STR;
        s->in_key = 0;
        s->keep = element;
        s->len = 0;
        return 0;
    case 't':
    case 'f':
    case 'n':
        s->word = c == 't' ? "true" : c == 'f' ? "false" : "null";
        s->sub = 1;
        s->st = ST_LIT;
        return 0;
    case '-':
        s->sub = N_MINUS;
        s->st = ST_NUM;
        return 0;
    default:
        if (c < '0' || c > '9')
            return fail(s, "invalid token");
        s->sub = c == '0' ? N_ZERO : N_INT;
        s->st = ST_NUM;
        return 0;
    }
}

/* The closing quote of a string was taken: 1 when the element's call paused. */
static int string_done(jstream_t *s)
{
    if (s->in_key) {
        const char *k = s->key;
        s->key[s->len < KEY_KEEP ? s->len : KEY_KEEP] = '\0';
        s->key_is = 0;
        if (s->len <= KEY_KEEP) {
            if (s->depth == 1 && s->stack[0] == '{' && strcmp(k, "recipients") == 0)
                s->key_is = 1;
            else if (s->recip_level > 0 && s->depth == s->recip_level && !s->found)
                for (int i = 0; i < 2; i++)
                    if (strcmp(k, watched[i]) == 0)
                        s->key_is = 2 + i;
        }
        s->st = ST_COLON;
        return 0;
    }
    value_done(s);
    if (!s->keep || s->fn == NULL)
        return 0;
    if (s->len > JSTREAM_STRING_MAX)
        return s->fn(s->arg, s->count - 1, NULL, s->len) != 0;
    s->buf[s->len] = '\0';
    return s->fn(s->arg, s->count - 1, s->buf, s->len) != 0;
}

/* The lead byte c of a multi-byte character: the bytes to come and the next one's range. */
static int utf8_lead(jstream_t *s, unsigned char c)
{
    s->lo = 0x80;
    s->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        s->need = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        s->need = 2;
    else if (c >= 0xF0 && c <= 0xF4)
        s->need = 3;
    else
        return fail(s, "invalid UTF-8");
    if (c == 0xE0)
        s->lo = 0xA0; /* overlong */
    else if (c == 0xED)
        s->hi = 0x9F; /* surrogates */
    else if (c == 0xF0)
        s->lo = 0x90; /* overlong */
    else if (c == 0xF4)
        s->hi = 0x8F; /* past U+10FFFF */
    s->st = ST_UTF8;
    return 0;
}

static int escape(jstream_t *s, unsigned char c)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *at = c != 0 ? strchr(from, c) : NULL;

    if (c == 'u') {
        s->st = ST_HEX;
        s->sub = 0;
        s->cp = 0;
        return 0;
    }
    if (at == NULL)
        return fail(s, "invalid escape");
    put(s, to[at - from]);
    s->st = ST_STR;
    return 0;
}

static int hex_digit(jstream_t *s, unsigned char c)
{
    char d[5] = {'0', '0', '0', (char)c, 0};
    unsigned v;

    if (jutf8_hex4(d, &v) < 0)
        return fail(s, "invalid \\u escape");
    s->cp = s->cp << 4 | v;
    if (++s->sub < 4)
        return 0;
    if (s->high != 0) {
        if (s->cp < 0xDC00 || s->cp > 0xDFFF)
            return fail(s, "invalid \\u escape: a high surrogate without its low one");
        put_cp(s, 0x10000 + ((s->high - 0xD800) << 10) + (s->cp - 0xDC00));
        s->high = 0;
    } else if (s->cp >= 0xDC00 && s->cp <= 0xDFFF) {
        return fail(s, "invalid \\u escape: a lone low surrogate");
    } else if (s->cp >= 0xD800 && s->cp <= 0xDBFF) {
        s->high = s->cp;
        s->st = ST_LOW_BS;
        return 0;
    } else if (s->cp == 0) {
        return fail(s, "\\u0000 is not allowed");
    } else {
        put_cp(s, s->cp);
    }
    s->st = ST_STR;
    return 0;
}

/* A byte that may end a number (c): 1 when it is the number's, 0 when it ended before c. */
static int number_byte(jstream_t *s, unsigned char c)
{
    int digit = c >= '0' && c <= '9';

    switch (s->sub) {
    case N_MINUS:
        if (!digit)
            return fail(s, "invalid number");
        s->sub = c == '0' ? N_ZERO : N_INT;
        return 1;
    case N_ZERO:
    case N_INT:
        if (digit && s->sub == N_INT)
            return 1;
        if (c == '.') {
            s->sub = N_DOT;
            return 1;
        }
        if (c == 'e' || c == 'E') {
            s->sub = N_E;
            return 1;
        }
        if (digit)
            return fail(s, "invalid number: a leading zero");
        return 0;
    case N_DOT:
        if (!digit)
            return fail(s, "invalid number");
        s->sub = N_FRAC;
        return 1;
    case N_FRAC:
        if (digit)
            return 1;
        if (c == 'e' || c == 'E') {
            s->sub = N_E;
            return 1;
        }
        return 0;
    case N_E:
        if (c == '+' || c == '-') {
            s->sub = N_ESIGN;
            return 1;
        }
        /* fall through */
    case N_ESIGN:
        if (!digit)
            return fail(s, "invalid number");
        s->sub = N_EXP;
        return 1;
    default: /* N_EXP */
        return digit;
    }
}

/* The structural byte c (blanks passed over already) in state ST_VALUE, ST_AFTER, ST_KEY,
 * ST_COLON or ST_DONE. */
static int structural(jstream_t *s, unsigned char c)
{
    char in = s->depth > 0 ? s->stack[s->depth - 1] : 0;

    switch (s->st) {
    case ST_VALUE:
        if (c == ']' && s->first && in == '[') {
            pop(s);
            return 0;
        }
        s->first = 0;
        return value_start(s, c);
    case ST_AFTER:
        if (c == ',') {
            s->st = in == '{' ? ST_KEY : ST_VALUE;
            s->first = 0;
            return 0;
        }
        if (c == (in == '{' ? '}' : ']')) {
            pop(s);
            return 0;
        }
        return fail(s, in == '{' ? "',' or '}' expected" : "',' or ']' expected");
    case ST_KEY:
        if (c == '}' && s->first) {
            pop(s);
            return 0;
        }
        if (c != '"')
            return fail(s, "a string key expected");
        s->first = 0;
        s->st = ST_STR;
        s->in_key = s->keep = 1;
        s->len = 0;
        return 0;
    case ST_COLON:
        if (c != ':')
            return fail(s, "':' expected");
        s->st = ST_VALUE;
        return 0;
    default: /* ST_DONE */
        return fail(s, "end of text expected");
    }
}

/* The string's plain bytes from p (not past end): passed over, kept when kept. */
static const char *plain_run(jstream_t *s, const char *p, const char *end)
{
    const char *q = p;

    while (q < end && (unsigned char)*q >= 0x20 && (unsigned char)*q < 0x80 && *q != '"' &&
           *q != '\\')
        q++;
    if (s->keep)
        for (const char *c = p; c < q; c++)
            put(s, *c);
    else
        s->len += (size_t)(q - p);
    return q;
}

ssize_t jstream_feed(jstream_t *s, const char *p, size_t n)
{
    const char *at = p, *end = p + n;

    if (s->st == ST_FAILED)
        return -1;
    while (at < end) {
        unsigned char c = (unsigned char)*at;
        int r = 0;

        switch (s->st) {
        case ST_STR: {
            const char *q = plain_run(s, at, end);
            s->off += (size_t)(q - at);
            if ((at = q) == end)
                return (ssize_t)n;
            c = (unsigned char)*at;
            if (c == '"')
                r = string_done(s);
            else if (c == '\\')
                s->st = ST_ESC;
            else if (c < 0x20)
                r = fail(s, "control character in a string");
            else if ((r = utf8_lead(s, c)) == 0)
                put(s, (char)c);
            break;
        }
        case ST_UTF8:
            if (c < s->lo || c > s->hi) {
                r = fail(s, "invalid UTF-8");
                break;
            }
            put(s, (char)c);
            s->lo = 0x80;
            s->hi = 0xBF;
            if (--s->need == 0)
                s->st = ST_STR;
            break;
        case ST_ESC:
            r = escape(s, c);
            break;
        case ST_HEX:
            r = hex_digit(s, c);
            break;
        case ST_LOW_BS:
            if (c != '\\')
                r = fail(s, "invalid \\u escape: a high surrogate without its low one");
            else
                s->st = ST_LOW_U;
            break;
        case ST_LOW_U:
            if (c != 'u')
                r = fail(s, "invalid \\u escape: a high surrogate without its low one");
            else
                s->st = ST_HEX, s->sub = 0, s->cp = 0;
            break;
        case ST_LIT:
            if (c != (unsigned char)s->word[s->sub])
                r = fail(s, "invalid literal");
            else if (s->word[++s->sub] == '\0')
                value_done(s);
            break;
        case ST_NUM:
            if ((r = number_byte(s, c)) == 0) {
                value_done(s);
                continue; /* c is the next state's */
            }
            r = r < 0 ? -1 : 0;
            break;
        case ST_FAILED:
            return -1;
        default:
            if (!is_blank(c))
                r = structural(s, c);
            break;
        }
        if (r < 0)
            return -1;
        s->off++;
        at++;
        if (r > 0)
            return (ssize_t)(at - p);
    }
    return (ssize_t)n;
}

int jstream_end(jstream_t *s)
{
    if (s->st == ST_NUM && s->depth == 0 && (s->sub & 1) && s->sub != N_MINUS)
        s->st = ST_DONE;
    if (s->st == ST_FAILED)
        return -1;
    if (s->st != ST_DONE)
        return fail(s, s->top == 0 ? "no value" : "unexpected end of text");
    return 0;
}

const char *jstream_error(const jstream_t *s)
{
    return s->err;
}

char jstream_top(const jstream_t *s)
{
    return s->top;
}

int jstream_array(const jstream_t *s, size_t *start, size_t *end, size_t *count, const char **key)
{
    if (!s->found || s->target_level != -1)
        return -1;
    *start = s->start;
    *end = s->end;
    *count = s->count;
    *key = s->which >= 2 ? watched[s->which - 2] : "";
    return 0;
}
