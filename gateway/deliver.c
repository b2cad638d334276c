/* deliver.c - delivering one response to the platform: make sure the channel's credential is
 * fresh (one refresh per channel at a time across every worker and instance, through a Redis
 * lock), check a whatsapp number once a week, turn a wechat image into a media_id, send, and
 * retry once where that is safe (expired credential, rate limit with Retry-After). Callbacks
 * only record what happened and call deliver_step(), which decides what comes next. */
#include "deliver.h"

#include "../core/auth.h"
#include "../core/clock.h"
#include "../core/hash.h"
#include "../json/jparse.h"
#include "../core/rng.h"
#include "credwait.h"
#include "deliver_rate.h"
#include "log.h"

#include <event2/event.h>
#include <event2/event_struct.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANSWER_MAX    (1024 * 1024)      /* a platform answer larger than this is an error */
#define MEDIA_MAX     (10 * 1024 * 1024) /* an image or a video to upload */
#define VOICE_MAX     (2 * 1024 * 1024)  /* wechat: a voice message */
#define LOCK_TTL_MS   15000              /* a crashed refresher's lock expires after this */
#define CONTACT_TTL_S (7 * 24 * 3600)    /* whatsapp: a valid number is checked once a week */
#define MEDIA_TTL_S   (2 * 24 * 3600)    /* wechat: media ids live 3 days; keep them 2 */

#define CONNECT_RETRY_MS      100  /* pause before the one retry of a refused connection */
#define RATE_PAUSE_UNKNOWN_MS 1000 /* retryAfterMs when the pause could not be set */
/* A pause heard of with less left than this is over by the time the call arrives: it is the
 * end of one the slot was already given after, heard a publish's latency late. */
#define PAUSE_HEARD_MIN_MS 20
#define PAUSE_HEARD_MAX    3 /* times a delivery takes its slot again for pauses heard of */

/* What only credential refreshes and media uploads need: kept out of deliver_t, which every
 * request in flight carries. Allocated when first needed, freed when the delivery ends. */
typedef struct deliver_extra {
    struct event timer; /* a wait inside a delivery (Retry-After) */
    /* the hash of the credential that failed, to see a new one: a credential may be long */
    char stale_hash[AUTH_HASH_HEX];
    credwait_waiter_t wait; /* in a group while another holds the credential lock */
    deliver_t *owner;       /* the delivery this is the state of */
    char lock_owner[40];
    char media_id[ADAPTER_ID_MAX];
    char url_hash[AUTH_HASH_HEX];
    unsigned media_kind;             /* ADAPTER_IMAGE, _VIDEO or _AUDIO: what is uploaded */
    char rate_msg[BG_ERROR_MSG_MAX]; /* the platform's rate-limit answer, while it pauses */
} deliver_extra_t;

static void deliver_step(deliver_t *d);
static const char *deliver_chat_id(const deliver_t *d, const adapter_result_t *res);

int64_t deliver_remaining_ms(const deliver_t *d)
{
    return d->deadline_ms - clock_mono_us() / 1000;
}

/* Sets d->to to a copy of to (at most ADAPTER_ID_MAX - 1 bytes); -1 when out of memory. */
int deliver_set_address(deliver_t *d, const char *to, const char *member_id)
{
    size_t n = strnlen(to, ADAPTER_ID_MAX - 1), m = strlen(member_id);
    char *copy = malloc(n + 1 + m + 1);

    if (copy == NULL)
        return -1;
    memcpy(copy, to, n);
    copy[n] = '\0';
    memcpy(copy + n + 1, member_id, m + 1);
    free(d->to);
    d->to = copy;
    return 0;
}

/* The rare paths' state; a delivery that never refreshes a credential nor uploads media never
 * allocates it. */
static const char *media_id(const deliver_t *d)
{
    return d->_x != NULL ? d->_x->media_id : "";
}

static deliver_extra_t *extra(deliver_t *d)
{
    /* a stand-in after a failed allocation: the delivery then fails its call anyway */
    static _Thread_local deliver_extra_t none;

    if (d->_x == NULL && (d->_x = calloc(1, sizeof(*d->_x))) == NULL)
        return &none;
    d->_x->owner = d;
    return d->_x;
}

static const json_t *info(const deliver_t *d)
{
    const deliver_channel_kept_t *k = deliver_kept(d->env, d->channel);

    if (k->record == d->channel && d->channel != NULL)
        return k->info;
    return json_object_get(d->channel, "info");
}

static const char *current_cred(const deliver_t *d)
{
    const char *s = d->adapter->cred_field
                        ? json_string_value(json_object_get(info(d), d->adapter->cred_field))
                        : NULL;
    return s ? s : "";
}

/* The configured base URL of a platform type, NULL when the type has none (whatsapp). */
static const char *platform_url(const config_t *cfg, const char *type)
{
    if (strcmp(type, "facebook") == 0)
        return cfg->facebook_url;
    if (strcmp(type, "whatsapp-cloud") == 0)
        return cfg->whatsapp_cloud_url;
    if (strcmp(type, "slack") == 0)
        return cfg->slack_url;
    if (strcmp(type, "wechat") == 0)
        return cfg->wechat_url;
    if (strcmp(type, "teamwork") == 0)
        return cfg->teamwork_url;
    return NULL;
}

static adapter_target_t target(const deliver_t *d)
{
    adapter_target_t t;

    t.base_url = platform_url(d->env->cfg, d->adapter->type);
    t.info = info(d);
    t.to = d->to;
    t.now_ms = clock_wall_ms();
    return t;
}

