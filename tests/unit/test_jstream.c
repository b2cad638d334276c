/* test_jstream.c - the resumable JSON check: the same verdict as jparse for whole texts and for
 * every split of them into pieces, the watched array's elements, pauses and errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "json/jparse.h"
#include "json/jstream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct seen {
    char text[4096]; /* the elements, each "<index>:<string>|" or "<index>:#<len>|" */
    size_t n;
    int pause_every; /* pause after every nth string (0: never) */
    int strings;
} seen_t;

static int on_element(void *arg, size_t index, const char *s, size_t len)
{
    seen_t *w = arg;
    int n = s != NULL ? snprintf(w->text + w->n, sizeof(w->text) - w->n, "%zu:%s|", index, s)
                      : snprintf(w->text + w->n, sizeof(w->text) - w->n, "%zu:#%zu|", index, len);

    w->n += (size_t)n;
    if (s == NULL && len == 0)
        return 0;
    w->strings++;
    return w->pause_every > 0 && w->strings % w->pause_every == 0;
}

/* Feeds text in pieces cut at the given points (sorted, within n); 0 when it was valid. */
static int run(unsigned flags, const char *text, size_t n, const size_t *cuts, size_t ncuts,
               seen_t *w, size_t *start, size_t *end, size_t *count, const char **key)
{
    jstream_t *s = jstream_new(flags, on_element, w);
    size_t from = 0;
    int rc = 0;

    assert_non_null(s);
    for (size_t i = 0; i <= ncuts && rc == 0; i++) {
        size_t to = i < ncuts ? cuts[i] : n;
        while (from < to) {
            ssize_t took = jstream_feed(s, text + from, to - from);
            if (took < 0) {
                rc = -1;
                assert_true(jstream_error(s)[0] != '\0');
                break;
            }
            assert_true(took > 0);
            from += (size_t)took;
        }
    }
    if (rc == 0)
        rc = jstream_end(s);
    if (rc == 0 && start != NULL && jstream_array(s, start, end, count, key) < 0) {
        *start = *end = *count = (size_t)-1;
        *key = "(none)";
    }
    jstream_free(s);
    return rc;
}

/* jstream's verdict on text, whole, cut at every byte and cut in two at every place, is
 * jparse's, and the elements seen are the same each way. */
static void same_verdict(const char *text)
{
    size_t n = strlen(text), cuts[4096];
    json_t *v = jparse_value(text, n);
    int want = v != NULL ? 0 : -1;
    seen_t whole = {0}, w;
    size_t s0 = 0, e0 = 0, c0 = 0, s1, e1, c1;
    const char *k0 = "", *k1;

    json_decref(v);
    assert_true(n < 4096);
    if (run(0, text, n, NULL, 0, &whole, &s0, &e0, &c0, &k0) != want) {
        fprintf(stderr, "verdict differs on %s\n", text);
        fail();
    }
    for (size_t i = 0; i < n; i++)
        cuts[i] = i + 1;
    memset(&w, 0, sizeof(w));
    assert_int_equal(run(0, text, n, cuts, n, &w, &s1, &e1, &c1, &k1), want);
    assert_string_equal(w.text, whole.text);
    for (size_t i = 1; i < n; i++) {
        memset(&w, 0, sizeof(w));
        assert_int_equal(run(0, text, n, &i, 1, &w, &s1, &e1, &c1, &k1), want);
        assert_string_equal(w.text, whole.text);
        if (want == 0) {
            assert_int_equal(s1, s0);
            assert_int_equal(e1, e0);
            assert_int_equal(c1, c0);
            assert_string_equal(k1, k0);
        }
    }
}

