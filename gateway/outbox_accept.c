/* outbox_accept.c - accepting a request sent with Prefer: respond-async (contract.md section 12):
 * written to its member's shard's stream with its place in the member's turn queue
 * (store/outbox.c), then answered 202 with its requestId. An accept whose script got no answer
 * is settled in Redis, which says whether it was queued and keeps a late one from queueing
 * anything; at the deadline a 119 names the id it may be queued as. */
#include "outbox_accept.h"

#include "../core/rng.h"
#include "../store/outbox.h"
#include "outbox_post.h"
#include "outbox_status.h"

#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SETTLE_AGAIN_MS 100 /* an accept not settled is asked about again after this */
#define SETTLE_LAST_MS  100 /* ...while this much of the request's deadline is left */

/* An accept's state, op_outbox(op) of an async op. */
typedef struct outbox_accept {
    store_outbox_call_t *call;
    struct event *timer; /* the last moment before the deadline; settling: asked again */
    unsigned shard;
    char id[OUTBOX_REQUEST_ID_LEN + 1];
} ob_accept_t;

static void accepted(op_t *op)
{
    ob_accept_t *a = op_outbox(op);
    jsonw_t w;
    char *text;
    size_t len;

    metrics_count(&op->env->deliver.metrics->outbox_accepted);
    jw_init(&w);
    jw_lit(&w, "{\"ok\":1,\"requestId\":");
    jw_str(&w, a->id);
    jw_lit(&w, ",\"member\":");
    jw_str(&w, op->member_id);
    jw_lit(&w, ",\"status\":\"queued\"}");
    if (w.failed || (text = jw_steal(&w, &len)) == NULL) {
        jw_free(&w);
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    op_answer_accepted(op, text, len);
}

static void settle(op_t *op);

/* The accept's script was sent and its answer did not come (Redis silent, or settling took
 * until now): the request may be queued, or be queued when Redis runs the script late. The
 * 119 says by which id, for GET /requests/<id> to tell (the body keeps section 5's shape). */
static void maybe_queued(op_t *op)
{
    ob_accept_t *a = op_outbox(op);
    char msg[160 + 2 * OUTBOX_REQUEST_ID_LEN];

    store_outbox_cancel(a->call);
    a->call = NULL;
    snprintf(msg, sizeof(msg),
             "store unavailable (Redis timed out): the request may have been queued as "
             "requestId %s (GET /requests/%s tells)",
             a->id, a->id);
    op_fail_code(op, BG_ERR_STORE, msg);
}

/* The accept's timer: ms from now, but never past the last moment before the request's
 * deadline, when maybe_queued answers (the op's own deadline would answer a plain 119). */
static void settle_arm(op_t *op, int64_t ms)
{
    ob_accept_t *a = op_outbox(op);
    int64_t last = deliver_remaining_ms(&op->dl) - SETTLE_LAST_MS;

    outbox_arm(a->timer, ms < last ? ms : last);
}

static void on_settled(void *arg, store_status_t st, int queued)
{
    op_t *op = arg;
    ob_accept_t *a = op_outbox(op);

    a->call = NULL;
    if (st != STORE_OK)
        settle_arm(op, SETTLE_AGAIN_MS);
    else if (queued)
        accepted(op);
    else
        op_fail_code(op, BG_ERR_STORE,
                     "store unavailable (Redis timed out): the request was not "
                     "queued");
}

/* Asked again, or the last moment came with the accept's or a settle's script still out. */
static void on_settle_timer(evutil_socket_t fd, short what, void *arg)
{
    op_t *op = arg;
    ob_accept_t *a = op_outbox(op);

    (void)fd;
    (void)what;
    if (a->call != NULL)
        maybe_queued(op);
    else
        settle(op);
}

/* The accept got no answer (Redis timed out, the connection went): its script may have run,
 * or may still run. Settled in Redis, which says whether it was queued and keeps a late one
 * from queueing anything; asked again until the request's deadline is near. A 119 then says
 * the request may be queued, and by which id. */
static void settle(op_t *op)
{
    ob_accept_t *a = op_outbox(op);
    const config_t *cfg = op->env->deliver.cfg;
    int64_t keep_ms = ((int64_t)cfg->outbox_ttl_s + cfg->idempotency_ttl_s) * 1000;
    store_status_t st = STORE_OK;

    if (deliver_remaining_ms(&op->dl) < SETTLE_LAST_MS) {
        maybe_queued(op);
        return;
    }
    a->call =
        store_outbox_settle(op->env->deliver.store, a->shard, a->id, keep_ms, on_settled, op, &st);
    /* not sent: asked again soon; sent: answered by the last moment at the latest */
    settle_arm(op, a->call == NULL ? SETTLE_AGAIN_MS : INT64_MAX);
}

static void on_accepted(void *arg, store_status_t st, int64_t created_ms)
{
    op_t *op = arg;
    ob_accept_t *a = op_outbox(op);

    (void)created_ms;
    a->call = NULL;
    evtimer_del(a->timer);
    if (st == STORE_OK)
        accepted(op);
    else if (st == STORE_BUSY) /* not sent: nothing ran */
        op_fail_store(op, st);
    else
        settle(op);
}

/* statusCallback: an http(s) URL (the SSRF guard checks its address when it is called). */
static int callback_valid(const json_t *v)
{
    const char *url = json_string_value(v);

    return url != NULL && strlen(url) <= 2048 &&
           (strncmp(url, "https://", 8) == 0 || strncmp(url, "http://", 7) == 0) &&
           strcspn(url, " \t\r\n") == strlen(url);
}

/* The body of the request op, as parsed. */
static json_t *request_root(const op_t *op)
{
    return op->kind->route == METRICS_ROUTE_SEND ? op->send.root : op->redirect.root;
}

void outbox_accept(op_t *op, unsigned shards)
{
    const json_t *cb = json_object_get(request_root(op), "statusCallback");
    ob_accept_t *a;
    json_t *body;
    char *text;
    size_t len = 0;
    unsigned shard;
    store_status_t st = STORE_OK;

    if (cb != NULL && !json_is_null(cb) && !callback_valid(cb)) {
        op_fail_code(op, BG_ERR_MISSING_PARAM,
                     "parameter statusCallback must be an http:// or https:// URL (at most 2048 "
                     "characters)");
        return;
    }
    if ((a = calloc(1, sizeof(*a))) == NULL) {
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    op_outbox(op) = a;
    if ((a->timer = evtimer_new(op->env->deliver.base, on_settle_timer, op)) == NULL) {
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    a->shard = shard = store_outbox_shard(shards, op->target.channel_id, op->member_id);
    snprintf(a->id, sizeof(a->id), "%02x", shard);
    rng_hex(&op->env->deliver.rng, a->id + 2, OUTBOX_REQUEST_ID_LEN - 2);
    /* the request as it runs: addressed by the member it was resolved to (a recipientId made
     * it already), without what only the accept reads */
    body = json_copy(request_root(op));
    if (body != NULL) {
        json_object_del(body, "recipientId");
        json_object_del(body, "statusCallback");
        json_object_set_new(body, "memberId", json_string(op->member_id));
    }
    text = body != NULL ? jw_dump(body, &len) : NULL;
    json_decref(body);
    if (text == NULL) {
        op_fail_code(op, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    {
        const config_t *cfg = op->env->deliver.cfg;
        store_outbox_new_t req = {op->token.app,
                                  text,
                                  len,
                                  op->target.channel_id,
                                  op->member_id,
                                  json_string_value(cb),
                                  op->kind->route == METRICS_ROUTE_SEND ? "" : "redirect",
                                  0,
                                  0};
        int64_t keep_ms = ((int64_t)cfg->outbox_ttl_s + cfg->idempotency_ttl_s) * 1000;
        if (req.callback == NULL)
            req.callback = "";
        if (cfg->member_order) {
            /* its place in the member's turn queue, held until it ends: nothing of it is sent
             * after the TTL, and an attempt begun before lasts a request's time at most */
            req.turn_lease_ms = (int64_t)cfg->outbox_ttl_s * 1000 + cfg->request_timeout_ms +
                                OUTBOX_LEASE_MARGIN_MS;
            req.turn_guess_ms = cfg->request_timeout_ms;
        }
        a->call = store_outbox_accept(op->env->deliver.store, shard, a->id, &req, keep_ms,
                                      (int64_t)op->env->deliver.cfg->outbox_ttl_s * 1000,
                                      on_accepted, op, &st);
    }
    free(text);
    if (a->call == NULL)
        op_fail_store(op, st == STORE_BAD_RECORD ? STORE_UNAVAILABLE : st);
    else /* still out at the last moment: maybe_queued */
        settle_arm(op, INT64_MAX);
}

void outbox_accept_cancel(op_t *op)
{
    ob_accept_t *a = op_outbox(op);

    store_outbox_cancel(a->call);
    a->call = NULL;
    if (a->timer != NULL)
        evtimer_del(a->timer);
}

void outbox_accept_release(op_t *op)
{
    ob_accept_t *a = op_outbox(op);

    if (a->timer != NULL)
        event_free(a->timer);
    free(a);
}