/* The response parsed, for building a call from it: NULL when out of memory. The parsed copy
 * is the builder's and goes once the call is built (thousands of calls wait at once): the one
 * the caller gave, the first time; else the text (the caller's) parsed again. */
static json_t *response_parse(deliver_t *d)
{
    json_t *r = d->_response;

    if (r != NULL) {
        d->_response = NULL;
        return r;
    }
    return jparse_value(d->_text, d->_text_len);
}

static void lock_release(deliver_t *d)
{
    if (d->_lock_held) {
        store_unlock_credential(d->env->store, d->channel_id, extra(d)->lock_owner);
        d->_lock_held = 0;
    }
}

static void deliver_finish(deliver_t *d, deliver_result_t *r)
{
    char from[32], generated[40];
    const char *message_id = NULL;

    if (r->ok) {
        message_id = r->res.message_id;
        if (*message_id == '\0') { /* wechat gives none */
            rng_hex(&d->env->rng, generated, 32);
            message_id = generated;
        }
    }
    r->event = deliver_event(d, message_id, from);
    r->chat_id = deliver_chat_id(d, &r->res);
    d->failed += !r->ok;
    /* before its call, or answered "not taken" (5xx): nothing of it reached the platform */
    d->last_unsent =
        !r->ok && (d->phase != DL_SEND || d->last_unsent || r->err.code == BG_ERR_RATE_LIMITED);
    if (!r->ok && r->err.code != BG_ERR_RATE_LIMITED)
        d->failed_other = 1;
    metrics_message(d->env->metrics, d->adapter->type, r->ok ? 0 : r->err.code);
    deliver_cancel(d); /* the lock, a wait, the rare paths' state: an idle delivery holds none */
    d->_delivered++;
    d->_text = NULL;
    d->_done(d, r, d->_arg);
    adapter_result_clear(&r->res);
}

/* Ends the delivery with a failure of class status. On the first response, failures that
 * concern the whole request abort it (contract.md section 5). */
static void deliver_fail(deliver_t *d, adapter_status_t status, long platform_code, const char *msg)
{
    deliver_result_t r;
    int code = adapter_err_code(d->adapter, status);

    memset(&r, 0, sizeof(r));
    adapter_result_init(&r.res);
    r.res.status = status;
    r.res.platform_code = platform_code;
    bg_error_set(&r.err, code, "%s", msg);
    r.abort =
        d->_delivered == 0 && (status == ADAPTER_RECIPIENT_INVALID ||
                               status == ADAPTER_AUTH_INVALID || status == ADAPTER_AUTH_EXPIRED ||
                               (status == ADAPTER_SERVER_ERROR && d->adapter->server_error_aborts));
    deliver_finish(d, &r);
}

static void deliver_fail_store(deliver_t *d, store_status_t st)
{
    deliver_result_t r;

    memset(&r, 0, sizeof(r));
    adapter_result_init(&r.res);
    bg_error_set(&r.err, BG_ERR_STORE,
                 st == STORE_BUSY ? "store busy: too many commands in flight"
                                  : "store unavailable");
    r.abort = d->_delivered == 0;
    deliver_finish(d, &r);
}

static void arm_timer(deliver_t *d, int64_t us, event_callback_fn cb)
{
    struct timeval tv = clock_us_timeval(us);

    if (extra(d) != d->_x) {
        cb(-1, EV_TIMEOUT, d); /* out of memory: no wait rather than none at all */
        return;
    }
    event_assign(&d->_x->timer, d->env->base, -1, 0, cb, d);
    event_add(&d->_x->timer, &tv);
    d->_timer_armed = 1;
}

void deliver_cancel(deliver_t *d)
{
    if (d->bulk && d->phase == DL_RATE_TAKE)
        deliver_lane_leave(d); /* (when it waits in its lane) */
    if (d->_xfer != NULL) {
        net_cancel(d->_xfer);
        d->_xfer = NULL;
    }
    /* idle: a slot taken ahead and not used goes back */
    if (d->phase == DL_RATE_TAKE || d->phase == DL_RATE_PAUSE || d->phase == DL_IDLE)
        store_rate_cancel(d->_rate);
    else
        store_cancel(d->_call);
    d->_call = NULL;
    json_decref(d->_response);
    d->_response = NULL;
    if (d->_timer_armed) {
        event_del(&d->_x->timer);
        d->_timer_armed = 0;
    }
    if (d->_x != NULL && credwait_waiting(&d->_x->wait))
        credwait_leave(&d->_x->wait);
    lock_release(d);
    free(d->_x);
    d->_x = NULL;
    d->phase = DL_IDLE;
}

int deliver_on_wire(const deliver_t *d)
{
    return d->phase == DL_SEND && d->_xfer != NULL;
}

void deliver_no_retry(deliver_t *d)
{
    d->_connect_retried = d->_rate_retried = 1;
    d->_auth_retried = 2;
}

/* A platform's answer as delivery reads it: the adapters' view of it (a) and what net/ told of
 * the call. Valid during the answer's callback. */
typedef struct call_answer {
    adapter_answer_t a; /* status 0 when no HTTP answer arrived */
    const char *error;  /* what went wrong, "" when nothing */
    long long elapsed_us;
    int not_sent;  /* 1 when the request surely never reached the platform */
    int blocked;   /* 1 when the SSRF guard refused the address */
    int too_large; /* 1 when the answer was longer than allowed */
    net_err_t err;
} call_answer_t;

