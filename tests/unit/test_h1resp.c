/* The HTTP/1.1 answer parser (net/h1resp.h): every rule of its strictness accepted and refused,
 * and every answer fed whole, byte by byte and cut in two at every offset, each piece in a buffer
 * of its own (so that ASan sees a read past a piece), with the same outcome each way. */
#include "../../net/h1resp.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MAX     4096 /* body_max of most cases */
#define SPLITS  2048 /* answers up to this long are also fed in every split */
#define CLOSE   1    /* run(): the peer closes after the last byte */
#define NOCLOSE 0

/* What one parse came to. */
typedef struct outcome {
    int rc, status, keep_alive;
    char content_type[256], retry_after[32];
    char *body; /* owned */
    size_t body_len, used;
    const char *error;
} outcome_t;

/* Feeds text[0..len) in pieces ending at cuts[0..ncuts) (ascending) and at len, stopping at the
 * first result that is not MORE; then, when close is set and the answer wants more, the eof. */
static void run(outcome_t *o, const char *text, size_t len, size_t body_max, int no_body,
                const size_t *cuts, size_t ncuts, int close)
{
    h1resp_t r;
    size_t from = 0;

    h1resp_init(&r, body_max, no_body);
    memset(o, 0, sizeof(*o));
    o->rc = H1RESP_MORE;
    for (size_t i = 0; i <= ncuts && o->rc == H1RESP_MORE; i++) {
        size_t to = i < ncuts ? cuts[i] : len, used = 0;
        char *piece = malloc(to - from + 1);
        assert_non_null(piece);
        memcpy(piece, text + from, to - from);
        o->rc = h1resp_feed(&r, piece, to - from, &used);
        free(piece);
        assert_true(used <= to - from);
        if (o->rc == H1RESP_MORE)
            assert_int_equal(used, to - from);
        o->used += used;
        from = to;
    }
    if (o->rc == H1RESP_MORE && close)
        o->rc = h1resp_eof(&r);
    o->status = r.status;
    o->keep_alive = r.keep_alive;
    memcpy(o->content_type, r.content_type, sizeof(o->content_type));
    memcpy(o->retry_after, r.retry_after, sizeof(o->retry_after));
    o->body_len = r.body_len;
    o->error = r.error;
    if (o->rc == H1RESP_DONE) {
        assert_true(r.body_len <= body_max);
        assert_true(r.body == NULL || (r.body_len > 0 && r.body[r.body_len] == '\0'));
        assert_true(r.body != NULL || r.body_len == 0);
        o->body = h1resp_take_body(&r);
        assert_null(r.body);
    } else if (o->rc != H1RESP_MORE) {
        assert_non_null(r.error);
    }
    h1resp_release(&r);
}

static void assert_same(const outcome_t *a, const outcome_t *b, const char *how, size_t at)
{
    if (a->rc != b->rc)
        fail_msg("%s %zu: result %d, whole %d (%s)", how, at, b->rc, a->rc,
                 b->error ? b->error : "");
    assert_int_equal(a->status, b->status);
    assert_string_equal(a->content_type, b->content_type);
    assert_string_equal(a->retry_after, b->retry_after);
    if (a->rc != H1RESP_DONE)
        return;
    assert_int_equal(a->keep_alive, b->keep_alive);
    assert_int_equal(a->used, b->used);
    assert_int_equal(a->body_len, b->body_len);
    if (a->body_len > 0)
        assert_memory_equal(a->body, b->body, a->body_len);
}

/* text fed whole, then byte by byte and in two at every offset (short answers): the outcome of
 * the whole feed, which every other way must match. */
static outcome_t check_len(const char *text, size_t len, size_t body_max, int no_body, int close)
{
    outcome_t whole, other;
    size_t *cuts = malloc((len + 1) * sizeof(*cuts));

    assert_non_null(cuts);
    run(&whole, text, len, body_max, no_body, NULL, 0, close);
    if (len <= SPLITS) {
        for (size_t i = 0; i < len; i++)
            cuts[i] = i + 1;
        run(&other, text, len, body_max, no_body, cuts, len, close);
        assert_same(&whole, &other, "byte by byte", 0);
        free(other.body);
        for (size_t at = 0; at <= len; at++) {
            run(&other, text, len, body_max, no_body, &at, 1, close);
            assert_same(&whole, &other, "cut at", at);
            free(other.body);
        }
    }
    free(cuts);
    return whole;
}

static outcome_t check(const char *text, size_t body_max, int no_body, int close)
{
    return check_len(text, strlen(text), body_max, no_body, close);
}

