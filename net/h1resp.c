/* h1resp.c - the incremental, strict HTTP/1.1 answer parser of h1resp.h (RFC 9112, RFC 9110).
 *
 * A head is gathered until its empty line (found by a scan that carries its state across feeds),
 * then parsed line by line in one pass: in place when the whole head came in one feed, from
 * _head otherwise. Chunk lines and the bytes between chunks are read byte by byte, so that any
 * split of the same answer gives the same result. */
#include "h1resp.h"
#include "../json/swar.h"

#include <stdlib.h>
#include <string.h>

enum {
    PHASE_HEAD,       /* a head: status line and fields */
    PHASE_BODY_LEN,   /* a body of Content-Length bytes; _remain still to come */
    PHASE_BODY_CLOSE, /* a body that runs until the connection closes */
    PHASE_CHUNK_LINE, /* chunk-size [chunk-ext] CRLF; _sub says where */
    PHASE_CHUNK_DATA, /* chunk data; _remain still to come */
    PHASE_CHUNK_END,  /* the CRLF after a chunk's data; _sub says where */
    PHASE_TRAILER,    /* the trailer section, read as a head without a status line */
    PHASE_END,        /* _result is final */
};

enum { LINE_SIZE, LINE_BWS, LINE_EXT, LINE_LF }; /* _sub in PHASE_CHUNK_LINE */
enum { END_CR, END_LF };                         /* _sub in PHASE_CHUNK_END */

#define CHUNK_LINE_MAX 4096
#define BODY_FIRST_CAP 256 /* a body of unknown length starts here and doubles */

/* What the fields of a final head say about the framing. */
typedef struct framing {
    uint64_t length;
    int has_length, chunked, close, keep_alive;
} framing_t;

static const char E_CLOSED_EARLY[] = "the connection closed before the answer was complete";
static const char E_CLOSED_EMPTY[] = "the connection closed before any answer";
static const char E_HEAD_LONG[] = "answer head too long";
static const char E_TRAILER_LONG[] = "answer trailer section too long";
static const char E_CR[] = "CR not followed by LF in the answer";
static const char E_NUL[] = "NUL byte in the answer head";
static const char E_MEMORY[] = "out of memory reading the answer";
static const char E_TOO_LARGE[] = "answer body larger than allowed";

static int parse_end(h1resp_t *r, int result, const char *error)
{
    r->_result = (int8_t)result;
    r->_phase = PHASE_END;
    if (result == H1RESP_DONE) {
        if (r->body != NULL)
            r->body[r->body_len] = '\0';
    } else {
        r->error = error;
    }
    return result;
}

/* tchar of RFC 9110 5.6.2, by byte; 0x80-0xFF are not */
static const unsigned char tchar[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 10 */
    0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0, /* 20 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, /* 30 */
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 40 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, /* 50 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 60 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0, /* 70 */
};

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* [*s, *e) without the OWS at either end. */
static void ows_trim(const char **s, const char **e)
{
    while (*s < *e && is_ows(**s))
        (*s)++;
    while (*e > *s && is_ows((*e)[-1]))
        (*e)--;
}

/* The rest of a line of a head from s, every byte of it checked as one of a field value or a
 * reason phrase (HTAB, SP, VCHAR, obs-text): *eol gets its CRLF or LF. Returns NULL or what is
 * wrong. The head ends with LF, so the scan stops before end; eight bytes are tested at once
 * while none is below 0x20 or DEL. */
static const char *line_scan(const char *s, const char *end, const char **eol)
{
    const unsigned char *p = (const unsigned char *)s, *e = (const unsigned char *)end;

    for (;;) {
        while (e - p >= 8) {
            uint64_t w = swar_load(p);
            uint64_t stop = swar_below(w, 0x20) | swar_equal(w, 0x7F);
            if (stop != 0) {
                p += swar_clear_bytes(stop);
                break;
            }
            p += 8;
        }
        if ((*p >= 0x20 && *p != 0x7F) || *p == '\t') {
            p++;
            continue;
        }
        if (*p == '\n' || (*p == '\r' && p[1] == '\n')) { /* a CR is never the last byte */
            *eol = (const char *)p;
            return NULL;
        }
        if (*p == '\r')
            return E_CR;
        return *p == '\0' ? E_NUL : "control byte in the answer head";
    }
}

