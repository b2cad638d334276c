/* test_result.c - addresses, messageEvent, result elements and the success answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_util.h"

#include "core/result.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v equals the JSON text want (exactly: an integer is not a real, a number not a string). */
static void assert_json(const json_t *v, const char *want)
{
    json_t *w = load(want);

    if (!json_equal(v, w)) {
        char *got = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        fail_msg("got %s, want %s", got ? got : "(null)", want);
    }
    json_decref(w);
}

static void test_address(void **state)
{
    static const struct {
        const char *addr;
        const char *json;
    } cases[] = {
        {"1", "1"},
        {"0", "0"},
        {"123456789012345", "123456789012345"}, /* 15 digits: a number */
        {"999999999999999", "999999999999999"},
        {"85291234567", "85291234567"},
        {"1234567890123456", "\"1234567890123456\""}, /* 16 digits: a string */
        {"99999999999999999999", "\"99999999999999999999\""},
        {"0123", "\"0123\""}, /* a leading zero would be lost */
        {"00", "\"00\""},
        {"", "\"\""},
        {"+85291234567", "\"+85291234567\""},
        {"-5", "\"-5\""},
        {"12a", "\"12a\""},
        {"1.5", "\"1.5\""},
        {" 12", "\" 12\""},
        {"12 ", "\"12 \""},
        {"1e5", "\"1e5\""},
        {"U012ABCDEF", "\"U012ABCDEF\""},
        {"oU7b-5x_Jq", "\"oU7b-5x_Jq\""},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *v = result_address(cases[i].addr);
        assert_non_null(v);
        assert_json(v, cases[i].json);
        if (cases[i].json[0] != '"')
            assert_true(json_is_integer(v));
        json_decref(v);
    }
    {
        json_t *v = result_address(NULL);
        assert_true(json_is_null(v));
        json_decref(v);
    }
}

static void test_message_event(void **state)
{
    json_t *resp = load("{\"type\":\"TEXT\",\"text\":\"Hi \\u00e9\"}");
    json_t *img = load("{\"type\":\"IMAGE\",\"url\":\"https://x/a.png\",\"caption\":\"c\"}");
    json_t *ev;

    (void)state;
    ev = result_message_event("1234567890", "85291234567", resp, 1700000000123LL, "wamid.X");
    assert_json(ev, "{\"from\":1234567890,\"to\":85291234567,\"data\":{\"text\":\"Hi \\u00e9\"},"
                    "\"type\":\"TEXT\",\"timestamp\":1700000000123,\"messageId\":\"wamid.X\"}");
    assert_true(json_is_integer(json_object_get(ev, "timestamp")));
    /* the response itself is not touched */
    assert_json(resp, "{\"type\":\"TEXT\",\"text\":\"Hi \\u00e9\"}");
    /* data is a copy: changing the event leaves the response alone */
    json_object_set_new(json_object_get(ev, "data"), "text", json_string("changed"));
    assert_string_equal(json_string_value(json_object_get(resp, "text")), "Hi \xc3\xa9");
    json_decref(ev);

    /* no messageId, string addresses */
    ev = result_message_event("B0123", "U9", img, 5, NULL);
    assert_json(ev, "{\"from\":\"B0123\",\"to\":\"U9\",\"data\":{\"url\":\"https://x/a.png\","
                    "\"caption\":\"c\"},\"type\":\"IMAGE\",\"timestamp\":5}");
    assert_null(json_object_get(ev, "messageId"));
    json_decref(ev);

    /* an empty message id is still given, as a string */
    ev = result_message_event("1", "2", resp, 0, "");
    assert_string_equal(json_string_value(json_object_get(ev, "messageId")), "");
    json_decref(ev);

    /* a template: nested data is copied whole, only the top-level type goes */
    {
        json_t *t = load("{\"type\":\"TEMPLATE\",\"elementName\":\"e\",\"languageCode\":\"en\","
                         "\"components\":[{\"type\":\"header\",\"parameters\":[]}]}");
        ev = result_message_event(NULL, "1234567890123456", t, 7, "m1");
        assert_json(ev, "{\"from\":null,\"to\":\"1234567890123456\",\"data\":{\"elementName\":"
                        "\"e\",\"languageCode\":\"en\",\"components\":[{\"type\":\"header\","
                        "\"parameters\":[]}]},\"type\":\"TEMPLATE\",\"timestamp\":7,"
                        "\"messageId\":\"m1\"}");
        json_decref(ev);
        json_decref(t);
    }
    json_decref(resp);
    json_decref(img);
}

