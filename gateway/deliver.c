/* deliver.c - delivering one response to the platform: make sure the channel's credential is
 * fresh (one refresh per channel at a time across every worker and instance, through a Redis
 * lock), check a whatsapp number once a week, turn a wechat image into a media_id, send, and
 * retry once where that is safe (expired credential, rate limit with Retry-After). Callbacks
 * only record what happened and call step(); step() decides what comes next. */
#include "op.h"

#include "log.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANSWER_MAX (1024 * 1024)        /* a platform answer larger than this is an error */
#define MEDIA_MAX (10 * 1024 * 1024)    /* an image to upload */
#define LOCK_TTL_MS 15000               /* a crashed refresher's lock expires after this */
#define WAIT_FALLBACK_MS 1000           /* waiters look again without news (a refresher died) */
#define CONTACT_TTL_S (7 * 24 * 3600)   /* whatsapp: a valid number is checked once a week */
#define MEDIA_TTL_S (2 * 24 * 3600)     /* wechat: media ids live 3 days; keep them 2 */
#define DEADLINE_MARGIN_MS 20           /* leave time to answer after a call times out */
#define CONNECT_RETRY_MS 100            /* pause before the one retry of a refused connection */

static void step(op_t *op);
static void wait_leave(op_t *op);

/* The rare paths' state; a request that never refreshes a credential nor uploads media never
 * allocates it. NULL only when memory ran out, which callers treat as a failed call. */
static const char *media_id(const op_t *op)
{
    return op->x != NULL ? op->x->media_id : "";
}

static deliver_extra_t *extra(op_t *op)
{
    /* a stand-in after a failed allocation: the delivery then fails its call anyway */
    static _Thread_local deliver_extra_t none;

    if (op->x == NULL && (op->x = calloc(1, sizeof(*op->x))) == NULL)
        return &none;
    return op->x;
}

static const json_t *info(const op_t *op)
{
    return json_object_get(op->channel, "info");
}

static const char *current_cred(const op_t *op)
{
    const char *s = op->adapter->cred_field
                        ? json_string_value(json_object_get(info(op), op->adapter->cred_field))
                        : NULL;
    return s ? s : "";
}

static adapter_target_t target(const op_t *op)
{
    adapter_target_t t;

    t.base_url = config_platform_url(op->w->cfg, op->adapter->type);
    t.info = info(op);
    t.to = op->to;
    t.now_ms = op_now_wall_ms();
    return t;
}

static void finish(op_t *op, deliver_result_t *r)
{
    op_delivered_fn *done = op->delivered;

    if (op->lock_held) {
        store_unlock_credential(op->w->store, op->target.channel_id, extra(op)->lock_owner);
        op->lock_held = 0;
    }
    op->dl = DL_IDLE;
    op->delivered_count++;
    done(op, r);
    adapter_result_clear(&r->res);
}

/* Ends the delivery with a failure of class status. On the first response, failures that
 * concern the whole request abort it (contract.md section 5). */
static void fail(op_t *op, adapter_status_t status, long platform_code, const char *msg)
{
    deliver_result_t r;
    int code = adapter_err_code(op->adapter, status);

    memset(&r, 0, sizeof(r));
    adapter_result_init(&r.res);
    r.res.status = status;
    r.res.platform_code = platform_code;
    bg_error_set(&r.err, code, "%s", msg);
    r.abort = op->delivered_count == 0 &&
              (status == ADAPTER_RECIPIENT_INVALID || status == ADAPTER_AUTH_INVALID ||
               status == ADAPTER_AUTH_EXPIRED ||
               (status == ADAPTER_SERVER_ERROR && op->adapter->server_error_aborts));
    finish(op, &r);
}

static void fail_store(op_t *op, store_status_t st)
{
    deliver_result_t r;

    memset(&r, 0, sizeof(r));
    adapter_result_init(&r.res);
    bg_error_set(&r.err, BG_ERR_STORE,
                 st == STORE_BUSY ? "store busy: too many commands in flight"
                                  : "store unavailable");
    r.abort = op->delivered_count == 0;
    finish(op, &r);
}

static void arm_timer(op_t *op, long ms, event_callback_fn cb)
{
    struct timeval tv;

    if (op->x == NULL && (op->x = calloc(1, sizeof(*op->x))) == NULL) {
        cb(-1, EV_TIMEOUT, op); /* out of memory: no wait rather than none at all */
        return;
    }
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    event_assign(&op->x->timer, op->w->base, -1, 0, cb, op);
    event_add(&op->x->timer, &tv);
    op->timer_armed = 1;
}