net_xfer_t *deliver_net_start(net_t *net, adapter_call_t *call, long timeout_ms, size_t max_answer,
                              unsigned flags, net_cb *cb, void *arg)
{
    net_request_t req = {call->method, call->url,      (const char *const *)call->headers,
                         call->body,   call->body_len, timeout_ms,
                         max_answer,   flags};
    net_xfer_t *x;

    call->body = NULL; /* net's now */
    x = net_start(net, &req, cb, arg);
    adapter_call_free(call);
    return x;
}

/* Why a platform call failed: the adapter's words and, when no HTTP answer came at all, the
 * transport's (refused, timed out, a certificate refused...), which tell an operator where
 * to look. */
static const char *failure_reason(const adapter_result_t *res, const call_answer_t *ans, char *buf,
                                  size_t size)
{
    if (res->error[0] == '\0')
        return ans->error;
    if (ans->a.status != 0 || ans->error[0] == '\0')
        return res->error;
    snprintf(buf, size, "%s: %s", res->error, ans->error);
    return buf;
}

static void on_cred_answer(deliver_t *d, const call_answer_t *ans);
static void on_contact_answer(deliver_t *d, const call_answer_t *ans);
static void on_media_fetched(deliver_t *d, const call_answer_t *ans);
static void on_upload_answer(deliver_t *d, const call_answer_t *ans);
static void on_send_answer(deliver_t *d, const call_answer_t *ans);

/* Every outbound answer passes here: metrics, then the phase that made the call takes it. */
static void on_platform_answer(void *arg, const net_answer_t *net)
{
    deliver_t *d = arg;
    call_answer_t answer = {
        {net->status, net->body, net->body_len, net->retry_after, net->content_type},
        net->error,
        net->elapsed_us,
        net->not_sent,
        net->err == NET_ERR_BLOCKED,
        net->err == NET_ERR_TOO_LARGE,
        net->err};
    const call_answer_t *ans = &answer;

    d->_xfer = NULL;
    metrics_call(d->env->metrics, d->phase == DL_MEDIA_FETCH ? "media" : d->adapter->type,
                 ans->a.status, (int64_t)ans->elapsed_us);
    switch (d->phase) {
    case DL_CRED_CALL:
        on_cred_answer(d, ans);
        return;
    case DL_CONTACT_CALL:
        on_contact_answer(d, ans);
        return;
    case DL_MEDIA_FETCH:
        on_media_fetched(d, ans);
        return;
    case DL_MEDIA_UPLOAD:
        on_upload_answer(d, ans);
        return;
    default: /* DL_SEND: no other phase has a call out */
        on_send_answer(d, ans);
        return;
    }
}

/* Starts c on client up and empties it; the answer goes to the phase's handler. */
static void call_on(deliver_t *d, adapter_call_t *c, net_t *up, deliver_phase_t phase,
                    size_t max_answer, unsigned flags)
{
    long remaining = (long)deliver_remaining_ms(d) - DEADLINE_MARGIN_MS;
    long timeout = d->env->cfg->upstream_timeout_ms;

    if (remaining <= 0) {
        adapter_call_free(c);
        deliver_fail(d, ADAPTER_SERVER_ERROR, 0, "no time left for the platform call");
        return;
    }
    d->phase = phase;
    d->platform_calls++;
    d->_xfer = deliver_net_start(up, c, remaining < timeout ? remaining : timeout, max_answer,
                                 flags, on_platform_answer, d);
    if (d->_xfer == NULL)
        deliver_fail(d, ADAPTER_SERVER_ERROR, 0, "could not start the platform call");
}

/* A platform call. */
static void platform_call(deliver_t *d, adapter_call_t *c, deliver_phase_t phase)
{
    call_on(d, c, d->env->up, phase, ANSWER_MAX, 0);
}

/* Builds a call with build (0 or -1 with res filled) from response (may be NULL: the call
 * needs none) and starts it, or fails. */
typedef int build_fn(deliver_t *d, const adapter_target_t *t, const json_t *response,
                     adapter_call_t *c, adapter_result_t *res);

static void build_and_call(deliver_t *d, build_fn *build, const json_t *response,
                           deliver_phase_t phase)
{
    adapter_target_t t = target(d);
    adapter_result_t res;
    adapter_call_t c = {0};

    adapter_result_init(&res);
    if (build(d, &t, response, &c, &res) < 0) {
        adapter_call_free(&c);
        deliver_fail(d, res.status, 0, res.error);
        return;
    }
    platform_call(d, &c, phase);
}

/* Takes a fresh channel record (after a refresh, or someone else's). */
static void adopt_channel(deliver_t *d, json_t *channel)
{
    json_decref(d->channel);
    d->channel = channel;
}

static int cred_fresh(deliver_t *d)
{
    const char *cred = current_cred(d);
    char hash[AUTH_HASH_HEX];

    if (*cred == '\0')
        return 0;
    auth_hash_token(cred, strlen(cred), hash);
    return strcmp(hash, extra(d)->stale_hash) != 0 &&
           !d->adapter->cred_needs_refresh(info(d), clock_wall_ms());
}

/* The platform said the credential expired: refresh it (once per request) and go on. */
static void cred_force(deliver_t *d)
{
    d->_cred_ready = 0;
    d->_cred_forced = 1;
    deliver_step(d);
}

/* ---- credential refresh ---- */

static void cred_done(deliver_t *d)
{
    lock_release(d);
    d->_cred_ready = 1;
    d->_cred_forced = 0;
    deliver_step(d);
}

