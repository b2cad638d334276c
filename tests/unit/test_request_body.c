/* test_request_body.c - the request body as a whole, for both operations: its size, depth,
 * string lengths and JSON (not an object, invalid UTF-8, duplicate keys): 108/118. */
#include "request_test.h"

static void test_string_limits(void **state)
{
    buf_t b = {0};

    (void)state;
    /* a string value: 64 KiB is the most */
    for (size_t n = REQUEST_MAX_STRING - 1; n <= REQUEST_MAX_STRING + 1; n++) {
        buf_add(&b, "{" TARGET ",\"response\":[{\"type\":\"TEXT\",\"text\":\"");
        buf_rep(&b, "a", n);
        buf_add(&b, "\"}]}");
        if (n <= REQUEST_MAX_STRING)
            send_accepts(b.s);
        else
            send_fails(b.s, BG_ERR_LIMIT, NULL);
        buf_free(&b);
    }
    /* counted in bytes once decoded: 32768 two-byte characters fit, one more does not */
    for (size_t n = REQUEST_MAX_STRING / 2; n <= REQUEST_MAX_STRING / 2 + 1; n++) {
        buf_add(&b, "{" TARGET ",\"response\":[{\"type\":\"TEXT\",\"text\":\"");
        buf_rep(&b, "\xc3\xa9", n);
        buf_add(&b, "\"}]}");
        if (n == REQUEST_MAX_STRING / 2)
            send_accepts(b.s);
        else
            send_fails(b.s, BG_ERR_LIMIT, NULL);
        buf_free(&b);
    }
    /* escapes decode: 65537 "\u0041" escapes are 65537 bytes */
    buf_add(&b, "{" TARGET ",\"response\":[{\"type\":\"TEXT\",\"text\":\"");
    buf_rep(&b, "\\u0041", REQUEST_MAX_STRING + 1);
    buf_add(&b, "\"}]}");
    send_fails(b.s, BG_ERR_LIMIT, NULL);
    buf_free(&b);

    /* an object key, at the top and nested */
    for (size_t n = REQUEST_MAX_STRING; n <= REQUEST_MAX_STRING + 1; n++) {
        buf_add(&b, "{" TARGET ",\"response\":[" TEXT_RESP "],\"");
        buf_rep(&b, "k", n);
        buf_add(&b, "\":1}");
        if (n == REQUEST_MAX_STRING)
            send_accepts(b.s);
        else
            send_fails(b.s, BG_ERR_LIMIT, NULL);
        buf_free(&b);

        buf_add(&b, "{" TARGET ",\"response\":[{\"type\":\"NATIVE\",\"message\":{\"x\":[{\"");
        buf_rep(&b, "k", n);
        buf_add(&b, "\":1}]}}]}");
        if (n == REQUEST_MAX_STRING)
            send_accepts(b.s);
        else
            send_fails(b.s, BG_ERR_LIMIT, NULL);
        buf_free(&b);
    }
    /* anywhere in the body, also in a redirect's meta */
    buf_add(&b, "{" TARGET "," REDIRECT ",\"meta\":{\"a\":[\"");
    buf_rep(&b, "z", REQUEST_MAX_STRING + 1);
    buf_add(&b, "\"]}}");
    redirect_fails(b.s, BG_ERR_LIMIT, NULL);
    buf_free(&b);
}

