/* json/jparse.c: reads what jansson reads, as jansson reads it (each case is checked against
 * json_loadb), refuses what it refuses, and stops at 64 levels. */
#include "../../json/jparse.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

static json_t *jansson(const char *s)
{
    json_error_t e;

    return json_loadb(s, strlen(s), JSON_DECODE_ANY, &e);
}

/* Accepted by both, the same value. */
static void test_same_values(void **state)
{
    static const char *const cases[] = {
        "{\"type\":\"TEXT\",\"text\":\"hello\"}",
        "[1,-2,0,-0,3.25,-1e-3,6.02E+23,true,false,null]",
        "\"caf\\u00e9 \\ud83d\\ude00 \\n\\t\\\\\\\"\\/\"",
        "  {\"a\":1,\"a\":2}  ", /* the last duplicate wins */
        "{\"deep\":{\"er\":[[[{\"x\":\"\xc3\xa9\"}]]]}}",
        "9223372036854775807",
        "-9223372036854775808",
        "1.00000000000000000000000000000000000000000000000000000000000000000000001",
        "{}",
        "[]",
        "\"\"",
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *mine = jparse_value(cases[i], strlen(cases[i]));
        json_t *theirs = jansson(cases[i]);
        if (mine == NULL || theirs == NULL || !json_equal(mine, theirs))
            fail_msg("case %zu differs: %s", i, cases[i]);
        json_decref(mine);
        json_decref(theirs);
    }
}

/* Refused by both. */
static void test_same_refusals(void **state)
{
    static const char *const cases[] = {
        "",
        "   ",
        "{",
        "[1,]",
        "{\"a\"}",
        "{\"a\":1,}",
        "01",
        "1.",
        ".5",
        "-",
        "1e",
        "+1",
        "tru",
        "nul",
        "\"\\x\"",
        "\"\\ud800\"",
        "\"\\u0000\"",
        "\"a\x01\"",
        "\"\xc3\"",
        "\"\xed\xa0\x80\"",
        "{} []",
        "9223372036854775808",
        "1e400",
        "'a'",
        "NaN",
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *mine = jparse_value(cases[i], strlen(cases[i]));
        json_t *theirs = jansson(cases[i]);
        if (mine != NULL || theirs != NULL)
            fail_msg("case %zu not refused by %s: %s", i, mine ? "jparse" : "jansson", cases[i]);
    }
}

/* 64 levels are read, 65 are not (the request parser's limit; jansson goes to 2048). */
static void test_depth(void **state)
{
    char text[2 * 65 + 1];
    json_t *v;

    (void)state;
    memset(text, '[', 64);
    memset(text + 64, ']', 64);
    v = jparse_value(text, 128);
    assert_non_null(v);
    json_decref(v);
    memset(text, '[', 65);
    memset(text + 65, ']', 65);
    assert_null(jparse_value(text, 130));
}

/* Only the given length is read: text after it, a NUL included, plays no part. */
static void test_length_bounds_input(void **state)
{
    const char text[] = "[1,2]garbage";
    json_t *v;

    (void)state;
    v = jparse_value(text, 5);
    assert_non_null(v);
    assert_int_equal(json_array_size(v), 2);
    json_decref(v);
    assert_null(jparse_value(text, 6));
    assert_null(jparse_value("[1]\0", 4)); /* a NUL is not white space */
}

/* jparse_value_unique refuses a repeated key at any level, as JSON_REJECT_DUPLICATES does,
 * the key compared once decoded; the same key in two objects is no repeat. */
static void test_unique_keys(void **state)
{
    static const char *const refused[] = {
        "{\"a\":1,\"a\":1}",
        "{\"a\":1,\"b\":{\"c\":1,\"c\":2}}",
        "[{\"x\":[{\"k\":1,\"k\":null}]}]",
        "{\"a\":1,\"\\u0061\":2}",
    };
    static const char *const accepted[] = {
        "{\"a\":1,\"b\":1}",
        "[{\"a\":1},{\"a\":2}]",
        "{\"a\":{\"a\":{\"a\":1}}}",
        "{\"a\":1,\"A\":2,\"a \":3}",
    };
    json_error_t e;
    (void)state;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        json_t *theirs = json_loadb(refused[i], strlen(refused[i]),
                                    JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &e);
        if (jparse_value_unique(refused[i], strlen(refused[i])) != NULL || theirs != NULL)
            fail_msg("case %zu not refused: %s", i, refused[i]);
        json_t *v = jparse_value(refused[i], strlen(refused[i])); /* without: the last wins */
        assert_non_null(v);
        json_decref(v);
    }
    for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
        json_t *mine = jparse_value_unique(accepted[i], strlen(accepted[i]));
        json_t *theirs = json_loadb(accepted[i], strlen(accepted[i]),
                                    JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &e);
        if (mine == NULL || theirs == NULL || !json_equal(mine, theirs))
            fail_msg("case %zu differs: %s", i, accepted[i]);
        json_decref(mine);
        json_decref(theirs);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_values), cmocka_unit_test(test_same_refusals),
        cmocka_unit_test(test_depth),       cmocka_unit_test(test_length_bounds_input),
        cmocka_unit_test(test_unique_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