void deliver_cancel(op_t *op)
{
    if (op->xfer != NULL) {
        upstream_cancel(op->xfer);
        op->xfer = NULL;
    }
    if (op->timer_armed) {
        event_del(&op->x->timer);
        op->timer_armed = 0;
    }
    if (op->x != NULL && op->x->wait != NULL)
        wait_leave(op);
    if (op->lock_held) {
        store_unlock_credential(op->w->store, op->target.channel_id, extra(op)->lock_owner);
        op->lock_held = 0;
    }
    op->dl = DL_IDLE;
}

/* Why a platform call failed: the adapter's words and, when no HTTP answer came at all, the
 * transport's (refused, timed out, a certificate refused...), which tell an operator where
 * to look. */
static const char *why(const adapter_result_t *res, const upstream_answer_t *ans, char *buf,
                       size_t size)
{
    if (res->error[0] == '\0')
        return ans->error;
    if (ans->a.status != 0 || ans->error[0] == '\0')
        return res->error;
    snprintf(buf, size, "%s: %s", res->error, ans->error);
    return buf;
}

/* Every outbound answer passes here on its way to the phase's callback: metrics. */
static void on_answer(void *arg, const upstream_answer_t *ans)
{
    op_t *op = arg;
    upstream_cb *cb = op->xfer_cb;

    metrics_call(&op->w->metrics,
                 op->dl == DL_MEDIA_FETCH ? METRICS_TARGET_MEDIA
                                          : metrics_target(op->adapter->type),
                 ans->a.status, (int64_t)ans->elapsed_us);
    cb(op, ans);
}

/* Starts c on client up and empties it; cb gets the answer. */
static void call_on(op_t *op, adapter_call_t *c, upstream_t *up, deliver_phase_t phase,
                    size_t max_answer, unsigned flags, upstream_cb *cb)
{
    long remaining = (long)op_remaining_ms(op) - DEADLINE_MARGIN_MS;
    long timeout = op->w->cfg->upstream_timeout_ms;

    if (remaining <= 0) {
        adapter_call_free(c);
        fail(op, ADAPTER_SERVER_ERROR, 0, "no time left for the platform call");
        return;
    }
    op->dl = phase;
    op->platform_calls++;
    op->xfer_cb = cb;
    op->xfer = upstream_start(up, c, remaining < timeout ? remaining : timeout, max_answer,
                              flags, on_answer, op);
    if (op->xfer == NULL)
        fail(op, ADAPTER_SERVER_ERROR, 0, "could not start the platform call");
    else if (phase == DL_SEND && op->kind->set_aside != NULL)
        op->kind->set_aside(op); /* taken back by response_back, if a retry needs it */
}

/* A platform call. */
static void call(op_t *op, adapter_call_t *c, deliver_phase_t phase, size_t max_answer,
                 upstream_cb *cb)
{
    call_on(op, c, op->w->up, phase, max_answer, 0, cb);
}

/* Takes a fresh channel record (after a refresh, or someone else's). */
static void adopt_channel(op_t *op, json_t *channel)
{
    json_decref(op->channel);
    op->channel = channel;
}

static int cred_fresh(op_t *op)
{
    const char *cred = current_cred(op);
    char hash[AUTH_HASH_HEX];

    if (*cred == '\0')
        return 0;
    auth_hash_token(cred, strlen(cred), hash);
    return strcmp(hash, extra(op)->stale_hash) != 0 &&
           !op->adapter->cred_needs_refresh(info(op), op_now_wall_ms());
}

/* ---- credential refresh ---- */

static void cred_done(op_t *op)
{
    if (op->lock_held) {
        store_unlock_credential(op->w->store, op->target.channel_id, extra(op)->lock_owner);
        op->lock_held = 0;
    }
    op->cred_ready = 1;
    op->cred_forced = 0;
    step(op);
}

static void on_cred_written(void *arg, store_status_t st, json_t *channel)
{
    op_t *op = arg;

    op->call = NULL;
    if (st == STORE_OK)
        adopt_channel(op, channel);
    else
        log_msg(LOG_WARN, "channel %s: the new credential could not be written back",
                op->target.channel_id);
    cred_done(op);
}

