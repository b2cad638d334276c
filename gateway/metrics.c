/* metrics.c - recording into the per-worker counters, and the Prometheus exposition that sums
 * them. Labels never carry ids or secrets: only routes, codes, platforms and outcomes. */
#include "metrics.h"

#include <botgate_version.h> /* generated in the build tree */

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>

static const double bounds[METRICS_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
static const char *const route_names[METRICS_ROUTES] = {"sendResponses", "redirectMemberToNode",
                                                        "requests", "broadcasts", "webhooks"};
static const int statuses[METRICS_STATUSES] = {200, 413, 500, 400, 401, 404,
                                               409, 429, 502, 503, 202};
static const char *const targets[METRICS_TARGETS] = {
    "facebook", "whatsapp", "whatsapp-cloud", "slack", "wechat", "teamwork", "media", "webhook",
};
static const char *const outcomes[METRICS_OUTCOMES] = {"2xx", "4xx", "5xx", "no_answer"};

static int code_slot(int err_code)
{
    if (err_code == 0)
        return 0;
    if (err_code == -1)
        return 1;
    if (err_code >= 100 && err_code < 100 + METRICS_CODES - 3)
        return 3 + err_code - 100;
    return 2;
}

static const char *code_label(int slot, char *buf)
{
    if (slot == 0)
        return "0";
    if (slot == 1)
        return "unauthorized";
    if (slot == 2)
        return "internal";
    buf[0] = '1';
    buf[1] = (char)('0' + (slot - 3) / 10);
    buf[2] = (char)('0' + (slot - 3) % 10);
    buf[3] = '\0';
    return buf;
}

static void counter_add(atomic_uint_fast64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static uint64_t counter_read(const atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

void metrics_observe(metrics_histogram_t *h, int64_t us)
{
    int i = 0;

    if (us < 0)
        us = 0;
    while (i < METRICS_BUCKETS && (double)us > bounds[i] * 1e6)
        i++;
    counter_add(&h->buckets[i], 1);
    counter_add(&h->sum_us, (uint64_t)us);
}

void metrics_request(metrics_t *m, metrics_route_t route, int http_status, int err_code,
                     int64_t elapsed_us)
{
    int s = 2; /* a status not in the table counts as 500 */

    for (int i = 0; i < METRICS_STATUSES; i++)
        if (statuses[i] == http_status)
            s = i;

    counter_add(&m->requests[route][s][code_slot(err_code)], 1);
    metrics_observe(&m->latency[route], elapsed_us);
}

/* The index of target in targets[0..n), -1 when it is not there. */
static int target_index(const char *target, int n)
{
    for (int i = 0; i < n; i++)
        if (target != NULL && strcmp(targets[i], target) == 0)
            return i;
    return -1;
}

void metrics_call(metrics_t *m, const char *name, long status, int64_t elapsed_us)
{
    int target = target_index(name, METRICS_TARGETS);
    int o = status >= 200 && status < 300   ? 0
            : status >= 400 && status < 500 ? 1
            : status >= 500                 ? 2
                                            : 3;

    if (target < 0 || target >= METRICS_TARGETS)
        return;
    counter_add(&m->calls[target][o], 1);
    metrics_observe(&m->call_latency[target], elapsed_us);
}

void metrics_rate_wait(metrics_t *m, const char *platform, int64_t wait_us)
{
    int target = target_index(platform, METRICS_PLATFORMS);

    if (target >= 0 && target < METRICS_PLATFORMS)
        metrics_observe(&m->rate_wait[target], wait_us);
}

void metrics_rate_refused(metrics_t *m, const char *platform)
{
    int target = target_index(platform, METRICS_PLATFORMS);

    if (target >= 0 && target < METRICS_PLATFORMS)
        counter_add(&m->rate_refused[target], 1);
}

void metrics_rate_answer(metrics_t *m, const char *platform)
{
    int target = target_index(platform, METRICS_PLATFORMS);

    if (target >= 0 && target < METRICS_PLATFORMS)
        counter_add(&m->rate_answers[target], 1);
}

void metrics_message(metrics_t *m, const char *platform, int err_code)
{
    int t = target_index(platform, METRICS_PLATFORMS);

    if (t >= 0)
        counter_add(&m->messages[t][code_slot(err_code)], 1);
}

void metrics_hook_refused(metrics_t *m, const char *platform, metrics_hook_refusal_t why)
{
    int t = target_index(platform, METRICS_PLATFORMS);

    if (t >= 0)
        counter_add(&m->webhook_refused[t][why], 1);
}

void metrics_hook_events(metrics_t *m, const char *platform, unsigned n)
{
    int t = target_index(platform, METRICS_PLATFORMS);

    if (t >= 0)
        counter_add(&m->webhook_events[t], n);
}

void metrics_on_redis_command(void *arg, int ok, int64_t latency_us)
{
    metrics_t *m = arg;

    counter_add(ok ? &m->redis_commands : &m->redis_errors, 1);
    metrics_observe(&m->redis_latency, latency_us);
}

/* ---- exposition ---- */

static void header(struct evbuffer *b, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram(struct evbuffer *b, const char *name, const char *label, const char *value,
                      const metrics_histogram_t *const *hs, int n)
{
    uint64_t cum = 0, sum_us = 0;
    char le[32];

    for (int i = 0; i <= METRICS_BUCKETS; i++) {
        for (int w = 0; w < n; w++)
            cum += counter_read(&hs[w]->buckets[i]);
        if (i < METRICS_BUCKETS)
            snprintf(le, sizeof(le), "%g", bounds[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        evbuffer_add_printf(b, "%s_bucket{%s%s%s%sle=\"%s\"} %llu\n", name, label ? label : "",
                            label ? "=\"" : "", label ? value : "", label ? "\"," : "", le,
                            (unsigned long long)cum);
    }
    for (int w = 0; w < n; w++)
        sum_us += counter_read(&hs[w]->sum_us);
    if (label) {
        evbuffer_add_printf(b, "%s_sum{%s=\"%s\"} %.6f\n", name, label, value, sum_us / 1e6);
        evbuffer_add_printf(b, "%s_count{%s=\"%s\"} %llu\n", name, label, value,
                            (unsigned long long)cum);
    } else {
        evbuffer_add_printf(b, "%s_sum %.6f\n%s_count %llu\n", name, sum_us / 1e6, name,
                            (unsigned long long)cum);
    }
}

/* Sums one counter (a field path inside metrics_t) over every worker. */
#define SUM(out, field)                                                                            \
    do {                                                                                           \
        (out) = 0;                                                                                 \
        for (int w_ = 0; w_ < n; w_++)                                                             \
            (out) += atomic_load_explicit(&all[w_]->field, memory_order_relaxed);                  \
    } while (0)

static void scalar(struct evbuffer *b, const char *name, const char *type, const char *help,
                   long long value)
{
    header(b, name, type, help);
    evbuffer_add_printf(b, "%s %lld\n", name, value);
}

/* A counter with one label: a series for each of its count values (names), always. */
static void labelled(struct evbuffer *b, const char *name, const char *help, const char *label,
                     const char *const *names, const uint64_t *values, int count)
{
    header(b, name, "counter", help);
    for (int i = 0; i < count; i++)
        evbuffer_add_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, names[i],
                            (unsigned long long)values[i]);
}

/* out[i] = field[i] summed over the workers, for each of count. */
#define SUM_EACH(out, field, count)                                                                \
    do {                                                                                           \
        for (int i_ = 0; i_ < (count); i_++)                                                       \
            SUM((out)[i_], field[i_]);                                                             \
    } while (0)

/* The outbox (contract.md section 12): its counters, and the gauges one worker refreshes. */
static void outbox_render(struct evbuffer *b, const metrics_t *const *all, int n)
{
    static const char *const reasons[METRICS_RETRY_REASONS] = {"rate_limited", "platform", "store"};
    static const char *const ended[2] = {"done", "failed"};
    static const char *const posted[2] = {"delivered", "failed"};
    uint64_t each[METRICS_RETRY_REASONS > 2 ? METRICS_RETRY_REASONS : 2];
    uint64_t per_platform[METRICS_PLATFORMS];
    long long shards = 0;
    uint64_t v;

    SUM(v, outbox_accepted);
    scalar(b, "botgate_outbox_accepted_total", "counter",
           "Requests queued (Prefer: respond-async), answered 202.", (long long)v);
    SUM(v, outbox_attempts);
    scalar(b, "botgate_outbox_attempts_total", "counter",
           "Attempts started on queued requests (a first try, a retry, a take-over).",
           (long long)v);
    SUM(v, outbox_claimed);
    scalar(b, "botgate_outbox_claimed_total", "counter",
           "Queue entries taken over from a consumer that stopped answering.", (long long)v);
    SUM_EACH(each, outbox_ended, 2);
    labelled(b, "botgate_outbox_ended_total",
             "Queued requests ended, by status (done: every response delivered).", "status", ended,
             each, 2);
    SUM_EACH(each, outbox_retries, METRICS_RETRY_REASONS);
    labelled(b, "botgate_outbox_retries_total",
             "Queued requests tried again later, by reason (nothing had reached a platform).",
             "reason", reasons, each, METRICS_RETRY_REASONS);
    SUM_EACH(each, callbacks, 2);
    labelled(b, "botgate_outbox_callbacks_total",
             "Status callbacks ended: delivered (a 2xx), failed (none in 24 h, or nothing to "
             "send).",
             "outcome", posted, each, 2);
    SUM(v, callback_retries);
    scalar(b, "botgate_outbox_callback_retries_total", "counter",
           "Status callback posts not answered 2xx, tried again later.", (long long)v);
    header(b, "botgate_broadcasts_total", "counter",
           "Broadcasts by the state they reached: running (accepted), done, cancelled.");
    for (int i = 0; i < 3; i++) {
        static const char *const states[3] = {"running", "done", "cancelled"};
        SUM(v, broadcasts[i]);
        evbuffer_add_printf(b, "botgate_broadcasts_total{state=\"%s\"} %llu\n", states[i],
                            (unsigned long long)v);
    }
    header(
        b, "botgate_webhooks_refused_total", "counter",
        "Platform webhooks refused before anything of them was read: a signature or token "
        "missing or wrong, or a replay (slack) or a timestamp outside 5 minutes (slack, WeChat).");
    for (int p = 0; p < METRICS_PLATFORMS; p++)
        for (int r = 0; r < METRICS_HOOK_REFUSALS; r++) {
            SUM(v, webhook_refused[p][r]);
            evbuffer_add_printf(b,
                                "botgate_webhooks_refused_total{platform=\"%s\",reason=\"%s\"} "
                                "%llu\n",
                                targets[p], r == METRICS_HOOK_SIGNATURE ? "signature" : "replay",
                                (unsigned long long)v);
        }
    SUM_EACH(per_platform, webhook_events, METRICS_PLATFORMS);
    labelled(b, "botgate_webhook_events_total",
             "Events of platform webhooks stored in Redis (inbound messages, taps, receipts).",
             "platform", targets, per_platform, METRICS_PLATFORMS);
    SUM_EACH(each, webhook_posts, 2);
    labelled(b, "botgate_webhook_posts_total",
             "Webhook events posted to subscriptions: delivered (a 2xx), failed (none in 24 h).",
             "outcome", posted, each, 2);
    SUM(v, webhook_post_retries);
    scalar(b, "botgate_webhook_post_retries_total", "counter",
           "Event posts to subscriptions not answered 2xx, tried again later.", (long long)v);
    SUM(shards, outbox_shards);
    if (shards > METRICS_SHARDS)
        shards = METRICS_SHARDS;
    header(b, "botgate_outbox_depth", "gauge",
           "Entries in each outbox stream (queued requests and callbacks not finished), as last "
           "read (every 5 s).");
    for (int i = 0; i < shards; i++) {
        long long d;
        SUM(d, outbox_depth[i]);
        evbuffer_add_printf(b, "botgate_outbox_depth{shard=\"%d\"} %lld\n", i, d);
    }
    header(b, "botgate_outbox_oldest_seconds", "gauge",
           "Age of the oldest entry of each outbox stream, as last read.");
    for (int i = 0; i < shards; i++) {
        long long ms;
        SUM(ms, outbox_age_ms[i]);
        evbuffer_add_printf(b, "botgate_outbox_oldest_seconds{shard=\"%d\"} %lld.%03lld\n", i,
                            ms / 1000, ms % 1000);
    }
}

void metrics_render(struct evbuffer *b, const metrics_t *const *all, int n)
{
    const metrics_histogram_t *hs[256] = {0};
    char code[8];
    uint64_t v, each[METRICS_PLATFORMS];
    long long g;

    if (n > 256)
        n = 256;
    header(b, "botgate_requests_total", "counter",
           "API requests answered, by route, HTTP status and err_code.");
    for (int r = 0; r < METRICS_ROUTES; r++)
        for (int s = 0; s < METRICS_STATUSES; s++)
            for (int c = 0; c < METRICS_CODES; c++) {
                SUM(v, requests[r][s][c]);
                /* every success series always, errors once they happened */
                if (v == 0 && !(s == 0 && c == 0))
                    continue;
                evbuffer_add_printf(b,
                                    "botgate_requests_total{route=\"%s\",status=\"%d\","
                                    "err_code=\"%s\"} %llu\n",
                                    route_names[r], statuses[s], code_label(c, code),
                                    (unsigned long long)v);
            }
    header(b, "botgate_request_duration_seconds", "histogram",
           "Time from a request's arrival to its answer.");
    for (int r = 0; r < METRICS_ROUTES; r++) {
        for (int w = 0; w < n; w++)
            hs[w] = &all[w]->latency[r];
        histogram(b, "botgate_request_duration_seconds", "route", route_names[r], hs, n);
    }
    SUM(g, in_flight);
    scalar(b, "botgate_requests_in_flight", "gauge", "API requests being worked on.", g);
    header(b, "botgate_platform_calls_total", "counter",
           "Outbound calls by target (platform, media download, webhook) and outcome.");
    for (int t = 0; t < METRICS_TARGETS; t++)
        for (int o = 0; o < METRICS_OUTCOMES; o++) {
            SUM(v, calls[t][o]);
            evbuffer_add_printf(b,
                                "botgate_platform_calls_total{target=\"%s\",outcome=\"%s\"} %llu\n",
                                targets[t], outcomes[o], (unsigned long long)v);
        }
    header(b, "botgate_platform_call_duration_seconds", "histogram",
           "Duration of outbound calls by target.");
    for (int t = 0; t < METRICS_TARGETS; t++) {
        for (int w = 0; w < n; w++)
            hs[w] = &all[w]->call_latency[t];
        histogram(b, "botgate_platform_call_duration_seconds", "target", targets[t], hs, n);
    }
    SUM(v, redis_commands);
    scalar(b, "botgate_redis_commands_total", "counter", "Redis commands answered.", (long long)v);
    SUM(v, redis_errors);
    scalar(b, "botgate_redis_errors_total", "counter",
           "Redis commands that failed (connection lost, timed out, error reply).", (long long)v);
    SUM(v, redis_reconnects);
    scalar(b, "botgate_redis_disconnects_total", "counter", "Redis connections lost.",
           (long long)v);
    header(b, "botgate_redis_command_duration_seconds", "histogram",
           "Time from sending a Redis command to its reply.");
    for (int w = 0; w < n; w++)
        hs[w] = &all[w]->redis_latency;
    histogram(b, "botgate_redis_command_duration_seconds", NULL, NULL, hs, n);
    SUM(g, redis_up);
    scalar(b, "botgate_redis_connected_workers", "gauge", "Workers whose Redis connection is up.",
           g);
    SUM(v, credential_refreshes);
    scalar(b, "botgate_credential_refreshes_total", "counter",
           "Platform credentials refreshed (whatsapp admin logins, wechat access tokens).",
           (long long)v);
    header(b, "botgate_rate_limit_wait_seconds", "histogram",
           "Time a message waited for its slot of the shared platform rate limits.");
    for (int t = 0; t < METRICS_PLATFORMS; t++) {
        for (int w = 0; w < n; w++)
            hs[w] = &all[w]->rate_wait[t];
        histogram(b, "botgate_rate_limit_wait_seconds", "platform", targets[t], hs, n);
    }
    SUM_EACH(each, rate_refused, METRICS_PLATFORMS);
    labelled(b, "botgate_rate_limit_refused_total",
             "Elements failed with 120 because their slot came too late for the deadline.",
             "platform", targets, each, METRICS_PLATFORMS);
    SUM_EACH(each, rate_answers, METRICS_PLATFORMS);
    labelled(b, "botgate_platform_rate_limited_total",
             "Rate-limit answers from the platforms (each pauses the limit for every instance).",
             "platform", targets, each, METRICS_PLATFORMS);
    header(b, "botgate_messages_total", "counter",
           "Messages handed to delivery, by platform, outcome and err_code (a request answered "
           "200 may carry failed ones).");
    for (int t = 0; t < METRICS_PLATFORMS; t++)
        for (int c = 0; c < METRICS_CODES; c++) {
            SUM(v, messages[t][c]);
            if (v == 0 && c != 0) /* every platform's sent series always, failures once seen */
                continue;
            evbuffer_add_printf(b,
                                "botgate_messages_total{platform=\"%s\",outcome=\"%s\","
                                "err_code=\"%s\"} %llu\n",
                                targets[t], c == 0 ? "sent" : "failed", code_label(c, code),
                                (unsigned long long)v);
        }
    SUM(g, connections);
    scalar(b, "botgate_connections_open", "gauge", "Open client connections.", g);
    SUM(v, accept_pauses);
    scalar(b, "botgate_accept_pauses_total", "counter",
           "Times a worker stopped accepting connections because it reached its cap.",
           (long long)v);
    outbox_render(b, all, n);
    scalar(b, "botgate_workers", "gauge", "Worker threads.", n);
    header(b, "botgate_build_info", "gauge",
           "Always 1; its labels say which build runs (join on it to compare versions).");
    evbuffer_add_printf(b, "botgate_build_info{version=\"%s\",libevent=\"%s\"} 1\n",
                        BOTGATE_VERSION, event_get_version());
}
