/* test_idem.c - Idempotency-Key validation and request fingerprints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/auth.h"
#include "core/idem.h"

#include <string.h>

static void test_key_valid(void **state)
{
    char k[300];

    (void)state;
    assert_true(idem_key_valid("a"));
    assert_true(idem_key_valid("order 42/retry:~{x}"));
    assert_false(idem_key_valid(""));
    assert_false(idem_key_valid(NULL));
    assert_false(idem_key_valid("tab\there"));
    assert_false(idem_key_valid("caf\xc3\xa9"));
    assert_false(idem_key_valid("del\x7f"));
    memset(k, 'k', sizeof(k));
    k[255] = '\0';
    assert_true(idem_key_valid(k));
    k[255] = 'k';
    k[256] = '\0';
    assert_false(idem_key_valid(k));
}

static void test_fingerprint(void **state)
{
    char a[IDEM_HEX], b[IDEM_HEX], c[IDEM_HEX], d[IDEM_HEX];

    (void)state;
    idem_fingerprint("sendResponses", "{\"x\":1}", 7, a);
    idem_fingerprint("sendResponses", "{\"x\":1}", 7, b);
    idem_fingerprint("sendResponses", "{\"x\":2}", 7, c);
    idem_fingerprint("redirectMemberToNode", "{\"x\":1}", 7, d);
    assert_int_equal(strlen(a), 64);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    assert_string_not_equal(a, d);
    /* the route and the body are kept apart: "ab"+"c" is not "a"+"bc" */
    idem_fingerprint("ab", "c", 1, c);
    idem_fingerprint("a", "bc", 2, d);
    assert_string_not_equal(c, d);
    /* SHA-256("x\0") */
    idem_fingerprint("x", "", 0, a);
    assert_string_equal(a, "14f825b2bbc32dd8d196367fa8776873069c12a8954d8da7513aa7704ddd09eb");
}

/* Large requests are digested in parts, small ones from a copy: the same digest. */
static void test_fingerprint_large(void **state)
{
    static char joined[10002];
    char a[IDEM_HEX], b[IDEM_HEX];

    (void)state;
    memcpy(joined, "r", 2);
    memset(joined + 2, 'x', 10000);
    idem_fingerprint("r", joined + 2, 10000, a);
    auth_hash_token(joined, sizeof(joined), b);
    assert_int_equal(strlen(a), 64);
    assert_string_equal(a, b);
    idem_fingerprint("r", joined + 2, 4094, a);
    auth_hash_token(joined, 4096, b);
    assert_string_equal(a, b);
    idem_fingerprint("r", joined + 2, 4095, a);
    auth_hash_token(joined, 4097, b);
    assert_string_equal(a, b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_valid),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_fingerprint_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
