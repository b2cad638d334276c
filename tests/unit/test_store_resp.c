/* test_store_resp.c - store/resp.c's wire form, byte for byte, and commands redisc_command writes
 * with it reaching a redis-server this test starts: words with CR LF, NUL and nothing in them,
 * a command longer than its stack buffer, and one of more words than its stack takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "redis_test.h"
#include "store/resp.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void test_wire_form(void **state)
{
    const char *argv[] = {"SET", "k", "", "a\r\nb"};
    size_t lens[] = {3, 1, 0, 4};
    static const char want[] = "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$4\r\na\r\nb\r\n";
    char buf[256];
    size_t len;

    (void)state;
    assert_true(resp_command_size(4, lens) <= sizeof(buf));
    assert_true(resp_command_size(4, lens) >= sizeof(want) - 1);
    len = resp_command(buf, 4, argv, lens);
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(buf, want, len);
    /* a count of every size fits its room */
    assert_int_equal(resp_count(buf, '$', (size_t)-1) - buf, 1 + 20 + 2);
    assert_true(1 + 20 + 2 <= RESP_COUNT_SIZE);
}

/* resp_format, the writer of the commands that are not written on a stack (a cluster's, which
 * may be sent again; more words than redisc's stack takes): the same bytes, and without lengths
 * each word a C string. */
static void test_format_matches(void **state)
{
    const char *argv[] = {"SET", "k", "", "a\r\nb"};
    size_t lens[] = {3, 1, 0, 4}, len;
    static const char want[] = "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$4\r\na\r\nb\r\n";
    char *cmd;

    (void)state;
    cmd = resp_format(4, argv, lens, &len);
    assert_non_null(cmd);
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(cmd, want, len);
    free(cmd);
    cmd = resp_format(4, argv, NULL, &len);
    assert_non_null(cmd);
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(cmd, want, len);
    free(cmd);
    cmd = resp_format(0, NULL, NULL, &len);
    assert_non_null(cmd);
    assert_int_equal(len, 4);
    assert_memory_equal(cmd, "*0\r\n", 4);
    free(cmd);
}

typedef struct reply {
    int calls;
    int type;
    size_t len;
    long long integer;
    char *str;
} reply_t;

static void on_reply(redisReply *r, void *arg)
{
    reply_t *out = arg;

    out->calls++;
    if (r == NULL)
        return;
    out->type = r->type;
    out->integer = r->integer;
    if (r->str != NULL) {
        out->len = r->len;
        out->str = malloc(r->len + 1);
        memcpy(out->str, r->str, r->len);
    }
}

static void command(int argc, const char **argv, const size_t *lens, reply_t *out)
{
    redisc_cmd_t *cmd;

    memset(out, 0, sizeof(*out));
    assert_int_equal(redisc_command(store_redis(rt.store), on_reply, out, argc, argv, lens, &cmd),
                     REDISC_OK);
    run_until(&out->calls, 2000);
    assert_int_equal(out->calls, 1);
}

/* SET then GET of value: it comes back byte for byte. */
static void round_trip(const char *key, const char *value, size_t len)
{
    const char *set[] = {"SET", key, value}, *get[] = {"GET", key};
    size_t set_lens[] = {3, strlen(key), len}, get_lens[] = {3, strlen(key)};
    reply_t r;

    command(3, set, set_lens, &r);
    assert_int_equal(r.type, REDIS_REPLY_STATUS);
    free(r.str);
    command(2, get, get_lens, &r);
    assert_int_equal(r.type, REDIS_REPLY_STRING);
    assert_int_equal(r.len, len);
    assert_memory_equal(r.str, value, len);
    free(r.str);
}

static void test_words_reach_redis(void **state)
{
    char *big = malloc(100000);
    raw_reply_t text;

    (void)state;
    round_trip("resp:crlf", "a\r\nb\0c", 6);
    raw("GET", "resp:crlf", &text); /* through the helper every store test uses */
    assert_string_equal(text.text, "a\r\nb");
    round_trip("resp:empty", "", 0);
    for (size_t i = 0; i < 100000; i++)
        big[i] = (char)('a' + i % 26);
    round_trip("resp:big", big, 100000); /* past the stack buffer */
    free(big);
}

/* More words than redisc writes on its stack (32): resp_format writes those, and they arrive
 * too. */
static void test_many_words(void **state)
{
    const char *argv[41];
    size_t lens[41];
    char keys[40][16];
    reply_t r;

    (void)state;
    argv[0] = "DEL";
    lens[0] = 3;
    for (int i = 0; i < 40; i++) {
        snprintf(keys[i], sizeof(keys[i]), "resp:k%d", i);
        argv[i + 1] = keys[i];
        lens[i + 1] = strlen(keys[i]);
        round_trip(keys[i], "v", 1);
    }
    command(41, argv, lens, &r);
    assert_int_equal(r.type, REDIS_REPLY_INTEGER);
    assert_int_equal(r.integer, 40);
    /* no lengths: each word's own */
    command(2, (const char *[]){"EXISTS", "resp:k0"}, NULL, &r);
    assert_int_equal(r.type, REDIS_REPLY_INTEGER);
    assert_int_equal(r.integer, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_form),
        cmocka_unit_test(test_format_matches),
        cmocka_unit_test(test_words_reach_redis),
        cmocka_unit_test(test_many_words),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, redis_test_setup, redis_test_teardown);
}
