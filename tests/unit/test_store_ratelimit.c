/* test_store_ratelimit.c - store/ratelimit.c's async calls through the worker's Redis client,
 * against a redis-server this test starts on a free loopback port: verdicts and waits as the
 * script gives them, the retake of a pair, a pause, cancel, a slot taken ahead (used, stale,
 * given back; the member's pair's and whatsapp contact with it; an Idempotency-Key's begin
 * riding with it), and Redis down. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "redis_test.h"
#include "store/idem.h"
#include "store/ratelimit.h"
#include "store/store.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

typedef struct {
    int calls;
    store_status_t st;
    store_rate_verdict_t verdict;
    int64_t wait_us;
} answer_t;

static int channel_seq; /* a fresh channel id per test: tests share one Redis */

static void on_answer(void *arg, store_status_t st, store_rate_verdict_t verdict, int64_t wait_us)
{
    answer_t *a = arg;
    a->calls++;
    a->st = st;
    a->verdict = verdict;
    a->wait_us = wait_us;
}

static answer_t take(const char *channel, const char *rcpt, int pair_held,
                     const ratelimit_policy_t *p, int64_t max_wait_ms)
{
    answer_t a = {0};
    store_status_t st;
    store_rate_call_t *c =
        store_rate_take(rt.store, channel, rcpt, pair_held, p, max_wait_ms, on_answer, &a, &st);
    assert_non_null(c);
    assert_int_equal(st, STORE_OK);
    run_until(&a.calls, 2000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.st, STORE_OK);
    return a;
}

static const char *new_channel(char *buf, size_t len)
{
    snprintf(buf, len, "C%d", ++channel_seq);
    return buf;
}

static void test_burst_then_wait_then_too_late(void **state)
{
    (void)state;
    char ch[16];
    ratelimit_policy_t p = {.sender = {100000, 2}}; /* 10/s, burst 2 */
    new_channel(ch, sizeof(ch));
    assert_int_equal(take(ch, NULL, 0, &p, 1000).verdict, STORE_RATE_GO);
    assert_int_equal(take(ch, NULL, 0, &p, 1000).verdict, STORE_RATE_GO);
    answer_t a = take(ch, NULL, 0, &p, 1000);
    assert_int_equal(a.verdict, STORE_RATE_WAIT);
    assert_true(a.wait_us > 0 && a.wait_us <= 100000);
    a = take(ch, NULL, 0, &p, 50);
    assert_int_equal(a.verdict, STORE_RATE_TOO_LATE);
    assert_true(a.wait_us > 100000 && a.wait_us <= 200000);
}

static void test_pair_retake(void **state)
{
    (void)state;
    char ch[16];
    ratelimit_policy_t p = {.sender = {100000, 1}, .pair = {1000000, 1}};
    new_channel(ch, sizeof(ch));
    assert_int_equal(take(ch, "u1", 0, &p, 5000).verdict, STORE_RATE_GO);
    answer_t a = take(ch, "u1", 0, &p, 5000);
    assert_int_equal(a.verdict, STORE_RATE_RETAKE);
    assert_true(a.wait_us > 900000 && a.wait_us <= 1000000);
    a = take(ch, "u1", 1, &p, 5000); /* at the pair's slot: the sender's only */
    assert_int_equal(a.verdict, STORE_RATE_WAIT);
    assert_true(a.wait_us > 0 && a.wait_us <= 100000);
}

static void test_pause(void **state)
{
    (void)state;
    char ch[16];
    answer_t a = {0};
    store_status_t st;
    ratelimit_policy_t off = {0};
    new_channel(ch, sizeof(ch));
    assert_non_null(store_rate_pause(rt.store, ch, NULL, 0, on_answer, &a, &st));
    run_until(&a.calls, 2000);
    assert_int_equal(a.st, STORE_OK);
    assert_int_equal(a.wait_us, 1000000);
    a = take(ch, "u1", 0, &off, 5000);
    assert_int_equal(a.verdict, STORE_RATE_WAIT);
    assert_true(a.wait_us > 900000 && a.wait_us <= 1000000);
    /* without a callback, with the platform's Retry-After */
    assert_non_null(store_rate_pause(rt.store, ch, "u2", 3000, NULL, NULL, &st));
    a = take(ch, "u2", 0, &off, 5000);
    assert_true(a.wait_us > 2900000 && a.wait_us <= 3000000);
}