/* The line after the one ending at eol (CRLF or LF). */
static const char *line_next(const char *eol)
{
    return eol + (*eol == '\r' ? 2 : 1);
}

/* Whether s[0..n) is lit (lowercase ASCII) compared without case and without locale. */
static int same_nocase(const char *s, size_t n, const char *lit, size_t lit_len)
{
    if (n != lit_len)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c + ('a' - 'A'));
        if (c != (unsigned char)lit[i])
            return 0;
    }
    return 1;
}

#define SAME(s, n, lit) same_nocase((s), (n), lit, sizeof(lit) - 1)

/* The next element of a comma list in [*p, e), OWS trimmed, in [*el, *el + *len); *p moves past
 * its comma, or becomes NULL after the last element. Returns 0 when no element is left. */
static int list_next(const char **p, const char *e, const char **el, size_t *len)
{
    const char *s = *p, *comma, *end;

    if (s == NULL)
        return 0;
    comma = memchr(s, ',', (size_t)(e - s));
    end = comma != NULL ? comma : e;
    *p = comma != NULL ? comma + 1 : NULL;
    ows_trim(&s, &end);
    *el = s;
    *len = (size_t)(end - s);
    return 1;
}

/* Content-Length: 1*DIGIT, or a list of identical values (RFC 9110 8.6); repeated fields are
 * one list, so each value must equal the one already seen. */
static const char *content_length(framing_t *f, const char *v, size_t n)
{
    const char *p = v, *el;
    size_t len;

    while (list_next(&p, v + n, &el, &len)) {
        uint64_t x = 0;
        if (len == 0)
            return "Content-Length is not a number";
        for (size_t i = 0; i < len; i++) {
            unsigned d = (unsigned)(unsigned char)el[i] - '0';
            if (d > 9)
                return "Content-Length is not a number";
            if (x > (UINT64_MAX - d) / 10)
                return "Content-Length too large";
            x = x * 10 + d;
        }
        if (f->has_length && x != f->length)
            return "differing Content-Length values";
        f->has_length = 1;
        f->length = x;
    }
    return NULL;
}

/* Transfer-Encoding: only "chunked" alone (a second field makes a list of two codings). */
static const char *transfer_encoding(framing_t *f, const char *v, size_t n, int http10)
{
    if (http10)
        return "Transfer-Encoding in an HTTP/1.0 answer";
    if (f->chunked || !SAME(v, n, "chunked"))
        return "unsupported transfer coding";
    f->chunked = 1;
    return NULL;
}

static void connection(framing_t *f, const char *v, size_t n)
{
    const char *p = v, *el;
    size_t len;

    while (list_next(&p, v + n, &el, &len)) {
        if (SAME(el, len, "close"))
            f->close = 1;
        else if (SAME(el, len, "keep-alive"))
            f->keep_alive = 1;
    }
}