static void test_body_size(void **state)
{
    buf_t b = {0};
    bg_error_t err;
    send_request_t req;
    redirect_request_t rreq;

    (void)state;
    /* exactly 1 MiB of valid JSON (padded with white space) is accepted */
    buf_add(&b, "{" TARGET ",\"response\":[" TEXT_RESP "]");
    buf_rep(&b, " ", REQUEST_MAX_BODY - b.len - 1);
    buf_add(&b, "}");
    assert_int_equal(b.len, REQUEST_MAX_BODY);
    send_accepts(b.s);

    /* one byte more: 118 with HTTP 413, before any parsing */
    b.s[b.len - 1] = ' ';
    buf_add(&b, "}");
    assert_int_equal(b.len, REQUEST_MAX_BODY + 1);
    bg_error_clear(&err);
    assert_int_equal(request_parse_send(b.s, b.len, &req, &err), -1);
    assert_null(req.root);
    assert_int_equal(err.code, BG_ERR_LIMIT);
    assert_int_equal(err.http_status, 413);
    check_error(&err, BG_ERR_LIMIT, NULL, "1 MiB + 1");

    bg_error_clear(&err);
    assert_int_equal(request_parse_redirect(b.s, b.len, &rreq, &err), -1);
    assert_null(rreq.root);
    assert_int_equal(err.code, BG_ERR_LIMIT);
    assert_int_equal(err.http_status, 413);

    /* the size is checked first: garbage over the limit is 413 as well */
    memset(b.s, 'x', b.len);
    bg_error_clear(&err);
    assert_int_equal(request_parse_send(b.s, b.len, &req, &err), -1);
    assert_int_equal(err.code, BG_ERR_LIMIT);
    assert_int_equal(err.http_status, 413);
    buf_free(&b);

    /* other limits keep HTTP 500 */
    build_n_responses(&b, "response", 51);
    bg_error_clear(&err);
    assert_int_equal(request_parse_send(b.s, b.len, &req, &err), -1);
    assert_int_equal(err.code, BG_ERR_LIMIT);
    assert_int_equal(err.http_status, 500);
    buf_free(&b);
}

/* A send body with an extra "x" whose value nests so that the whole body has `depth` levels
 * (the root object is level 1). leaf: what sits in the innermost container. */
static void build_depth(buf_t *b, int depth, const char *open, const char *close, const char *leaf)
{
    buf_add(b, "{" TARGET ",\"response\":[" TEXT_RESP "],\"x\":");
    for (int i = 1; i < depth; i++)
        buf_add(b, "%s", open);
    buf_add(b, "%s", leaf);
    for (int i = 1; i < depth; i++)
        buf_add(b, "%s", close);
    buf_add(b, "}");
}

static void test_depth(void **state)
{
    static const struct {
        const char *open, *close, *leaf;
    } kinds[] = {
        {"[", "]", "1"},        {"[", "]", "\"s\""}, {"[", "]", ""},
        {"{\"a\":", "}", "{}"}, {"[", "]", "null"},  {"{\"a\":", "}", "true"},
    };
    buf_t b = {0};

    (void)state;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        int depth;
        /* "[" + leaf "" is an empty array: the innermost container is the last "[" */
        int extra = strcmp(kinds[k].leaf, "{}") == 0 ? 1 : 0;

        depth = REQUEST_MAX_DEPTH - extra;
        build_depth(&b, depth, kinds[k].open, kinds[k].close, kinds[k].leaf);
        send_accepts(b.s);
        buf_free(&b);

        build_depth(&b, depth + 1, kinds[k].open, kinds[k].close, kinds[k].leaf);
        send_fails(b.s, BG_ERR_MISSING_PARAM, NULL);
        buf_free(&b);
    }
    /* far deeper than jansson's own limit: refused, not a crash */
    build_depth(&b, 5000, "[", "]", "1");
    send_fails(b.s, BG_ERR_MISSING_PARAM, NULL);
    buf_free(&b);

    /* meta of a redirect sits at level 2 */
    buf_add(&b, "{" TARGET "," REDIRECT ",\"meta\":");
    for (int i = 2; i <= REQUEST_MAX_DEPTH; i++)
        buf_add(&b, "{\"a\":");
    buf_add(&b, "1");
    for (int i = 2; i <= REQUEST_MAX_DEPTH; i++)
        buf_add(&b, "}");
    buf_add(&b, "}");
    {
        redirect_request_t req;
        redirect_ok(b.s, &req);
        request_redirect_free(&req);
    }
    buf_free(&b);

    buf_add(&b, "{" TARGET "," REDIRECT ",\"meta\":");
    for (int i = 2; i <= REQUEST_MAX_DEPTH + 1; i++)
        buf_add(&b, "{\"a\":");
    buf_add(&b, "1");
    for (int i = 2; i <= REQUEST_MAX_DEPTH + 1; i++)
        buf_add(&b, "}");
    buf_add(&b, "}");
    redirect_fails(b.s, BG_ERR_MISSING_PARAM, NULL);
    buf_free(&b);
}

