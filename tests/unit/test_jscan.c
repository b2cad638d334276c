/* test_jscan.c - the brief decoding of member records: the same strings jansson would give,
 * and refusal of what is not one JSON object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "json/jscan.h"
#include "json/swar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const keys[] = {"_id", "externalId"};

/* jscan's answer for text equals jansson's (both succeed, same strings). */
static void same_as_jansson(const char *text)
{
    char *out[2];
    json_t *v = json_loads(text, 0, NULL);

    assert_non_null(v);
    assert_int_equal(jscan_strings(text, strlen(text), keys, 2, out), 0);
    for (int i = 0; i < 2; i++) {
        const char *want = json_string_value(json_object_get(v, keys[i]));
        if (want == NULL)
            assert_null(out[i]);
        else
            assert_string_equal(out[i], want);
        free(out[i]);
    }
    json_decref(v);
}

static void refused(const char *text, size_t n)
{
    char *out[2] = {(char *)1, (char *)1};

    assert_int_equal(jscan_strings(text, n, keys, 2, out), -1);
    assert_null(out[0]);
    assert_null(out[1]);
}

static void test_records(void **state)
{
    (void)state;
    same_as_jansson("{\"_id\":\"M1\",\"channel\":\"C1\",\"externalId\":\"psid-1\",\"tags\":[],"
                    "\"meta\":{\"a\":{\"b\":[1,2.5e3,-0.1,true,false,null]}},\"n\":-0}");
    same_as_jansson("{}");
    same_as_jansson("  {\"externalId\" : 12, \"_id\":\"x\"}  ");
    same_as_jansson("{\"_id\":null}");
    same_as_jansson("{\"_id\":\"a\",\"_id\":\"b\"}"); /* the last one, like jansson */
    same_as_jansson("{\"_id\":\"\\u00e9\\u20ac\\ud83d\\ude00\\n\\t\\\"\\\\\\/\"}");
    same_as_jansson("{\"_id\":\"é€😀\",\"externalId\":\"+852 9123\"}");
    same_as_jansson("{\"x\":{\"_id\":\"nested is not top level\"},\"_id\":\"top\"}");
}

static void test_escaped_key_is_not_matched(void **state)
{
    char *out[2];
    const char *text = "{\"_i\\u0064\":\"escaped key\"}";

    (void)state;
    /* documented: keys are matched on their raw bytes; botgate's records never escape keys */
    assert_int_equal(jscan_strings(text, strlen(text), keys, 2, out), 0);
    assert_null(out[0]);
}

static void test_refused(void **state)
{
    static const char *const bad[] = {
        "",
        "[]",
        "\"s\"",
        "1",
        "{",
        "{\"_id\"}",
        "{\"_id\":}",
        "{\"_id\":\"a\",}",
        "{,}",
        "{\"_id\":\"a\"} x",
        "{\"_id\":\"\\x\"}",
        "{\"_id\":\"\\ud800\"}",
        "{\"_id\":\"\\udc00\"}",
        "{\"_id\":\"\\u0000\"}",
        "{\"_id\":\"a\nb\"}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":-}",
        "{\"a\":tru}",
        "{\"a\":[1,]}",
        "{\"a\":{\"b\":1,}}",
        "{\"_id\":\"\xff\"}",
        "{\"_id\":\"\xc0\xaf\"}",
        "{\"_id\":\"\xed\xa0\x80\"}",
        "{'a':1}",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        refused(bad[i], strlen(bad[i]));
    refused("{\"_id\":\"a\0b\"}", 12); /* a NUL byte inside */
}

static void test_depth(void **state)
{
    char text[400];
    size_t n = 0;

    (void)state;
    text[n++] = '{';
    memcpy(text + n, "\"a\":", 4);
    n += 4;
    for (int i = 0; i < 100; i++)
        text[n++] = '[';
    for (int i = 0; i < 100; i++)
        text[n++] = ']';
    text[n++] = '}';
    refused(text, n); /* deeper than 64 */
}

/* Plain ASCII is skipped eight bytes at a time: whatever ends a run (a quote, an escape, a
 * multi-byte character, a control character, a byte that is no UTF-8) is seen at every offset
 * of a long string, and decoded or refused as jansson does. */