static void test_cancel(void **state)
{
    (void)state;
    char ch[16];
    answer_t cancelled = {0};
    store_status_t st;
    ratelimit_policy_t p = {.sender = {1000, 1}};
    new_channel(ch, sizeof(ch));
    store_rate_cancel(store_rate_take(rt.store, ch, NULL, 0, &p, 1000, on_answer, &cancelled, &st));
    take(ch, NULL, 0, &p, 1000); /* answered after the cancelled one */
    assert_int_equal(cancelled.calls, 0);
    store_rate_cancel(NULL);
}

static void test_id_too_long(void **state)
{
    (void)state;
    char id[STORE_KEY_MAX + 8];
    store_status_t st = STORE_OK;
    ratelimit_policy_t p = {0};
    memset(id, 'x', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    assert_null(store_rate_take(rt.store, "C1", id, 0, &p, 10, on_answer, NULL, &st));
    assert_int_equal(st, STORE_BAD_RECORD);
}

/* The script goes by its hash; a server that lost it (a restart, SCRIPT FLUSH) gets it once. */
static void test_script_by_hash(void **state)
{
    (void)state;
    char ch[16];
    raw_reply_t r;
    ratelimit_policy_t p = {.sender = {1000, 1}};
    /* a round trip on the async connection first: what earlier tests left in flight on it (a
     * cancelled call, a pause nobody waits for) is answered before the counters are reset,
     * and cannot be counted below */
    new_channel(ch, sizeof(ch));
    take(ch, NULL, 0, &p, 1000);
    new_channel(ch, sizeof(ch));
    raw("SCRIPT", "FLUSH", &r);
    raw("CONFIG", "RESETSTAT", &r);
    assert_int_equal(take(ch, NULL, 0, &p, 1000).verdict, STORE_RATE_GO);
    assert_int_equal(take(ch, NULL, 0, &p, 1000).verdict, STORE_RATE_WAIT);
    raw("INFO", "commandstats", &r);
    /* two by hash (the first refused with NOSCRIPT), one in full */
    assert_non_null(strstr(r.text, "cmdstat_evalsha:calls=2,"));
    assert_non_null(strstr(r.text, "cmdstat_eval:calls=1,"));
}

/* A command of three words. */
static void raw3(const char *a, const char *b, const char *c, raw_reply_t *r)
{
    const char *argv[3] = {a, b, c};
    raw_argv(3, argv, r);
}

/* The sender's TAT of ch (or the pair's with rcpt), "" when none. */
static const char *pair_tat(const char *ch, const char *rcpt, raw_reply_t *r)
{
    char key[STORE_KEY_MAX];
    store_key_rate(key, sizeof(key), store_prefix(rt.store), ch, rcpt);
    raw("GET", key, r);
    return r->text;
}

static const char *tat(const char *ch, raw_reply_t *r)
{
    return pair_tat(ch, NULL, r);
}

/* Redis's clock, in microseconds (the limiter's). */
static int64_t redis_now_us(void)
{
    raw_reply_t r;
    const char *argv[3] = {
        "EVAL", "local t = redis.call('TIME') return string.format('%.0f', t[1] * 1000000 + t[2])",
        "0"};
    raw_argv(3, argv, &r);
    return strtoll(r.text, NULL, 10);
}

/* A slot's wait is to the microsecond, as far as it is from Redis's clock when taken: exactly
 * between the clock read before and after the take (it was rounded up to whole milliseconds:
 * 1 ms for a slot 100 us away). */
static void test_wait_in_microseconds(void **state)
{
    (void)state;
    char ch[16];
    raw_reply_t r;
    ratelimit_policy_t p = {.sender = {100500, 1}}; /* one every 100.5 ms */
    new_channel(ch, sizeof(ch));
    assert_int_equal(take(ch, NULL, 0, &p, 1000).verdict, STORE_RATE_GO);
    int64_t before = redis_now_us();
    answer_t a = take(ch, NULL, 0, &p, 1000);
    int64_t after = redis_now_us();
    int64_t slot = strtoll(tat(ch, &r), NULL, 10) - 100500; /* the slot it took */
    assert_int_equal(a.verdict, STORE_RATE_WAIT);
    assert_true(a.wait_us >= slot - after && a.wait_us <= slot - before);
}

/* A channel with member M1 at address ext (and M1's turn held by someone when held). */
static const char *ahead_channel_at(char *ch, size_t len, int held, const char *ext)
{
    char key[STORE_KEY_MAX], rec[128];
    raw_reply_t r;
    new_channel(ch, len);
    store_key_member(key, sizeof(key), store_prefix(rt.store), ch, "M1");
    snprintf(rec, sizeof(rec), "{\"_id\":\"M1\",\"externalId\":\"%s\"}", ext);
    raw3("SET", key, rec, &r);
    if (held) {
        store_key_turns(key, sizeof(key), store_prefix(rt.store), ch, "M1");
        raw3("RPUSH", key, "someone", &r);
    }
    return ch;
}

static const char *ahead_channel(char *ch, size_t len, int held)
{
    return ahead_channel_at(ch, len, held, "P1");
}

/* A slot taken ahead (and the pair's, of the member's address, with pair flags), its answer in
 * (a round trip on the same connection after it). */
static store_rate_call_t *ahead_to(const char *ch, const char *member, unsigned pair, int turn,
                                   const ratelimit_policy_t *p)
{
    store_status_t st;
    raw_reply_t r;
    store_rate_call_t *c =
        store_rate_take_ahead(rt.store, ch, member, pair, turn, NULL, p, 5000, &st);
    assert_non_null(c);
    raw("PING", "x", &r);
    return c;
}

static store_rate_call_t *ahead(const char *ch, const char *member, int turn,
                                const ratelimit_policy_t *p)
{
    return ahead_to(ch, member, 0, turn, p);
}

static void test_ahead(void **state)
{
    (void)state;
    raw_reply_t r;
    char ch[16], before[sizeof(r.text)];
    answer_t a = {0};
    store_rate_verdict_t v;
    int64_t wait;
    ratelimit_policy_t p = {.sender = {1000000, 1}}; /* 1/s */

    /* no member, or its turn held: nothing taken */
    ahead_channel(ch, sizeof(ch), 1);
    assert_int_equal(store_rate_ahead_use(ahead(ch, "M2", 0, &p), 10, on_answer, &a, &v, &wait), 0);
    assert_int_equal(store_rate_ahead_use(ahead(ch, "M1", 1, &p), 10, on_answer, &a, &v, &wait), 0);
    assert_string_equal(tat(ch, &r), "");
    /* used at once: go; the next one waits a second */
    assert_int_equal(store_rate_ahead_use(ahead(ch, "M1", 0, &p), 10, on_answer, &a, &v, &wait), 1);
    assert_int_equal(v, STORE_RATE_GO);
    snprintf(before, sizeof(before), "%s", tat(ch, &r));
    assert_int_equal(store_rate_ahead_use(ahead(ch, "M1", 0, &p), 10, on_answer, &a, &v, &wait), 1);
    assert_int_equal(v, STORE_RATE_WAIT);
    assert_true(wait > 900000 && wait <= 1000000);
    /* let go, answered or not yet: the slot goes back */
    snprintf(before, sizeof(before), "%s", tat(ch, &r));
    store_rate_cancel(ahead(ch, "M1", 0, &p));
    assert_string_equal(tat(ch, &r), before);
    store_status_t st;
    store_rate_cancel(store_rate_take_ahead(rt.store, ch, "M1", 0, 0, NULL, &p, 5000, &st));
    raw("PING", "x", &r);
    assert_string_equal(tat(ch, &r), before);
    /* a slot taken after it: it stays taken (the TAT is the later one's) */
    store_rate_call_t *c = ahead(ch, "M1", 0, &p);
    answer_t later = take(ch, NULL, 0, &p, 5000);
    assert_int_equal(later.verdict, STORE_RATE_WAIT);
    snprintf(before, sizeof(before), "%s", tat(ch, &r));
    store_rate_cancel(c);
    assert_string_equal(tat(ch, &r), before);
    /* too late to use (the slot's time passed): given back, take another */
    ahead_channel(ch, sizeof(ch), 0);
    c = ahead(ch, "M1", 0, &p);
    assert_string_not_equal(tat(ch, &r), "");
    run_until(NULL, 50);
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 0);
    raw("PING", "x", &r);
    assert_string_equal(tat(ch, &r), "");
    /* used before its answer came: the answer goes to the callback */
    ahead_channel(ch, sizeof(ch), 0);
    c = store_rate_take_ahead(rt.store, ch, "M1", 0, 1, NULL, &p, 5000, &st);
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 2);
    run_until(&a.calls, 2000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.verdict, STORE_RATE_GO);
    /* the same, none taken: the callback is told so */
    answer_t none = {0};
    c = store_rate_take_ahead(rt.store, ch, "M9", 0, 1, NULL, &p, 5000, &st);
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &none, &v, &wait), 2);
    run_until(&none.calls, 2000);
    assert_int_equal(none.calls, 1);
    assert_int_equal(none.verdict, STORE_RATE_SKIP);
}