/* The text a writer produced, parsed (it must be JSON). */
static json_t *written(jsonw_t *w)
{
    char *text = jw_steal(w, NULL);
    json_t *v;

    assert_non_null(text);
    v = load(text);
    free(text);
    return v;
}

static void test_send_element(void **state)
{
    json_t *resp = load("{\"type\":\"TEXT\",\"text\":\"hi\"}");
    json_t *meta = load("{\"api_status\":\"deprecated\",\"version\":\"2.45.1\",\"x\":[1]}");
    result_event_t ev = {
        .from = "111", .to = "222", .response = resp, .timestamp_ms = 9, .message_id = "mid.1"};
    jsonw_t w;
    json_t *el;

    (void)state;
    /* default meta: the version botgate speaks */
    jw_init(&w);
    result_write_sent(&w, &ev, "222", NULL, "v19.0");
    el = written(&w);
    assert_json(el, "{\"result\":{\"messages\":[{\"id\":\"mid.1\"}],\"meta\":{\"api_status\":"
                    "\"stable\",\"version\":\"v19.0\"}},\"messageEvent\":{\"from\":111,\"to\":222,"
                    "\"data\":{\"text\":\"hi\"},\"type\":\"TEXT\",\"timestamp\":9,\"messageId\":"
                    "\"mid.1\"},\"chatId\":\"222\"}");
    json_decref(el);

    /* the platform's own meta */
    ev.message_id = "wamid.2";
    result_write_sent(&w, &ev, "C-7", meta, "");
    el = written(&w);
    assert_json(json_object_get(el, "result"),
                "{\"messages\":[{\"id\":\"wamid.2\"}],\"meta\":{\"api_status\":\"deprecated\","
                "\"version\":\"2.45.1\",\"x\":[1]}}");
    assert_string_equal(json_string_value(json_object_get(el, "chatId")), "C-7");
    json_decref(el);

    /* a meta that is not an object is replaced by the default */
    {
        json_t *bad = json_string("meta");
        result_write_sent(&w, &ev, "2", bad, "web-api");
        el = written(&w);
        assert_json(json_object_get(json_object_get(el, "result"), "meta"),
                    "{\"api_status\":\"stable\",\"version\":\"web-api\"}");
        json_decref(el);
        json_decref(bad);
    }
    json_decref(meta);
    json_decref(resp);
}

/* The writer's event equals result_message_event() for every kind of response, including
 * strings that need escaping and TEMPLATE components. */
static void test_written_event_matches_jansson(void **state)
{
    static const char *const responses[] = {
        "{\"type\":\"TEXT\",\"text\":\"quote \\\" backslash \\\\ nl \\n tab \\t ctl \\u0001 é 😀\"}",
        "{\"type\":\"IMAGE\",\"url\":\"https://x/a.png?b=1&c=</script>\"}",
        "{\"type\":\"TEMPLATE\",\"elementName\":\"t\",\"languageCode\":\"en\","
        "\"components\":[{\"type\":\"button\",\"index\":\"0\",\"parameters\":[{\"type\":"
        "\"payload\",\"payload\":\"P\\u2028\"}]},{\"n\":1.5,\"b\":true,\"z\":null}]}",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(responses) / sizeof(responses[0]); i++) {
        json_t *resp = load(responses[i]), *got, *want;
        result_event_t ev = {.from = "0123",
                             .to = "-9",
                             .response = resp,
                             .timestamp_ms = 1700000000123LL,
                             .message_id = i ? "m\"1" : NULL};
        jsonw_t w;
        bg_error_t err;

        jw_init(&w);
        bg_error_set(&err, BG_ERR_PLATFORM, "boom \"%zu\"", i);
        result_write_failed(&w, &ev, "c\n", &err);
        got = written(&w);
        want = result_message_event("0123", "-9", resp, 1700000000123LL, ev.message_id);
        if (!json_equal(json_object_get(got, "messageEvent"), want))
            fail_msg("event %zu differs", i);
        assert_string_equal(json_string_value(json_object_get(got, "chatId")), "c\n");
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(got, "error"), "err")), err.msg);
        json_decref(got);

        /* the same from what a response set aside keeps: its type and result_write_data */
        {
            jsonw_t d;
            char *data;
            jw_init(&d);
            result_write_data(&d, resp);
            assert_non_null(data = jw_steal(&d, NULL));
            ev.response = NULL;
            ev.type = json_string_value(json_object_get(resp, "type"));
            ev.data = data;
            jw_init(&w);
            result_write_failed(&w, &ev, "c\n", &err);
            got = written(&w);
            if (!json_equal(json_object_get(got, "messageEvent"), want))
                fail_msg("event %zu differs when written from its data text", i);
            json_decref(got);
            free(data);
        }
        json_decref(want);
        json_decref(resp);
    }
}