static void on_cred_written(void *arg, store_status_t st, json_t *channel)
{
    deliver_t *d = arg;

    d->_call = NULL;
    if (st == STORE_OK)
        adopt_channel(d, channel);
    else
        log_msg(LOG_WARN, "channel %s: the new credential could not be written back",
                d->channel_id);
    cred_done(d);
}

static void on_cred_answer(deliver_t *d, const call_answer_t *ans)
{
    char buf[BG_ERROR_MSG_MAX];
    adapter_target_t t = target(d);
    adapter_result_t res;
    json_t *fields;
    store_status_t st;

    adapter_result_init(&res);
    fields = d->adapter->parse_cred(&t, &ans->a, &res);
    if (fields == NULL) {
        /* A refused login is the channel's credential being wrong: 104, not "try again". */
        adapter_status_t status = res.status == ADAPTER_OK ? ADAPTER_SERVER_ERROR : res.status;
        if (status == ADAPTER_AUTH_EXPIRED)
            status = ADAPTER_AUTH_INVALID;
        deliver_fail(d, status, res.platform_code, failure_reason(&res, ans, buf, sizeof(buf)));
        adapter_result_clear(&res);
        return;
    }
    adapter_result_clear(&res);
    atomic_fetch_add_explicit(&d->env->metrics->credential_refreshes, 1, memory_order_relaxed);
    d->_cred_refreshed = 1;
    /* Use the new credential at once, whether or not the write-back succeeds. The channel
     * record may be the worker cache's shared copy: change a copy of it. */
    adopt_channel(d, json_deep_copy(d->channel));
    json_object_update(json_object_get(d->channel, "info"), fields);
    d->phase = DL_CRED_WRITE;
    d->_call =
        store_update_channel_info(d->env->store, d->channel_id, fields, on_cred_written, d, &st);
    json_decref(fields);
    if (d->_call == NULL)
        cred_done(d);
}

static int build_cred(deliver_t *d, const adapter_target_t *t, const json_t *response,
                      adapter_call_t *c, adapter_result_t *res)
{
    (void)response;
    return d->adapter->build_cred(t, c, res);
}

static void cred_lock(deliver_t *d);

static void on_reread(void *arg, store_status_t st, json_t *channel)
{
    deliver_t *d = arg;

    d->_call = NULL;
    if (st != STORE_OK) {
        json_decref(channel);
        deliver_fail_store(d, st == STORE_NOT_FOUND ? STORE_UNAVAILABLE : st);
        return;
    }
    adopt_channel(d, channel);
    if (cred_fresh(d)) {
        /* Someone else refreshed it while we waited for the lock. */
        cred_done(d);
        return;
    }
    if (d->_lock_held)
        build_and_call(d, build_cred, NULL, DL_CRED_CALL);
    else
        cred_lock(d);
}

static void cred_reread(deliver_t *d)
{
    store_status_t st;

    d->phase = DL_CRED_REREAD;
    d->_call = store_reread_channel(d->env->store, d->channel_id, on_reread, d, &st);
    if (d->_call == NULL)
        deliver_fail_store(d, st);
}

/* ---- waiting for another's refresh (credwait.c) ---- */

static deliver_t *waiter_owner(credwait_waiter_t *w)
{
    return ((deliver_extra_t *)((char *)w - offsetof(deliver_extra_t, wait)))->owner;
}

/* A re-read of the waiters' group: those that see a new credential go on. */
static void on_wait_read(credwait_waiter_t *w, store_status_t st, json_t *channel)
{
    deliver_t *d = waiter_owner(w);

    if (st != STORE_OK) {
        credwait_leave(w);
        deliver_fail_store(d, st == STORE_NOT_FOUND ? STORE_UNAVAILABLE : st);
        return;
    }
    adopt_channel(d, json_incref(channel));
    if (cred_fresh(d)) {
        credwait_leave(w);
        cred_done(d);
    }
}

static void on_wait_try(credwait_waiter_t *w)
{
    cred_lock(waiter_owner(w));
}

static const credwait_ops_t wait_ops = {on_wait_read, on_wait_try};

/* d waits with the worker's other waiters for the channel's lock. */
static void wait_join(deliver_t *d)
{
    if (d->_x == NULL || credwait_join(&d->env->cred_waits, d->env->base, d->env->store,
                                       d->channel_id, &wait_ops, &d->_x->wait) < 0) {
        deliver_fail(d, ADAPTER_SERVER_ERROR, 0, "out of memory");
        return;
    }
    d->phase = DL_CRED_WAIT;
}

static void on_lock(void *arg, store_status_t st, json_t *value)
{
    deliver_t *d = arg;
    int waiting = d->_x != NULL && credwait_waiting(&d->_x->wait);

    json_decref(value);
    d->_call = NULL;
    if (waiting && st == STORE_NOT_FOUND) { /* the group's trier: still held, wait on */
        credwait_tried(&d->_x->wait);
        d->phase = DL_CRED_WAIT;
        return;
    }
    if (waiting)
        credwait_leave(&d->_x->wait);
    if (st == STORE_OK) {
        d->_lock_held = 1;
        cred_reread(d); /* the refresh may have happened just before we got the lock */
        return;
    }
    if (st != STORE_NOT_FOUND) {
        deliver_fail_store(d, st);
        return;
    }
    wait_join(d);
}

static void cred_lock(deliver_t *d)
{
    store_status_t st;

    if (extra(d)->lock_owner[0] == '\0')
        rng_hex(&d->env->rng, extra(d)->lock_owner, 32);
    d->phase = DL_CRED_LOCK;
    d->_call = store_lock_credential(d->env->store, d->channel_id, extra(d)->lock_owner,
                                     LOCK_TTL_MS, on_lock, d, &st);
    if (d->_call == NULL)
        deliver_fail_store(d, st);
}

