/* Decimal formatting without printf (json/numfmt.h): the same text as "%lld" at the edges of
 * the range, and the result starts inside the caller's buffer. */
#include "../../json/numfmt.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h> /* after what it needs */

static void test_same_as_printf(void **state)
{
    static const long long values[] = {
        0, 1, 9, 10, 99, 100, -1, -10, 1234567890123LL, LLONG_MAX, LLONG_MIN, LLONG_MIN + 1};
    char buf[NUMFMT_DEC_SIZE], want[32];

    (void)state;
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        const char *got = numfmt_dec(buf, values[i]);
        snprintf(want, sizeof(want), "%lld", values[i]);
        assert_string_equal(got, want);
        assert_true(got >= buf && got < buf + NUMFMT_DEC_SIZE);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_printf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
