/* botgate-sim: options, one server per thread, the port file, and a clean exit on signals. */
#include "sim.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#define SIM_MAX_THREADS 256

typedef struct {
    char host[256];
    int port;
    const char *port_file;
    int threads;
    int latency_ms;
    long log_max;
    int quiet;
} sim_options_t;

static void sim_usage(FILE *out)
{
    fprintf(out,
            "usage: botgate-sim [options]\n"
            "Answers like Facebook Messenger, WhatsApp (on-premises and Cloud), Slack, WeChat\n"
            "and the team-collaboration API, for integration and load tests.\n"
            "\n"
            "  --listen HOST:PORT   address to listen on (default 127.0.0.1:9100; port 0 picks "
            "one)\n"
            "  --port-file PATH     write the port there once listening (atomically)\n"
            "  --threads N          server threads sharing the port (default 1)\n"
            "  --latency-ms N       delay added to every platform answer (default 0)\n"
            "  --log-max N          requests kept in the record (default 100000; 0 = counters "
            "only)\n"
            "  --quiet              no startup line\n"
            "  --help               this text\n");
}

static int sim_parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* HOST:PORT, [V6]:PORT, or a bare PORT. */
static int sim_parse_listen(const char *arg, sim_options_t *o)
{
    const char *port = arg;
    long p;
    if (arg[0] == '[') {
        const char *close = strchr(arg, ']');
        if (close == NULL || close[1] != ':')
            return -1;
        snprintf(o->host, sizeof(o->host), "%.*s", (int)(close - arg - 1), arg + 1);
        port = close + 2;
    } else if (strrchr(arg, ':') != NULL) {
        const char *colon = strrchr(arg, ':');
        snprintf(o->host, sizeof(o->host), "%.*s", (int)(colon - arg), arg);
        port = colon + 1;
    }
    if (o->host[0] == '\0' || sim_parse_int(port, 0, 65535, &p) != 0)
        return -1;
    o->port = (int)p;
    return 0;
}

static int sim_parse_options(int argc, char **argv, sim_options_t *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},  {"port-file", required_argument, NULL, 'p'},
        {"threads", required_argument, NULL, 't'}, {"latency-ms", required_argument, NULL, 'L'},
        {"log-max", required_argument, NULL, 'm'}, {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    long v;
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'l':
            if (sim_parse_listen(optarg, o) != 0) {
                fprintf(stderr, "botgate-sim: --listen wants HOST:PORT, got '%s'\n", optarg);
                return -1;
            }
            break;
        case 'p':
            o->port_file = optarg;
            break;
        case 't':
            if (sim_parse_int(optarg, 1, SIM_MAX_THREADS, &v) != 0) {
                fprintf(stderr, "botgate-sim: --threads wants 1..%d\n", SIM_MAX_THREADS);
                return -1;
            }
            o->threads = (int)v;
            break;
        case 'L':
            if (sim_parse_int(optarg, 0, SIM_MAX_DELAY, &v) != 0) {
                fprintf(stderr, "botgate-sim: --latency-ms wants 0..%d\n", SIM_MAX_DELAY);
                return -1;
            }
            o->latency_ms = (int)v;
            break;
        case 'm':
            if (sim_parse_int(optarg, 0, 100000000, &v) != 0) {
                fprintf(stderr, "botgate-sim: --log-max wants 0..100000000\n");
                return -1;
            }
            o->log_max = v;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'h':
            sim_usage(stdout);
            exit(0);
        default:
            sim_usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "botgate-sim: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* Written to a temporary name and renamed, so a test polling for the file never reads half. */
static int sim_write_port_file(const char *path, int port)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return -1;
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return -1;
    int ok = fprintf(f, "%d\n", port) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    sim_options_t o = {.host = "127.0.0.1", .port = 9100, .threads = 1, .log_max = 100000};
    if (sim_parse_options(argc, argv, &o) != 0)
        return 2;

    signal(SIGPIPE, SIG_IGN);
    /* Threads inherit this mask, so only main's sigwait() ever sees SIGINT and SIGTERM. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    json_object_seed(0); /* before any thread makes an object */
    if (sim_record_init((size_t)o.log_max) != 0) {
        fprintf(stderr, "botgate-sim: out of memory for a record of %ld\n", o.log_max);
        return 1;
    }
    sim_latency_set(o.latency_ms);

    int rc = 1, started = 0, port = o.port;
    sim_server_t **servers = calloc((size_t)o.threads, sizeof(*servers));
    pthread_t *threads = calloc((size_t)o.threads, sizeof(*threads));
    if (servers == NULL || threads == NULL)
        goto out;
    /* All bound before any thread runs: when port 0 was asked, the first picks the port and
     * the others join it. */
    for (int i = 0; i < o.threads; i++) {
        int bound = -1;
        servers[i] = sim_server_new(o.host, port, &bound);
        if (servers[i] == NULL)
            goto out;
        port = bound;
    }
    for (; started < o.threads; started++) {
        int err = pthread_create(&threads[started], NULL, sim_server_run, servers[started]);
        if (err != 0) {
            fprintf(stderr, "botgate-sim: pthread_create: %s\n", strerror(err));
            goto out;
        }
    }
    if (o.port_file != NULL && sim_write_port_file(o.port_file, port) != 0) {
        fprintf(stderr, "botgate-sim: cannot write %s: %s\n", o.port_file, strerror(errno));
        goto out;
    }
    if (!o.quiet)
        fprintf(stderr, "botgate-sim: listening on %s:%d, %d thread%s, latency %d ms\n", o.host,
                port, o.threads, o.threads == 1 ? "" : "s", o.latency_ms);

    int sig = 0;
    while (sigwait(&stop, &sig) != 0)
        ;
    if (!o.quiet)
        fprintf(stderr, "botgate-sim: signal %d, exiting\n", sig);
    rc = 0;

out:
    for (int i = 0; i < started; i++)
        sim_server_stop(servers[i]);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; servers != NULL && i < o.threads; i++)
        sim_server_free(servers[i]);
    free(servers);
    free(threads);
    sim_record_free();
    sim_limits_free();
    sim_windows_free();
    libevent_global_shutdown();
    return rc;
}
