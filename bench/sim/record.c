/* The state all server threads share: the request record, counters, issued tokens, config. */
#include "sim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const sim_platform_names[SIM_PLATFORM_COUNT] = {
    "facebook", "whatsapp", "whatsapp-cloud", "slack", "wechat", "teamwork", "hook",
};
static const char *const sim_kind_names[SIM_KIND_COUNT] = {
    "messages", "login", "contacts", "token", "upload", "send", "webhook",
};

/* One process-wide instance; the mutex guards the ring and the per-name counters only, so a
 * request holds it for a pointer store. Entries are immutable once in the ring, which lets
 * readers dump them outside the lock (jansson refcounts and dumping are thread safe). */
static struct {
    pthread_mutex_t lock;
    json_t **ring; /* cap slots, entries with seq first_seq.. in order from head */
    size_t cap, head, count;
    uint64_t first_seq, next_seq;
    json_t *token_calls; /* appid -> n */
    json_t *login_calls; /* username -> n */

    pthread_mutex_t tokens_lock;
    json_t *tokens; /* issued whatsapp and wechat tokens, used as a set */

    _Atomic uint64_t total;
    _Atomic uint64_t by_platform[SIM_PLATFORM_COUNT];
    _Atomic uint64_t by_kind[SIM_KIND_COUNT];
    _Atomic int64_t in_flight;
    _Atomic uint64_t next_id;
    _Atomic int latency_ms;
    int64_t start_ms;
} sim_rec = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .tokens_lock = PTHREAD_MUTEX_INITIALIZER,
};

const char *sim_platform_name(sim_platform_t p)
{
    return p < SIM_PLATFORM_COUNT ? sim_platform_names[p] : "none";
}

const char *sim_kind_name(sim_kind_t k)
{
    return k < SIM_KIND_COUNT ? sim_kind_names[k] : "none";
}

int64_t sim_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sim_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int sim_record_init(size_t log_max)
{
    sim_rec.cap = log_max;
    if (log_max > 0) {
        sim_rec.ring = calloc(log_max, sizeof(json_t *));
        if (sim_rec.ring == NULL)
            return -1;
    }
    sim_rec.first_seq = sim_rec.next_seq = 1;
    sim_rec.token_calls = json_object();
    sim_rec.login_calls = json_object();
    sim_rec.tokens = json_object();
    sim_rec.start_ms = sim_now_ms();
    if (!sim_rec.token_calls || !sim_rec.login_calls || !sim_rec.tokens)
        return -1;
    return 0;
}

static void sim_record_drop_all(void)
{
    for (size_t i = 0; i < sim_rec.count; i++)
        json_decref(sim_rec.ring[(sim_rec.head + i) % sim_rec.cap]);
    sim_rec.head = sim_rec.count = 0;
    sim_rec.first_seq = sim_rec.next_seq;
}

void sim_record_free(void)
{
    sim_record_drop_all();
    free(sim_rec.ring);
    sim_rec.ring = NULL;
    json_decref(sim_rec.token_calls);
    json_decref(sim_rec.login_calls);
    json_decref(sim_rec.tokens);
    sim_rec.token_calls = sim_rec.login_calls = sim_rec.tokens = NULL;
}

static json_t *sim_str_or_null(const char *s)
{
    json_t *j = s ? json_string(s) : NULL;
    return j ? j : json_null(); /* json_string refuses invalid UTF-8: record null then */
}

