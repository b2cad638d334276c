/* The table of guesses (core/guess.c): what was put comes back, two pairs per set, the older
 * one makes room, a value too long is not remembered, and no table answers nothing. */
#include "../../core/guess.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h> /* after what it needs */

/* The place of a pair that falls in the set of x, with another tag (n: which one). */
static uint64_t same_set(uint64_t x, uint32_t n)
{
    return (x % GUESS_SETS) + (uint64_t)n * GUESS_SETS * 1000003u;
}

static void test_put_and_get(void **state)
{
    (void)state;
    guess_table_t *t = NULL;
    uint64_t a = guess_hash("ch1", "m1"), b = guess_hash("ch1", "m2");

    assert_null(guess_get(t, a));
    guess_put(&t, a, "85291230001");
    assert_non_null(t);
    assert_string_equal(guess_get(t, a), "85291230001");
    assert_null(guess_get(t, b));
    guess_put(&t, a, "85291230002"); /* the same pair: replaced */
    assert_string_equal(guess_get(t, a), "85291230002");
    /* the pair's ids in the other order are another pair */
    assert_int_not_equal(guess_hash("m1", "ch1"), a);
    guess_free(t);
    guess_free(NULL);
}

static void test_two_ways_the_older_makes_room(void **state)
{
    (void)state;
    guess_table_t *t = NULL;
    uint64_t x = guess_hash("ch", "m"), p[3];
    char v[GUESS_VALUE_MAX];

    for (uint32_t i = 0; i < 3; i++)
        p[i] = same_set(x, (i + 1) << 20);
    guess_put(&t, p[0], "first");
    guess_put(&t, p[1], "second");
    assert_string_equal(guess_get(t, p[0]), "first");
    assert_string_equal(guess_get(t, p[1]), "second");
    guess_put(&t, p[2], "third"); /* the older of the two goes */
    assert_null(guess_get(t, p[0]));
    assert_string_equal(guess_get(t, p[1]), "second");
    assert_string_equal(guess_get(t, p[2]), "third");
    /* the longest value remembered; one byte more is not (the last one stays) */
    uint64_t y = guess_hash("ch", "long");
    snprintf(v, sizeof(v), "%0*d", GUESS_VALUE_MAX - 1, 7);
    guess_put(&t, y, v);
    assert_string_equal(guess_get(t, y), v);
    guess_put(&t, y, "0123456789012345678901234567");
    assert_string_equal(guess_get(t, y), v);
    guess_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_and_get),
        cmocka_unit_test(test_two_ways_the_older_makes_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