typedef struct {
    int calls;
    store_status_t st;
    store_idem_state_t state;
    char body[32];
} begun_t;

static void on_begun(void *arg, store_status_t st, const store_idem_t *res)
{
    begun_t *b = arg;
    b->calls++;
    b->st = st;
    b->state = res != NULL ? res->state : (store_idem_state_t)-1;
    if (res != NULL && res->state == STORE_IDEM_DONE)
        snprintf(b->body, sizeof(b->body), "%.*s", (int)res->len, res->body);
}

/* M1's slot ahead (turn 1) with the begin of record rec (fingerprint fp) riding: the answers of
 * both once in. The begin's callback has run by then. */
static store_rate_call_t *ahead_begin(const char *ch, const char *rec, const char *fp, int turn,
                                      const ratelimit_policy_t *p, begun_t *b)
{
    store_status_t st;
    raw_reply_t r;
    store_idem_call_t *begin =
        store_idem_begin_held(rt.store, rec, fp, "owner1", 5000, 60, on_begun, b, &st);
    store_rate_call_t *c;

    assert_non_null(begin);
    c = store_rate_take_ahead(rt.store, ch, "M1", 0, turn, begin, p, 5000, &st);
    assert_non_null(c);
    assert_int_equal(store_idem_begin_send(begin, &st), 0); /* alone unless it rode */
    raw("PING", "x", &r);
    run_until(&b->calls, 2000);
    assert_int_equal(b->calls, 1);
    assert_int_equal(b->st, STORE_OK);
    return c;
}

