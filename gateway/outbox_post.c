/* outbox_post.c - signed POSTs that must arrive (contract.md section 12): the app's secret read
 * on each try, the body signed with the try's time, posted through the SSRF-guarded client, and
 * tried again with backoff for 24 h until the receiver answers 2xx. */
#include "outbox_post.h"

#include "../core/clock.h"
#include "../core/rng.h"
#include "../store/outbox.h"
#include "log.h"

#include <event2/event.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_FIRST_MS 1000   /* contract.md section 12: 1 s doubling... */
#define BACKOFF_MAX_MS   300000 /* ...at most 5 min between tries */
#define ANSWER_MAX       4096

/* Owned by the caller's side from outbox_post_start until done is called or it is cancelled. */
struct outbox_post {
    op_env_t *env;
    char *app, *url, *body, *event_id;
    int64_t since_ms;
    atomic_uint_fast64_t *retries;
    int64_t tries;
    store_outbox_call_t *call; /* the secret being read */
    net_xfer_t *xfer;          /* the POST in flight */
    struct event *timer;       /* the next try, or the end */
    int delivered, ended;
    outbox_post_done_fn *done;
    void *arg;
};

int64_t outbox_backoff_ms(op_env_t *env, int64_t attempts)
{
    int64_t ms = clock_doubling_ms(BACKOFF_FIRST_MS, BACKOFF_MAX_MS, attempts - 1);
    char hex[9];

    rng_hex(&env->deliver.rng, hex, 8);
    return ms / 2 + (int64_t)(strtoul(hex, NULL, 16) % (uint64_t)(ms / 2 + 1));
}

void outbox_arm(struct event *ev, int64_t ms)
{
    struct timeval tv = clock_ms_timeval(ms);

    evtimer_add(ev, &tv);
}

static void post_free(outbox_post_t *p)
{
    store_outbox_cancel(p->call);
    if (p->xfer != NULL)
        net_cancel(p->xfer);
    if (p->timer != NULL)
        event_free(p->timer);
    free(p->app);
    free(p->url);
    free(p->body);
    free(p->event_id);
    free(p);
}

void outbox_post_cancel(outbox_post_t *p)
{
    if (p != NULL)
        post_free(p);
}

/* The end, told from the timer so that the caller never sees it inside one of its own calls. */
static void post_end(outbox_post_t *p, int delivered)
{
    p->ended = 1;
    p->delivered = delivered;
    outbox_arm(p->timer, 0);
}

/* Not answered 2xx: again after a backoff, for 24 h after the event. */
static void post_again(outbox_post_t *p)
{
    if (clock_wall_ms() - p->since_ms > OUTBOX_POST_FOR_MS) {
        log_msg(LOG_WARN, "outbox: post of event %s not taken in 24 h: dropped", p->event_id);
        post_end(p, 0);
        return;
    }
    if (p->retries != NULL)
        atomic_fetch_add_explicit(p->retries, 1, memory_order_relaxed);
    outbox_arm(p->timer, outbox_backoff_ms(p->env, ++p->tries));
}

static void on_answer(void *arg, const net_answer_t *ans)
{
    outbox_post_t *p = arg;

    p->xfer = NULL;
    metrics_call(p->env->deliver.metrics, "webhook", ans->status, (int64_t)ans->elapsed_us);
    if (ans->status >= 200 && ans->status < 300)
        post_end(p, 1);
    else
        post_again(p);
}

/* Botgate-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of "<t>.<body>"> with the app's secret. */
static char *signature(const char *secret, const char *body)
{
    char t[24], *msg, *out;
    unsigned char mac[32];
    unsigned mac_len = 0;
    size_t n;

    snprintf(t, sizeof(t), "%lld", (long long)(clock_wall_ms() / 1000));
    n = strlen(t) + 1 + strlen(body);
    if ((msg = malloc(n + 1)) == NULL)
        return NULL;
    snprintf(msg, n + 1, "%s.%s", t, body);
    if (HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)msg, n, mac,
             &mac_len) == NULL ||
        (out = malloc(64 + 64)) == NULL) {
        free(msg);
        return NULL;
    }
    free(msg);
    n = (size_t)snprintf(out, 64, "Botgate-Signature: t=%s,v1=", t);
    for (unsigned i = 0; i < mac_len; i++)
        n += (size_t)snprintf(out + n, 3, "%02x", mac[i]);
    return out;
}

static void on_secret(void *arg, store_status_t st, const char *secret)
{
    outbox_post_t *p = arg;
    adapter_call_t c = {0};
    int h = 0;

    p->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        post_again(p);
        return;
    }
    c.method = "POST";
    c.url = strdup(p->url);
    c.headers[h++] = strdup("Content-Type: application/json");
    if (secret != NULL) /* an app without a secret gets its posts unsigned */
        c.headers[h++] = signature(secret, p->body);
    c.body_len = strlen(p->body);
    c.body = strdup(p->body);
    if (c.url == NULL || c.headers[0] == NULL || (secret != NULL && c.headers[1] == NULL) ||
        c.body == NULL) {
        adapter_call_free(&c);
        post_again(p);
        return;
    }
    p->xfer =
        deliver_net_start(p->env->deliver.up_user, &c, p->env->deliver.cfg->upstream_timeout_ms,
                          ANSWER_MAX, 0, on_answer, p);
    if (p->xfer == NULL)
        post_again(p);
}

/* A try: the secret first (it may have been rotated since the last). */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    outbox_post_t *p = arg;
    store_status_t st = STORE_OK;

    (void)fd;
    (void)what;
    if (p->ended) {
        outbox_post_done_fn *done = p->done;
        void *done_arg = p->arg;
        int delivered = p->delivered;
        post_free(p);
        done(done_arg, delivered);
        return;
    }
    p->call = store_outbox_secret(p->env->deliver.store, p->app, on_secret, p, &st);
    if (p->call == NULL)
        post_again(p);
}

outbox_post_t *outbox_post_start(op_env_t *env, const outbox_post_req_t *req,
                                 outbox_post_done_fn *done, void *arg)
{
    outbox_post_t *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->env = env;
    p->app = strdup(req->app);
    p->url = strdup(req->url);
    p->body = strdup(req->body);
    p->event_id = strdup(req->event_id);
    p->timer = evtimer_new(env->deliver.base, on_timer, p);
    if (p->app == NULL || p->url == NULL || p->body == NULL || p->event_id == NULL ||
        p->timer == NULL) {
        post_free(p);
        return NULL;
    }
    p->since_ms = req->since_ms;
    p->retries = req->retries;
    p->done = done;
    p->arg = arg;
    outbox_arm(p->timer, 0);
    return p;
}