#define SEND_MEMBERS     TARGET ",\"response\":[" TEXT_RESP "]"
#define REDIRECT_MEMBERS TARGET "," REDIRECT
#define VALID_SEND       "{" SEND_MEMBERS "}"
#define VALID_REDIRECT   "{" REDIRECT_MEMBERS "}"

/* Refused as a body, not for a missing parameter. */
static void body_refused(const char *body, size_t len, int redirect)
{
    send_request_t req;
    redirect_request_t rreq;
    bg_error_t err;
    int rc;

    bg_error_clear(&err);
    rc = redirect ? request_parse_redirect(body, len, &rreq, &err)
                  : request_parse_send(body, len, &req, &err);
    if (rc == 0) {
        if (redirect)
            request_redirect_free(&rreq);
        else
            request_send_free(&req);
        fail_msg("accepted: %.300s", body ? body : "(null)");
    }
    check_error(&err, BG_ERR_MISSING_PARAM, NULL, body ? body : "(null)");
    assert_int_equal(err.http_status, 500);
    if (strncmp(err.msg, "missing parameter", 17) == 0 || strncmp(err.msg, "parameter ", 10) == 0)
        fail_msg("refused for a parameter (%s), not as a body: %.300s", err.msg, body);
}

static void test_not_an_object(void **state)
{
    /* each wraps or spoils a body that is otherwise valid; %s is its members (twice) */
    static const char *const fmts[] = {
        "[{%s}]",        "{%s}{%s}",         "{%s} x",         "{%s},",
        "\"{%s}\"",      "\xef\xbb\xbf{%s}", "/* */ {%s}",     "{%s} //",
        "{\"a\":01,%s}", "{\"a\":NaN,%s}",   "{\"a\":1,,%s}",  "{%s,}",
        "{'a':1,%s}",    "{a:1,%s}",         "{\"a\" 1,%s}",   "{%s",
        "{\"a\":[1,%s}", "{\"a\":.5,%s}",    "{\"a\":tru,%s}", "{\"a\":\"x,%s}",
    };
    static const char *const scalars[] = {" ",    "\n",   "[]",    "\"x\"", "1", "-0.5",
                                          "null", "true", "false", "{",     "}", "\"{}\""};
    char buf[512];
    send_request_t req;

    (void)state;
    for (int redirect = 0; redirect <= 1; redirect++) {
        const char *valid = redirect ? VALID_REDIRECT : VALID_SEND;
        const char *members = redirect ? REDIRECT_MEMBERS : SEND_MEMBERS;

        for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
            snprintf(buf, sizeof(buf), fmts[i], members, members);
            body_refused(buf, strlen(buf), redirect);
        }
        for (size_t i = 0; i < sizeof(scalars) / sizeof(scalars[0]); i++)
            body_refused(scalars[i], strlen(scalars[i]), redirect);
        /* empty, and no body at all */
        body_refused("", 0, redirect);
        body_refused(NULL, 0, redirect);
        /* len is honoured: the object ends where len says */
        body_refused(valid, strlen(valid) - 1, redirect);
        /* a NUL byte inside or after the object */
        body_refused(valid, strlen(valid) + 1, redirect);
        snprintf(buf, sizeof(buf), "%s", valid);
        buf[5] = '\0';
        body_refused(buf, strlen(valid), redirect);
    }
    /* the same body with the right length is fine */
    send_ok(VALID_SEND, &req);
    request_send_free(&req);
    /* an object without anything in it names the first missing parameter */
    send_fails("{}", BG_ERR_MISSING_PARAM, "channelId");
    redirect_fails("{}", BG_ERR_MISSING_PARAM, "channelId");
}