static void on_finished(void *arg, store_status_t st)
{
    answer_t *a = arg;
    a->calls++;
    a->st = st;
}

static void test_ahead_with_begin(void **state)
{
    (void)state;
    raw_reply_t r;
    char ch[16], rec[STORE_KEY_MAX], before[sizeof(r.text)];
    answer_t a = {0};
    store_rate_verdict_t v;
    int64_t wait;
    store_status_t st;
    ratelimit_policy_t p = {.sender = {1000000, 1}}; /* 1/s */
    begun_t b = {0};
    answer_t finished = {0};
    store_idem_call_t *begin;

    ahead_channel(ch, sizeof(ch), 0);
    store_idem_key(rt.store, rec, sizeof(rec), "app", "sendResponses", ch);
    /* a new key: the begin says run, the slot is taken, and the record holds the lease */
    store_rate_call_t *c = ahead_begin(ch, rec, "fpA", 1, &p, &b);
    assert_int_equal(b.state, STORE_IDEM_RUN);
    raw3("HGET", rec, "owner", &r);
    assert_string_equal(r.text, "owner1");
    snprintf(before, sizeof(before), "%s", tat(ch, &r));
    assert_string_not_equal(before, "");
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 1);
    assert_int_equal(v, STORE_RATE_GO);
    /* the same key while its lease runs: wait, and no slot taken (the TAT is as it was) */
    memset(&b, 0, sizeof(b));
    c = ahead_begin(ch, rec, "fpA", 1, &p, &b);
    assert_int_equal(b.state, STORE_IDEM_WAIT);
    assert_string_equal(tat(ch, &r), before);
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 0);
    /* another request under the key: conflict, none taken */
    memset(&b, 0, sizeof(b));
    store_rate_cancel(ahead_begin(ch, rec, "fpB", 1, &p, &b));
    assert_int_equal(b.state, STORE_IDEM_CONFLICT);
    raw("PING", "x", &r);
    assert_string_equal(tat(ch, &r), before);
    /* answered: the answer, none taken */
    finished.calls = 0;
    assert_non_null(store_idem_finish(rt.store, rec, "owner1", 200, 0, "{\"ok\":1}", 8, on_finished,
                                      &finished, &st));
    run_until(&finished.calls, 2000);
    assert_int_equal(finished.st, STORE_OK);
    memset(&b, 0, sizeof(b));
    store_rate_cancel(ahead_begin(ch, rec, "fpA", 1, &p, &b));
    assert_int_equal(b.state, STORE_IDEM_DONE);
    assert_string_equal(b.body, "{\"ok\":1}");
    assert_string_equal(tat(ch, &r), before);
    /* turn 0 (no queue named): the begin goes alone, as a script of its own */
    memset(&b, 0, sizeof(b));
    store_rate_cancel(ahead_begin(ch, rec, "fpA", 0, &p, &b));
    assert_int_equal(b.state, STORE_IDEM_DONE);
    /* cancelled while it rides: no callback, nothing leaks; the slot it took goes back */
    store_idem_key(rt.store, rec, sizeof(rec), "app", "sendResponses", "other");
    ahead_channel(ch, sizeof(ch), 0);
    memset(&b, 0, sizeof(b));
    begin = store_idem_begin_held(rt.store, rec, "fpA", "owner1", 5000, 60, on_begun, &b, &st);
    c = store_rate_take_ahead(rt.store, ch, "M1", 0, 1, begin, &p, 5000, &st);
    assert_non_null(c);
    assert_int_equal(store_idem_begin_send(begin, &st), 0);
    store_idem_cancel(begin);
    store_rate_cancel(c);
    raw("PING", "x", &r);
    raw("PING", "x", &r); /* the give-back's answer */
    assert_int_equal(b.calls, 0);
    assert_string_equal(tat(ch, &r), "");
    raw3("HGET", rec, "owner", &r);
    assert_string_equal(r.text, "owner1"); /* it ran in Redis: the caller drops the record */
}

