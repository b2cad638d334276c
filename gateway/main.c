/* main.c - botgate: read the configuration, start the workers, wait for a signal, drain. */
#include "config.h"
#include "log.h"
#include "worker.h"

#include "../core/rng.h"
#include "../net/curlmem.h"

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    config_t cfg;
    worker_t *workers;
    sigset_t set;
    int rc, sig;

    rc = config_load(&cfg, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    log_set_level((log_level_t)cfg.log_level);
    config_warn_unknown(environ);
    {
        uint64_t seed = worker_seed(&cfg);
        rng_hex(&seed, cfg.instance, sizeof(cfg.instance) - 1);
    }
    /* libevent and hiredis write to sockets with plain write(2). */
    signal(SIGPIPE, SIG_IGN);
    if (curlmem_global_init() < 0) {
        log_msg(LOG_ERROR, "curl_global_init failed");
        return 1;
    }
    json_object_seed(0); /* before threads: jansson seeds its hash function lazily otherwise */
    /* Signals go to the main thread only: workers inherit this mask. An ignored signal is
     * dropped even while blocked, and a shell without job control starts its background jobs
     * with SIGINT ignored: the drain on SIGINT must not depend on who started us. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    workers = calloc((size_t)cfg.workers, sizeof(*workers));
    if (workers == NULL)
        return 1;
    for (int i = 0; i < cfg.workers; i++) {
        if (worker_init(&workers[i], i, &cfg) < 0) {
            log_msg(LOG_ERROR, "worker %d could not start", i);
            /* its listeners closed too: nothing of this process is left holding the address */
            for (int j = 0; j <= i; j++)
                worker_cleanup(&workers[j]);
            free(workers);
            curlmem_global_cleanup();
            return 1;
        }
    }
    worker_set_all(workers, cfg.workers);
    for (int i = 0; i < cfg.workers; i++) {
        if (worker_start(&workers[i]) < 0) {
            log_msg(LOG_ERROR, "worker %d: no thread", i);
            return 1;
        }
    }
    log_msg(LOG_INFO, "botgate %s listening on %s with %d worker%s", config_version(), cfg.listen,
            cfg.workers, cfg.workers == 1 ? "" : "s");

    if (sigwait(&set, &sig) == 0)
        log_msg(LOG_INFO, "%s: draining (up to %d ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
                cfg.drain_timeout_ms);
    for (int i = 0; i < cfg.workers; i++)
        worker_tell(&workers[i], 'd');
    /* A second signal stops at once: every request still in flight gets an error answer. */
    int *joined = calloc((size_t)cfg.workers, sizeof(int));
    if (joined == NULL)
        return 1;
    for (;;) {
        struct timespec ts = {0, 100 * 1000000};
        int alive = 0;
        for (int i = 0; i < cfg.workers; i++) {
            if (!joined[i] && pthread_tryjoin_np(workers[i].thread, NULL) == 0)
                joined[i] = 1;
            alive += !joined[i];
        }
        if (alive == 0)
            break;
        if (sigtimedwait(&set, NULL, &ts) > 0) {
            log_msg(LOG_WARN, "second signal: stopping now");
            for (int i = 0; i < cfg.workers; i++)
                worker_tell(&workers[i], 'q');
        }
    }
    free(joined);
    for (int i = 0; i < cfg.workers; i++)
        worker_cleanup(&workers[i]);
    free(workers);
    curlmem_global_cleanup();
    log_msg(LOG_INFO, "botgate stopped");
    return 0;
}