static void cred_begin(deliver_t *d)
{
    if (d->_cred_refreshed) {
        deliver_fail(d, ADAPTER_AUTH_INVALID, 0, "the platform refused the channel credential");
        return;
    }
    auth_hash_token(current_cred(d), strlen(current_cred(d)), extra(d)->stale_hash);
    cred_lock(d);
}

/* ---- answers that give a reference (a whatsapp contact, a wechat media id) ---- */

typedef void parse_ref_fn(const adapter_target_t *t, const adapter_answer_t *a,
                          adapter_result_t *res);

/* The answer of a call that gives a reference: 1 with res->ref set when it did; otherwise the
 * delivery went on (an expired credential: refreshed once) or failed, 0. res is cleared by the
 * caller either way. */
static int ref_answer(deliver_t *d, const call_answer_t *ans, parse_ref_fn *parse,
                      adapter_result_t *res)
{
    char buf[BG_ERROR_MSG_MAX];
    adapter_target_t t = target(d);

    adapter_result_init(res);
    parse(&t, &ans->a, res);
    if (res->status == ADAPTER_OK && res->ref[0] != '\0')
        return 1;
    if (res->status == ADAPTER_AUTH_EXPIRED && !d->_cred_refreshed)
        cred_force(d);
    else
        deliver_fail(d, res->status == ADAPTER_OK ? ADAPTER_SERVER_ERROR : res->status,
                     res->platform_code, failure_reason(res, ans, buf, sizeof(buf)));
    return 0;
}

/* ---- whatsapp contacts ---- */

/* The number the platform knows for d->to: the message goes there. */
static void contact_found(deliver_t *d, const char *wa_id)
{
    if (deliver_set_address(d, wa_id, deliver_member_id(d)) < 0) {
        deliver_fail(d, ADAPTER_SERVER_ERROR, 0, "out of memory");
        return;
    }
    d->_contact_ready = 1;
    deliver_step(d);
}

static void on_contact_answer(deliver_t *d, const call_answer_t *ans)
{
    adapter_result_t res;

    if (ref_answer(d, ans, d->adapter->parse_check, &res)) {
        store_put_contact(d->env->store, d->channel_id, deliver_member_id(d), d->to, res.ref,
                          CONTACT_TTL_S);
        contact_found(d, res.ref);
    }
    adapter_result_clear(&res);
}

static int build_check(deliver_t *d, const adapter_target_t *t, const json_t *response,
                       adapter_call_t *c, adapter_result_t *res)
{
    (void)response;
    return d->adapter->build_check(t, c, res);
}

static void on_contact_cached(void *arg, store_status_t st, json_t *value)
{
    deliver_t *d = arg;
    const char *wa_id;

    d->_call = NULL;
    /* cached for the member's number (else it changed since: checked again) */
    wa_id = st == STORE_OK ? store_contact_wa_id(json_string_value(value), d->to) : NULL;
    if (wa_id != NULL)
        contact_found(d, wa_id);
    else /* a cache miss or a cache failure: ask the platform */
        build_and_call(d, build_check, NULL, DL_CONTACT_CALL);
    json_decref(value);
}

static void contact_cache(deliver_t *d)
{
    store_status_t st;

    d->phase = DL_CONTACT_CACHE;
    d->_call = store_get_contact(d->env->store, d->channel_id, deliver_member_id(d),
                                 on_contact_cached, d, &st);
    if (d->_call == NULL)
        build_and_call(d, build_check, NULL, DL_CONTACT_CALL);
}

/* ---- wechat media ---- */

static void media_found(deliver_t *d, const char *id)
{
    snprintf(extra(d)->media_id, sizeof(extra(d)->media_id), "%s", id);
    deliver_step(d);
}

static void on_upload_answer(deliver_t *d, const call_answer_t *ans)
{
    adapter_result_t res;

    if (ref_answer(d, ans, d->adapter->parse_upload, &res)) {
        store_put_media(d->env->store, d->channel_id, extra(d)->url_hash, res.ref, MEDIA_TTL_S);
        media_found(d, res.ref);
    }
    adapter_result_clear(&res);
}

/* What a media kind is called in messages, and the Content-Type its download must have. */
static const char *media_word(unsigned kind)
{
    return kind == ADAPTER_VIDEO ? "video" : kind == ADAPTER_AUDIO ? "audio" : "image";
}

static void on_media_fetched(deliver_t *d, const call_answer_t *ans)
{
    adapter_target_t t = target(d);
    adapter_result_t res;
    adapter_call_t c = {0};
    const char *ctype = ans->a.content_type, *word = media_word(extra(d)->media_kind);
    char msg[ADAPTER_ERROR_MAX];
    size_t wlen = strlen(word);

    if (ans->blocked || ans->too_large || ans->a.status < 200 || ans->a.status > 299) {
        if (ans->blocked || ans->too_large)
            snprintf(msg, sizeof(msg), "%s download refused: %s", word, ans->error);
        else if (ans->a.status == 0)
            snprintf(msg, sizeof(msg), "%s download failed: %s", word, ans->error);
        else
            snprintf(msg, sizeof(msg), "%s download failed: HTTP %ld", word, ans->a.status);
        deliver_fail(d, ADAPTER_REJECTED, 0, msg);
        return;
    }
    if (ctype == NULL || strncmp(ctype, word, wlen) != 0 || ctype[wlen] != '/') {
        snprintf(msg, sizeof(msg), "%s download is not %s %s (Content-Type)", word,
                 word[0] == 'i' || word[0] == 'a' ? "an" : "a", word);
        deliver_fail(d, ADAPTER_REJECTED, 0, msg);
        return;
    }
    adapter_result_init(&res);
    if (d->adapter->build_upload(&t, ans->a.body, ans->a.body_len, ctype, &c, &res) < 0) {
        adapter_call_free(&c);
        deliver_fail(d, res.status, 0, res.error);
        return;
    }
    platform_call(d, &c, DL_MEDIA_UPLOAD);
}