static void test_invalid_text(void **state)
{
    static const char *const bad[] = {
        "\xff",             /* never valid */
        "\xc3",             /* cut two-byte sequence */
        "\xc3\x28",         /* bad continuation */
        "\xe2\x82",         /* cut three-byte sequence */
        "\xf0\x9f\x98",     /* cut four-byte sequence */
        "\xc0\xaf",         /* overlong '/' */
        "\xe0\x80\xaf",     /* overlong '/' */
        "\xed\xa0\x80",     /* UTF-16 surrogate */
        "\xf4\x90\x80\x80", /* beyond U+10FFFF */
        "\x80",             /* stray continuation */
        "\\u0000",          /* NUL */
        "a\\u0000b",
        "\\ud800", /* lone surrogate escape */
        "\\udc00x",
        "\\x41", /* not a JSON escape */
        "\x01",  /* raw control character */
        "a\nb",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        buf_t b = {0};

        /* in a value */
        buf_add(&b, "{" TARGET ",\"response\":[{\"type\":\"TEXT\",\"text\":\"%s\"}]}", bad[i]);
        send_fails(b.s, BG_ERR_MISSING_PARAM, NULL);
        buf_free(&b);
        /* in a key */
        buf_add(&b, "{" TARGET ",\"response\":[" TEXT_RESP "],\"%s\":1}", bad[i]);
        send_fails(b.s, BG_ERR_MISSING_PARAM, NULL);
        buf_free(&b);
        /* in a redirect's meta */
        buf_add(&b, "{" TARGET "," REDIRECT ",\"meta\":{\"k\":\"%s\"}}", bad[i]);
        redirect_fails(b.s, BG_ERR_MISSING_PARAM, NULL);
        buf_free(&b);
    }
    /* a valid surrogate pair and valid multi-byte text are fine */
    send_accepts("{" TARGET ",\"response\":[{\"type\":\"TEXT\",\"text\":\"\\ud83d\\ude00 "
                 "\xf0\x9f\x98\x80 \xe2\x82\xac \xc3\xa9\"}]}");
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    send_fails(
        "{\"channelId\":\"C1\",\"channelId\":\"C2\",\"memberId\":\"M1\",\"response\":[" TEXT_RESP
        "]}",
        BG_ERR_MISSING_PARAM, NULL);
    send_fails("{" TARGET ",\"memberId\":\"M2\",\"response\":[" TEXT_RESP "]}",
               BG_ERR_MISSING_PARAM, NULL);
    send_fails("{" TARGET ",\"response\":[" TEXT_RESP "],\"response\":[" TEXT_RESP "]}",
               BG_ERR_MISSING_PARAM, NULL);
    send_fails("{" TARGET ",\"response\":[{\"type\":\"TEXT\",\"text\":\"a\",\"text\":\"b\"}]}",
               BG_ERR_MISSING_PARAM, NULL);
    redirect_fails("{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"tree\":\"T2\","
                   "\"nodeCompositeId\":\"N1\"}}",
                   BG_ERR_MISSING_PARAM, NULL);
    redirect_fails("{" TARGET "," REDIRECT ",\"meta\":{\"a\":1,\"a\":2}}", BG_ERR_MISSING_PARAM,
                   NULL);
    /* the same key in two different objects is not a duplicate */
    send_accepts("{" TARGET ",\"response\":[" TEXT_RESP "," TEXT_RESP "]}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_string_limits), cmocka_unit_test(test_body_size),
        cmocka_unit_test(test_depth),         cmocka_unit_test(test_not_an_object),
        cmocka_unit_test(test_invalid_text),  cmocka_unit_test(test_duplicate_keys),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