static void test_send_failed(void **state)
{
    json_t *resp = load("{\"type\":\"IMAGE\",\"url\":\"https://x/a.png\"}");
    result_event_t ev = {.from = "111", .to = "222", .response = resp, .timestamp_ms = 3};
    json_t *el;
    jsonw_t w;
    bg_error_t err;

    (void)state;
    jw_init(&w);
    bg_error_set(&err, BG_ERR_RATE_LIMITED, "rate limited by the platform");
    result_write_failed(&w, &ev, "222", &err);
    el = written(&w);
    assert_json(el, "{\"messageEvent\":{\"from\":111,\"to\":222,\"data\":{\"url\":"
                    "\"https://x/a.png\"},\"type\":\"IMAGE\",\"timestamp\":3},\"chatId\":\"222\","
                    "\"error\":{\"err_code\":120,\"err\":\"rate limited by the platform\"}}");
    json_decref(el);

    /* a rate limit's failure says when to try again; 0 leaves it out */
    result_write_failed_after(&w, &ev, "222", &err, 6000);
    el = written(&w);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(el, "error"), "retryAfterMs")), 6000);
    json_decref(el);
    result_write_failed_after(&w, &ev, "222", &err, 0);
    el = written(&w);
    assert_null(json_object_get(json_object_get(el, "error"), "retryAfterMs"));
    json_decref(el);

    /* a failure with no wire code of its own is still reported with one */
    bg_error_set(&err, BG_ERR_UNAUTHORIZED, "oops");
    result_write_failed(&w, &ev, "x", &err);
    el = written(&w);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(el, "error"), "err_code")),
                     BG_ERR_PLATFORM);
    json_decref(el);
    json_decref(resp);
}

static void test_written_answer(void **state)
{
    jsonw_t w;
    json_t *a;

    (void)state;
    jw_init(&w);
    result_write_answer(&w, "M1", 1, "{\"x\":1},{\"x\":2}", 15);
    a = written(&w);
    assert_json(a, "{\"ok\":1,\"member\":\"M1\",\"sendResult\":{\"ok\":1,\"member\":\"M1\","
                   "\"result\":[{\"x\":1},{\"x\":2}]}}");
    json_decref(a);
    result_write_answer(&w, "M\"2", 0, "", 0);
    a = written(&w);
    assert_json(a, "{\"ok\":1,\"member\":\"M\\\"2\",\"sendResult\":{\"ok\":0,\"member\":"
                   "\"M\\\"2\",\"result\":[]}}");
    json_decref(a);
}

static void test_written_cut_answer(void **state)
{
    jsonw_t w;
    json_t *a;
    bg_error_t err;

    (void)state;
    bg_error_set(&err, BG_ERR_UNAVAILABLE, "1 of 2 \"delivered\"");
    jw_init(&w);
    result_write_cut_answer(&w, &err, "M1", "{\"x\":1},{\"y\":2}", 15);
    a = written(&w);
    assert_json(a, "{\"ok\":0,\"err_code\":121,\"err\":\"1 of 2 \\\"delivered\\\"\","
                   "\"error\":\"1 of 2 \\\"delivered\\\"\",\"member\":\"M1\",\"sendResult\":"
                   "{\"ok\":0,\"member\":\"M1\",\"result\":[{\"x\":1},{\"y\":2}]}}");
    json_decref(a);
}