static void test_long_runs(void **state)
{
    static const char *const ends[] = {"\\\"",    "\\\\",     "\\n",
                                       "\\u00e9", "\xc3\xa9", "\xe2\x82\xac"};
    static const char *const bad[] = {"\n", "\x01", "\x1f", "\xff", "\x80", "\\q"};
    char text[200];

    (void)state;
    for (int at = 0; at < 20; at++) {
        for (size_t e = 0; e < sizeof(ends) / sizeof(ends[0]); e++) {
            snprintf(text, sizeof(text), "{\"_id\":\"%.*s%s%.*s\",\"externalId\":\"%.*s\"}", at,
                     "abcdefghijklmnopqrstuvwxyz", ends[e], 19 - at, "ABCDEFGHIJKLMNOPQRSTU", at,
                     "0123456789012345678901");
            same_as_jansson(text);
        }
        for (size_t e = 0; e < sizeof(bad) / sizeof(bad[0]); e++) {
            snprintf(text, sizeof(text), "{\"_id\":\"%.*s%s%.*s\"}", at,
                     "abcdefghijklmnopqrstuvwxyz", bad[e], 19 - at, "ABCDEFGHIJKLMNOPQRSTU");
            refused(text, strlen(text));
        }
        /* a string that ends exactly at a word's end, and one cut short */
        snprintf(text, sizeof(text), "{\"_id\":\"%.*s\"}", at, "abcdefghijklmnopqrstuvwxyz");
        same_as_jansson(text);
        refused(text, strlen(text) - 2);
    }
}

/* A number is copied as its text only for the keys asked so (a member's lastInboundAt), and
 * checked as jansson checks it. */
static void test_scalars(void **state)
{
    static const char *const three[] = {"_id", "externalId", "lastInboundAt"};
    const char *text = "{\"_id\":7,\"externalId\":\"e\",\"lastInboundAt\":1764400000000}";
    char *out[3];

    (void)state;
    assert_int_equal(jscan_scalars(text, strlen(text), three, 3, out, 1u << 2), 0);
    assert_null(out[0]); /* a number where a string goes stays absent */
    assert_string_equal(out[1], "e");
    assert_string_equal(out[2], "1764400000000");
    for (int i = 0; i < 3; i++)
        free(out[i]);
    text = "{\"lastInboundAt\":-1.5e3}";
    assert_int_equal(jscan_scalars(text, strlen(text), three, 3, out, 1u << 2), 0);
    assert_string_equal(out[2], "-1.5e3");
    free(out[2]);
    text = "{\"lastInboundAt\":\"2025-11-29T07:06:40Z\"}";
    assert_int_equal(jscan_scalars(text, strlen(text), three, 3, out, 1u << 2), 0);
    assert_string_equal(out[2], "2025-11-29T07:06:40Z");
    free(out[2]);
    text = "{\"lastInboundAt\":true}";
    assert_int_equal(jscan_scalars(text, strlen(text), three, 3, out, 1u << 2), 0);
    assert_null(out[2]);
    text = "{\"lastInboundAt\":01}";
    assert_int_equal(jscan_scalars(text, strlen(text), three, 3, out, 1u << 2), -1);
    assert_null(out[2]);
}

/* swar_clear_bytes never skips a match: on this (little-endian) machine it finds the first one
 * exactly, whatever follows it, even bytes that the borrow out of the match flags falsely ('#'
 * after a quote, a space after a control character). */
static void test_swar_first_match(void **state)
{
    static const unsigned char stops[] = {'"', '\\', 0x00, 0x1F, 0x0A, 0x80, 0xC3, 0xFF};
    static const unsigned char after[] = {'#', ' ', '!', ']', 0x01, 0x21, 'a', 0x80};

    (void)state;
    for (size_t k = 0; k < 8; k++)
        for (size_t i = 0; i < sizeof(stops); i++)
            for (size_t j = 0; j < sizeof(after); j++) {
                unsigned char b[8];
                uint64_t w, stop;
                memset(b, 'x', sizeof(b));
                b[k] = stops[i];
                for (size_t m = k + 1; m < 8; m++)
                    b[m] = after[j];
                w = swar_load(b);
                stop = swar_json_special(w) | (w & SWAR_HIGHS);
                assert_true(stop != 0);
                assert_true(swar_clear_bytes(stop) <= k);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                assert_int_equal(swar_clear_bytes(stop), k);
#endif
            }
}

/* Every string length up to 24 and every place of an escape, a control character or UTF-8 in
 * it, read as jansson reads it: the eight-byte runs end where the byte that ends them is. */
static void test_string_runs(void **state)
{
    static const char *const inserts[] = {"\\\"", "\\n", "\\u00e9", "\xc3\xa9", "#", " "};

    (void)state;
    for (size_t len = 0; len <= 24; len++)
        for (size_t at = 0; at <= len; at++)
            for (size_t i = 0; i < sizeof(inserts) / sizeof(*inserts); i++) {
                char value[64], text[128];
                memset(value, 'v', len);
                value[len] = '\0';
                snprintf(text, sizeof(text), "{\"_id\":\"%.*s%s%s\",\"externalId\":\"#\"}", (int)at,
                         value, inserts[i], value + at);
                same_as_jansson(text);
                text[strlen(text) - 3] = '\x01'; /* a raw control character in the last string */
                refused(text, strlen(text));
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_escaped_key_is_not_matched),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_swar_first_match),
        cmocka_unit_test(test_string_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