void sim_record_add(const sim_entry_t *e)
{
    atomic_fetch_add_explicit(&sim_rec.total, 1, memory_order_relaxed);
    if (e->platform < SIM_PLATFORM_COUNT)
        atomic_fetch_add_explicit(&sim_rec.by_platform[e->platform], 1, memory_order_relaxed);
    if (e->kind < SIM_KIND_COUNT)
        atomic_fetch_add_explicit(&sim_rec.by_kind[e->kind], 1, memory_order_relaxed);
    if (sim_rec.cap == 0)
        return;

    /* Built outside the lock; only the seq is filled in under it. */
    json_t *seq = json_integer(0);
    json_t *o = json_object();
    json_object_set_new(o, "seq", seq);
    json_object_set_new(o, "platform", json_string(sim_platform_name(e->platform)));
    json_object_set_new(o, "kind", json_string(sim_kind_name(e->kind)));
    json_object_set_new(o, "method", sim_str_or_null(e->method));
    json_object_set_new(o, "path", sim_str_or_null(e->path));
    json_object_set_new(o, "query", sim_str_or_null(e->query));
    json_object_set_new(o, "auth", sim_str_or_null(e->auth));
    json_object_set_new(o, "recipient", sim_str_or_null(e->recipient));
    json_object_set(o, "body", e->body ? e->body : json_null());
    json_object_set_new(o, "fault", sim_str_or_null(e->fault));
    json_object_set_new(o, "ts_ms", json_integer(e->ts_us / 1000));
    json_object_set_new(o, "ts_us", json_integer(e->ts_us));
    json_object_set_new(o, "limit",
                        e->limit == SIM_LIMIT_SENDER ? json_string("sender")
                        : e->limit == SIM_LIMIT_PAIR ? json_string("pair")
                                                     : json_null());

    json_t *evicted = NULL;
    pthread_mutex_lock(&sim_rec.lock);
    json_integer_set(seq, (json_int_t)sim_rec.next_seq++);
    if (sim_rec.count == sim_rec.cap) {
        evicted = sim_rec.ring[sim_rec.head];
        sim_rec.head = (sim_rec.head + 1) % sim_rec.cap;
        sim_rec.count--;
        sim_rec.first_seq++;
    }
    sim_rec.ring[(sim_rec.head + sim_rec.count) % sim_rec.cap] = o;
    sim_rec.count++;
    pthread_mutex_unlock(&sim_rec.lock);
    json_decref(evicted);
}

json_t *sim_record_log(uint64_t since)
{
    json_t *list = json_array();
    uint64_t next;

    pthread_mutex_lock(&sim_rec.lock);
    uint64_t start = since < sim_rec.first_seq ? sim_rec.first_seq : since;
    if (start > sim_rec.next_seq)
        start = sim_rec.next_seq;
    size_t n = (size_t)(sim_rec.next_seq - start);
    if (n > SIM_LOG_PAGE)
        n = SIM_LOG_PAGE;
    size_t at = (size_t)(start - sim_rec.first_seq);
    for (size_t i = 0; i < n; i++)
        json_array_append(list, sim_rec.ring[(sim_rec.head + at + i) % sim_rec.cap]);
    next = start + n;
    pthread_mutex_unlock(&sim_rec.lock);

    json_t *o = json_object();
    json_object_set_new(o, "next", json_integer((json_int_t)next));
    json_object_set_new(o, "requests", list);
    return o;
}

/* The sequence keeps counting across resets so that a reader's old "next" never points into
 * entries recorded later. */
void sim_record_reset(void)
{
    json_t **old = NULL;
    size_t old_count = 0, old_head = 0, cap = sim_rec.cap;

    pthread_mutex_lock(&sim_rec.lock);
    if (cap > 0 && sim_rec.count > 0) {
        old = sim_rec.ring;
        old_count = sim_rec.count;
        old_head = sim_rec.head;
        sim_rec.ring = calloc(cap, sizeof(json_t *));
        if (sim_rec.ring == NULL) { /* keep the old array, drop its entries under the lock */
            sim_rec.ring = old;
            old = NULL;
            old_count = 0;
            sim_record_drop_all();
        }
    }
    sim_rec.head = sim_rec.count = 0;
    sim_rec.first_seq = sim_rec.next_seq;
    json_object_clear(sim_rec.token_calls);
    json_object_clear(sim_rec.login_calls);
    atomic_store(&sim_rec.total, 0);
    for (int i = 0; i < SIM_PLATFORM_COUNT; i++)
        atomic_store(&sim_rec.by_platform[i], 0);
    for (int i = 0; i < SIM_KIND_COUNT; i++)
        atomic_store(&sim_rec.by_kind[i], 0);
    pthread_mutex_unlock(&sim_rec.lock);

    /* Freeing up to log_max entries is slow: done after the lock so senders do not wait. */
    for (size_t i = 0; i < old_count; i++)
        json_decref(old[(old_head + i) % cap]);
    free(old);
}

