/* request_test.h - what test_request.c and test_request_body.c share: bodies built at run
 * time, and the checks of an accepted or refused body (its code, the parameter it names). */
#ifndef BOTGATE_TESTS_REQUEST_TEST_H
#define BOTGATE_TESTS_REQUEST_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/request.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TARGET    "\"channelId\":\"C1\",\"memberId\":\"M1\""
#define TEXT_RESP "{\"type\":\"TEXT\",\"text\":\"hi\"}"
#define REDIRECT  "\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\"}"

/* A growable string for the bodies built at run time. */
typedef struct buf {
    char *s;
    size_t len, cap;
} buf_t;

static inline void buf_grow(buf_t *b, size_t more)
{
    if (b->len + more + 1 <= b->cap)
        return;
    b->cap = (b->len + more + 1) * 2;
    b->s = realloc(b->s, b->cap);
    assert_non_null(b->s);
}

static inline void buf_add(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline void buf_add(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    buf_grow(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static inline void buf_rep(buf_t *b, const char *piece, size_t times)
{
    size_t n = strlen(piece);

    buf_grow(b, n * times);
    for (size_t i = 0; i < times; i++) {
        memcpy(b->s + b->len, piece, n);
        b->len += n;
    }
    b->s[b->len] = '\0';
}

static inline void buf_free(buf_t *b)
{
    free(b->s);
    memset(b, 0, sizeof(*b));
}

/* 1 when msg mentions name as a whole parameter: "response" is not found in
 * "response[0].type", "redirect.tree" is not found in "redirect.treeX". */
static inline int names_param(const char *msg, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = strstr(msg, name); p; p = strstr(p + 1, name)) {
        char before = p == msg ? ' ' : p[-1], after = p[n];
        if (isalnum((unsigned char)before) || strchr("_.[]", before))
            continue;
        if (isalnum((unsigned char)after) || (after && strchr("_.[", after)))
            continue;
        return 1;
    }
    return 0;
}

/* Every error: the code, the parameter it names, and a message that survives as JSON. */
static inline void check_error(const bg_error_t *err, int code, const char *name, const char *body)
{
    json_t *j;

    if (err->code != code)
        fail_msg("err_code %d (%s), want %d, for %.300s", err->code, err->msg, code, body);
    if (name != NULL && !names_param(err->msg, name))
        fail_msg("message \"%s\" does not name %s (body %.300s)", err->msg, name, body);
    j = bg_error_to_json(err);
    assert_non_null(j);
    assert_non_null(json_string_value(json_object_get(j, "err")));
    assert_non_null(json_string_value(json_object_get(j, "error")));
    json_decref(j);
}

static inline void send_fails_len(const char *body, size_t len, int code, const char *name)
{
    send_request_t req;
    bg_error_t err;

    bg_error_clear(&err);
    if (request_parse_send(body, len, &req, &err) == 0) {
        request_send_free(&req);
        fail_msg("accepted: %.300s", body ? body : "(null)");
    }
    assert_null(req.root);
    assert_null(req.responses);
    check_error(&err, code, name, body ? body : "(null)");
    if (err.code != BG_ERR_LIMIT || len <= REQUEST_MAX_BODY)
        assert_int_equal(err.http_status, 500);
}

static inline void send_fails(const char *body, int code, const char *name)
{
    send_fails_len(body, strlen(body), code, name);
}

static inline void send_ok(const char *body, send_request_t *req)
{
    bg_error_t err;

    bg_error_clear(&err);
    if (request_parse_send(body, strlen(body), req, &err) != 0)
        fail_msg("refused (%d: %s): %.300s", err.code, err.msg, body);
    assert_non_null(req->root);
    assert_true(json_is_array(req->responses));
}

/* Accepted and released at once. */
static inline void send_accepts(const char *body)
{
    send_request_t req;

    send_ok(body, &req);
    request_send_free(&req);
    assert_null(req.root);
}

static inline void redirect_fails_len(const char *body, size_t len, int code, const char *name)
{
    redirect_request_t req;
    bg_error_t err;

    bg_error_clear(&err);
    if (request_parse_redirect(body, len, &req, &err) == 0) {
        request_redirect_free(&req);
        fail_msg("accepted: %.300s", body);
    }
    assert_null(req.root);
    check_error(&err, code, name, body);
}

static inline void redirect_fails(const char *body, int code, const char *name)
{
    redirect_fails_len(body, strlen(body), code, name);
}

static inline void redirect_ok(const char *body, redirect_request_t *req)
{
    bg_error_t err;

    bg_error_clear(&err);
    if (request_parse_redirect(body, strlen(body), req, &err) != 0)
        fail_msg("refused (%d: %s): %.300s", err.code, err.msg, body);
    assert_non_null(req->root);
}

/* {"channelId":..,<id_key>:<id_json>,"response":[TEXT]} with the other id fixed. */
static inline char *body_with_id(const char *key, const char *value_json)
{
    buf_t b = {0};

    if (strcmp(key, "channelId") == 0)
        buf_add(&b, "{\"channelId\":%s,\"memberId\":\"M1\"", value_json);
    else
        buf_add(&b, "{\"channelId\":\"C1\",\"%s\":%s", key, value_json);
    buf_add(&b, ",\"response\":[" TEXT_RESP "]}");
    return b.s;
}

/* A send body of n TEXT responses under key ("response" or its synonym). */
static inline void build_n_responses(buf_t *b, const char *key, size_t n)
{
    buf_add(b, "{" TARGET ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++)
        buf_add(b, "%s{\"type\":\"TEXT\",\"text\":\"m%zu\"}", i ? "," : "", i);
    buf_add(b, "]}");
}

#endif