static void on_cred_answer(void *arg, const upstream_answer_t *ans)
{
    op_t *op = arg;
    char buf[BG_ERROR_MSG_MAX];
    adapter_target_t t = target(op);
    adapter_result_t res;
    json_t *fields;
    store_status_t st;

    op->xfer = NULL;
    adapter_result_init(&res);
    fields = op->adapter->parse_cred(&t, &ans->a, &res);
    if (fields == NULL) {
        /* A refused login is the channel's credential being wrong: 104, not "try again". */
        adapter_status_t status = res.status == ADAPTER_OK ? ADAPTER_SERVER_ERROR : res.status;
        if (status == ADAPTER_AUTH_EXPIRED)
            status = ADAPTER_AUTH_INVALID;
        fail(op, status, res.platform_code, why(&res, ans, buf, sizeof(buf)));
        adapter_result_clear(&res);
        return;
    }
    adapter_result_clear(&res);
    atomic_fetch_add_explicit(&op->w->metrics.credential_refreshes, 1, memory_order_relaxed);
    op->cred_refreshed = 1;
    /* Use the new credential at once, whether or not the write-back succeeds. The channel
     * record may be the worker cache's shared copy: change a copy of it. */
    adopt_channel(op, json_deep_copy(op->channel));
    json_object_update(json_object_get(op->channel, "info"), fields);
    op->dl = DL_CRED_WRITE;
    op->call = store_update_channel_info(op->w->store, op->target.channel_id, fields,
                                         on_cred_written, op, &st);
    json_decref(fields);
    if (op->call == NULL)
        cred_done(op);
}

static void cred_call(op_t *op)
{
    adapter_target_t t = target(op);
    adapter_result_t res;
    adapter_call_t c = {0};

    adapter_result_init(&res);
    if (op->adapter->build_cred(&t, &c, &res) < 0) {
        adapter_call_free(&c);
        fail(op, res.status, 0, res.error);
        return;
    }
    call(op, &c, DL_CRED_CALL, ANSWER_MAX, on_cred_answer);
}

static void cred_lock(op_t *op);

static void on_reread(void *arg, store_status_t st, json_t *channel)
{
    op_t *op = arg;

    op->call = NULL;
    if (st != STORE_OK) {
        json_decref(channel);
        fail_store(op, st == STORE_NOT_FOUND ? STORE_UNAVAILABLE : st);
        return;
    }
    adopt_channel(op, channel);
    if (cred_fresh(op)) {
        /* Someone else refreshed it while we waited for the lock. */
        cred_done(op);
        return;
    }
    if (op->lock_held)
        cred_call(op);
    else
        cred_lock(op);
}

static void cred_reread(op_t *op)
{
    store_status_t st;

    op->dl = DL_CRED_REREAD;
    op->call = store_reread_channel(op->w->store, op->target.channel_id, on_reread, op, &st);
    if (op->call == NULL)
        fail_store(op, st);
}

/* ---- waiting for another's refresh ---- */

/* The requests of one worker that wait while another request (of any worker or instance)
 * holds a channel's credential lock. They wait together: one subscription to the lock's
 * release, one re-read of the channel at a time, one slow fallback timer, so that a thousand
 * waiters cost Redis what one does. Owned by the worker's list (w->cred_waits); freed by
 * wait_free when the last waiter has left. */
typedef struct cred_wait {
    worker_t *w;
    struct cred_wait *prev, *next; /* w->cred_waits */
    op_t *first, *last;            /* the waiters, oldest first (op->x->wait_prev/next) */
    redisc_sub_t *watch;           /* the lock's release; NULL: the timer alone */
    struct event timer;            /* the fallback */
    store_call_t *call;            /* the group's re-read in flight */
    unsigned handouts;             /* re-reads handed out so far */
    unsigned again : 1;            /* news came during the re-read: read once more */
    unsigned busy : 1;             /* handing out a re-read: not freed when empty */
    char channel_id[];
} cred_wait_t;

static void wait_free(cred_wait_t *g)
{
    if (g->call != NULL)
        store_cancel(g->call);
    store_unwatch(g->watch);
    event_del(&g->timer);
    if (g->prev != NULL)
        g->prev->next = g->next;
    else
        g->w->cred_waits = g->next;
    if (g->next != NULL)
        g->next->prev = g->prev;
    free(g);
}

/* Takes op out of its group (which it must be in); the group goes with its last waiter
 * unless it is handing out a re-read. */
