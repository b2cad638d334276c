/* fuzz_h1resp.c - libFuzzer target for the HTTP/1.1 answer parser (net/h1resp.c).
 *
 * Input: byte 0 chooses body_max (bits 0-2), a HEAD request (bit 3) and whether the peer closes
 * after the last byte (bit 4); bytes 1-2 choose where the answer is cut in two; the rest is the
 * answer. It is parsed in one feed, in two feeds cut there, and (when short) byte by byte, each
 * piece in a buffer of its own so that ASan sees a read past a piece. Every way must give the
 * same result, status, kept values and, when done, keep_alive, body and bytes consumed, and a done
 * answer's own bytes, without what followed them, the same again; the body stays within body_max
 * and is NUL-terminated; every refusal has an error text. */
#include "fuzz_util.h"

#include "net/h1resp.h"

#define BYTEWISE_MAX 2048 /* answers up to this long are also fed byte by byte */

static const size_t body_maxes[8] = {0, 1, 16, 100, 300, 4096, 65536, SIZE_MAX};

typedef struct outcome {
    int rc, status, keep_alive;
    char content_type[256], retry_after[32];
    char *body;
    size_t body_len, used;
} outcome_t;

/* Feeds data[0..n) in pieces of at most step bytes (and the first piece ending at cut). */
static void parse(outcome_t *o, const uint8_t *data, size_t n, size_t cut, size_t step,
                  size_t body_max, int no_body, int close)
{
    h1resp_t r;
    size_t from = 0;

    h1resp_init(&r, body_max, no_body);
    memset(o, 0, sizeof(*o));
    o->rc = H1RESP_MORE;
    while (from < n && o->rc == H1RESP_MORE) {
        size_t to = from < cut ? cut : from + step, used = SIZE_MAX;
        if (to > n)
            to = n;
        char *piece = fuzz_strndup(data + from, to - from);
        o->rc = h1resp_feed(&r, piece, to - from, &used);
        free(piece);
        FUZZ_CHECK(used <= to - from, "used %zu of %zu", used, to - from);
        FUZZ_CHECK(o->rc != H1RESP_MORE || used == to - from, "MORE with %zu of %zu used", used,
                   to - from);
        o->used += used;
        from = to;
    }
    FUZZ_CHECK(h1resp_started(&r) == (n > 0), "started %d after %zu bytes", h1resp_started(&r), n);
    if (o->rc == H1RESP_MORE && close) {
        o->rc = h1resp_eof(&r);
        FUZZ_CHECK(o->rc != H1RESP_MORE, "eof gave MORE");
    }
    if (o->rc != H1RESP_MORE) { /* the result sticks */
        size_t used = 1;
        FUZZ_CHECK(h1resp_feed(&r, "x", 1, &used) == o->rc && used == 0, "a feed after %d", o->rc);
    }
    o->status = r.status;
    o->keep_alive = r.keep_alive;
    FUZZ_CHECK(memchr(r.content_type, '\0', sizeof(r.content_type)) != NULL, "content_type");
    FUZZ_CHECK(memchr(r.retry_after, '\0', sizeof(r.retry_after)) != NULL, "retry_after");
    memcpy(o->content_type, r.content_type, sizeof(o->content_type));
    memcpy(o->retry_after, r.retry_after, sizeof(o->retry_after));
    FUZZ_CHECK(r.status == 0 || (r.status >= 200 && r.status <= 599), "status %d", r.status);
    FUZZ_CHECK(r.body_len <= body_max, "body of %zu bytes, body_max %zu", r.body_len, body_max);
    if (o->rc == H1RESP_DONE) {
        FUZZ_CHECK(r.status != 0, "done without a status");
        FUZZ_CHECK(r.keep_alive == 0 || r.keep_alive == 1, "keep_alive %d", r.keep_alive);
        FUZZ_CHECK(r.error == NULL, "done with an error: %s", r.error);
        FUZZ_CHECK((r.body == NULL) == (r.body_len == 0), "body %p of %zu bytes", (void *)r.body,
                   r.body_len);
        FUZZ_CHECK(r.body == NULL || r.body[r.body_len] == '\0', "body not NUL-terminated");
        FUZZ_CHECK(!no_body || r.body == NULL, "a body after a HEAD request");
        o->body_len = r.body_len;
        o->body = h1resp_take_body(&r);
        FUZZ_CHECK(r.body == NULL, "the body stayed after h1resp_take_body");
    } else if (o->rc != H1RESP_MORE) {
        FUZZ_CHECK(r.error != NULL && fuzz_str_valid(r.error), "result %d without an error", o->rc);
    }
    h1resp_release(&r);
}

static void check_same(const outcome_t *a, const outcome_t *b, const char *how)
{
    FUZZ_CHECK(a->rc == b->rc, "%s: result %d, whole %d", how, b->rc, a->rc);
    FUZZ_CHECK(a->status == b->status, "%s: status %d, whole %d", how, b->status, a->status);
    FUZZ_CHECK(strcmp(a->content_type, b->content_type) == 0, "%s: content_type", how);
    FUZZ_CHECK(strcmp(a->retry_after, b->retry_after) == 0, "%s: retry_after", how);
    if (a->rc != H1RESP_DONE)
        return; /* a refusal may come at another byte: what was consumed may differ */
    FUZZ_CHECK(a->keep_alive == b->keep_alive, "%s: keep_alive", how);
    FUZZ_CHECK(a->used == b->used, "%s: used %zu, whole %zu", how, b->used, a->used);
    FUZZ_CHECK(a->body_len == b->body_len, "%s: body of %zu bytes, whole %zu", how, b->body_len,
               a->body_len);
    FUZZ_CHECK(a->body_len == 0 || memcmp(a->body, b->body, a->body_len) == 0, "%s: body bytes",
               how);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    outcome_t whole, other;
    size_t body_max, cut, n;
    int no_body, close;

    if (size < 3)
        return 0;
    body_max = body_maxes[data[0] & 7];
    no_body = (data[0] >> 3) & 1;
    close = (data[0] >> 4) & 1;
    cut = (size_t)data[1] << 8 | data[2];
    data += 3;
    n = size - 3;
    if (n > 0)
        cut %= n + 1;

    parse(&whole, data, n, n, n, body_max, no_body, close);
    parse(&other, data, n, cut, n, body_max, no_body, close);
    check_same(&whole, &other, "two feeds");
    free(other.body);
    if (whole.rc == H1RESP_DONE && whole.used < n) {
        /* the answer ends where it ends, whatever follows: its bytes alone give the same */
        parse(&other, data, whole.used, whole.used, n, body_max, no_body, close);
        check_same(&whole, &other, "the answer's bytes alone");
        free(other.body);
    }
    if (n <= BYTEWISE_MAX) {
        parse(&other, data, n, 0, 1, body_max, no_body, close);
        check_same(&whole, &other, "byte by byte");
        free(other.body);
    }
    free(whole.body);
    return 0;
}