static void test_jw_scalars(void **state)
{
    static const long long ints[] = {
        0, 7, -7, 1700000000123LL, 9223372036854775807LL, -9223372036854775807LL - 1};
    jsonw_t w;
    char *text;

    (void)state;
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        char want[32];
        jw_init(&w);
        jw_int(&w, ints[i]);
        text = jw_steal(&w, NULL);
        snprintf(want, sizeof(want), "%lld", ints[i]);
        assert_string_equal(text, want);
        free(text);
    }
    jw_init(&w);
    jw_str(&w, NULL);
    jw_lit(&w, ",");
    jw_addr(&w, NULL);
    jw_lit(&w, ",");
    jw_addr(&w, "123456789012345");
    jw_lit(&w, ",");
    jw_addr(&w, "1234567890123456");
    text = jw_steal(&w, NULL);
    assert_string_equal(text, "null,null,123456789012345,\"1234567890123456\"");
    free(text);
}

/* The texts copied from body (result_body_text) against those written from its parse
 * (result_response_text), element by element; copied counts those the copy made itself. */
static void assert_body_texts(const char *body, const char *name, int *copied)
{
    json_t *root = load(body), *list = json_object_get(root, name);
    const char *p = result_body_array(body, strlen(body), name);
    jsonw_t scratch;

    jw_init(&scratch);
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *r = json_array_get(list, i);
        int fallback = json_object_get(r, "fallback") != NULL;
        char *want = result_response_text(r, fallback), *got = NULL;
        if (p != NULL)
            got = result_body_text(&p, body + strlen(body), &scratch);
        if (got != NULL) {
            ++*copied;
            assert_string_equal(got, want);
            if (fallback) /* and the fallback's text after the NUL */
                assert_string_equal(got + strlen(got) + 1, want + strlen(want) + 1);
        }
        free(got);
        free(want);
    }
    jw_free(&scratch);
    json_decref(root);
}

/* A response's text copied from the body is the one written from its parsed value, whatever
 * the blanks, the order of its members, its nesting, numbers (reals and -0 written again),
 * literals, UTF-8, a fallback; a string with an escape is left to the parsed value, and so is
 * the rest of a body the copy cannot read on in. */
static void test_body_texts(void **state)
{
    static const char *const plain[] = {
        "{\"channelId\":\"c\",\"response\":[{\"type\":\"TEXT\",\"text\":\"hi\"}]}",
        "{ \"memberId\" : \"m\" , \"response\" : [ { \"text\" : \"a b\" , \"type\" : \"TEXT\" } ,"
        "\n\t{\"type\":\"IMAGE\",\"url\":\"https://x/y.png\"} ] , \"channelId\":\"c\" }",
        "{\"response\":[{\"type\":\"LOCATION\",\"latitude\":22.28,\"longitude\":-114.16e0,"
        "\"name\":\"\xe9\xa6\x99\xe6\xb8\xaf\","
        "\"fallback\":{\"text\":\"at 22.28\",\"type\":\"TEXT\"}},"
        "{\"type\":\"NATIVE\",\"message\":{\"a\":[1,-2,3.5,-0,true,false,null,{},[]],\"b\":{\"c\":"
        "[ { } , [ ] ]},\"n\":-0.0,\"e\":1E+2}}]}",
        "{\"responses\":[{\"type\":\"TEXT\",\"text\":\"x\",\"quickReplies\":[{\"title\":\"A\","
        "\"payload\":\"P\"}]},{\"type\":\"BUTTON\",\"buttons\":[{\"type\":\"url\",\"title\":\"T\","
        "\"url\":\"https://e\"}],\"text\":\"t\"}]}",
    };
    static const char *const escaped[] = {
        "{\"response\":[{\"type\":\"TEXT\",\"text\":\"a\\\"b\"},"
        "{\"type\":\"TEXT\",\"text\":\"c\"}]}",
        "{\"response\":[{\"type\":\"TEXT\",\"te\\u0078t\":\"x\"}]}",
        "{\"respons\\u0065\":[{\"type\":\"TEXT\",\"text\":\"x\"}]}",
    };
    int copied = 0;

    (void)state;
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        json_t *root = load(plain[i]);
        const char *name = json_object_get(root, "response") ? "response" : "responses";
        int n = (int)json_array_size(json_object_get(root, name));
        json_decref(root);
        copied = 0;
        assert_body_texts(plain[i], name, &copied);
        assert_int_equal(copied, n); /* every one copied */
    }
    copied = 0;
    assert_body_texts(escaped[0], "response", &copied);
    assert_int_equal(copied, 1); /* the second one */
    for (size_t i = 1; i < sizeof(escaped) / sizeof(escaped[0]); i++) {
        copied = 0;
        assert_body_texts(escaped[i], "response", &copied);
        assert_int_equal(copied, 0);
    }
}

