/* broadcast_ids.c - a large POST /broadcasts body checked in steps of the loop, and its ids
 * read from it a slice at a time (broadcast_ids.h). */
#include "broadcast_ids.h"

#include "../core/clock.h"
#include "../core/request.h"
#include "../json/jstream.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE ((size_t)-1)

/* The ids' limits of check_body: what the first id that breaks each is (NONE: none does). */
typedef struct id_faults {
    size_t shape;   /* not a string, or empty */
    size_t long_m;  /* longer than REQUEST_MAX_ID */
    size_t long_r;  /* longer than REQUEST_MAX_RECIPIENT */
    size_t chars_m; /* a character not allowed, within REQUEST_MAX_ID */
    size_t chars_r; /* the same within REQUEST_MAX_RECIPIENT */
} id_faults_t;

struct bc_ids {
    struct evbuffer *body;
    size_t len;
    struct event *step;
    bc_ids_checked_fn *fn;
    void *arg;
    jstream_t *js;
    struct evbuffer_ptr at; /* where the check goes on */
    size_t off;
    EVP_MD_CTX *md; /* the fingerprint, NULL without one */
    char fp[IDEM_HEX];
    id_faults_t faults;
    int64_t longest_us;
    unsigned steps;
    /* the ids' array, once checked */
    char name[16];
    size_t start, end, count;
    /* reading it again */
    jstream_t *reader;
    struct evbuffer_ptr rat;
    size_t roff;
    char *slice; /* the slice's ids, REQUEST_MAX_ID + 1 bytes each */
    size_t slice_cap, got, want;
    const char **ids;
};

static void first(size_t *at, size_t i)
{
    if (*at == NONE)
        *at = i;
}

static int on_checked_id(void *arg, size_t i, const char *s, size_t len)
{
    id_faults_t *f = arg;

    if (len == 0) {
        first(&f->shape, i);
        return 0;
    }
    if (len > REQUEST_MAX_ID)
        first(&f->long_m, i);
    if (len > REQUEST_MAX_RECIPIENT)
        first(&f->long_r, i);
    if (s != NULL && !request_id_chars_ok(s)) {
        if (len <= REQUEST_MAX_ID)
            first(&f->chars_m, i);
        if (len <= REQUEST_MAX_RECIPIENT)
            first(&f->chars_r, i);
    }
    return 0;
}

static void finish(bc_ids_t *b)
{
    bg_error_t err;
    json_t *root = NULL;
    const char *name;
    size_t rest;
    char *text = NULL;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;

    memset(&err, 0, sizeof(err));
    if (b->md != NULL && EVP_DigestFinal_ex(b->md, md, &mdlen) == 1)
        for (unsigned i = 0; i < mdlen && 2 * i + 2 < sizeof(b->fp); i++)
            sprintf(b->fp + 2 * i, "%02x", md[i]);
    if (jstream_end(b->js) < 0) {
        bg_error_set(&err, BG_ERR_MISSING_PARAM, "body is not valid JSON: %s",
                     jstream_error(b->js));
    } else if (jstream_top(b->js) != '{') {
        bg_error_set(&err, BG_ERR_MISSING_PARAM, "body must be a JSON object");
    } else if (jstream_array(b->js, &b->start, &b->end, &b->count, &name) < 0 ||
               (rest = b->len - (b->end - b->start) + 2) > REQUEST_MAX_BODY) {
        /* what is not the ids is held to the limit of every other body */
        bg_error_set(&err, BG_ERR_LIMIT,
                     "body larger than %d bytes apart from recipients.memberIds or "
                     "recipients.recipientIds",
                     REQUEST_MAX_BODY);
        err.http_status = 413;
    } else if ((text = malloc(rest)) == NULL) {
        bg_error_set(&err, BG_ERR_UNAVAILABLE, "out of memory");
    } else {
        struct evbuffer_ptr p;
        snprintf(b->name, sizeof(b->name), "%s", name);
        evbuffer_copyout(b->body, text, b->start);
        memcpy(text + b->start, "[]", 2);
        evbuffer_ptr_set(b->body, &p, b->end, EVBUFFER_PTR_SET);
        evbuffer_copyout_from(b->body, &p, text + b->start + 2, b->len - b->end);
        request_parse_json(text, rest, &root, &err);
        free(text);
    }
    jstream_free(b->js);
    b->js = NULL;
    b->fn(b->arg, root, root != NULL ? NULL : &err);
}

/* One step of the check: BC_IDS_STEP bytes, then the loop's other work before the next. */
static void on_step(evutil_socket_t fd, short what, void *arg)
{
    static const struct timeval now = {0, 0};
    bc_ids_t *b = arg;
    int64_t t0 = clock_mono_us(), took;
    size_t left = BC_IDS_STEP;

    (void)fd;
    (void)what;
    while (left > 0 && b->off < b->len) {
        struct evbuffer_iovec vec[16];
        int n = evbuffer_peek(b->body, (ev_ssize_t)left, &b->at, vec, 16);
        size_t done = 0;
        for (int i = 0; i < n && i < 16 && left > 0; i++) {
            size_t k = vec[i].iov_len < left ? vec[i].iov_len : left;
            if (b->md != NULL)
                EVP_DigestUpdate(b->md, vec[i].iov_base, k);
            if (jstream_feed(b->js, vec[i].iov_base, k) < 0) {
                b->off = b->len; /* refused: the rest need not be read */
                break;
            }
            done += k;
            left -= k;
        }
        if (b->off >= b->len || n <= 0)
            break;
        b->off += done;
        evbuffer_ptr_set(b->body, &b->at, done, EVBUFFER_PTR_ADD);
    }
    took = clock_mono_us() - t0;
    b->steps++;
    if (took > b->longest_us)
        b->longest_us = took;
    if (b->off < b->len)
        event_add(b->step, &now);
    else
        finish(b);
}