static void wait_leave(op_t *op)
{
    deliver_extra_t *x = op->x;
    cred_wait_t *g = x->wait;

    if (x->wait_prev != NULL)
        x->wait_prev->x->wait_next = x->wait_next;
    else
        g->first = x->wait_next;
    if (x->wait_next != NULL)
        x->wait_next->x->wait_prev = x->wait_prev;
    else
        g->last = x->wait_prev;
    x->wait = NULL;
    x->wait_prev = x->wait_next = NULL;
    if (g->first == NULL && !g->busy)
        wait_free(g);
}

static void wait_read(cred_wait_t *g);

static void on_wait_news(void *arg, const char *msg, size_t len)
{
    (void)msg;
    (void)len;
    wait_read(arg);
}

static void on_wait_timer(evutil_socket_t fd, short what, void *arg)
{
    cred_wait_t *g = arg;
    struct timeval tv = {WAIT_FALLBACK_MS / 1000, (WAIT_FALLBACK_MS % 1000) * 1000};

    (void)fd;
    (void)what;
    event_add(&g->timer, &tv);
    wait_read(g);
}

/* The group's re-read: hands the channel to every waiter; those that see a new credential go
 * on; if none did, the oldest tries the lock (the refresh may have failed, or its holder
 * died), and rejoins if it is still held. */
static void on_wait_read(void *arg, store_status_t st, json_t *channel)
{
    cred_wait_t *g = arg;
    unsigned round = ++g->handouts;
    op_t *op;

    g->call = NULL;
    g->busy = 1;
    for (;;) {
        /* from the first again after each one that went on: its callbacks may end others */
        for (op = g->first; op != NULL && op->x->wait_seen == round; op = op->x->wait_next)
            ;
        if (op == NULL)
            break;
        op->x->wait_seen = round;
        if (st != STORE_OK) {
            wait_leave(op);
            fail_store(op, st == STORE_NOT_FOUND ? STORE_UNAVAILABLE : st);
            continue;
        }
        adopt_channel(op, json_incref(channel));
        if (cred_fresh(op)) {
            wait_leave(op);
            cred_done(op);
        }
    }
    json_decref(channel);
    g->busy = 0;
    if (g->first == NULL) {
        wait_free(g);
    } else if (g->again) {
        g->again = 0;
        wait_read(g);
    } else {
        op = g->first;
        wait_leave(op);
        cred_lock(op);
    }
}

static void wait_read(cred_wait_t *g)
{
    store_status_t st;

    if (g->call != NULL) {
        g->again = 1;
        return;
    }
    g->call = store_reread_channel(g->w->store, g->channel_id, on_wait_read, g, &st);
    if (g->call == NULL)
        on_wait_read(g, st, NULL); /* every waiter fails as a re-read of its own would */
}

/* op waits with the worker's other waiters for the channel's lock, in a group made for the
 * first of them. */
static void wait_join(op_t *op)
{
    worker_t *w = op->w;
    const char *id = op->target.channel_id;
    struct timeval tv = {WAIT_FALLBACK_MS / 1000, (WAIT_FALLBACK_MS % 1000) * 1000};
    cred_wait_t *g;

    for (g = w->cred_waits; g != NULL && strcmp(g->channel_id, id) != 0; g = g->next)
        ;
    if (g == NULL) {
        if (op->x == NULL || (g = calloc(1, sizeof(*g) + strlen(id) + 1)) == NULL) {
            fail(op, ADAPTER_SERVER_ERROR, 0, "out of memory");
            return;
        }
        g->w = w;
        memcpy(g->channel_id, id, strlen(id) + 1);
        evtimer_assign(&g->timer, w->base, on_wait_timer, g);
        event_add(&g->timer, &tv);
        g->watch = store_watch_credential(w->store, id, on_wait_news, g);
        g->next = w->cred_waits;
        if (g->next != NULL)
            g->next->prev = g;
        w->cred_waits = g;
    }
    op->x->wait = g;
    op->x->wait_next = NULL;
    op->x->wait_prev = g->last;
    if (g->last != NULL)
        g->last->x->wait_next = op;
    else
        g->first = op;
    g->last = op;
    op->x->wait_seen = g->handouts;
    op->dl = DL_CRED_WAIT;
}

static void on_lock(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    json_decref(value);
    op->call = NULL;
    if (st == STORE_OK) {
        op->lock_held = 1;
        cred_reread(op); /* the refresh may have happened just before we got the lock */
        return;
    }
    if (st != STORE_NOT_FOUND) {
        fail_store(op, st);
        return;
    }
    wait_join(op);
}