/* A copy of the image's URL (the caller frees it), "" when the response has none; NULL when
 * out of memory. */
static char *image_url(deliver_t *d)
{
    json_t *r = response_parse(d);
    const char *url = json_string_value(json_object_get(r, "url"));
    char *copy = r != NULL ? strdup(url ? url : "") : NULL;

    json_decref(r);
    return copy;
}

static void media_fetch(deliver_t *d)
{
    adapter_call_t c = {0};

    c.method = "GET";
    c.url = image_url(d);
    if (c.url == NULL) {
        deliver_fail(d, ADAPTER_SERVER_ERROR, 0, "out of memory");
        return;
    }
    call_on(d, &c, d->env->up_user, DL_MEDIA_FETCH,
            extra(d)->media_kind == ADAPTER_AUDIO ? VOICE_MAX : MEDIA_MAX, NET_FOLLOW);
}

static void on_media_cached(void *arg, store_status_t st, json_t *value)
{
    deliver_t *d = arg;

    d->_call = NULL;
    if (st == STORE_OK && json_string_length(value) > 0)
        media_found(d, json_string_value(value));
    else
        media_fetch(d);
    json_decref(value);
}

static void media_cache(deliver_t *d)
{
    char *url = image_url(d);
    store_status_t st;

    if (url == NULL) {
        deliver_fail(d, ADAPTER_SERVER_ERROR, 0, "out of memory");
        return;
    }
    /* an image is cached by its URL alone (as before videos and voices were); the others by
     * kind and URL, since one URL uploads as one kind only */
    if (extra(d)->media_kind != ADAPTER_IMAGE) {
        char *keyed = NULL;
        if (asprintf(&keyed, "%s %s", media_word(extra(d)->media_kind), url) < 0) {
            free(url);
            deliver_fail(d, ADAPTER_SERVER_ERROR, 0, "out of memory");
            return;
        }
        free(url);
        url = keyed;
    }
    auth_hash_token(url, strlen(url), extra(d)->url_hash);
    free(url);
    d->phase = DL_MEDIA_CACHE;
    d->_call =
        store_get_media(d->env->store, d->channel_id, extra(d)->url_hash, on_media_cached, d, &st);
    if (d->_call == NULL)
        media_fetch(d);
}

/* ---- the message ---- */

/* ---- the shared rate limits (contract.md section 8) ---- */

/* The element fails with 120: its slot (or the pause's end) is wait_us away, past the
 * deadline; nothing was sent for it. */
static void rate_refuse(deliver_t *d, int64_t wait_us, const char *msg)
{
    deliver_result_t r;

    memset(&r, 0, sizeof(r));
    adapter_result_init(&r.res);
    r.res.status = ADAPTER_RATE_LIMITED;
    bg_error_set(&r.err, BG_ERR_RATE_LIMITED, "%s", msg);
    r.retry_after_ms = wait_us > 1000 ? (wait_us + 999) / 1000 : 1; /* whole ms, rounded up */
    metrics_rate_refused(d->env->metrics, d->adapter->type);
    deliver_finish(d, &r);
}

static int rate_take(deliver_t *d);

static void on_rate_wait(evutil_socket_t fd, short what, void *arg)
{
    deliver_t *d = arg;

    (void)fd;
    (void)what;
    d->_timer_armed = 0;
    if (d->_pair_held && rate_take(d)) /* the pair's slot is now: the sender's comes next */
        return;
    d->_slot_ready = 1;
    deliver_step(d);
}

static void on_rate_taken(void *arg, store_status_t st, store_rate_verdict_t verdict,
                          int64_t wait_us)
{
    deliver_t *d = arg;

    d->_rate = NULL;
    if (st != STORE_OK) {
        /* The limiter is out of reach: the message goes unlimited rather than not at all (the
         * rest of the request needs Redis too, and a platform refusal is answered as 120). */
        d->_slot_ready = 1;
        deliver_step(d);
        return;
    }
    switch (verdict) {
    case STORE_RATE_GO:
        metrics_rate_wait(d->env->metrics, d->adapter->type, 0);
        d->_slot_ready = 1;
        deliver_step(d);
        return;
    case STORE_RATE_WAIT:
    case STORE_RATE_RETAKE:
        metrics_rate_wait(d->env->metrics, d->adapter->type, wait_us);
        d->_pair_held = verdict == STORE_RATE_RETAKE;
        d->phase = DL_RATE_WAIT;
        arm_timer(d, wait_us, on_rate_wait);
        return;
    case STORE_RATE_SKIP: /* the slot ahead, used before its answer came, was none: one now */
        if (!rate_take(d))
            deliver_step(d);
        return;
    default:
        rate_refuse(d, wait_us, "rate limit: the next slot comes after the request's deadline");
        return;
    }
}

/* Takes the message's slot of the sender's and the pair's limits, after any pause in force;
 * 1 when that is under way, 0 when the message needs no slot: its channel sets no limit at
 * all (then it skips the round trip), unless the platform just refused it (then it waits for
 * the pause like any other). */
