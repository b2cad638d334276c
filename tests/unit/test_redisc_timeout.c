/* test_redisc_timeout.c - redisc's two deadlines against a real redis-server: a command past its
 * own fails alone (told NULL once, its late reply dropped) while a server that keeps answering
 * keeps the connection; a connection that hears nothing for a whole timeout is given up. The
 * server is made slow by DEBUG SLEEPs pipelined on the client's own connection (send_sleep). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/clock.h"
#include "redis_test.h"
#include "store/redisc.h"

#define TIMEOUT_MS 1000
#define CAP        16
#define CMDS_MAX   16

typedef struct told {
    int ups, downs;
    int64_t down_ms; /* when the first down was told */
    char why[256];
} told_t;

/* One command's end: how often its callback ran, when, and what it got. */
typedef struct sent {
    int calls;
    int null; /* the last call got NULL */
    int64_t sent_ms, done_ms;
    char text[64];
} sent_t;

static void on_state(void *arg, int up, const char *why)
{
    told_t *t = arg;

    if (up) {
        t->ups++;
        return;
    }
    if (t->downs++ == 0) {
        t->down_ms = clock_coarse_ms();
        snprintf(t->why, sizeof(t->why), "%s", why);
    }
}

static void on_reply(redisReply *reply, void *arg)
{
    sent_t *s = arg;

    s->calls++;
    s->null = reply == NULL;
    s->done_ms = clock_coarse_ms();
    if (reply != NULL && reply->str != NULL)
        snprintf(s->text, sizeof(s->text), "%s", reply->str);
}

/* A client of the test's Redis, connected: a subscriber staying subscribed to anchor, or
 * with anchor NULL a command connection. */
static redisc_t *connection(told_t *t, const char *anchor)
{
    redisc_config_t cfg;
    redisc_t *r;

    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.host, sizeof(cfg.host), "127.0.0.1");
    cfg.port = rt.port;
    cfg.connect_timeout_ms = 1000;
    cfg.command_timeout_ms = TIMEOUT_MS;
    cfg.max_in_flight = CAP;
    memset(t, 0, sizeof(*t));
    r = anchor != NULL ? redisc_new_subscriber(rt.base, &cfg, anchor) : redisc_new(rt.base, &cfg);
    assert_non_null(r);
    redisc_set_state_cb(r, on_state, t);
    run_until(&t->ups, 3000);
    assert_int_equal(t->ups, 1);
    return r;
}

static redisc_t *client(told_t *t)
{
    return connection(t, NULL);
}

/* Sends argv (argc words) as s's command. */
static int send_to(redisc_t *r, sent_t *s, int argc, const char **argv)
{
    redisc_cmd_t *cmd;

    memset(s, 0, sizeof(*s));
    s->sent_ms = clock_coarse_ms();
    return redisc_command(r, on_reply, s, argc, argv, NULL, &cmd);
}

/* DEBUG SLEEP seconds, its number padded with zeros to PAD bytes. Redis reads a connection once
 * per turn of its loop, runs the commands complete in what it read, and only then writes their
 * replies; an argument past 32 KiB it reads up to its end and no further, and then at most
 * about its size at once. So the padded sleeps pipelined run one per turn and are answered one
 * by one, each after its sleep, as a loaded server answers a deep pipeline. */
#define PAD 100000
static void send_sleep(redisc_t *r, sent_t *s, const char *seconds)
{
    static char padded[PAD + 1];
    const char *argv[] = {"DEBUG", "SLEEP", padded};
    size_t n = strlen(seconds);

    memcpy(padded, seconds, n);
    memset(padded + n, '0', PAD - n);
    padded[PAD] = '\0';
    assert_int_equal(send_to(r, s, 3, argv), REDISC_OK);
}

static int nulls(const sent_t *s, int n)
{
    int k = 0;

    for (int i = 0; i < n; i++)
        k += s[i].calls > 0 && s[i].null;
    return k;
}

