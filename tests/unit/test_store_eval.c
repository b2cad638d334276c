/* test_store_eval.c - store/eval.c against a redis-server this test starts: the words reach the
 * script byte for byte (empty, CR LF, NUL, long), keys and arguments counted as given, EVALSHA
 * first and EVAL once after NOSCRIPT, cancel, a call nobody waits for, and the limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "redis_test.h"
#include "store/eval.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* Every word back, as an array: keys first. */
static const char ECHO[] = "local out = {} "
                           "for i = 1, #KEYS do out[#out + 1] = KEYS[i] end "
                           "for i = 1, #ARGV do out[#out + 1] = ARGV[i] end return out";
static const char COUNT[] = "return {#KEYS, #ARGV}";
static const char SET[] = "redis.call('SET', KEYS[1], ARGV[1]) return 1";

static _Thread_local store_script_t echo_script = STORE_SCRIPT(ECHO);
static _Thread_local store_script_t count_script = STORE_SCRIPT(COUNT);
static _Thread_local store_script_t set_script = STORE_SCRIPT(SET);

typedef struct answer {
    int calls;
    int type;
    size_t n;
    char *words[STORE_EVAL_WORDS_MAX];
    size_t lens[STORE_EVAL_WORDS_MAX];
    long long ints[STORE_EVAL_WORDS_MAX];
} answer_t;

static void on_answer(redisReply *reply, void *arg)
{
    answer_t *a = arg;

    a->calls++;
    a->type = reply != NULL ? reply->type : -1;
    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i < reply->elements && i < STORE_EVAL_WORDS_MAX; i++) {
        redisReply *e = reply->element[i];
        if (e->type == REDIS_REPLY_STRING) {
            a->words[i] = malloc(e->len + 1);
            memcpy(a->words[i], e->str, e->len + 1);
            a->lens[i] = e->len;
        } else if (e->type == REDIS_REPLY_INTEGER) {
            a->ints[i] = e->integer;
        }
        a->n = i + 1;
    }
}

static void answer_free(answer_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->words[i]);
}

/* Runs script on words and waits for its answer. */
static void eval(store_script_t *script, int nkeys, int nwords, const char *const *words,
                 const size_t *lens, answer_t *a)
{
    memset(a, 0, sizeof(*a));
    assert_int_equal(store_eval(rt.store, script, nkeys, nwords, words, lens, on_answer, a, NULL),
                     REDISC_OK);
    run_until(&a->calls, 2000);
    assert_int_equal(a->calls, 1);
}

static void test_words_arrive_byte_for_byte(void **state)
{
    (void)state;
    char *big = malloc(100000);
    const char *words[] = {"botgate:eval:{k}", "", "a\r\nb", "x\0y", big, "$3\r\n*1"};
    size_t lens[] = {16, 0, 4, 3, 100000, 6};
    answer_t a;

    memset(big, 'b', 100000);
    eval(&echo_script, 1, 6, words, lens, &a);
    assert_int_equal(a.type, REDIS_REPLY_ARRAY);
    assert_int_equal(a.n, 6);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(a.lens[i], lens[i]);
        assert_memory_equal(a.words[i], words[i], lens[i]);
    }
    answer_free(&a);
    free(big);
}

static void test_keys_and_arguments_are_counted_as_given(void **state)
{
    (void)state;
    const char *words[] = {"botgate:{k}:1", "botgate:{k}:2", "one", "two", "three"};
    answer_t a;

    eval(&count_script, 2, 5, words, NULL, &a);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.ints[0], 2);
    assert_int_equal(a.ints[1], 3);
    eval(&count_script, 5, 5, words, NULL, &a);
    assert_int_equal(a.ints[0], 5);
    assert_int_equal(a.ints[1], 0);
}

/* By hash; a server that lost the script (a restart, SCRIPT FLUSH) gets its text once. */
static void test_noscript_sends_the_text_once(void **state)
{
    (void)state;
    const char *words[] = {"botgate:eval:{k}", "v"};
    raw_reply_t r;
    answer_t a;

    raw("SCRIPT", "FLUSH", &r);
    raw("CONFIG", "RESETSTAT", &r);
    for (int i = 0; i < 2; i++) {
        eval(&echo_script, 1, 2, words, NULL, &a);
        assert_int_equal(a.n, 2);
        assert_string_equal(a.words[1], "v");
        answer_free(&a);
    }
    raw("INFO", "commandstats", &r);
    assert_non_null(strstr(r.text, "cmdstat_evalsha:calls=2,"));
    assert_non_null(strstr(r.text, "cmdstat_eval:calls=1,"));
}

static void test_cancelled_call_still_runs_without_its_callback(void **state)
{
    (void)state;
    const char *words[] = {"botgate:eval:cancelled", "yes"};
    store_eval_t *ev = NULL;
    answer_t a = {0};
    raw_reply_t r;

    raw("SCRIPT", "FLUSH", &r); /* the call goes twice: NOSCRIPT, then in full */
    assert_int_equal(store_eval(rt.store, &set_script, 1, 2, words, NULL, on_answer, &a, &ev),
                     REDISC_OK);
    assert_non_null(ev);
    store_eval_cancel(ev);
    run_until(NULL, 300);
    assert_int_equal(a.calls, 0);
    raw("GET", "botgate:eval:cancelled", &r);
    assert_string_equal(r.text, "yes");
}

static void test_call_nobody_waits_for(void **state)
{
    (void)state;
    const char *words[] = {"botgate:eval:unwaited", "done"};
    raw_reply_t r;

    assert_int_equal(store_eval(rt.store, &set_script, 1, 2, words, NULL, NULL, NULL, NULL),
                     REDISC_OK);
    run_until(NULL, 300);
    raw("GET", "botgate:eval:unwaited", &r);
    assert_string_equal(r.text, "done");
}

static void test_limits_send_nothing(void **state)
{
    (void)state;
    const char *words[STORE_EVAL_WORDS_MAX + 1];
    answer_t a = {0};

    for (int i = 0; i <= STORE_EVAL_WORDS_MAX; i++)
        words[i] = "botgate:eval:{k}";
    assert_int_equal(store_eval(rt.store, &count_script, 1, STORE_EVAL_WORDS_MAX + 1, words, NULL,
                                on_answer, &a, NULL),
                     REDISC_BUSY);
    assert_int_equal(store_eval(rt.store, &count_script, 0, 1, words, NULL, on_answer, &a, NULL),
                     REDISC_BUSY);
    assert_int_equal(store_eval(rt.store, &count_script, 2, 1, words, NULL, on_answer, &a, NULL),
                     REDISC_BUSY);
    /* the most words there may be */
    eval(&count_script, 1, STORE_EVAL_WORDS_MAX, words, NULL, &a);
    assert_int_equal(a.ints[1], STORE_EVAL_WORDS_MAX - 1);
    run_until(NULL, 100);
    assert_int_equal(a.calls, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_words_arrive_byte_for_byte),
        cmocka_unit_test(test_keys_and_arguments_are_counted_as_given),
        cmocka_unit_test(test_noscript_sends_the_text_once),
        cmocka_unit_test(test_cancelled_call_still_runs_without_its_callback),
        cmocka_unit_test(test_call_nobody_waits_for),
        cmocka_unit_test(test_limits_send_nothing),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, redis_test_setup, redis_test_teardown);
}
