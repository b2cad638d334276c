/* h1resp.h - an HTTP/1.1 answer read as its bytes arrive (RFC 9112), strictly: the status line,
 * the fields that frame the body (Content-Length, Transfer-Encoding: chunked, Connection), the
 * two fields botgate reads (Content-Type, Retry-After) and the body. Pure: no I/O, no clock.
 * 1xx heads are read and skipped. A head that arrives whole in one feed is parsed in place;
 * only a head split across feeds is copied. The body is the one allocation of a usual answer. */
#ifndef BOTGATE_NET_H1RESP_H
#define BOTGATE_NET_H1RESP_H

#include <stddef.h>
#include <stdint.h>

enum { H1RESP_MORE = 0, H1RESP_DONE = 1, H1RESP_BAD = -1, H1RESP_TOO_LARGE = -2 };
#define H1RESP_HEAD_MAX 16384 /* status line + fields of one head, CRLFs included */

/* The caller owns the struct; h1resp_release frees what it points to (body, head buffer). */
typedef struct h1resp {
    /* results, valid once h1resp_feed/h1resp_eof returned H1RESP_DONE (status: once the final
     * head is read) */
    int status;             /* the final answer's status (100-199 heads are skipped), 0 before */
    int keep_alive;         /* 1: the connection may carry the next request after this answer */
    char content_type[256]; /* "" when absent or longer than the field (then not stored) */
    char retry_after[32];   /* "" when absent or too long; value with OWS trimmed */
    char *body;             /* owned, NUL-terminated when not NULL; NULL when the body was empty */
    size_t body_len;
    const char *error; /* static text saying what was wrong, set with H1RESP_BAD/TOO_LARGE */
    /* private state below */
    char *_head;        /* owned: a head (or trailer section) split across feeds, so far */
    uint32_t _head_len; /* bytes in _head; 0 when no head is being gathered */
    uint32_t _head_cap; /* bytes allocated at _head */
    size_t _body_max;   /* bytes of decoded body allowed */
    size_t _body_cap;   /* bytes allocated at body (one more than it may hold, for the NUL) */
    uint64_t _remain;   /* Content-Length bytes or chunk bytes still to come; the chunk size
                         * being read on a chunk line */
    uint16_t _line_len; /* bytes of the chunk line read so far */
    int8_t _result;     /* H1RESP_MORE until the answer ended; then what every call returns */
    uint8_t _phase;     /* where in the answer the next byte belongs (h1resp.c) */
    uint8_t _sub;       /* the state inside a chunk line, or after a chunk's data */
    uint8_t _eoh;       /* the end of a head across feeds: 0 in a line, 1 after LF, 2 after
                         * LF CR */
    uint8_t _no_body;   /* the request was HEAD */
    uint8_t _started;   /* a byte has been fed */
} h1resp_t;

/* body_max: bytes of body allowed (decoded); no_body: 1 when the request was HEAD (no body
 * follows any status). */
void h1resp_init(h1resp_t *r, size_t body_max, int no_body);

/* Feeds the next bytes of the connection. *used is set to how many were consumed: after
 * H1RESP_DONE the rest belongs to no answer (the caller then closes the connection). Returns
 * H1RESP_MORE (all consumed, need more), H1RESP_DONE, H1RESP_BAD or H1RESP_TOO_LARGE (body_max
 * exceeded). After a non-MORE result further feeds return the same result. */
int h1resp_feed(h1resp_t *r, const char *data, size_t len, size_t *used);

/* The peer closed the connection (read returned 0): H1RESP_DONE when the body was delimited by
 * the close (then keep_alive is 0), H1RESP_BAD otherwise (error says "the connection closed
 * before the answer was complete" or, with no byte at all received, "the connection closed
 * before any answer"). */
int h1resp_eof(h1resp_t *r);

/* Whether any byte of an answer has been received (the gateway needs to tell "nothing came
 * back" from a cut answer). */
int h1resp_started(const h1resp_t *r);

/* Hands the body over (the caller frees it with free()); r keeps none. Called once
 * H1RESP_DONE was returned. */
char *h1resp_take_body(h1resp_t *r);

/* Frees what r owns (body, head buffer); r may be init'ed again. */
void h1resp_release(h1resp_t *r);

#endif
