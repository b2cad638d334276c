/* The Prefer header's grammar (core/prefer.c): respond-async found only as a preference. */
#include "../../core/prefer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h> /* after what it needs */

static void test_states_respond_async(void **state)
{
    (void)state;
    assert_int_equal(prefer_respond_async("respond-async"), 1);
    assert_int_equal(prefer_respond_async("Respond-Async"), 1);
    assert_int_equal(prefer_respond_async("  respond-async  "), 1);
    assert_int_equal(prefer_respond_async("wait=10, respond-async"), 1);
    assert_int_equal(prefer_respond_async("respond-async; foo=\"a,b\", handling=lenient"), 1);
    assert_int_equal(prefer_respond_async(",respond-async,,"), 1);
    assert_int_equal(prefer_respond_async("return=minimal;;x, respond-async"), 1);
}

static void test_states_nothing(void **state)
{
    (void)state;
    assert_int_equal(prefer_respond_async("wait=10"), 0);
    assert_int_equal(prefer_respond_async("respond-asyncx"), 0);
    assert_int_equal(prefer_respond_async("x=respond-async"), 0);
    assert_int_equal(prefer_respond_async("respond-async=1"), 0);    /* it takes no value */
    assert_int_equal(prefer_respond_async("foo; respond-async"), 0); /* a parameter of foo */
    assert_int_equal(prefer_respond_async("x=\"respond-async\""), 0);
}

static void test_malformed(void **state)
{
    (void)state;
    assert_int_equal(prefer_respond_async(""), -1);
    assert_int_equal(prefer_respond_async(" , "), -1);
    assert_int_equal(prefer_respond_async("respond async"), -1);
    assert_int_equal(prefer_respond_async("respond-async;="), -1);
    assert_int_equal(prefer_respond_async("x=\"unterminated"), -1);
    assert_int_equal(prefer_respond_async("x=y z"), -1);
    assert_int_equal(prefer_respond_async("(respond-async)"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states_respond_async),
        cmocka_unit_test(test_states_nothing),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