/* Sleeps pipelined on the connection answer every 0.3 to 0.45 s, the last at 1.8 s: the server
 * is slow but answers. The GETs behind them (answered at 1.8 s) and the sleeps answered after
 * 1 s fail at their deadline, alone: the connection stays, and the commands sent after them
 * get their own replies. Each callback runs once; a late one never before its deadline. The
 * late ones count against the cap until their replies come. Before, the first deadline gave
 * the connection up. */
static void test_late_commands_fail_alone_and_the_connection_stays(void **state)
{
    (void)state;
    told_t t;
    redisc_t *r = client(&t);
    sent_t s[CMDS_MAX], probe[CAP], last;
    const char *get[] = {"GET", "redisc-timeout-nothing"};
    int gets_done = 0, accepted = 0;
    char word[CAP][16];

    send_sleep(r, &s[0], "0.3");
    send_sleep(r, &s[1], "0.3");
    send_sleep(r, &s[2], "0.3");
    send_sleep(r, &s[3], "0.45");
    send_sleep(r, &s[4], "0.45");
    for (int i = 5; i < 9; i++)
        assert_int_equal(send_to(r, &s[i], 2, get), REDISC_OK);
    for (int i = 0; i < 200 && gets_done < 4; i++) {
        run_until(NULL, 10);
        gets_done = s[5].calls + s[6].calls + s[7].calls + s[8].calls;
    }
    assert_int_equal(gets_done, 4);
    assert_int_equal(nulls(s + 5, 4), 4);
    /* the GETs' replies come after the last sleep's: at least they are still in flight */
    for (int i = 0; i < CAP; i++) {
        const char *echo[] = {"ECHO", word[i]};
        snprintf(word[i], sizeof(word[i]), "probe-%d", i);
        if (send_to(r, &probe[i], 2, echo) != REDISC_OK)
            break;
        accepted++;
    }
    assert_true(accepted >= 1);
    assert_true(accepted <= CAP - 5);
    assert_int_equal(send_to(r, &last, 2, get), REDISC_BUSY);
    run_until(NULL, 2500); /* every late reply has come (the last at 1.8 s) */
    assert_int_equal(t.downs, 0);
    assert_int_equal(t.ups, 1);
    assert_true(redisc_connected(r));
    for (int i = 0; i < 9; i++) {
        assert_int_equal(s[i].calls, 1);
        if (s[i].null)
            assert_true(s[i].done_ms - s[i].sent_ms >= TIMEOUT_MS - 20); /* coarse clock */
        else
            assert_string_equal(s[i].text, "OK");
    }
    for (int i = 0; i < accepted; i++) { /* in time or not, never another's reply */
        assert_int_equal(probe[i].calls, 1);
        if (!probe[i].null)
            assert_string_equal(probe[i].text, word[i]);
    }
    {
        const char *echo[] = {"ECHO", "after"};
        assert_int_equal(send_to(r, &last, 2, echo), REDISC_OK);
        run_until(&last.calls, 2000);
        assert_int_equal(last.calls, 1);
        assert_false(last.null);
        assert_string_equal(last.text, "after");
    }
    redisc_free(r);
}

/* Nothing answered for a whole timeout: the server is stuck, the connection given up at the
 * deadline, every command told NULL once; it connects again once the server answers. */
static void test_silent_server_is_given_up(void **state)
{
    (void)state;
    told_t t;
    redisc_t *r = client(&t);
    sent_t s[2];
    const char *get[] = {"GET", "redisc-timeout-nothing"};

    send_sleep(r, &s[0], "1.6");
    assert_int_equal(send_to(r, &s[1], 2, get), REDISC_OK);
    run_until(&t.downs, 3000);
    assert_int_equal(t.downs, 1);
    assert_non_null(strstr(t.why, "command timed out"));
    assert_int_equal(s[0].calls, 1);
    assert_int_equal(s[1].calls, 1);
    assert_true(s[0].null && s[1].null);
    while (t.ups < 2 && clock_coarse_ms() - s[0].sent_ms < 6000)
        run_until(NULL, 100);
    assert_int_equal(t.ups, 2);
    assert_int_equal(s[0].calls + s[1].calls, 2);
    redisc_free(r);
}