static void cred_lock(op_t *op)
{
    store_status_t st;

    if (extra(op)->lock_owner[0] == '\0')
        worker_random_hex(op->w, extra(op)->lock_owner, 32);
    op->dl = DL_CRED_LOCK;
    op->call = store_lock_credential(op->w->store, op->target.channel_id, extra(op)->lock_owner,
                                     LOCK_TTL_MS, on_lock, op, &st);
    if (op->call == NULL)
        fail_store(op, st);
}

static void cred_begin(op_t *op)
{
    if (op->cred_refreshed) {
        fail(op, ADAPTER_AUTH_INVALID, 0, "the platform refused the channel credential");
        return;
    }
    auth_hash_token(current_cred(op), strlen(current_cred(op)), extra(op)->stale_hash);
    cred_lock(op);
}

/* ---- whatsapp contacts ---- */

static void on_contact_answer(void *arg, const upstream_answer_t *ans)
{
    op_t *op = arg;
    char buf[BG_ERROR_MSG_MAX];
    adapter_target_t t = target(op);
    adapter_result_t res;

    op->xfer = NULL;
    adapter_result_init(&res);
    op->adapter->parse_check(&t, &ans->a, &res);
    if (res.status == ADAPTER_OK && res.ref[0] != '\0') {
        store_put_contact(op->w->store, op->target.channel_id, op->to, res.ref, CONTACT_TTL_S);
        if (op_set_to(op, res.ref) < 0) {
            fail(op, ADAPTER_SERVER_ERROR, 0, "out of memory");
        } else {
            op->contact_ready = 1;
            step(op);
        }
    } else if (res.status == ADAPTER_AUTH_EXPIRED && !op->cred_refreshed) {
        op->cred_ready = 0;
        op->cred_forced = 1;
        step(op);
    } else {
        fail(op, res.status == ADAPTER_OK ? ADAPTER_SERVER_ERROR : res.status, res.platform_code,
             why(&res, ans, buf, sizeof(buf)));
    }
    adapter_result_clear(&res);
}

static void contact_call(op_t *op)
{
    adapter_target_t t = target(op);
    adapter_result_t res;
    adapter_call_t c = {0};

    adapter_result_init(&res);
    if (op->adapter->build_check(&t, &c, &res) < 0) {
        adapter_call_free(&c);
        fail(op, res.status, 0, res.error);
        return;
    }
    call(op, &c, DL_CONTACT_CALL, ANSWER_MAX, on_contact_answer);
}

static void on_contact_cached(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->call = NULL;
    if (st == STORE_OK && json_string_length(value) > 0) {
        int ok = op_set_to(op, json_string_value(value)) == 0;
        json_decref(value);
        if (!ok) {
            fail(op, ADAPTER_SERVER_ERROR, 0, "out of memory");
            return;
        }
        op->contact_ready = 1;
        step(op);
        return;
    }
    json_decref(value);
    contact_call(op); /* a cache miss or a cache failure: ask the platform */
}

static void contact_cache(op_t *op)
{
    store_status_t st;

    op->dl = DL_CONTACT_CACHE;
    op->call = store_get_contact(op->w->store, op->target.channel_id, op->to, on_contact_cached,
                                 op, &st);
    if (op->call == NULL)
        contact_call(op);
}

/* ---- wechat media ---- */

static void on_upload_answer(void *arg, const upstream_answer_t *ans)
{
    op_t *op = arg;
    char buf[BG_ERROR_MSG_MAX];
    adapter_target_t t = target(op);
    adapter_result_t res;

    op->xfer = NULL;
    adapter_result_init(&res);
    op->adapter->parse_upload(&t, &ans->a, &res);
    if (res.status == ADAPTER_OK && res.ref[0] != '\0') {
        snprintf(extra(op)->media_id, sizeof(extra(op)->media_id), "%s", res.ref);
        store_put_media(op->w->store, op->target.channel_id, extra(op)->url_hash,
                        extra(op)->media_id, MEDIA_TTL_S);
        step(op);
    } else if (res.status == ADAPTER_AUTH_EXPIRED && !op->cred_refreshed) {
        op->cred_ready = 0;
        op->cred_forced = 1;
        step(op);
    } else {
        fail(op, res.status == ADAPTER_OK ? ADAPTER_SERVER_ERROR : res.status, res.platform_code,
             why(&res, ans, buf, sizeof(buf)));
    }
    adapter_result_clear(&res);
}