static void test_same_as_jparse(void **state)
{
    static const char *const texts[] = {
        "{}",
        "[]",
        "1",
        "-0",
        "0.5e+3",
        "1E9",
        "\"x\"",
        "true",
        "false",
        "null",
        " {\"a\" : [1, 2.5, "
        "-3e-2, true, false, null, {}, [], \"s\"]} ",
        "{\"a\":\"\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\\b\\f\\r\"}",
        "{\"k\":\"é😀€\"}",
        /* refused */
        "",
        " ",
        "{",
        "[",
        "[1,]",
        "{\"a\":1,}",
        "{,}",
        "[,1]",
        "{\"a\" 1}",
        "{\"a\":}",
        "{1:2}",
        "01",
        "1.",
        ".5",
        "-",
        "1e",
        "1e+",
        "+1",
        "tru",
        "nul",
        "truex",
        "[1 2]",
        "{} {}",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\u00zz\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud800\\u0041\"",
        "\"\\u0000\"",
        "\"a\tb\"",
        "\"\xff\"",
        "\"\xc0\xaf\"",
        "\"\xe0\x80\xaf\"",
        "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"",
        "\"\xe2\x82\"",
        "\xef\xbb\xbf{}",
        "[\"a\"",
        "{\"a\":\"b",
        "\"unterminated",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        same_verdict(texts[i]);
}

static void test_depth(void **state)
{
    char text[300];

    (void)state;
    for (int d = 62; d <= 66; d++) {
        /* d arrays, the innermost empty; and d arrays around a number */
        memset(text, '[', (size_t)d);
        memset(text + d, ']', (size_t)d);
        text[2 * d] = '\0';
        same_verdict(text);
        memset(text, '[', (size_t)d);
        text[d] = '1';
        memset(text + d + 1, ']', (size_t)d);
        text[2 * d + 1] = '\0';
        same_verdict(text);
    }
}

static void test_watched_array(void **state)
{
    const char *text = "{\"channelId\":\"c\",\"recipients\":{\"memberIds\":[\"a\", \"b\\u00e9\","
                       "7, \"\", {\"x\":1}, \"\\ud83d\\ude00\"]},\"response\":[\"x\"]}";
    seen_t w = {0};
    size_t start, end, count;
    const char *key;

    (void)state;
    same_verdict(text);
    assert_int_equal(run(0, text, strlen(text), NULL, 0, &w, &start, &end, &count, &key), 0);
    assert_string_equal(w.text, "0:a|1:b\xc3\xa9|2:#0|3:|4:#0|5:\xf0\x9f\x98\x80|");
    assert_int_equal(count, 6);
    assert_string_equal(key, "memberIds");
    assert_int_equal(text[start], '[');
    assert_int_equal(text[end - 1], ']');
    assert_int_equal(text[end], '}');

    /* not watched: at another level, under another key, or a second one */
    memset(&w, 0, sizeof(w));
    text = "{\"x\":{\"memberIds\":[\"a\"]},\"recipients\":{\"tags\":[\"t\"],"
           "\"recipientIds\":[\"+1 555\"],\"memberIds\":[\"m\"]}}";
    assert_int_equal(run(0, text, strlen(text), NULL, 0, &w, &start, &end, &count, &key), 0);
    assert_string_equal(w.text, "0:+1 555|");
    assert_string_equal(key, "recipientIds");
    assert_int_equal(count, 1);

    memset(&w, 0, sizeof(w));
    text = "[[\"a\"],{\"recipients\":{\"memberIds\":[\"b\"]}}]";
    assert_int_equal(run(0, text, strlen(text), NULL, 0, &w, &start, &end, &count, &key), 0);
    assert_int_equal(start, (size_t)-1);
    assert_string_equal(w.text, "");
}

static void test_long_element(void **state)
{
    size_t n = JSTREAM_STRING_MAX + 1;
    char *text = malloc(n + 64);
    seen_t w = {0};
    size_t start, end, count;
    const char *key;

    (void)state;
    strcpy(text, "[\"");
    memset(text + 2, 'x', n);
    strcpy(text + 2 + n, "\",\"y\"]");
    assert_int_equal(
        run(JSTREAM_TOP_ARRAY, text, strlen(text), NULL, 0, &w, &start, &end, &count, &key), 0);
    assert_string_equal(w.text, "0:#513|1:y|");
    assert_string_equal(key, "");
    assert_int_equal(start, 0);
    assert_int_equal(end, strlen(text));
    free(text);
}

/* An element's call pauses the feed right after the string; it goes on from there. */
static void test_pause(void **state)
{
    const char *text = "[\"a\",\"bb\", \"c\\n\" , \"d\"]";
    size_t n = strlen(text), from = 0;
    seen_t w = {0};
    jstream_t *s;
    int feeds = 0;

    (void)state;
    w.pause_every = 1;
    s = jstream_new(JSTREAM_TOP_ARRAY, on_element, &w);
    while (from < n) {
        ssize_t took = jstream_feed(s, text + from, n - from);
        assert_true(took > 0);
        from += (size_t)took;
        feeds++;
        if (from < n)
            assert_int_equal(text[from - 1], '"');
    }
    assert_int_equal(feeds, 5);
    assert_int_equal(jstream_end(s), 0);
    assert_string_equal(w.text, "0:a|1:bb|2:c\n|3:d|");
    jstream_free(s);
}

static void test_error_says_where(void **state)
{
    const char *text = "{\"a\":[1,2,\"\xff\"]}";
    jstream_t *s = jstream_new(0, NULL, NULL);

    (void)state;
    assert_int_equal(jstream_feed(s, text, 8), 8);
    assert_int_equal(jstream_feed(s, text + 8, strlen(text) - 8), -1);
    assert_string_equal(jstream_error(s), "invalid UTF-8 at byte 11");
    assert_int_equal(jstream_feed(s, "1", 1), -1);
    assert_int_equal(jstream_end(s), -1);
    jstream_free(s);

    s = jstream_new(0, NULL, NULL);
    assert_int_equal(jstream_feed(s, "{\"a\":1", 6), 6);
    assert_int_equal(jstream_end(s), -1);
    assert_string_equal(jstream_error(s), "unexpected end of text at byte 6");
    assert_int_equal(jstream_top(s), '{');
    jstream_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_jparse), cmocka_unit_test(test_depth),
        cmocka_unit_test(test_watched_array),  cmocka_unit_test(test_long_element),
        cmocka_unit_test(test_pause),          cmocka_unit_test(test_error_says_where),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
