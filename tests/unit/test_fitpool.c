/* The exact-fit pool (net/fitpool.h): blocks fit their size to 32 bytes, never overlap, keep
 * what was written to them, come back for the same size class only, and the pool refuses sizes
 * outside its range and a full region. */
#include "../../net/fitpool.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static char region[64 * 1024];

static void test_sizes_and_range(void **state)
{
    fitpool_t p;

    (void)state;
    fitpool_init(&p, region, sizeof(region));
    assert_null(fitpool_alloc(&p, FITPOOL_MIN - 1));
    assert_null(fitpool_alloc(&p, FITPOOL_MAX + 1));
    void *a = fitpool_alloc(&p, 5360); /* libcurl 7.88's easy handle on Debian 12 */
    assert_non_null(a);
    assert_true(fitpool_owns(&p, a));
    assert_int_equal(fitpool_size(a), 5376);
    assert_int_equal((uintptr_t)a % 16, 0);
    void *b = fitpool_alloc(&p, FITPOOL_MIN);
    assert_int_equal(fitpool_size(b), FITPOOL_MIN + FITPOOL_STEP - 1);
    void *c = fitpool_alloc(&p, FITPOOL_MAX);
    assert_int_equal(fitpool_size(c), FITPOOL_MAX);
    /* no overlap: each block written whole, then read back whole */
    memset(a, 'a', 5360);
    memset(b, 'b', FITPOOL_MIN);
    memset(c, 'c', FITPOOL_MAX);
    for (size_t i = 0; i < 5360; i++)
        assert_int_equal(((char *)a)[i], 'a');
    for (size_t i = 0; i < FITPOOL_MIN; i++)
        assert_int_equal(((char *)b)[i], 'b');
    assert_false(fitpool_owns(&p, &p));
    assert_false(fitpool_owns(&p, NULL));
}

static void test_reuse_by_class(void **state)
{
    fitpool_t p;

    (void)state;
    fitpool_init(&p, region, sizeof(region));
    void *a = fitpool_alloc(&p, 5360);
    void *b = fitpool_alloc(&p, 1025); /* its receive buffer */
    fitpool_free(&p, a);
    /* another class does not take a's block; its own class does, the last freed first */
    void *c = fitpool_alloc(&p, 6000);
    assert_ptr_not_equal(c, a);
    void *d = fitpool_alloc(&p, 5345);
    assert_ptr_equal(d, a);
    fitpool_free(&p, b);
    fitpool_free(&p, d);
    assert_ptr_equal(fitpool_alloc(&p, 5360), d);
    assert_ptr_equal(fitpool_alloc(&p, 1040), b);
}

static void test_full_region(void **state)
{
    fitpool_t p, none;
    int n = 0;
    void *last = NULL, *q;

    (void)state;
    fitpool_init(&p, region, sizeof(region));
    while ((q = fitpool_alloc(&p, FITPOOL_MAX)) != NULL) {
        assert_true((char *)q + FITPOOL_MAX <= region + sizeof(region));
        last = q;
        n++;
    }
    assert_int_equal(n, (int)(sizeof(region) / (FITPOOL_MAX + 16)));
    /* a freed block is served again even with the region used up */
    fitpool_free(&p, last);
    assert_ptr_equal(fitpool_alloc(&p, FITPOOL_MAX), last);
    /* a pool without a region owns nothing and hands out nothing */
    fitpool_init(&none, NULL, 0);
    assert_null(fitpool_alloc(&none, 5360));
    assert_false(fitpool_owns(&none, region));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_range),
        cmocka_unit_test(test_reuse_by_class),
        cmocka_unit_test(test_full_region),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