static void on_media_fetched(void *arg, const upstream_answer_t *ans)
{
    op_t *op = arg;
    adapter_target_t t = target(op);
    adapter_result_t res;
    adapter_call_t c = {0};
    const char *ctype = ans->a.content_type;
    char msg[ADAPTER_ERROR_MAX];

    op->xfer = NULL;
    if (ans->blocked || ans->too_large || ans->a.status < 200 || ans->a.status > 299) {
        if (ans->blocked || ans->too_large)
            snprintf(msg, sizeof(msg), "image download refused: %s", ans->error);
        else if (ans->a.status == 0)
            snprintf(msg, sizeof(msg), "image download failed: %s", ans->error);
        else
            snprintf(msg, sizeof(msg), "image download failed: HTTP %ld", ans->a.status);
        fail(op, ADAPTER_REJECTED, 0, msg);
        return;
    }
    if (ctype == NULL || strncmp(ctype, "image/", 6) != 0) {
        fail(op, ADAPTER_REJECTED, 0, "image download is not an image (Content-Type)");
        return;
    }
    adapter_result_init(&res);
    if (op->adapter->build_upload(&t, ans->a.body, ans->a.body_len, ctype, &c, &res) < 0) {
        adapter_call_free(&c);
        fail(op, res.status, 0, res.error);
        return;
    }
    call(op, &c, DL_MEDIA_UPLOAD, ANSWER_MAX, on_upload_answer);
}

static void media_fetch(op_t *op)
{
    const char *url = json_string_value(json_object_get(op->response, "url"));
    adapter_call_t c = {0};

    c.method = "GET";
    c.url = strdup(url ? url : "");
    if (c.url == NULL) {
        fail(op, ADAPTER_SERVER_ERROR, 0, "out of memory");
        return;
    }
    call_on(op, &c, op->w->up_user, DL_MEDIA_FETCH, MEDIA_MAX, UPSTREAM_FOLLOW,
            on_media_fetched);
}

static void on_media_cached(void *arg, store_status_t st, json_t *value)
{
    op_t *op = arg;

    op->call = NULL;
    if (st == STORE_OK && json_string_length(value) > 0) {
        snprintf(extra(op)->media_id, sizeof(extra(op)->media_id), "%s", json_string_value(value));
        json_decref(value);
        step(op);
        return;
    }
    json_decref(value);
    media_fetch(op);
}

static void media_cache(op_t *op)
{
    const char *url = json_string_value(json_object_get(op->response, "url"));
    store_status_t st;

    auth_hash_token(url ? url : "", url ? strlen(url) : 0, extra(op)->url_hash);
    op->dl = DL_MEDIA_CACHE;
    op->call = store_get_media(op->w->store, op->target.channel_id, extra(op)->url_hash,
                               on_media_cached, op, &st);
    if (op->call == NULL)
        media_fetch(op);
}

/* ---- the message ---- */

static void send_now(op_t *op);

/* The response again, when it was set aside while its call was out and a retry needs it:
 * retries come back through step() or on_retry_wait(). */
static int response_back(op_t *op)
{
    if (op->response == NULL && op->kind->take_back != NULL)
        op->kind->take_back(op);
    if (op->response != NULL)
        return 0;
    fail(op, ADAPTER_SERVER_ERROR, 0, "out of memory");
    return -1;
}

static void on_retry_wait(evutil_socket_t fd, short what, void *arg)
{
    op_t *op = arg;

    (void)fd;
    (void)what;
    op->timer_armed = 0;
    if (response_back(op) < 0)
        return;
    send_now(op);
}