/* jw_real(d) against jansson's dump of d, for d and -d. */
static void assert_real_as_jansson(double d)
{
    for (int sign = 0; sign < 2; sign++) {
        json_t *v = json_real(sign ? -d : d);
        char *want = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT), *text;
        jsonw_t w;
        jw_init(&w);
        jw_json(&w, v);
        text = jw_steal(&w, NULL);
        assert_non_null(want);
        assert_string_equal(text, want);
        free(text);
        free(want);
        json_decref(v);
    }
}

/* Reals of the common range are written without printf (jsonw.c real17): exactly as jansson
 * writes them, ties of the 17th digit (half to even) and the ends of the range included;
 * outside it, printf's text as before. */
static void test_jw_reals(void **state)
{
    static const double some[] = {22.28,
                                  114.16,
                                  -90,
                                  180,
                                  0.1,
                                  0.3,
                                  1,
                                  2.5,
                                  1e-4,
                                  9.9999999999999991e-5,
                                  0.001,
                                  1e16,
                                  9999999999999998.0,
                                  99999999999999984.0,
                                  1e17,
                                  123456789012345678.0,
                                  1e300,
                                  5e-324,
                                  0.0,
                                  123456789012345.625, /* a tie: ...62|5 -> ...62 */
                                  123456789012345.375, /* ...37|5 -> ...38 */
                                  1234567890123456.5,
                                  1234567890123457.5};
    uint64_t x = 88172645463325252u;

    (void)state;
    for (size_t i = 0; i < sizeof(some) / sizeof(some[0]); i++)
        assert_real_as_jansson(some[i]);
    for (int i = 0; i < 20000; i++) {
        double d;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        switch (i % 4) {
        case 0: /* coordinates with up to 6 decimals */
            d = (double)(x % 360000001) / 1e6 - 180;
            break;
        case 1: /* halves, quarters, ... of 15-digit integers: ties at the 17th digit */
            d = (double)(100000000000000 + x % 100000) + (double)(x >> 40 & 15) / 16;
            break;
        case 2: /* any magnitude from 1e-6 to 1e19 */
            d = (double)(x % 1000000007) * 1e-15 * (double)(1ull << (x >> 58));
            break;
        default: /* any bits that make a finite double */
            memcpy(&d, &x, sizeof(d));
            if (d != d || d - d != 0)
                continue;
        }
        assert_real_as_jansson(d);
    }
}

/* Strings are copied eight bytes at a time until one needs an escape: every character that
 * does, at every offset of a long string, comes out as jansson writes it. */
static void test_jw_str_escapes(void **state)
{
    static const char *const special[] = {"\"", "\\", "\n", "\x01", "\x1f", "\t", "\xc3\xa9", "/"};
    char in[64];

    (void)state;
    for (int at = 0; at < 20; at++) {
        for (size_t e = 0; e < sizeof(special) / sizeof(special[0]); e++) {
            jsonw_t w;
            json_t *v;
            char *text, *want;
            snprintf(in, sizeof(in), "%.*s%s%.*s", at, "abcdefghijklmnopqrstuvwxyz", special[e],
                     19 - at, "ABCDEFGHIJKLMNOPQRSTU");
            jw_init(&w);
            jw_str(&w, in);
            text = jw_steal(&w, NULL);
            v = json_string(in);
            want = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            assert_string_equal(text, want);
            free(text);
            free(want);
            json_decref(v);
        }
    }
}