/* An answer refused in every split, with an error that names the fault. */
static void refused_len(const char *text, size_t len, const char *words)
{
    outcome_t o = check_len(text, len, MAX, 0, CLOSE);

    if (o.rc != H1RESP_BAD)
        fail_msg("accepted (%d): %s", o.rc, text);
    if (words != NULL && strstr(o.error, words) == NULL)
        fail_msg("error \"%s\" does not say \"%s\" for %s", o.error, words, text);
    free(o.body);
}

static void refused(const char *text, const char *words)
{
    refused_len(text, strlen(text), words);
}

/* An answer accepted in every split with the given body. */
static outcome_t accepted(const char *text, const char *body)
{
    outcome_t o = check(text, MAX, 0, NOCLOSE);

    if (o.rc != H1RESP_DONE)
        fail_msg("refused (%d, %s): %s", o.rc, o.error ? o.error : "", text);
    assert_int_equal(o.body_len, strlen(body));
    if (*body == '\0')
        assert_null(o.body);
    else
        assert_string_equal(o.body, body);
    return o;
}

static void accept_ok(const char *text, const char *body)
{
    outcome_t o = accepted(text, body);

    free(o.body);
}

/* Answers refused in every split, each with the words its error must contain. */
typedef struct refusal {
    const char *text, *words;
} refusal_t;

static void refuse_each(const refusal_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        refused(t[i].text, t[i].words);
}

/* Answers accepted in every split, each with its body. */
typedef struct acceptance {
    const char *text, *body;
} acceptance_t;

static void accept_each(const acceptance_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        accept_ok(t[i].text, t[i].body);
}

#define HEAD200 "HTTP/1.1 200 OK\r\n"

static void test_common_answer_in_one_feed(void **state)
{
    static const char text[] = "HTTP/1.1 200 OK\r\n"
                               "Date: Fri, 27 Nov 2026 05:00:00 GMT\r\n"
                               "Content-Type: application/json; charset=UTF-8\r\n"
                               "Content-Length: 41\r\n"
                               "Connection: keep-alive\r\n"
                               "Retry-After: \t 120 \r\n"
                               "x-fb-trace-id: AbCdEf\r\n"
                               "\r\n"
                               "{\"recipient_id\":\"1\",\"message_id\":\"m_abc\"}";
    h1resp_t r;
    size_t used = 0;

    (void)state;
    h1resp_init(&r, 1 << 20, 0);
    assert_false(h1resp_started(&r));
    assert_int_equal(h1resp_feed(&r, text, sizeof(text) - 1, &used), H1RESP_DONE);
    assert_true(h1resp_started(&r));
    assert_int_equal(used, sizeof(text) - 1);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.keep_alive, 1);
    assert_string_equal(r.content_type, "application/json; charset=UTF-8");
    assert_string_equal(r.retry_after, "120");
    assert_int_equal(r.body_len, 41);
    assert_string_equal(r.body, "{\"recipient_id\":\"1\",\"message_id\":\"m_abc\"}");
    assert_null(r.error);
    /* parsed in place: no head copy; the body buffer is exactly its length and the NUL */
    assert_null(r._head);
    assert_int_equal(r._body_cap, 42);
    assert_true(sizeof(h1resp_t) <= 400); /* one per request in flight */
    /* a feed after the end: the same result, nothing consumed */
    assert_int_equal(h1resp_feed(&r, "x", 1, &used), H1RESP_DONE);
    assert_int_equal(used, 0);
    assert_int_equal(h1resp_eof(&r), H1RESP_DONE);
    h1resp_release(&r);
    /* the same answer in every split */
    outcome_t o = accepted(text, "{\"recipient_id\":\"1\",\"message_id\":\"m_abc\"}");
    assert_int_equal(o.used, sizeof(text) - 1);
    assert_int_equal(o.keep_alive, 1);
    free(o.body);
}