static void on_send_answer(void *arg, const upstream_answer_t *ans)
{
    op_t *op = arg;
    char buf[BG_ERROR_MSG_MAX];
    adapter_target_t t = target(op);
    deliver_result_t r;

    op->xfer = NULL;
    /* The one failure that surely delivered nothing: the connection could not be made. Try
     * once more after a short pause; anything else (a timeout, a reset, a 5xx) may have been
     * delivered, and a retry could send the message twice. */
    if (ans->not_sent && !op->connect_retried &&
        op_remaining_ms(op) > CONNECT_RETRY_MS + 2 * DEADLINE_MARGIN_MS) {
        op->connect_retried = 1;
        op->dl = DL_RETRY_WAIT;
        arm_timer(op, CONNECT_RETRY_MS, on_retry_wait);
        return;
    }
    memset(&r, 0, sizeof(r));
    adapter_result_init(&r.res);
    op->adapter->parse_send(&t, &ans->a, &r.res);
    switch (r.res.status) {
    case ADAPTER_OK:
        r.ok = 1;
        finish(op, &r);
        return;
    case ADAPTER_AUTH_EXPIRED:
        /* Refresh and retry. The first retry may adopt a credential another worker or instance
         * just got, which the platform may have revoked as well: then one more, with a
         * credential of our own (after which cred_refreshed stops the loop). */
        if (!op->cred_refreshed && op->auth_retried < 2) {
            op->auth_retried++;
            op->cred_ready = 0;
            op->cred_forced = 1;
            adapter_result_clear(&r.res);
            step(op);
            return;
        }
        break;
    case ADAPTER_RATE_LIMITED:
        /* Retried once, only when the platform says when and that fits the deadline: a 429
         * means the message was not accepted, so the retry cannot duplicate it. */
        if (!op->rate_retried && r.res.retry_after_s >= 0 &&
            (int64_t)r.res.retry_after_s * 1000 + 2 * DEADLINE_MARGIN_MS < op_remaining_ms(op)) {
            op->rate_retried = 1;
            op->dl = DL_RETRY_WAIT;
            arm_timer(op, (long)r.res.retry_after_s * 1000, on_retry_wait);
            adapter_result_clear(&r.res);
            return;
        }
        break;
    default:
        break;
    }
    fail(op, r.res.status, r.res.platform_code, why(&r.res, ans, buf, sizeof(buf)));
    adapter_result_clear(&r.res);
}

static void send_now(op_t *op)
{
    adapter_target_t t = target(op);
    adapter_result_t res;
    adapter_call_t c = {0};

    adapter_result_init(&res);
    if (op->adapter->build_send(&t, op->response, media_id(op)[0] ? media_id(op) : NULL, &c,
                                &res) < 0) {
        adapter_call_free(&c);
        fail(op, res.status, 0, res.error);
        return;
    }
    call(op, &c, DL_SEND, ANSWER_MAX, on_send_answer);
}

static int is_image(const json_t *response)
{
    const char *type = json_string_value(json_object_get(response, "type"));

    return type != NULL && strcmp(type, "IMAGE") == 0;
}

/* Decides what the delivery needs next. */
static void step(op_t *op)
{
    const adapter_ops_t *a = op->adapter;

    if (response_back(op) < 0)
        return;
    if (!op->cred_ready && a->cred_needs_refresh != NULL) {
        if (op->cred_forced || a->cred_needs_refresh(info(op), op_now_wall_ms())) {
            cred_begin(op);
            return;
        }
        op->cred_ready = 1;
    }
    if (!op->contact_ready && a->build_check != NULL) {
        contact_cache(op);
        return;
    }
    if (a->image_by_upload && is_image(op->response) && media_id(op)[0] == '\0') {
        media_cache(op);
        return;
    }
    send_now(op);
}

void deliver_start(op_t *op, const json_t *response, op_delivered_fn *done)
{
    op->response = response;
    op->delivered = done;
    op->auth_retried = op->rate_retried = op->connect_retried = 0;
    if (op->x != NULL)
        op->x->media_id[0] = '\0';
    step(op);
}

result_event_t deliver_event_of(const op_t *op, const json_t *response, const char *message_id,
                                char buf[32])
{
    const json_t *from = json_object_get(info(op), op->adapter->from_field);
    result_event_t ev;

    ev.from = json_string_value(from);
    if (ev.from == NULL && json_is_integer(from)) {
        snprintf(buf, 32, "%lld", (long long)json_integer_value(from));
        ev.from = buf;
    }
    ev.to = op->to;
    ev.response = response;
    ev.type = ev.data = NULL;
    ev.timestamp_ms = op_now_wall_ms();
    ev.message_id = message_id;
    return ev;
}

json_t *deliver_event(const op_t *op, const json_t *response, const char *message_id)
{
    char buf[32];
    result_event_t ev = deliver_event_of(op, response, message_id, buf);

    return result_message_event(ev.from, ev.to, response, ev.timestamp_ms, message_id);
}

const char *deliver_chat_id(const op_t *op, const adapter_result_t *res)
{
    return res->chat_id[0] ? res->chat_id : op->to;
}