json_t *sim_record_stats(void)
{
    json_t *o = json_object();
    json_t *plat = json_object(), *kind = json_object();
    json_object_set_new(o, "total", json_integer((json_int_t)atomic_load(&sim_rec.total)));
    for (int i = 0; i < SIM_PLATFORM_COUNT; i++)
        json_object_set_new(plat, sim_platform_names[i],
                            json_integer((json_int_t)atomic_load(&sim_rec.by_platform[i])));
    for (int i = 0; i < SIM_KIND_COUNT; i++)
        json_object_set_new(kind, sim_kind_names[i],
                            json_integer((json_int_t)atomic_load(&sim_rec.by_kind[i])));
    json_object_set_new(o, "by_platform", plat);
    json_object_set_new(o, "by_kind", kind);
    pthread_mutex_lock(&sim_rec.lock);
    json_object_set_new(o, "token_calls", json_deep_copy(sim_rec.token_calls));
    json_object_set_new(o, "login_calls", json_deep_copy(sim_rec.login_calls));
    json_object_set_new(o, "recorded", json_integer((json_int_t)sim_rec.count));
    json_object_set_new(o, "next", json_integer((json_int_t)sim_rec.next_seq));
    pthread_mutex_unlock(&sim_rec.lock);
    json_object_set_new(o, "in_flight", json_integer(atomic_load(&sim_rec.in_flight)));
    json_object_set_new(o, "uptime_ms", json_integer(sim_now_ms() - sim_rec.start_ms));
    json_object_set_new(o, "latency_ms", json_integer(sim_latency_get()));
    return o;
}

static void sim_record_count_name(json_t *map, const char *name)
{
    pthread_mutex_lock(&sim_rec.lock);
    json_t *v = json_object_get(map, name);
    if (v != NULL)
        json_integer_set(v, json_integer_value(v) + 1);
    else
        json_object_set_new(map, name, json_integer(1));
    pthread_mutex_unlock(&sim_rec.lock);
}

void sim_record_token_call(const char *appid)
{
    sim_record_count_name(sim_rec.token_calls, appid ? appid : "");
}

void sim_record_login_call(const char *username)
{
    sim_record_count_name(sim_rec.login_calls, username ? username : "");
}

void sim_record_in_flight(int delta)
{
    atomic_fetch_add_explicit(&sim_rec.in_flight, delta, memory_order_relaxed);
}

uint64_t sim_next_id(void)
{
    return atomic_fetch_add_explicit(&sim_rec.next_id, 1, memory_order_relaxed) + 1;
}

void sim_tokens_issue(const char *token)
{
    pthread_mutex_lock(&sim_rec.tokens_lock);
    json_object_set_new(sim_rec.tokens, token, json_true());
    pthread_mutex_unlock(&sim_rec.tokens_lock);
}

int sim_tokens_valid(const char *token)
{
    if (token == NULL)
        return 0;
    pthread_mutex_lock(&sim_rec.tokens_lock);
    int ok = json_object_get(sim_rec.tokens, token) != NULL;
    pthread_mutex_unlock(&sim_rec.tokens_lock);
    return ok;
}

size_t sim_tokens_expire(void)
{
    pthread_mutex_lock(&sim_rec.tokens_lock);
    size_t n = json_object_size(sim_rec.tokens);
    json_object_clear(sim_rec.tokens);
    pthread_mutex_unlock(&sim_rec.tokens_lock);
    return n;
}

int sim_latency_get(void)
{
    return atomic_load_explicit(&sim_rec.latency_ms, memory_order_relaxed);
}

void sim_latency_set(int ms)
{
    atomic_store(&sim_rec.latency_ms, ms);
}