/* Commands that timed out are still awaited: a server that then answers nothing for a whole
 * timeout is given up then (a whole timeout after its last reply, not at the first deadline),
 * and the cap is free again after the reconnect. */
static void test_silence_after_late_commands_gives_up(void **state)
{
    (void)state;
    told_t t;
    redisc_t *r = client(&t);
    sent_t s[3], after;
    const char *get[] = {"GET", "redisc-timeout-nothing"};

    send_sleep(r, &s[0], "0.4");
    send_sleep(r, &s[1], "1.5");
    assert_int_equal(send_to(r, &s[2], 2, get), REDISC_OK);
    run_until(&s[2].calls, 3000);
    assert_int_equal(s[2].calls, 1);
    assert_true(s[2].null);
    assert_int_equal(t.downs, 0); /* it answered 0.6 s ago */
    run_until(&t.downs, 3000);
    assert_int_equal(t.downs, 1);
    assert_non_null(strstr(t.why, "command timed out"));
    /* a whole timeout after the first sleep's reply (0.4 s), not at the deadline (1 s) */
    assert_true(t.down_ms - s[0].sent_ms >= 400 + TIMEOUT_MS - 150);
    for (int i = 0; i < 3; i++)
        assert_int_equal(s[i].calls, 1);
    while (t.ups < 2 && clock_coarse_ms() - s[0].sent_ms < 6000)
        run_until(NULL, 100);
    assert_int_equal(t.ups, 2);
    {
        const char *echo[] = {"ECHO", "again"};
        assert_int_equal(send_to(r, &after, 2, echo), REDISC_OK);
        run_until(&after.calls, 2000);
        assert_string_equal(after.text, "again");
    }
    redisc_free(r);
}

typedef struct tracked {
    int on, offs;
    char key[64]; /* the last key told changed */
} tracked_t;

static void on_tracking(void *arg, int on)
{
    tracked_t *k = arg;

    k->on = on;
    k->offs += !on;
}

static void on_invalidate(void *arg, const char *key, size_t len)
{
    tracked_t *k = arg;

    snprintf(k->key, sizeof(k->key), "%.*s", (int)len, key != NULL ? key : "");
}

/* Client-side caching enabled while the server answers late: the CLIENT TRACKING sent behind
 * 2.4 s of sleeps times out, and is sent again on the connection that stayed (it was left
 * off until a reconnect, and before that the connection was given up); then a write by
 * another connection is told. */
static void test_tracking_that_times_out_is_asked_again(void **state)
{
    (void)state;
    told_t t, ts;
    tracked_t k = {0};
    redisc_t *r = client(&t), *sub = connection(&ts, "redisc-timeout-anchor");
    sent_t s[8];
    raw_reply_t set;
    const char *prefix[] = {"redisc-timeout:"};
    const char *set_argv[] = {"SET", "redisc-timeout:k", "v"};

    for (int i = 0; i < 8; i++)
        send_sleep(r, &s[i], "0.3");
    /* the subscriber connects again for its CLIENT ID, subscribes, then tracking is sent */
    assert_int_equal(redisc_track(r, sub, prefix, 1, on_tracking, on_invalidate, &k), 0);
    while (!k.on && clock_coarse_ms() - s[0].sent_ms < 6000)
        run_until(NULL, 50);
    assert_int_equal(k.on, 1);
    assert_int_equal(t.downs, 0);
    raw_argv(3, set_argv, &set); /* on another connection: r's own writes are not told */
    for (int i = 0; i < 200 && k.key[0] == '\0'; i++)
        run_until(NULL, 10);
    assert_string_equal(k.key, "redisc-timeout:k");
    assert_int_equal(t.downs, 0);
    redisc_free(r);
    redisc_free(sub);
}

int main(void)
{
    (void)raw; /* redis_test.h's two-word form; the tests here use raw_argv */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_commands_fail_alone_and_the_connection_stays),
        cmocka_unit_test(test_silent_server_is_given_up),
        cmocka_unit_test(test_silence_after_late_commands_gives_up),
        cmocka_unit_test(test_tracking_that_times_out_is_asked_again),
    };
    return cmocka_run_group_tests(tests, redis_test_setup, redis_test_teardown);
}
