/* The ms -> timeval conversion every timer uses (core/clock.h): whole seconds and the rest in
 * microseconds, and a delay already over as 0, never a negative field; and the doubling pause
 * of what is tried again. */
#include "../../core/clock.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static void expect_tv(int64_t ms, long sec, long usec)
{
    struct timeval tv = clock_ms_timeval(ms);

    assert_int_equal(tv.tv_sec, sec);
    assert_int_equal(tv.tv_usec, usec);
}

static void test_ms_timeval(void **state)
{
    (void)state;
    expect_tv(0, 0, 0);
    expect_tv(1, 0, 1000);
    expect_tv(999, 0, 999000);
    expect_tv(1000, 1, 0);
    expect_tv(1999, 1, 999000);
    expect_tv(86400001, 86400, 1000);
}

static void test_past_is_now(void **state)
{
    (void)state;
    expect_tv(-1, 0, 0);
    expect_tv(-1500, 0, 0);
    expect_tv(INT64_MIN, 0, 0);
}

static void test_doubling(void **state)
{
    (void)state;
    assert_int_equal(clock_doubling_ms(100, 2000, 0), 100);
    assert_int_equal(clock_doubling_ms(100, 2000, -3), 100);
    assert_int_equal(clock_doubling_ms(100, 2000, 1), 200);
    assert_int_equal(clock_doubling_ms(100, 2000, 4), 1600);
    assert_int_equal(clock_doubling_ms(100, 2000, 5), 2000);
    assert_int_equal(clock_doubling_ms(1000, 300000, 8), 256000);
    assert_int_equal(clock_doubling_ms(1000, 300000, 9), 300000);
    assert_int_equal(clock_doubling_ms(1000, 300000, INT64_MAX), 300000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ms_timeval),
        cmocka_unit_test(test_past_is_now),
        cmocka_unit_test(test_doubling),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