static int rate_take(deliver_t *d)
{
    store_status_t st;
    ratelimit_policy_t policy;
    store_rate_verdict_t verdict;
    int64_t wait_us;

    switch (deliver_ahead_take(d, on_rate_taken, &verdict, &wait_us)) {
    case 1:
        on_rate_taken(d, STORE_OK, verdict, wait_us);
        return 1;
    case 2:
        return 1;
    }
    deliver_rate_policy(d, &policy);
    if (ratelimit_is_off(&policy) && !d->_rate_retried && !d->_pair_held && !d->_pauses_heard) {
        d->_slot_ready = 1;
        return 0;
    }
    /* a broadcast's message: in the lane, which takes its slot when it is due */
    if (d->bulk && policy.sender.interval_us > 0) {
        if (deliver_lane_join(d, on_rate_taken) == 0)
            return 1;
        policy.sender.burst = 1; /* out of memory: its slot now, still not from the burst */
    }
    d->phase = DL_RATE_TAKE;
    /* the pair's keys only where it has a limit, or the platform just paused it */
    d->_rate = store_rate_take(
        d->env->store, d->channel_id,
        policy.pair.interval_us > 0 || d->_rate_retried || d->_pauses_heard ? deliver_member_id(d)
                                                                            : NULL,
        d->_pair_held, &policy, deliver_rate_max_wait_ms(d), on_rate_taken, d, &st);
    d->_pair_held = 0;
    if (d->_rate == NULL)
        on_rate_taken(d, st, STORE_RATE_GO, 0);
    return 1;
}

/* Right before the message call: a pause set since the slot was granted (a refusal of another
 * send, of this worker or of any instance) holds this send too. The board hears of pauses
 * without a round trip (store_rate_board_t); when it has heard of one, the slot is taken again
 * in Redis, which knows the pause exactly and queues the send after it. 1 when that is under
 * way. */
static int rate_recheck(deliver_t *d)
{
    if (d->_pauses_heard == PAUSE_HEARD_MAX ||
        store_rate_board_paused(d->env->_pauses, d->channel_id, deliver_member_id(d)) <
            PAUSE_HEARD_MIN_MS)
        return 0;
    d->_pauses_heard++;
    d->_slot_ready = 0;
    return rate_take(d);
}

static void on_rate_paused(void *arg, store_status_t st, store_rate_verdict_t verdict,
                           int64_t pause_us)
{
    deliver_t *d = arg;

    (void)verdict;
    d->_rate = NULL;
    if (st != STORE_OK) { /* no pause to wait for: a retry now would be refused as well */
        rate_refuse(d, pause_us > 0 ? pause_us : RATE_PAUSE_UNKNOWN_MS * 1000, extra(d)->rate_msg);
        return;
    }
    /* Once, when it fits: the next slot comes after the pause (rate_take waits for it or
     * refuses the element). A rate-limit answer means the message was not accepted, so the
     * retry cannot send it twice. */
    if (!d->_rate_retried) {
        d->_rate_retried = 1;
        d->_slot_ready = 0;
        deliver_step(d);
        return;
    }
    rate_refuse(d, pause_us, extra(d)->rate_msg);
}

/* The platform refused the message for a rate limit: pause the sender's (or the pair's) limit
 * for every worker and instance, for Retry-After when given, else the doubling pause. */
static void rate_pause(deliver_t *d, const adapter_result_t *res)
{
    store_status_t st;
    int64_t after_ms = res->retry_after_s > 0 ? (int64_t)res->retry_after_s * 1000 : 0;

    metrics_rate_answer(d->env->metrics, d->adapter->type);
    snprintf(extra(d)->rate_msg, sizeof(extra(d)->rate_msg), "%s",
             res->error[0] ? res->error : "rate limited by the platform");
    d->phase = DL_RATE_PAUSE;
    d->_rate = store_rate_pause(d->env->store, d->channel_id,
                                res->rate_recipient ? deliver_member_id(d) : NULL, after_ms,
                                on_rate_paused, d, &st);
    if (d->_rate == NULL)
        on_rate_paused(d, st, STORE_RATE_GO, after_ms * 1000);
}

static void on_retry_wait(evutil_socket_t fd, short what, void *arg)
{
    deliver_t *d = arg;

    (void)fd;
    (void)what;
    d->_timer_armed = 0;
    deliver_step(d); /* everything before the message call is done: it goes again */
}

/* The call failed making its connection: the transport connects once per call and leaves the
 * one retry to deliver. A call it sent and had refused unprocessed (a stream the platform
 * refused, a kept-alive connection found closed) it has tried again itself, up to its own
 * count: also not sent, but never retried here, or each try would be made twice. */
static int connect_failed(const call_answer_t *ans)
{
    return ans->not_sent && (ans->err == NET_ERR_CONNECT || ans->err == NET_ERR_DNS);
}