static void test_node_element(void **state)
{
    json_t *resp = load("{\"type\":\"TEXT\",\"text\":\"hi\"}");
    json_t *ev, *el;
    bg_error_t err;

    (void)state;
    ev = result_message_event("111", "222", resp, 4, "m1");
    el = result_node_element(ev, NULL);
    assert_json(el, "{\"ok\":1,\"messageEvent\":{\"from\":111,\"to\":222,\"data\":{\"text\":"
                    "\"hi\"},\"type\":\"TEXT\",\"timestamp\":4,\"messageId\":\"m1\"}}");
    assert_true(json_is_integer(json_object_get(el, "ok")));
    json_decref(el);

    bg_error_set(&err, BG_ERR_PHONE_INVALID, "phone number invalid");
    ev = result_message_event("111", "222", resp, 4, NULL);
    el = result_node_element(ev, &err);
    assert_json(el, "{\"ok\":0,\"messageEvent\":{\"from\":111,\"to\":222,\"data\":{\"text\":"
                    "\"hi\"},\"type\":\"TEXT\",\"timestamp\":4},\"error\":{\"err_code\":100,"
                    "\"err\":\"phone number invalid\"}}");
    json_decref(el);

    /* a failure with nothing sent: no messageEvent */
    bg_error_set(&err, BG_ERR_LIMIT, "redirect chain longer than 11 nodes");
    el = result_node_element(NULL, &err);
    assert_json(el, "{\"ok\":0,\"error\":{\"err_code\":118,\"err\":\"redirect chain longer than "
                    "11 nodes\"}}");
    json_decref(el);

    bg_error_set(&err, BG_ERR_RATE_LIMITED, "rate limited");
    el = result_node_element_after(NULL, &err, 1500);
    assert_json(el, "{\"ok\":0,\"error\":{\"err_code\":120,\"err\":\"rate limited\","
                    "\"retryAfterMs\":1500}}");
    json_decref(el);

    el = result_node_element(NULL, NULL);
    assert_json(el, "{\"ok\":1}");
    json_decref(el);
    json_decref(resp);
}

static void test_answer(void **state)
{
    json_t *results = load("[{\"ok\":1},{\"ok\":0}]");
    json_t *keep = json_incref(results);
    json_t *a;

    (void)state;
    a = result_answer("M1", 1, results);
    assert_json(a, "{\"ok\":1,\"member\":\"M1\",\"sendResult\":{\"ok\":1,\"member\":\"M1\","
                   "\"result\":[{\"ok\":1},{\"ok\":0}]}}");
    assert_ptr_equal(json_object_get(json_object_get(a, "sendResult"), "result"), keep);
    assert_true(json_is_integer(json_object_get(a, "ok")));
    assert_true(json_is_integer(json_object_get(json_object_get(a, "sendResult"), "ok")));
    json_decref(a);
    json_decref(keep);

    /* a failed element: sendResult.ok 0, the top-level ok stays 1 */
    a = result_answer("M2", 0, json_array());
    assert_json(a, "{\"ok\":1,\"member\":\"M2\",\"sendResult\":{\"ok\":0,\"member\":\"M2\","
                   "\"result\":[]}}");
    json_decref(a);

    /* any non-zero send_ok is 1 on the wire */
    a = result_answer("M3", 7, json_array());
    assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "sendResult"), "ok")),
                     1);
    json_decref(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_address),
        cmocka_unit_test(test_message_event),
        cmocka_unit_test(test_send_element),
        cmocka_unit_test(test_send_failed),
        cmocka_unit_test(test_written_event_matches_jansson),
        cmocka_unit_test(test_written_answer),
        cmocka_unit_test(test_written_cut_answer),
        cmocka_unit_test(test_jw_scalars),
        cmocka_unit_test(test_jw_str_escapes),
        cmocka_unit_test(test_jw_reals),
        cmocka_unit_test(test_body_texts),
        cmocka_unit_test(test_node_element),
        cmocka_unit_test(test_answer),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