bc_ids_t *bc_ids_check(struct event_base *base, struct evbuffer *body, const char *route,
                       bc_ids_checked_fn *fn, void *arg)
{
    static const struct timeval now = {0, 0};
    bc_ids_t *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->body = body;
    b->len = evbuffer_get_length(body);
    b->fn = fn;
    b->arg = arg;
    memset(&b->faults, 0xff, sizeof(b->faults)); /* NONE each */
    b->js = jstream_new(0, on_checked_id, &b->faults);
    b->step = event_new(base, -1, 0, on_step, b);
    if (route != NULL &&
        ((b->md = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(b->md, EVP_sha256(), NULL) != 1 ||
         EVP_DigestUpdate(b->md, route, strlen(route) + 1) != 1)) {
        bc_ids_free(b);
        return NULL;
    }
    if (b->js == NULL || b->step == NULL ||
        evbuffer_ptr_set(body, &b->at, 0, EVBUFFER_PTR_SET) < 0 || event_add(b->step, &now) < 0) {
        bc_ids_free(b);
        return NULL;
    }
    return b;
}

void bc_ids_free(bc_ids_t *b)
{
    if (b == NULL)
        return;
    if (b->step != NULL)
        event_free(b->step);
    EVP_MD_CTX_free(b->md);
    jstream_free(b->js);
    jstream_free(b->reader);
    free(b->slice);
    free(b->ids);
    free(b);
}

const char *bc_ids_name(const bc_ids_t *b)
{
    return b->name;
}

size_t bc_ids_body_bytes(const bc_ids_t *b)
{
    return b->len;
}

size_t bc_ids_count(const bc_ids_t *b)
{
    return b->count;
}

const char *bc_ids_fingerprint(const bc_ids_t *b)
{
    return b->fp;
}

int64_t bc_ids_longest_step_us(const bc_ids_t *b)
{
    return b->longest_us;
}

unsigned bc_ids_steps(const bc_ids_t *b)
{
    return b->steps;
}

int bc_ids_verdict(const bc_ids_t *b, size_t most_ids, size_t max, bg_error_t *err)
{
    const id_faults_t *f = &b->faults;
    size_t too_long = max >= REQUEST_MAX_ID ? f->long_m : f->long_r,
           chars = max >= REQUEST_MAX_ID ? f->chars_m : f->chars_r;

    if (b->count == 0)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter recipients.%s must not be empty",
                            b->name);
    if (b->count > most_ids)
        return bg_error_set(err, BG_ERR_LIMIT, "more than %zu recipients in one broadcast",
                            most_ids);
    /* the first id at fault, with the first fault check_ids finds in it */
    if (f->shape != NONE && f->shape <= too_long && f->shape <= chars)
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter recipients.%s[%zu] must be a non-empty string", b->name,
                            f->shape);
    if (too_long != NONE && too_long <= chars)
        return bg_error_set(err, BG_ERR_LIMIT,
                            "parameter recipients.%s[%zu] is longer than %zu bytes", b->name,
                            too_long, max);
    if (chars != NONE)
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter recipients.%s[%zu] contains a character that is not "
                            "allowed",
                            b->name, chars);
    return 0;
}

static int on_read_id(void *arg, size_t i, const char *s, size_t len)
{
    bc_ids_t *b = arg;
    char *to = b->slice + b->got * (REQUEST_MAX_ID + 1);

    (void)i;
    /* checked already (bc_ids_verdict): a string of at most REQUEST_MAX_ID bytes */
    if (s == NULL || len > REQUEST_MAX_ID)
        to[0] = '\0';
    else
        memcpy(to, s, len + 1);
    b->ids[b->got++] = to;
    return b->got == b->want;
}

int bc_ids_next(bc_ids_t *b, const char **ids, size_t n)
{
    if (n > BC_IDS_SLICE_MAX)
        n = BC_IDS_SLICE_MAX;
    if (b->reader == NULL) {
        if ((b->reader = jstream_new(JSTREAM_TOP_ARRAY, on_read_id, b)) == NULL ||
            evbuffer_ptr_set(b->body, &b->rat, b->start, EVBUFFER_PTR_SET) < 0)
            return -1;
        b->roff = b->start;
    }
    if (n > b->slice_cap) {
        char *slice = realloc(b->slice, n * (REQUEST_MAX_ID + 1));
        const char **list = slice != NULL ? realloc(b->ids, n * sizeof(*list)) : NULL;
        if (slice != NULL)
            b->slice = slice;
        if (list == NULL)
            return -1;
        b->ids = list;
        b->slice_cap = n;
    }
    b->got = 0;
    b->want = n;
    while (b->got < n && b->roff < b->end) {
        struct evbuffer_iovec vec[1];
        size_t k;
        ssize_t took;
        if (evbuffer_peek(b->body, (ev_ssize_t)(b->end - b->roff), &b->rat, vec, 1) < 1)
            return -1;
        k = vec[0].iov_len < b->end - b->roff ? vec[0].iov_len : b->end - b->roff;
        if ((took = jstream_feed(b->reader, vec[0].iov_base, k)) < 0)
            return -1; /* checked already: never */
        b->roff += (size_t)took;
        evbuffer_ptr_set(b->body, &b->rat, (size_t)took, EVBUFFER_PTR_ADD);
    }
    memcpy(ids, b->ids, b->got * sizeof(*ids));
    return (int)b->got;
}
