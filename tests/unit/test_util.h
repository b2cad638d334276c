/* test_util.h - helpers the cmocka unit tests share. Include after <cmocka.h>. */
#ifndef BOTGATE_TESTS_TEST_UTIL_H
#define BOTGATE_TESTS_TEST_UTIL_H

#include <jansson.h>

/* Parses test JSON; a mistake in the test itself fails the test at once. */
static inline json_t *load(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &e);

    if (v == NULL)
        fail_msg("bad test JSON: %s (%s)", e.text, text);
    return v;
}

#endif