static void test_status_line(void **state)
{
    outcome_t o;

    (void)state;
    o = accepted("HTTP/1.0 404 Not Found\r\nContent-Length: 1\r\n\r\nx", "x");
    assert_int_equal(o.status, 404);
    free(o.body);
    o = accepted("HTTP/1.1 599\r\nContent-Length: 0\r\n\r\n", ""); /* no reason, as curl */
    assert_int_equal(o.status, 599);
    accept_ok("HTTP/1.1 100 \r\n\r\nHTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", "");
    accept_ok("HTTP/1.1 200 O\tK \x80\xff!~\r\nContent-Length: 0\r\n\r\n", "");
    static const refusal_t bad[] = {
        {"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
        {"HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
        {"HTTP/1.10 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
        {"HTTP/11 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
        {"http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
        {"HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n", "three digits"},
        {"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n", "three digits"},
        {"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "three digits"},
        {"HTTP/1.1 20x OK\r\nContent-Length: 0\r\n\r\n", "three digits"},
        {"HTTP/1.1 099 OK\r\nContent-Length: 0\r\n\r\n", "out of range"},
        {"HTTP/1.1 600 OK\r\nContent-Length: 0\r\n\r\n", "out of range"},
        {"HTTP/1.1 200\tOK\r\nContent-Length: 0\r\n\r\n", "space"},
        {"HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n", "control"},
        {"HTTP/1.1 200 OK\x7f\r\nContent-Length: 0\r\n\r\n", "control"},
        {"HTTP/1.1 200 OK\r\r\nContent-Length: 0\r\n\r\n", "CR"},
        {"\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
    };
    refuse_each(bad, sizeof(bad) / sizeof(bad[0]));
    static const char nul[] = "HTTP/1.1 200 O\0K\r\nContent-Length: 0\r\n\r\n";
    refused_len(nul, sizeof(nul) - 1, "NUL");
}

static void test_line_ends(void **state)
{
    outcome_t o;

    (void)state;
    o = accepted("HTTP/1.1 200 OK\nContent-Length: 2\nContent-Type: a/b\n\nhi", "hi");
    assert_string_equal(o.content_type, "a/b");
    free(o.body);
    accept_ok("HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nhi", "hi");
    accept_ok("HTTP/1.1 200 OK\nContent-Length: 2\r\n\nhi", "hi");
    static const refusal_t bad[] = {
        {"HTTP/1.1 200 OK\rContent-Length: 2\r\n\r\nhi", "CR"},
        {"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 2\r\n\r\nhi", "CR"},
        {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\r\n\r\nhi", "CR"},
        {"HTTP/1.1 200 OK\r\nX\r: a\r\nContent-Length: 2\r\n\r\nhi", "CR"},
    };
    refuse_each(bad, sizeof(bad) / sizeof(bad[0]));
}

static void test_field_lines(void **state)
{
    (void)state;
    accept_ok(HEAD200 "X-A:b\r\nx-b: \t \r\nX-C: a\x80\xff b\t\"(),/:;<=>?@[\\]{}\r\n"
                      "!#$%&'*+-.^_`|~09azAZ: 1\r\nContent-Length: 0\r\n\r\n",
              "");
    static const refusal_t bad[] = {
        {HEAD200 " X: y\r\nContent-Length: 0\r\n\r\n", "obs-fold"},
        {HEAD200 "X: y\r\n\tz\r\nContent-Length: 0\r\n\r\n", "obs-fold"},
        {HEAD200 "X : y\r\nContent-Length: 0\r\n\r\n", "whitespace"},
        {HEAD200 "X\t: y\r\nContent-Length: 0\r\n\r\n", "whitespace"},
        {HEAD200 "X Y: z\r\nContent-Length: 0\r\n\r\n", "whitespace"},
        {HEAD200 ": y\r\nContent-Length: 0\r\n\r\n", "empty field name"},
        {HEAD200 "X(: y\r\nContent-Length: 0\r\n\r\n", "token"},
        {HEAD200 "X\x80: y\r\nContent-Length: 0\r\n\r\n", "token"},
        {HEAD200 "NoColon\r\nContent-Length: 0\r\n\r\n", "colon"},
        {HEAD200 "X: a\x01z\r\nContent-Length: 0\r\n\r\n", "control"},
        {HEAD200 "X: a\x7fz\r\nContent-Length: 0\r\n\r\n", "control"},
        {HEAD200 "X: a\x1b\r\nContent-Length: 0\r\n\r\n", "control"},
    };
    refuse_each(bad, sizeof(bad) / sizeof(bad[0]));
    /* NUL in a value and in a name */
    static const char nul_value[] = HEAD200 "X: a\0z\r\nContent-Length: 0\r\n\r\n";
    static const char nul_name[] = HEAD200 "X\0: z\r\nContent-Length: 0\r\n\r\n";
    refused_len(nul_value, sizeof(nul_value) - 1, "NUL");
    refused_len(nul_name, sizeof(nul_name) - 1, "NUL");
}

static void test_content_length(void **state)
{
    outcome_t o;

    (void)state;
    static const acceptance_t good[] = {
        {HEAD200 "Content-Length: 3\r\n\r\nabc", "abc"},
        {HEAD200 "content-LENGTH:\t 3 \t\r\n\r\nabc", "abc"},
        {HEAD200 "Content-Length: 3, 3,3\r\n\r\nabc", "abc"},
        {HEAD200 "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "abc"},
        {HEAD200 "Content-Length: 003\r\n\r\nabc", "abc"},
    };
    accept_each(good, sizeof(good) / sizeof(good[0]));
    static const refusal_t bad[] = {
        {HEAD200 "Content-Length: 3, 4\r\n\r\nabcd", "differing"},
        {HEAD200 "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "differing"},
        {HEAD200 "Content-Length: 3,\r\n\r\nabc", "not a number"},
        {HEAD200 "Content-Length: 3,,3\r\n\r\nabc", "not a number"},
        {HEAD200 "Content-Length:\r\n\r\nabc", "not a number"},
        {HEAD200 "Content-Length: 3a\r\n\r\nabc", "not a number"},
        {HEAD200 "Content-Length: +3\r\n\r\nabc", "not a number"},
        {HEAD200 "Content-Length: -3\r\n\r\nabc", "not a number"},
        {HEAD200 "Content-Length: 3 3\r\n\r\nabc", "not a number"},
        {HEAD200 "Content-Length: 0x3\r\n\r\nabc", "not a number"},
        {HEAD200 "Content-Length: 18446744073709551616\r\n\r\n", "too large"},
        {HEAD200 "Content-Length: 99999999999999999999999\r\n\r\n", "too large"},
    };
    refuse_each(bad, sizeof(bad) / sizeof(bad[0]));
    /* the largest value parses; beyond body_max it is TOO_LARGE at the head, before any body */
    o = check(HEAD200 "Content-Length: 18446744073709551615\r\n\r\n", MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_TOO_LARGE);
    assert_int_equal(o.status, 200);
    o = check(HEAD200 "Content-Length: 4097\r\n\r\n", MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_TOO_LARGE);
    assert_non_null(o.error);
    o = check(HEAD200 "Content-Length: 5\r\n\r\nabcde", 5, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    free(o.body);
    o = check(HEAD200 "Content-Length: 6\r\n\r\nabcdef", 5, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_TOO_LARGE);
    /* a body cut by the close */
    o = check(HEAD200 "Content-Length: 6\r\n\r\nabc", MAX, 0, CLOSE);
    assert_int_equal(o.rc, H1RESP_BAD);
    assert_string_equal(o.error, "the connection closed before the answer was complete");
}

static void test_transfer_encoding(void **state)
{
    outcome_t o;

    (void)state;
    static const acceptance_t good[] = {
        {HEAD200 "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc"},
        {HEAD200 "transfer-encoding:  Chunked \r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc"},
        {HEAD200 "Transfer-Encoding: CHUNKED\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc"},
    };
    accept_each(good, sizeof(good) / sizeof(good[0]));
    static const refusal_t bad[] = {
        {HEAD200 "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "transfer coding"},
        {HEAD200 "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", "transfer coding"},
        {HEAD200 "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         "transfer coding"},
        {HEAD200 "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         "transfer coding"},
        {HEAD200 "Transfer-Encoding: identity\r\n\r\n", "transfer coding"},
        {HEAD200 "Transfer-Encoding: chunkedx\r\n\r\n0\r\n\r\n", "transfer coding"},
        {HEAD200 "Transfer-Encoding: chunked,\r\n\r\n0\r\n\r\n", "transfer coding"},
        {HEAD200 "Transfer-Encoding:\r\n\r\n0\r\n\r\n", "transfer coding"},
        {"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.0"},
    };
    refuse_each(bad, sizeof(bad) / sizeof(bad[0]));
    /* both: chunked wins, and the connection is not reused (RFC 9112 6.3) */
    o = accepted(HEAD200 "Content-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "3\r\nabc\r\n0\r\n\r\n",
                 "abc");
    assert_int_equal(o.keep_alive, 0);
    free(o.body);
    o = accepted(HEAD200 "Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"
                         "3\r\nabc\r\n0\r\n\r\n",
                 "abc");
    assert_int_equal(o.keep_alive, 0);
    free(o.body);
    o = accepted(HEAD200 "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc");
    assert_int_equal(o.keep_alive, 1);
    free(o.body);
}

#define CHUNKED HEAD200 "Transfer-Encoding: chunked\r\n\r\n"

static void test_chunked_body(void **state)
{
    outcome_t o;

    (void)state;
    o = accepted(CHUNKED "5;name=value\r\nhello\r\n6 ; a=\"b c\" ;x\r\n world\r\n"
                         "A\t;q\r\n, 01234567\r\n0000;last\r\nX-Trailer: t\r\nY: \r\n\r\n",
                 "hello world, 01234567");
    assert_int_equal(o.keep_alive, 1);
    free(o.body);
    static const acceptance_t good[] = {
        {CHUNKED "1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n", "abcdefghijklmnopqrstuvwxyz"},
        {CHUNKED "1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n", "abcdefghijklmnopqrstuvwxyz"},
        {CHUNKED "0\r\n\r\n", ""},
        {CHUNKED "3\nabc\n0\n\n", "abc"},
        {CHUNKED "3\r\nabc\n0\r\nT: 1\n\r\n", "abc"},
        {CHUNKED "000000000000000000000003\r\nabc\r\n0\r\n\r\n", "abc"},
    };
    accept_each(good, sizeof(good) / sizeof(good[0]));
    static const refusal_t bad[] = {
        {CHUNKED "10000000000000000\r\n", "chunk size too large"},
        {CHUNKED "\r\nabc\r\n0\r\n\r\n", "chunk size missing"},
        {CHUNKED ";x\r\nabc\r\n0\r\n\r\n", "chunk size missing"},
        {CHUNKED " 3\r\nabc\r\n0\r\n\r\n", "chunk size missing"},
        {CHUNKED "3x\r\nabc\r\n0\r\n\r\n", "hexadecimal"},
        {CHUNKED "3 \r\nabc\r\n0\r\n\r\n", "whitespace"},
        {CHUNKED "-3\r\nabc\r\n0\r\n\r\n", "chunk size missing"},
        {CHUNKED "3\rabc\r\n0\r\n\r\n", "CR"},
        {CHUNKED "3;a\x01\r\nabc\r\n0\r\n\r\n", "chunk extension"},
        {CHUNKED "3\r\nabcd\r\n0\r\n\r\n", "CRLF"},
        {CHUNKED "3\r\nabc\rx0\r\n\r\n", "CR"},
        {CHUNKED "3\r\nabc0\r\n\r\n", "CRLF"},
        {CHUNKED "3\r\nabc\r\n0\r\n X: y\r\n\r\n", "obs-fold"},
        {CHUNKED "3\r\nabc\r\n0\r\nX : y\r\n\r\n", "whitespace"},
        {CHUNKED "3\r\nabc\r\n0\r\nNoColon\r\n\r\n", "colon"},
        {CHUNKED "3\r\nabc\r\n0\r\n\r\r\n\r\n", "CR"},
        {CHUNKED "3\r\nabc\r\n", "before the answer was complete"},
        {CHUNKED "3\r\nabc\r\n0\r\nX: y\r\n", "before the answer was complete"},
    };
    refuse_each(bad, sizeof(bad) / sizeof(bad[0]));
    /* the answer ends before the last chunk or the trailer's end */
    /* a chunk line of 4096 bytes (its CRLF included) is read, one more is refused */
    char line[4200];
    size_t head = strlen(CHUNKED), n = head;
    memcpy(line, CHUNKED "1;", head + 2);
    n += 2;
    memset(line + n, 'e', 4092);
    n += 4092;
    memcpy(line + n, "\r\nz\r\n0\r\n\r\n", 10);
    n += 10;
    assert_int_equal((char *)memchr(line + head, '\n', n - head) - (line + head) + 1, 4096);
    o = check_len(line, n, MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_string_equal(o.body, "z");
    free(o.body);
    memmove(line + head + 3, line + head + 2, n - head - 2);
    line[head + 2] = 'e';
    o = check_len(line, n + 1, MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_BAD);
    assert_string_equal(o.error, "chunk line too long");
}

static void test_chunked_too_large(void **state)
{
    outcome_t o;

    (void)state;
    o = check(CHUNKED "5\r\nabcde\r\n0\r\n\r\n", 5, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_string_equal(o.body, "abcde");
    free(o.body);
    /* refused at the chunk line, before its data */
    o = check(CHUNKED "6\r\n", 5, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_TOO_LARGE);
    o = check(CHUNKED "3\r\nabc\r\n3\r\n", 5, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_TOO_LARGE);
    o = check(CHUNKED "fffffffffffffff\r\n", 1 << 20, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_TOO_LARGE);
    assert_non_null(o.error);
    o = check(CHUNKED "1\r\na\r\n0\r\n\r\n", 0, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_TOO_LARGE);
    o = check(CHUNKED "0\r\n\r\n", 0, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_null(o.body);
}

/* What an answer declares costs nothing until its bytes come: a Content-Length or a chunk size
 * of a gigabyte (within body_max) followed by a few bytes holds a buffer for those few. Before,
 * the declared length was allocated at once (fuzz_h1resp found it: a chunk of 1.5 GB). */
static void test_declared_length_costs_nothing_until_it_comes(void **state)
{
    static const char *const answers[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n{\"a\":1}",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40000000\r\n{\"a\":1}",
    };
    (void)state;
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        h1resp_t r;
        size_t used;
        h1resp_init(&r, SIZE_MAX, 0);
        assert_int_equal(h1resp_feed(&r, answers[i], strlen(answers[i]), &used), H1RESP_MORE);
        assert_int_equal(r.body_len, 7);
        assert_true(r._body_cap >= 8 && r._body_cap <= 256);
        assert_memory_equal(r.body, "{\"a\":1}", 7);
        h1resp_release(&r);
    }
}

static void test_chunked_body_grows(void **state)
{
    /* 40 chunks of 97 bytes: the buffer doubles from 256 and never passes body_max + 1 */
    static char text[8192];
    char expect[40 * 97 + 1];
    size_t n = 0;

    (void)state;
    n += (size_t)snprintf(text, sizeof(text), CHUNKED);
    for (int i = 0; i < 40; i++) {
        n += (size_t)snprintf(text + n, sizeof(text) - n, "61\r\n");
        memset(text + n, 'a' + i % 26, 97);
        memset(expect + i * 97, 'a' + i % 26, 97);
        n += 97;
        memcpy(text + n, "\r\n", 2);
        n += 2;
    }
    memcpy(text + n, "0\r\n\r\n", 5);
    n += 5;
    expect[40 * 97] = '\0';
    outcome_t o = check_len(text, n, 40 * 97, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.body_len, 40 * 97);
    assert_string_equal(o.body, expect);
    free(o.body);

    h1resp_t r;
    size_t used;
    h1resp_init(&r, 40 * 97, 0);
    assert_int_equal(h1resp_feed(&r, text, n, &used), H1RESP_DONE);
    assert_int_equal(r._body_cap, 40 * 97 + 1); /* 4096 capped by body_max */
    h1resp_release(&r);
    h1resp_init(&r, 1 << 20, 0);
    assert_int_equal(h1resp_feed(&r, text, n, &used), H1RESP_DONE);
    assert_int_equal(r._body_cap, 4096);
    h1resp_release(&r);
}

static void test_connection(void **state)
{
    outcome_t o;

    (void)state;
    o = accepted(HEAD200 "Content-Length: 0\r\n\r\n", "");
    assert_int_equal(o.keep_alive, 1);
    o = accepted(HEAD200 "Connection: close\r\nContent-Length: 0\r\n\r\n", "");
    assert_int_equal(o.keep_alive, 0);
    o = accepted(HEAD200 "Connection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n", "");
    assert_int_equal(o.keep_alive, 0);
    o = accepted(HEAD200 "Connection: x\r\nconnection: \tclose \r\nContent-Length: 0\r\n\r\n", "");
    assert_int_equal(o.keep_alive, 0);
    o = accepted(HEAD200 "Connection: upgrade, closed\r\nContent-Length: 0\r\n\r\n", "");
    assert_int_equal(o.keep_alive, 1);
    o = accepted("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", "");
    assert_int_equal(o.keep_alive, 0);
    o = accepted("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", "");
    assert_int_equal(o.keep_alive, 1);
    o = accepted("HTTP/1.0 200 OK\r\nConnection: Keep-Alive ,close\r\nContent-Length: 0\r\n\r\n",
                 "");
    assert_int_equal(o.keep_alive, 0);
    /* a 1xx head's Connection is not the answer's */
    o = accepted("HTTP/1.1 100 Continue\r\nConnection: close\r\n\r\n" HEAD200
                 "Content-Length: 0\r\n\r\n",
                 "");
    assert_int_equal(o.keep_alive, 1);
}

static void test_body_until_close(void **state)
{
    outcome_t o;

    (void)state;
    o = check(HEAD200 "Content-Type: text/plain\r\n\r\nabc\r\ndef", MAX, 0, CLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.keep_alive, 0);
    assert_string_equal(o.body, "abc\r\ndef");
    free(o.body);
    o = check("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", MAX, 0, CLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.keep_alive, 0);
    assert_null(o.body);
    o = check(HEAD200 "\r\nabcdef", 5, 0, CLOSE);
    assert_int_equal(o.rc, H1RESP_TOO_LARGE);
    o = check(HEAD200 "\r\nabcde", 5, 0, CLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    free(o.body);
    /* without the close it waits */
    o = check(HEAD200 "\r\nabc", MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_MORE);
}

static void test_interim_heads(void **state)
{
    static const char text[] = "HTTP/1.1 100 Continue\r\n\r\n"
                               "HTTP/1.1 102 Processing\r\nX: y\r\n\r\n"
                               "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n"
                               "Content-Type: text/early\r\nRetry-After: 9\r\n"
                               "Content-Length: 99999\r\n\r\n"
                               "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
    h1resp_t r;
    size_t used;
    outcome_t o;

    (void)state;
    o = accepted(text, "ok");
    assert_int_equal(o.status, 201);
    assert_string_equal(o.content_type, ""); /* the 103's fields are not kept */
    assert_string_equal(o.retry_after, "");
    free(o.body);
    /* status stays 0 while only interim heads came */
    h1resp_init(&r, MAX, 0);
    assert_int_equal(h1resp_feed(&r, text, 25, &used), H1RESP_MORE);
    assert_int_equal(r.status, 0);
    assert_int_equal(h1resp_eof(&r), H1RESP_BAD);
    h1resp_release(&r);
    static const refusal_t bad[] = {
        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "101"},
        {"HTTP/1.1 100 Continue\r\nX : y\r\n\r\n" HEAD200 "Content-Length: 0\r\n\r\n",
         "whitespace"},
        {"HTTP/1.1 100 Continue\r\n X\r\n\r\n" HEAD200 "Content-Length: 0\r\n\r\n", "obs-fold"},
    };
    refuse_each(bad, sizeof(bad) / sizeof(bad[0]));
}

static void test_no_body_statuses(void **state)
{
    static const char no_content[] = "HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n";
    outcome_t o;

    (void)state;
    o = check(no_content, MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.status, 204);
    assert_int_equal(o.used, sizeof(no_content) - 1);
    assert_null(o.body);
    assert_int_equal(o.keep_alive, 1);
    o = check("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\nnext", MAX, 0,
              NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.used, strlen("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked"
                                    "\r\n\r\n"));
    o = check("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.keep_alive, 0);
}

static void test_head_request(void **state)
{
    static const char len[] = HEAD200 "Content-Length: 1000000\r\nContent-Type: a/b\r\n\r\n";
    outcome_t o;

    (void)state;
    /* Content-Length is not a body length here, not even beyond body_max */
    o = check(len, 10, 1, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.status, 200);
    assert_int_equal(o.used, sizeof(len) - 1);
    assert_int_equal(o.keep_alive, 1);
    assert_string_equal(o.content_type, "a/b");
    assert_null(o.body);
    o = check(CHUNKED "3\r\nabc\r\n0\r\n\r\n", MAX, 1, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.used, strlen(CHUNKED));
    o = check(HEAD200 "\r\n", MAX, 1, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.keep_alive, 1);
    o = check(HEAD200 "Content-Length: x\r\n\r\n", MAX, 1, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_BAD); /* still checked */
}

static void test_bytes_after_the_answer(void **state)
{
    static const char text[] = HEAD200 "Content-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n";
    static const char chunked[] = CHUNKED "2\r\nok\r\n0\r\nT: x\r\n\r\nleft";
    outcome_t o;

    (void)state;
    o = accepted(text, "ok");
    assert_int_equal(o.used, sizeof(text) - 1 - strlen(HEAD200));
    free(o.body);
    o = accepted(chunked, "ok");
    assert_int_equal(o.used, sizeof(chunked) - 1 - 4);
    free(o.body);
}

static void test_eof(void **state)
{
    h1resp_t r;
    size_t used;

    (void)state;
    h1resp_init(&r, MAX, 0);
    assert_false(h1resp_started(&r));
    assert_int_equal(h1resp_feed(&r, "", 0, &used), H1RESP_MORE);
    assert_false(h1resp_started(&r));
    assert_int_equal(h1resp_eof(&r), H1RESP_BAD);
    assert_string_equal(r.error, "the connection closed before any answer");
    assert_int_equal(h1resp_eof(&r), H1RESP_BAD);
    assert_int_equal(h1resp_feed(&r, "HTTP", 4, &used), H1RESP_BAD);
    assert_int_equal(used, 0);
    h1resp_release(&r);

    h1resp_init(&r, MAX, 0);
    assert_int_equal(h1resp_feed(&r, "H", 1, &used), H1RESP_MORE);
    assert_true(h1resp_started(&r));
    assert_int_equal(h1resp_eof(&r), H1RESP_BAD);
    assert_string_equal(r.error, "the connection closed before the answer was complete");
    h1resp_release(&r);

    refused(HEAD200 "Content-Length: 0\r\n", "before the answer was complete");
    refused(HEAD200 "Content-Length: 0\r\n\r", "before the answer was complete");
}

static void test_head_limit(void **state)
{
    size_t size = H1RESP_HEAD_MAX + 64;
    char *text = malloc(size);
    size_t filler, n;
    outcome_t o;
    const size_t cuts[] = {1, 100, 9000, 16000};

    (void)state;
    assert_non_null(text);
    /* a head of exactly H1RESP_HEAD_MAX bytes (its empty line included) is read */
    n = (size_t)snprintf(text, size, HEAD200 "Content-Length: 1\r\nX: ");
    filler = H1RESP_HEAD_MAX - n - 4;
    memset(text + n, 'v', filler);
    n += filler;
    memcpy(text + n, "\r\n\r\nb", 5);
    n += 5;
    o = check_len(text, n, MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_string_equal(o.body, "b");
    free(o.body);
    run(&o, text, n, MAX, 0, cuts, 4, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_DONE);
    assert_int_equal(o.used, n);
    free(o.body);
    /* one byte more is refused, whole or split */
    memmove(text + n - 4, text + n - 5, 5);
    text[n - 5] = 'v';
    n++;
    o = check_len(text, n, MAX, 0, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_BAD);
    assert_string_equal(o.error, "answer head too long");
    run(&o, text, n, MAX, 0, cuts, 4, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_BAD);
    assert_string_equal(o.error, "answer head too long");
    /* a trailer section has the same limit */
    n = (size_t)snprintf(text, size, CHUNKED "1\r\nz\r\n0\r\nX: ");
    memset(text + n, 't', H1RESP_HEAD_MAX);
    memcpy(text + n + H1RESP_HEAD_MAX - 4, "\r\n\r\n", 4);
    n += H1RESP_HEAD_MAX;
    run(&o, text, n, MAX, 0, cuts, 4, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_BAD);
    assert_string_equal(o.error, "answer trailer section too long");
    run(&o, text, n - 3, MAX, 0, NULL, 0, NOCLOSE); /* "X: " and 16381 bytes: read */
    assert_int_equal(o.rc, H1RESP_MORE);
    /* and a head that never ends, fed in pieces */
    memset(text, 'x', size);
    run(&o, text, size, MAX, 0, cuts, 4, NOCLOSE);
    assert_int_equal(o.rc, H1RESP_BAD);
    assert_string_equal(o.error, "answer head too long");
    free(text);
}

static void test_kept_values(void **state)
{
    char text[1024];
    outcome_t o;

    (void)state;
    o = accepted(HEAD200 "Retry-After:   Fri, 27 Nov 2026 06:00:00 GMT \t\r\n"
                         "content-type: text/html\r\nContent-Type:  application/json \r\n"
                         "Content-Length: 0\r\n\r\n",
                 "");
    assert_string_equal(o.retry_after, "Fri, 27 Nov 2026 06:00:00 GMT"); /* 29 bytes: fits */
    assert_string_equal(o.content_type, "application/json");             /* the last wins */
    o = accepted(HEAD200 "Retry-After: Friday, 27-Nov-2026 06:00:00 GMT\r\n"
                         "Content-Length: 0\r\n\r\n",
                 "");
    assert_string_equal(o.retry_after, ""); /* too long: not stored */
    o = accepted(HEAD200 "Content-Length: 0\r\n\r\n", "");
    assert_string_equal(o.retry_after, "");
    assert_string_equal(o.content_type, "");
    /* Content-Type: 255 bytes are kept, 256 are not */
    for (size_t len = 255; len <= 256; len++) {
        size_t n = (size_t)snprintf(text, sizeof(text), HEAD200 "Content-Type: ");
        memset(text + n, 't', len);
        n += len;
        memcpy(text + n, "\r\nContent-Length: 0\r\n\r\n", 24);
        o = check(text, MAX, 0, NOCLOSE);
        assert_int_equal(o.rc, H1RESP_DONE);
        assert_int_equal(strlen(o.content_type), len == 255 ? 255 : 0);
    }
}

static void test_take_body_and_reuse(void **state)
{
    static const char text[] = HEAD200 "Content-Length: 4\r\n\r\nbody";
    h1resp_t r;
    size_t used;
    char *body;

    (void)state;
    h1resp_init(&r, MAX, 0);
    assert_int_equal(h1resp_feed(&r, text, 10, &used), H1RESP_MORE);
    assert_int_equal(h1resp_feed(&r, text + 10, sizeof(text) - 11, &used), H1RESP_DONE);
    body = h1resp_take_body(&r);
    assert_string_equal(body, "body");
    assert_null(r.body);
    assert_null(h1resp_take_body(&r));
    h1resp_release(&r); /* frees the head copy, not the body */
    /* init'ed again after release: a new answer */
    h1resp_init(&r, MAX, 0);
    assert_int_equal(h1resp_feed(&r, text, sizeof(text) - 1, &used), H1RESP_DONE);
    assert_string_equal(r.body, "body");
    h1resp_release(&r);
    assert_null(r.body);
    h1resp_release(&r); /* twice is harmless */
    free(body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_common_answer_in_one_feed),
        cmocka_unit_test(test_status_line),
        cmocka_unit_test(test_line_ends),
        cmocka_unit_test(test_field_lines),
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_transfer_encoding),
        cmocka_unit_test(test_chunked_body),
        cmocka_unit_test(test_chunked_too_large),
        cmocka_unit_test(test_declared_length_costs_nothing_until_it_comes),
        cmocka_unit_test(test_chunked_body_grows),
        cmocka_unit_test(test_connection),
        cmocka_unit_test(test_body_until_close),
        cmocka_unit_test(test_interim_heads),
        cmocka_unit_test(test_no_body_statuses),
        cmocka_unit_test(test_head_request),
        cmocka_unit_test(test_bytes_after_the_answer),
        cmocka_unit_test(test_eof),
        cmocka_unit_test(test_head_limit),
        cmocka_unit_test(test_kept_values),
        cmocka_unit_test(test_take_body_and_reuse),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