/* M1's slots ahead, its pair's too. */
static store_rate_call_t *pair_ahead(const char *ch, int turn, const ratelimit_policy_t *p)
{
    return ahead_to(ch, "M1", STORE_AHEAD_PAIR, turn, p);
}

static void test_pair_ahead(void **state)
{
    (void)state;
    raw_reply_t r;
    char ch[16], key[STORE_KEY_MAX], s_before[sizeof(r.text)], p_before[sizeof(r.text)];
    answer_t a = {0};
    store_rate_verdict_t v;
    int64_t wait;
    ratelimit_policy_t p = {.sender = {100000, 1}, .pair = {1000000, 1}}; /* 10/s, 1/s */
    ratelimit_policy_t slack = {.pair = {1000000, 1}};                    /* the pair's alone */

    /* its turn held: nothing taken, the pair's neither */
    ahead_channel(ch, sizeof(ch), 1);
    assert_int_equal(store_rate_ahead_use(pair_ahead(ch, 1, &p), 10, on_answer, &a, &v, &wait), 0);
    assert_string_equal(tat(ch, &r), "");
    assert_string_equal(pair_tat(ch, "M1", &r), "");
    /* the pair's keys are the member's: taken whatever its record holds (the delivery, which
     * reads it, refuses a member without an address, and the slots go back) */
    ahead_channel(ch, sizeof(ch), 0);
    store_key_member(key, sizeof(key), store_prefix(rt.store), ch, "M1");
    raw3("SET", key, "{\"_id\":\"M1\"}", &r);
    store_rate_call_t *c = pair_ahead(ch, 0, &p);
    assert_string_not_equal(pair_tat(ch, "M1", &r), "");
    store_rate_cancel(c);
    raw("PING", "x", &r);
    assert_string_equal(tat(ch, &r), "");
    assert_string_equal(pair_tat(ch, "M1", &r), "");
    /* the member's pair: both taken, go; the next one waits for the pair's slot (a retake: the
     * sender's is taken then) */
    ahead_channel(ch, sizeof(ch), 0);
    c = pair_ahead(ch, 1, &p);
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 1);
    assert_int_equal(v, STORE_RATE_GO);
    assert_string_not_equal(pair_tat(ch, "M1", &r), "");
    snprintf(s_before, sizeof(s_before), "%s", tat(ch, &r));
    assert_int_equal(store_rate_ahead_use(pair_ahead(ch, 0, &p), 10, on_answer, &a, &v, &wait), 1);
    assert_int_equal(v, STORE_RATE_RETAKE);
    assert_true(wait > 900000 && wait <= 1000000);
    assert_string_equal(tat(ch, &r), s_before); /* the sender's not taken */
    /* let go: the pair's slot goes back, with the sender's */
    snprintf(p_before, sizeof(p_before), "%s", pair_tat(ch, "M1", &r));
    store_rate_cancel(pair_ahead(ch, 0, &p));
    assert_string_equal(pair_tat(ch, "M1", &r), p_before);
    /* both taken (the sender's slot later), let go: both go back (the pair's to the slot's
     * time, which is the sender's TAT before: a pair's next slot no later than that) */
    ahead_channel(ch, sizeof(ch), 0);
    take(ch, NULL, 0, &p, 5000);
    snprintf(s_before, sizeof(s_before), "%s", tat(ch, &r));
    c = pair_ahead(ch, 0, &p);
    assert_string_not_equal(tat(ch, &r), s_before);
    assert_string_not_equal(pair_tat(ch, "M1", &r), s_before);
    store_rate_cancel(c);
    raw("PING", "x", &r);
    assert_string_equal(tat(ch, &r), s_before);
    assert_string_equal(pair_tat(ch, "M1", &r), s_before);
    /* a pause of the pair holds the slot taken ahead */
    assert_non_null(store_rate_pause(rt.store, ch, "M1", 2000, NULL, NULL, &(store_status_t){0}));
    assert_int_equal(store_rate_ahead_use(pair_ahead(ch, 0, &slack), 10, on_answer, &a, &v, &wait),
                     1);
    assert_int_equal(v, STORE_RATE_WAIT);
    assert_true(wait > 1900000 && wait <= 2000000);
    /* no sender's limit (slack): the pair's alone, given back when let go */
    ahead_channel(ch, sizeof(ch), 0);
    c = pair_ahead(ch, 0, &slack);
    assert_string_equal(tat(ch, &r), "");
    assert_string_not_equal(pair_tat(ch, "M1", &r), "");
    store_rate_cancel(c);
    raw("PING", "x", &r);
    assert_string_equal(pair_tat(ch, "M1", &r), "");
}