/* dst gets v[0..n) when it fits with its NUL, else "". Repeated fields: the last one wins. */
static void keep_value(char *dst, size_t size, const char *v, size_t n)
{
    if (n >= size)
        n = 0;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* The fields of a head from p (a line start) through its empty line, which ends the head at end:
 * their syntax and, with f, what they mean for a final head. Returns NULL or what is wrong. */
static const char *fields(h1resp_t *r, framing_t *f, int http10, const char *p, const char *end)
{
    for (;;) {
        const char *name = p, *v, *ve, *err;
        size_t nlen;
        if (*p == '\n' || (*p == '\r' && p[1] == '\n'))
            return NULL; /* the empty line */
        if (is_ows(*p))
            return "obs-fold in the answer head";
        while (tchar[(unsigned char)*p]) /* stops at the LF at the latest */
            p++;
        if (*p != ':') {
            if (*p == '\n' || (*p == '\r' && p[1] == '\n'))
                return "field line without a colon";
            if (is_ows(*p))
                return "whitespace between a field name and its colon";
            if (*p == '\r')
                return E_CR;
            if (*p == '\0')
                return E_NUL;
            return "field name is not a token";
        }
        if (p == name)
            return "empty field name";
        nlen = (size_t)(p - name);
        v = p + 1;
        if ((err = line_scan(v, end, &ve)) != NULL)
            return err;
        p = line_next(ve);
        ows_trim(&v, &ve);
        if (f == NULL)
            continue;
        /* dispatch on the length first: most fields are none of these */
        switch (nlen) {
        case 10:
            if (SAME(name, nlen, "connection"))
                connection(f, v, (size_t)(ve - v));
            break;
        case 11:
            if (SAME(name, nlen, "retry-after"))
                keep_value(r->retry_after, sizeof(r->retry_after), v, (size_t)(ve - v));
            break;
        case 12:
            if (SAME(name, nlen, "content-type"))
                keep_value(r->content_type, sizeof(r->content_type), v, (size_t)(ve - v));
            break;
        case 14:
            if (SAME(name, nlen, "content-length") &&
                (err = content_length(f, v, (size_t)(ve - v))) != NULL)
                return err;
            break;
        case 17:
            if (SAME(name, nlen, "transfer-encoding") &&
                (err = transfer_encoding(f, v, (size_t)(ve - v), http10)) != NULL)
                return err;
            break;
        }
    }
}

/* status-line = HTTP-version SP 3DIGIT SP [reason-phrase], or (as curl) nothing after the code,
 * at the start of a head that ends at end. *next gets the line after it. */
static const char *status_line(const char *p, const char *end, int *status, int *http10,
                               const char **next)
{
    const char *eol, *err;

    /* 12 bytes and a line end at least; the LF that ends a shorter line fails a test below */
    if (end - p < 13 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ')
        return "not an HTTP/1.1 or HTTP/1.0 status line";
    *http10 = p[7] == '0';
    *status = 0;
    for (int i = 9; i < 12; i++) {
        if (p[i] < '0' || p[i] > '9')
            return "status code is not three digits";
        *status = *status * 10 + (p[i] - '0');
    }
    if (*status < 100 || *status > 599)
        return "status code out of range";
    if (p[12] >= '0' && p[12] <= '9')
        return "status code is not three digits";
    if (p[12] != ' ' && p[12] != '\r' && p[12] != '\n')
        return "no space after the status code";
    if ((err = line_scan(p + 12 + (p[12] == ' '), end, &eol)) != NULL)
        return err;
    *next = line_next(eol);
    return NULL;
}

/* Room for len bytes of body and its NUL, where the body can reach most bytes (len <= most <=
 * _body_max): from BODY_FIRST_CAP doubling, never more than most + 1. */
static int body_reserve(h1resp_t *r, size_t len, size_t most)
{
    size_t want = len + 1, cap = r->_body_cap != 0 ? r->_body_cap : BODY_FIRST_CAP;
    char *b;

    if (want <= r->_body_cap)
        return 1;
    while (cap < want && cap <= SIZE_MAX / 2)
        cap *= 2;
    if (cap < want)
        cap = want;
    if (cap - 1 > most)
        cap = most + 1;
    b = realloc(r->body, cap);
    if (b == NULL)
        return 0;
    r->body = b;
    r->_body_cap = cap;
    return 1;
}

/* After the final head: where the body is, by RFC 9112 6.3. */
static int body_start(h1resp_t *r, const framing_t *f, int http10)
{
    r->keep_alive = http10 ? f->keep_alive && !f->close : !f->close;
    if (f->chunked && f->has_length)
        r->keep_alive = 0; /* RFC 9112 6.3: a smuggling attempt or a broken server */
    if (r->_no_body || r->status == 204 || r->status == 304)
        return parse_end(r, H1RESP_DONE, NULL);
    if (f->chunked) {
        r->_phase = PHASE_CHUNK_LINE;
        r->_sub = LINE_SIZE;
        r->_remain = 0;
        r->_line_len = 0;
        return H1RESP_MORE;
    }
    if (f->has_length) {
        if (f->length > r->_body_max)
            return parse_end(r, H1RESP_TOO_LARGE, E_TOO_LARGE);
        if (f->length == 0)
            return parse_end(r, H1RESP_DONE, NULL);
        r->_remain = f->length;
        r->_phase = PHASE_BODY_LEN;
        return H1RESP_MORE;
    }
    r->keep_alive = 0;
    r->_phase = PHASE_BODY_CLOSE;
    return H1RESP_MORE;
}

/* A whole head (or trailer section) at p, of n bytes ending with its empty line. */
static int head_parse(h1resp_t *r, const char *p, size_t n)
{
    const char *end = p + n, *err;
    int status, http10;
    framing_t f = {0};

    if (r->_phase == PHASE_TRAILER) {
        /* trailer fields: checked as fields, their meaning ignored (RFC 9112 7.1.2) */
        if ((err = fields(r, NULL, 0, p, end)) != NULL)
            return parse_end(r, H1RESP_BAD, err);
        return parse_end(r, H1RESP_DONE, NULL);
    }
    if ((err = status_line(p, end, &status, &http10, &p)) != NULL)
        return parse_end(r, H1RESP_BAD, err);
    if (status == 101)
        return parse_end(r, H1RESP_BAD, "unexpected 101 Switching Protocols");
    if (status < 200) { /* an interim answer: its fields are checked, not kept */
        if ((err = fields(r, NULL, http10, p, end)) != NULL)
            return parse_end(r, H1RESP_BAD, err);
        return H1RESP_MORE; /* the next head follows */
    }
    r->status = status;
    if ((err = fields(r, &f, http10, p, end)) != NULL)
        return parse_end(r, H1RESP_BAD, err);
    return body_start(r, &f, http10);
}

/* Offset just past the empty line that ends a head in d[0..n), or 0 when d holds no end yet. */
static size_t head_end(h1resp_t *r, const char *d, size_t n)
{
    size_t i = 0;
    unsigned s = r->_eoh;

    while (i < n) {
        if (s == 0) {
            const char *nl = memchr(d + i, '\n', n - i);
            if (nl == NULL)
                break;
            i = (size_t)(nl - d) + 1;
            s = 1;
            continue;
        }
        char c = d[i++];
        if (c == '\n') {
            r->_eoh = 0;
            return i;
        }
        s = s == 1 && c == '\r' ? 2 : 0;
    }
    r->_eoh = (uint8_t)s;
    return 0;
}

static int head_append(h1resp_t *r, const char *d, size_t n)
{
    size_t need = r->_head_len + n; /* <= H1RESP_HEAD_MAX: the caller checked */

    if (need > r->_head_cap) {
        size_t cap = r->_head_cap != 0 ? r->_head_cap : 1024;
        char *h;
        while (cap < need)
            cap *= 2;
        if (cap > H1RESP_HEAD_MAX)
            cap = H1RESP_HEAD_MAX;
        if ((h = realloc(r->_head, cap)) == NULL)
            return 0;
        r->_head = h;
        r->_head_cap = (uint32_t)cap;
    }
    memcpy(r->_head + r->_head_len, d, n);
    r->_head_len = (uint32_t)need;
    return 1;
}

/* Bytes of d[0..n) that belong to the head being read; parses it when it ends there. */
static size_t head_feed(h1resp_t *r, const char *d, size_t n)
{
    size_t end = head_end(r, d, n), take = end != 0 ? end : n;

    if (r->_head_len + take > H1RESP_HEAD_MAX) {
        parse_end(r, H1RESP_BAD, r->_phase == PHASE_TRAILER ? E_TRAILER_LONG : E_HEAD_LONG);
        return take;
    }
    if (r->_head_len == 0 && end != 0) { /* the usual case: the whole head is here */
        head_parse(r, d, end);
        return take;
    }
    if (!head_append(r, d, take)) {
        parse_end(r, H1RESP_BAD, E_MEMORY);
        return take;
    }
    if (end != 0) {
        size_t len = r->_head_len;
        r->_head_len = 0; /* _head is read in place; the next head starts anew */
        head_parse(r, r->_head, len);
    }
    return take;
}

/* Bytes of d[0..n) read on a chunk line; at its end, the chunk's data or the trailer follow. */
static size_t chunk_line(h1resp_t *r, const char *d, size_t n)
{
    size_t i = 0;

    while (i < n) {
        unsigned char c = (unsigned char)d[i++];
        if (++r->_line_len > CHUNK_LINE_MAX) {
            parse_end(r, H1RESP_BAD, "chunk line too long");
            return i;
        }
        switch (r->_sub) {
        case LINE_SIZE: {
            unsigned x = c >= '0' && c <= '9'                     ? c - '0'
                         : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
                                                                  : 16;
            if (x < 16) {
                if (r->_remain > UINT64_MAX >> 4) {
                    parse_end(r, H1RESP_BAD, "chunk size too large");
                    return i;
                }
                r->_remain = r->_remain << 4 | x;
                continue;
            }
            if (r->_line_len == 1) {
                parse_end(r, H1RESP_BAD, "chunk size missing");
                return i;
            }
            if (c == ';')
                r->_sub = LINE_EXT;
            else if (is_ows((char)c))
                r->_sub = LINE_BWS;
            else if (c == '\r')
                r->_sub = LINE_LF;
            else if (c != '\n') {
                parse_end(r, H1RESP_BAD, "chunk size is not hexadecimal");
                return i;
            }
            break;
        }
        case LINE_BWS: /* BWS may stand before the ';' of an extension, nothing else */
            if (c == ';')
                r->_sub = LINE_EXT;
            else if (!is_ows((char)c)) {
                parse_end(r, H1RESP_BAD, "whitespace after a chunk size without an extension");
                return i;
            }
            break;
        case LINE_EXT: /* chunk-ext: read to the line end, ignored */
            if (c == '\r')
                r->_sub = LINE_LF;
            else if (c != '\n' && c != '\t' && (c < 0x20 || c == 0x7F)) {
                parse_end(r, H1RESP_BAD, "control byte in a chunk extension");
                return i;
            }
            break;
        case LINE_LF:
            if (c != '\n') {
                parse_end(r, H1RESP_BAD, E_CR);
                return i;
            }
            break;
        }
        if (c != '\n')
            continue;
        /* the line ended */
        if (r->_remain == 0) {
            r->_phase = PHASE_TRAILER;
            r->_eoh = 1; /* right after a LF: an empty line ends the trailer section at once */
            return i;
        }
        if (r->_remain > r->_body_max - r->body_len) {
            parse_end(r, H1RESP_TOO_LARGE, E_TOO_LARGE);
            return i;
        }
        r->_phase = PHASE_CHUNK_DATA;
        return i;
    }
    return i;
}

/* Bytes of d[0..n) that are the CRLF after a chunk's data. */
static size_t chunk_end(h1resp_t *r, const char *d, size_t n)
{
    size_t i = 0;

    while (i < n) {
        char c = d[i++];
        if (r->_sub == END_CR && c == '\r') {
            r->_sub = END_LF;
        } else if (c == '\n') {
            r->_phase = PHASE_CHUNK_LINE;
            r->_sub = LINE_SIZE;
            r->_remain = 0;
            r->_line_len = 0;
            return i;
        } else {
            parse_end(r, H1RESP_BAD, r->_sub == END_LF ? E_CR : "chunk data not followed by CRLF");
            return i;
        }
    }
    return i;
}

/* Copies what of d[0..n) belongs to the body's current run (_remain bytes, within _body_max:
 * the whole body after a Content-Length, else a chunk). The buffer grows with the bytes that
 * come, not with the length the answer declares: a length that never comes costs nothing. A
 * Content-Length body's buffer never grows past its length, so that one that comes in one piece
 * gets a buffer of its length; chunks may follow a chunk, so that one doubles. Bytes copied, or 0
 * when memory ran out (the answer ended). */
static size_t body_copy(h1resp_t *r, const char *d, size_t n)
{
    size_t k = r->_remain < n ? (size_t)r->_remain : n;
    size_t most = r->_phase == PHASE_BODY_LEN ? r->body_len + (size_t)r->_remain : r->_body_max;

    if (!body_reserve(r, r->body_len + k, most)) {
        parse_end(r, H1RESP_BAD, E_MEMORY);
        return 0;
    }
    memcpy(r->body + r->body_len, d, k);
    r->body_len += k;
    r->_remain -= k;
    return k;
}

void h1resp_init(h1resp_t *r, size_t body_max, int no_body)
{
    memset(r, 0, sizeof(*r));
    r->_body_max = body_max;
    r->_no_body = no_body != 0;
}

int h1resp_feed(h1resp_t *r, const char *data, size_t len, size_t *used)
{
    size_t pos = 0;

    if (len > 0)
        r->_started = 1;
    while (r->_phase != PHASE_END && pos < len) {
        const char *d = data + pos;
        size_t n = len - pos;
        switch (r->_phase) {
        case PHASE_HEAD:
        case PHASE_TRAILER:
            pos += head_feed(r, d, n);
            break;
        case PHASE_BODY_LEN:
            pos += body_copy(r, d, n);
            if (r->_remain == 0)
                parse_end(r, H1RESP_DONE, NULL);
            break;
        case PHASE_BODY_CLOSE:
            if (n > r->_body_max - r->body_len) {
                parse_end(r, H1RESP_TOO_LARGE, E_TOO_LARGE);
                break;
            }
            if (!body_reserve(r, r->body_len + n, r->_body_max)) {
                parse_end(r, H1RESP_BAD, E_MEMORY);
                break;
            }
            memcpy(r->body + r->body_len, d, n);
            r->body_len += n;
            pos = len;
            break;
        case PHASE_CHUNK_LINE:
            pos += chunk_line(r, d, n);
            break;
        case PHASE_CHUNK_DATA:
            pos += body_copy(r, d, n);
            if (r->_remain == 0) {
                r->_phase = PHASE_CHUNK_END;
                r->_sub = END_CR;
            }
            break;
        case PHASE_CHUNK_END:
            pos += chunk_end(r, d, n);
            break;
        }
    }
    *used = pos;
    return r->_result;
}

int h1resp_eof(h1resp_t *r)
{
    if (r->_phase == PHASE_END)
        return r->_result;
    if (r->_phase == PHASE_BODY_CLOSE) {
        r->keep_alive = 0;
        return parse_end(r, H1RESP_DONE, NULL);
    }
    return parse_end(r, H1RESP_BAD, r->_started ? E_CLOSED_EARLY : E_CLOSED_EMPTY);
}

int h1resp_started(const h1resp_t *r)
{
    return r->_started;
}

char *h1resp_take_body(h1resp_t *r)
{
    char *b = r->body;

    r->body = NULL;
    r->_body_cap = 0;
    return b;
}

void h1resp_release(h1resp_t *r)
{
    free(r->body);
    free(r->_head);
    r->body = NULL;
    r->_head = NULL;
    r->_body_cap = 0;
    r->_head_cap = 0;
    r->_head_len = 0;
}