static void on_send_answer(deliver_t *d, const call_answer_t *ans)
{
    char buf[BG_ERROR_MSG_MAX];
    adapter_target_t t = target(d);
    deliver_result_t r;

    /* The one failure that surely delivered nothing: the connection could not be made. Try
     * once more after a short pause; anything else (a timeout, a reset, a 5xx) may have been
     * delivered, and a retry could send the message twice. */
    if (connect_failed(ans) && !d->_connect_retried &&
        deliver_remaining_ms(d) > CONNECT_RETRY_MS + 2 * DEADLINE_MARGIN_MS) {
        d->_connect_retried = 1;
        d->phase = DL_RETRY_WAIT;
        arm_timer(d, CONNECT_RETRY_MS * 1000, on_retry_wait);
        return;
    }
    memset(&r, 0, sizeof(r));
    adapter_result_init(&r.res);
    d->last_unsent = ans->not_sent || ans->a.status >= 500; /* read by deliver_finish */
    adapter_parse_send(d->adapter, &t, &ans->a, &r.res);
    switch (r.res.status) {
    case ADAPTER_OK:
        r.ok = 1;
        deliver_finish(d, &r);
        return;
    case ADAPTER_AUTH_EXPIRED:
        /* Refresh and retry. The first retry may adopt a credential another worker or instance
         * just got, which the platform may have revoked as well: then one more, with a
         * credential of our own (after which _cred_refreshed stops the loop). */
        if (!d->_cred_refreshed && d->_auth_retried < 2) {
            d->_auth_retried++;
            adapter_result_clear(&r.res);
            cred_force(d);
            return;
        }
        break;
    case ADAPTER_RATE_LIMITED:
        rate_pause(d, &r.res); /* then retried once when it fits, or 120 */
        adapter_result_clear(&r.res);
        return;
    default:
        break;
    }
    deliver_fail(d, r.res.status, r.res.platform_code,
                 failure_reason(&r.res, ans, buf, sizeof(buf)));
    adapter_result_clear(&r.res);
}

static int build_send(deliver_t *d, const adapter_target_t *t, const json_t *response,
                      adapter_call_t *c, adapter_result_t *res)
{
    return d->adapter->build_send(t, response, media_id(d)[0] ? media_id(d) : NULL, c, res);
}

/* The kind of media a response uploads first on this platform, 0 when none. */
static unsigned upload_kind(const deliver_t *d, const json_t *response)
{
    if (!d->adapter->image_by_upload)
        return 0;
    return adapter_response_type(json_string_value(json_object_get(response, "type"))) &
           ADAPTER_UPLOADED;
}

/* Decides what the delivery needs next. */
static void deliver_step(deliver_t *d)
{
    const adapter_ops_t *a = d->adapter;
    json_t *response;

    if (!d->_cred_ready && a->cred_needs_refresh != NULL) {
        if (d->_cred_forced || a->cred_needs_refresh(info(d), clock_wall_ms())) {
            deliver_ahead_drop(d);
            cred_begin(d);
            return;
        }
        d->_cred_ready = 1;
    }
    if (!d->_contact_ready && a->build_check != NULL) {
        const char *wa_id = deliver_ahead_contact(d); /* saves the cache's round trip */
        if (wa_id != NULL) {
            contact_found(d, wa_id);
            return;
        }
        deliver_ahead_drop(d);
        contact_cache(d);
        return;
    }
    if (!d->_slot_ready && rate_take(d)) /* login, contact, upload calls take none */
        return;
    if (rate_recheck(d))
        return;
    if ((response = response_parse(d)) == NULL) {
        deliver_fail(d, ADAPTER_SERVER_ERROR, 0, "out of memory");
        return;
    }
    if (upload_kind(d, response) && media_id(d)[0] == '\0') {
        extra(d)->media_kind = upload_kind(d, response);
        json_decref(response);
        media_cache(d);
        return;
    }
    build_and_call(d, build_send, response, DL_SEND);
    json_decref(response); /* the call carries what it needs */
}

void deliver_start(deliver_t *d, const char *text, size_t len, deliver_done_fn *done, void *arg)
{
    deliver_start_parsed(d, NULL, text, len, done, arg);
}

void deliver_start_parsed(deliver_t *d, json_t *response, const char *text, size_t len,
                          deliver_done_fn *done, void *arg)
{
    d->_response = response;
    d->_text = text;
    d->_text_len = (unsigned)len;
    d->_done = done;
    d->_arg = arg;
    d->_auth_retried = d->_rate_retried = d->_connect_retried = 0;
    d->_slot_ready = d->_pair_held = d->_pauses_heard = 0;
    d->last_unsent = 0;
    /* the worker's board, from its first message on: it must be listening before a slot given
     * now is used (rate_recheck) */
    if (d->env->_pauses == NULL)
        d->env->_pauses = store_rate_board_new(d->env->store);
    deliver_step(d);
}

void deliver_refuse(deliver_t *d, const bg_error_t *err, deliver_done_fn *done, void *arg)
{
    deliver_result_t r;

    memset(&r, 0, sizeof(r));
    adapter_result_init(&r.res);
    r.err = *err;
    d->_text = NULL;
    d->_done = done;
    d->_arg = arg;
    deliver_finish(d, &r);
}

result_event_t deliver_event(const deliver_t *d, const char *message_id, char buf[32])
{
    const json_t *from = json_object_get(info(d), d->adapter->from_field);
    result_event_t ev;

    ev.from = json_string_value(from);
    if (ev.from == NULL && json_is_integer(from)) {
        snprintf(buf, 32, "%lld", (long long)json_integer_value(from));
        ev.from = buf;
    }
    ev.to = d->to;
    ev.response = NULL;
    ev.type = ev.data = NULL;
    ev.timestamp_ms = clock_wall_ms();
    ev.message_id = message_id;
    return ev;
}

json_t *deliver_event_json(const deliver_t *d, const json_t *response, const char *message_id)
{
    char buf[32];
    result_event_t ev = deliver_event(d, message_id, buf);

    return result_message_event(ev.from, ev.to, response, ev.timestamp_ms, message_id);
}

static const char *deliver_chat_id(const deliver_t *d, const adapter_result_t *res)
{
    return res->chat_id[0] ? res->chat_id : d->to;
}
