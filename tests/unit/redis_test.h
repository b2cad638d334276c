/* redis_test.h - the store's unit tests against a real redis-server: redis_test_setup starts
 * one on a free loopback port and a store on a loop of its own (rt), run_until turns the loop,
 * raw sends a command of two words (raw_argv: up to four). Include after <cmocka.h>; one test file,
 * one Redis. */
#ifndef BOTGATE_TESTS_REDIS_TEST_H
#define BOTGATE_TESTS_REDIS_TEST_H

#include "store/store.h"

#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static struct redis_test {
    pid_t redis; /* 0 once a test stopped it */
    int port;
    struct event_base *base;
    store_t *store;
} rt;

static int redis_test_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void redis_test_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Runs the loop in 10 ms steps until *done or limit_ms passed. */
static void run_until(const int *done, int limit_ms)
{
    struct timeval tick = {0, 10000};
    struct event *ev = event_new(rt.base, -1, EV_PERSIST, redis_test_tick, NULL);
    event_add(ev, &tick);
    for (int i = 0; i < limit_ms / 10 && !(done != NULL && *done); i++)
        event_base_loop(rt.base, EVLOOP_ONCE);
    event_free(ev);
}

/* cmocka's group setup: Redis, and a store connected to it. */
static int redis_test_setup(void **state)
{
    (void)state;
    char port[16];
    const char *redis = getenv("REDIS_SERVER") ? getenv("REDIS_SERVER") : "redis-server";
    rt.port = redis_test_free_port();
    snprintf(port, sizeof(port), "%d", rt.port);
    char *argv[] = {(char *)redis, "--port", port, "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--loglevel", "warning",
                    /* DEBUG SLEEP makes the server slow (test_redisc_timeout.c) */
                    "--enable-debug-command", "local", NULL};
    posix_spawn_file_actions_t quiet;
    posix_spawn_file_actions_init(&quiet);
    posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawnp(&rt.redis, redis, &quiet, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&quiet);
    if (rc != 0)
        return -1;
    rt.base = event_base_new();
    store_config_t cfg = {.redis = {.host = "127.0.0.1",
                                    .port = rt.port,
                                    .connect_timeout_ms = 1000,
                                    .command_timeout_ms = 1000,
                                    .max_in_flight = 100},
                          .prefix = "botgate:"};
    rt.store = store_new(rt.base, &cfg);
    for (int i = 0; i < 500 && !store_ready(rt.store); i++)
        run_until(NULL, 10); /* the client reconnects with backoff until redis listens */
    return store_ready(rt.store) ? 0 : -1;
}

static int redis_test_teardown(void **state)
{
    (void)state;
    store_free(rt.store);
    event_base_free(rt.base);
    if (rt.redis > 0) {
        kill(rt.redis, SIGTERM);
        waitpid(rt.redis, NULL, 0);
    }
    return 0;
}

typedef struct raw_reply {
    int calls;
    char text[4096]; /* a status or bulk reply's text */
} raw_reply_t;

static void on_raw(redisReply *reply, void *arg)
{
    raw_reply_t *r = arg;
    r->calls++;
    if (reply != NULL && reply->str != NULL)
        snprintf(r->text, sizeof(r->text), "%s", reply->str);
}

/* One command of argc (at most 4) words on the store's connection; its reply's text. */
static void raw_argv(int argc, const char **argv, raw_reply_t *r)
{
    size_t lens[4];
    redisc_cmd_t *cmd;
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    memset(r, 0, sizeof(*r));
    assert_int_equal(redisc_command(store_redis(rt.store), on_raw, r, argc, argv, lens, &cmd),
                     REDISC_OK);
    run_until(&r->calls, 2000);
    assert_int_equal(r->calls, 1);
}

/* One command of two words. */
static void raw(const char *a, const char *b, raw_reply_t *r)
{
    const char *argv[2] = {a, b};
    raw_argv(2, argv, r);
}

#endif