/* M1's slots ahead with its contact read too (whatsapp; flags: STORE_AHEAD_PHONE or 0), its
 * answer in. */
static store_rate_call_t *contact_ahead(const char *ch, unsigned flags, const ratelimit_policy_t *p)
{
    return ahead_to(ch, "M1", STORE_AHEAD_PAIR | STORE_AHEAD_CONTACT | flags, 0, p);
}

static void test_contact_ahead(void **state)
{
    (void)state;
    raw_reply_t r;
    char ch[16], key[STORE_KEY_MAX];
    answer_t a = {0};
    store_rate_verdict_t v;
    int64_t wait;
    ratelimit_policy_t p = {.sender = {100000, 1}, .pair = {1000000, 1}}; /* 10/s, 1/s */
    ratelimit_policy_t slow = {.pair = {10000000, 1}};                    /* 1 per 10 s */
    store_rate_call_t *c;

    /* not cached (never checked, or expired): nothing read, nothing taken */
    ahead_channel(ch, sizeof(ch), 0);
    c = contact_ahead(ch, 0, &p);
    assert_null(store_rate_ahead_contact(c));
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 0);
    assert_string_equal(tat(ch, &r), "");
    assert_string_equal(pair_tat(ch, "M1", &r), "");
    /* cached as an empty string: none, as deliver.c reads it */
    store_key_contact(key, sizeof(key), store_prefix(rt.store), ch, "M1");
    raw3("SET", key, "", &r);
    c = contact_ahead(ch, 0, &p);
    assert_null(store_rate_ahead_contact(c));
    store_rate_cancel(c);
    assert_string_equal(pair_tat(ch, "M1", &r), "");
    /* known by another wa_id: handed over, no slot taken (its check's answer comes first) */
    raw3("SET", key, "P1 P1-wa", &r);
    c = contact_ahead(ch, 0, &p);
    assert_string_equal(store_rate_ahead_contact(c), "P1 P1-wa");
    assert_string_equal(store_contact_wa_id(store_rate_ahead_contact(c), "P1"), "P1-wa");
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 0);
    assert_string_equal(tat(ch, &r), "");
    assert_string_equal(pair_tat(ch, "M1", &r), "");
    /* seen valid for the member's former number: nothing taken, and not its number's */
    raw3("SET", key, "P0 P0", &r);
    c = contact_ahead(ch, 0, &p);
    assert_null(store_contact_wa_id(store_rate_ahead_contact(c), "P1"));
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 0);
    assert_string_equal(pair_tat(ch, "M1", &r), "");
    /* seen valid as it is: handed over with both slots */
    raw3("SET", key, "P1 P1", &r);
    c = contact_ahead(ch, 0, &p);
    assert_string_equal(store_contact_wa_id(store_rate_ahead_contact(c), "P1"), "P1");
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 1);
    assert_int_equal(v, STORE_RATE_GO);
    assert_string_not_equal(tat(ch, &r), "");
    assert_string_not_equal(pair_tat(ch, "M1", &r), "");
    /* a phone number as written ("+852 ..."): compared normalised as request_normalize_phone
     * does, with STORE_AHEAD_PHONE; as it is without */
    ahead_channel_at(ch, sizeof(ch), 0, "+852 (9123) 45-67");
    store_key_contact(key, sizeof(key), store_prefix(rt.store), ch, "M1");
    raw3("SET", key, "85291234567 85291234567", &r);
    c = contact_ahead(ch, 0, &p);
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 0);
    c = contact_ahead(ch, STORE_AHEAD_PHONE, &p);
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 1);
    assert_int_equal(v, STORE_RATE_GO);
    /* an externalId of no string: nothing read, nothing taken */
    ahead_channel(ch, sizeof(ch), 0);
    store_key_member(key, sizeof(key), store_prefix(rt.store), ch, "M1");
    raw3("SET", key, "{\"_id\":\"M1\",\"externalId\":7}", &r);
    c = contact_ahead(ch, 0, &p);
    assert_null(store_rate_ahead_contact(c));
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 0);
    assert_string_equal(pair_tat(ch, "M1", &r), "");
    /* the pair's slot past the longest wait: too late, the contact handed over still */
    ahead_channel(ch, sizeof(ch), 0);
    store_key_contact(key, sizeof(key), store_prefix(rt.store), ch, "M1");
    raw3("SET", key, "P1 P1", &r);
    take(ch, "M1", 0, &slow, 5000);
    c = contact_ahead(ch, 0, &slow);
    assert_string_equal(store_rate_ahead_contact(c), "P1 P1");
    assert_int_equal(store_rate_ahead_use(c, 10, on_answer, &a, &v, &wait), 1);
    assert_int_equal(v, STORE_RATE_TOO_LATE);
    /* no member: nothing read */
    c = store_rate_take_ahead(rt.store, ch, "M9", STORE_AHEAD_PAIR | STORE_AHEAD_CONTACT, 0, NULL,
                              &p, 5000, &(store_status_t){0});
    raw("PING", "x", &r);
    assert_null(store_rate_ahead_contact(c));
    store_rate_cancel(c);
}

