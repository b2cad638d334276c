/* The intrusive list (core/dlist.h): append, prepend and unlink keep first, last and both
 * directions of links consistent, at the ends and in the middle. */
#include "../../core/dlist.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

typedef struct node {
    int v;
    struct node *prev, *next;
} node_t;

/* The list read forwards and backwards must give the same values, mirrored. */
static void expect_list(node_t *first, node_t *last, const int *want, int n)
{
    int i = 0;

    for (node_t *p = first; p != NULL; p = p->next, i++) {
        assert_true(i < n);
        assert_int_equal(p->v, want[i]);
    }
    assert_int_equal(i, n);
    for (node_t *p = last; p != NULL; p = p->prev) {
        i--;
        assert_int_equal(p->v, want[i]);
    }
    assert_int_equal(i, 0);
}

static void test_append_unlink(void **state)
{
    node_t a = {1, NULL, NULL}, b = {2, NULL, NULL}, c = {3, NULL, NULL};
    node_t *first = NULL, *last = NULL;

    (void)state;
    DLIST_APPEND(first, last, &a);
    DLIST_APPEND(first, last, &b);
    DLIST_APPEND(first, last, &c);
    expect_list(first, last, (int[]){1, 2, 3}, 3);
    DLIST_UNLINK(first, last, &b); /* middle */
    expect_list(first, last, (int[]){1, 3}, 2);
    assert_null(b.prev);
    assert_null(b.next);
    DLIST_UNLINK(first, last, &a); /* first */
    expect_list(first, last, (int[]){3}, 1);
    DLIST_UNLINK(first, last, &c); /* last and only */
    assert_null(first);
    assert_null(last);
}

static void test_prepend(void **state)
{
    node_t a = {1, NULL, NULL}, b = {2, NULL, NULL}, c = {3, NULL, NULL};
    node_t *first = NULL, *last = NULL;

    (void)state;
    DLIST_PREPEND(first, last, &b);
    DLIST_APPEND(first, last, &c);
    DLIST_PREPEND(first, last, &a);
    expect_list(first, last, (int[]){1, 2, 3}, 3);
    DLIST_UNLINK(first, last, &c); /* the end moves back */
    expect_list(first, last, (int[]){1, 2}, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_unlink),
        cmocka_unit_test(test_prepend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
