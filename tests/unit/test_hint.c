/* The ids a worker remembers (core/hint.h): a put is found again, a set keeps two pairs and the
 * older makes room for a third, an id too long is not kept, an empty table knows nothing. */
#include "../../core/hint.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

static void test_put_get(void **state)
{
    hint_table_t t = {0};
    uint64_t a = hint_hash("ch1", "psid-a"), b = hint_hash("ch1", "psid-b");

    (void)state;
    assert_null(hint_get(&t, a));
    hint_put(&t, a, "member-a");
    assert_string_equal(hint_get(&t, a), "member-a");
    assert_null(hint_get(&t, b));
    hint_put(&t, a, "member-a2"); /* the same pair: its way again */
    assert_string_equal(hint_get(&t, a), "member-a2");
    assert_int_not_equal(hint_hash("ch1", "psid-a"), hint_hash("psid-a", "ch1"));
    hint_free(&t);
}

static void test_older_makes_room(void **state)
{
    hint_table_t t = {0};
    /* three places in one set: the same low bits (the set), other tags (the high bits) */
    uint64_t x[3] = {5, 5 + ((uint64_t)1 << 40), 5 + ((uint64_t)2 << 40)};

    (void)state;
    hint_put(&t, x[0], "one");
    hint_put(&t, x[1], "two");
    assert_string_equal(hint_get(&t, x[0]), "one");
    assert_string_equal(hint_get(&t, x[1]), "two");
    hint_put(&t, x[2], "three");
    assert_null(hint_get(&t, x[0]));
    assert_string_equal(hint_get(&t, x[1]), "two");
    assert_string_equal(hint_get(&t, x[2]), "three");
    hint_free(&t);
}

static void test_long_id_not_kept(void **state)
{
    hint_table_t t = {0};
    char id[HINT_ID_MAX + 1];

    (void)state;
    memset(id, 'x', HINT_ID_MAX);
    id[HINT_ID_MAX] = '\0';
    hint_put(&t, 7, id);
    assert_null(hint_get(&t, 7));
    id[HINT_ID_MAX - 1] = '\0';
    hint_put(&t, 7, id);
    assert_string_equal(hint_get(&t, 7), id);
    hint_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get),
        cmocka_unit_test(test_older_makes_room),
        cmocka_unit_test(test_long_id_not_kept),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