/* Last: stops Redis. A call in flight gets STORE_UNAVAILABLE; later ones are not sent. */
static void test_redis_down(void **state)
{
    (void)state;
    answer_t a = {0};
    store_status_t st;
    ratelimit_policy_t p = {0};
    kill(rt.redis, SIGKILL);
    waitpid(rt.redis, NULL, 0);
    rt.redis = 0;
    store_rate_call_t *c = store_rate_take(rt.store, "C1", NULL, 0, &p, 10, on_answer, &a, &st);
    if (c != NULL) {
        run_until(&a.calls, 3000);
        assert_int_equal(a.calls, 1);
        assert_int_equal(a.st, STORE_UNAVAILABLE);
    }
    run_until(NULL, 100);
    assert_null(store_rate_take(rt.store, "C1", NULL, 0, &p, 10, on_answer, &a, &st));
    assert_int_equal(st, STORE_UNAVAILABLE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_wait_then_too_late),
        cmocka_unit_test(test_wait_in_microseconds),
        cmocka_unit_test(test_pair_retake),
        cmocka_unit_test(test_pause),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_id_too_long),
        cmocka_unit_test(test_script_by_hash),
        cmocka_unit_test(test_ahead),
        cmocka_unit_test(test_ahead_with_begin),
        cmocka_unit_test(test_pair_ahead),
        cmocka_unit_test(test_contact_ahead),
        cmocka_unit_test(test_redis_down),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, redis_test_setup, redis_test_teardown);
}
