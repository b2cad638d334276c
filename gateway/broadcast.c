/* broadcast.c - broadcasts (contract.md section 13) on one worker. Accepting: the body is
 * checked at once with a send's codes (108, 112, 114-118, 119), then the recipients go to Redis
 * a slice at a time (store/broadcast.c), each slice sent when the one before answered: the
 * loop is held a slice's work at most, and Redis a script of a few thousand ids. GET and
 * DELETE /broadcasts/<id> tell and cancel one. Its delivery is bcpump.c's; its status callback
 * is an outbox entry, queued once by the delivery when it ended and posted by outbox.c. */
#include "broadcast.h"

#include "../core/clock.h"
#include "../core/dlist.h"
#include "../core/idem.h"
#include "../core/member.h"
#include "../core/rng.h"
#include "../store/broadcast.h"
#include "../store/idem.h"
#include "bcpump.h"
#include "broadcast_ids.h"
#include "log.h"
#include "outbox_post.h"
#include "outbox_status.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#define RECIPIENTS_MAX    1000000 /* contract.md section 13 */
#define SLICE             2000    /* ids per accepting script */
#define TAG_COUNT         2000    /* SSCAN COUNT of a tag's slice */
#define ID_LEN            BCPUMP_ID_LEN
#define PATH              "/broadcasts/"
#define CANCEL_POLL_MS    50           /* a DELETE waits for the attempts running to end */
#define CANCEL_WAIT_EXTRA 5000         /* past an attempt's deadline: its lease (outbox.c) */
#define IDEM_ROUTE        "broadcasts" /* an Idempotency-Key's scope: app, this route, key */
/* How long a keyed POST's accepting may run before a retry takes it over as dead: a million
 * recipients take seconds (docs/api.md), and a live accepting taken over is refused, so the
 * lease is far above the slowest seen. */
#define IDEM_LEASE_MS 300000

typedef enum { BC_MEMBERS, BC_RECIPIENTS, BC_TAGS } bc_by_t;
typedef enum { R_POST, R_GET, R_DELETE } bc_route_t;

typedef struct bc_req bc_req_t;

/* Owned by the worker (broadcasts_new, broadcasts_free). */
struct broadcasts {
    op_env_t *env;
    bc_req_t *reqs, *reqs_last; /* requests in flight */
    size_t big_bytes;           /* bodies over REQUEST_MAX_BODY held by them (bc_ids) */
    bcpump_t *pump;             /* the delivery */
};

/* One request in flight: a POST's accepting, or a GET or DELETE. Owned by the broadcasts from
 * its route to its answer (req_answer frees it). */
struct bc_req {
    broadcasts_t *b;
    bc_req_t *prev, *next;
    struct evhttp_request *req;
    bc_route_t route;
    int64_t started_us;
    char request_id[17];
    char token_hash[AUTH_HASH_HEX];
    auth_token_t token;
    store_call_t *token_call, *channel_call;
    store_bc_call_t *call;
    /* POST */
    json_t *root;           /* the body */
    json_t *channel;        /* the channel record */
    const char *channel_id; /* in root, or channel_buf */
    bc_by_t by;
    const json_t *list; /* the ids or tags */
    bc_ids_t *big;      /* the ids of a body over REQUEST_MAX_BODY (list is empty then) */
    const json_t *responses;
    const char *callback;
    const adapter_ops_t *ops;
    size_t pos;      /* the next id or tag */
    char cursor[32]; /* SSCAN's, within the tag at pos */
    int created;     /* the record exists: a refusal deletes it */
    char *kept;      /* what each member's request is made from */
    size_t kept_len;
    /* GET and DELETE */
    char id[ID_LEN + 1];
    char channel_buf[STORE_KEY_MAX];
    struct event *timer; /* DELETE: waits for the attempts running */
    int64_t wait_until_us;
    /* POST with an Idempotency-Key (contract.md section 7) */
    char *idem_key;             /* the header's value, until the record's name is made */
    char *idem_record;          /* the record's name (store_idem_key), also its channel */
    store_idem_call_t *idem;    /* the record's call in flight */
    redisc_sub_t *idem_sub;     /* waiting for the first request's answer */
    struct event *idem_timer;   /* ... or for its lease's end */
    unsigned idem_owner : 1;    /* it runs the key's request: it stores or drops the answer */
    unsigned idem_begun : 1;    /* a begin is in flight: it may have made this one the owner */
    unsigned idem_stale : 1;    /* told of a change while a begin was out */
    unsigned idem_replayed : 1; /* the answer is the stored one */
    char idem_fp[IDEM_HEX];
    char idem_owner_id[17];
};

static metrics_t *metrics(const broadcasts_t *b)
{
    return b->env->deliver.metrics;
}

/* ---- answering ---- */

static void req_free(bc_req_t *r)
{
    broadcasts_t *b = r->b;
    op_env_t *env = b->env;

    store_cancel(r->token_call);
    store_cancel(r->channel_call);
    store_bc_cancel(r->call);
    if (r->timer != NULL)
        event_free(r->timer);
    store_idem_cancel(r->idem);
    store_unwatch(r->idem_sub);
    if (r->idem_timer != NULL)
        event_free(r->idem_timer);
    free(r->idem_key);
    free(r->idem_record);
    auth_token_free(&r->token);
    json_decref(r->root);
    json_decref(r->channel);
    if (r->big != NULL)
        b->big_bytes -= bc_ids_body_bytes(r->big);
    bc_ids_free(r->big);
    free(r->kept);
    DLIST_UNLINK(b->reqs, b->reqs_last, r);
    free(r);
    env->in_flight--;
    if (env->draining && env->in_flight == 0 && env->done != NULL)
        env->done(env->done_arg);
}

/* Answers (text taken over) and frees r. */
static void req_answer(bc_req_t *r, int status, int code, char *text, size_t len)
{
    op_env_t *env = r->b->env;
    http_answer_t a;

    memset(&a, 0, sizeof(a));
    a.status = status;
    a.code = code;
    a.route = METRICS_ROUTE_BROADCASTS;
    a.request_id = r->request_id;
    a.channel = r->channel_id;
    a.app = r->token.record != NULL ? r->token.app : NULL;
    a.started_us = r->started_us;
    a.close = env->draining != 0;
    a.replayed = r->idem_replayed;
    if (r->idem_record != NULL && (r->idem_owner || r->idem_begun)) {
        /* only an accepted broadcast is kept for a retry; a refusal is dropped, so that the
         * retry runs afresh (as a send's refusal before it ran) */
        int64_t until_ms = r->started_us / 1000 + IDEM_LEASE_MS; /* it began after the start */
        if (r->idem_owner && status == 202)
            op_guard_keep(env, r->request_id, r->idem_record, r->idem_owner_id, status, code, text,
                          len, until_ms);
        else
            op_guard_drop(env, r->request_id, r->idem_record, r->idem_owner_id, until_ms);
        r->idem_owner = r->idem_begun = 0;
    }
    http_answer(env->http, r->req, &a, text, len);
    r->req = NULL;
    req_free(r);
}

static void req_fail_err(bc_req_t *r, const bg_error_t *err)
{
    json_t *body = bg_error_to_json(err);
    size_t len = 0;
    char *text = body != NULL ? jw_dump(body, &len) : NULL;

    json_decref(body);
    if (r->created)
        store_bc_abort(r->b->env->deliver.store, r->channel_id, r->id);
    req_answer(r, err->http_status ? err->http_status : 500, err->code, text, len);
}

static void req_fail(bc_req_t *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void req_fail(bc_req_t *r, int code, const char *fmt, ...)
{
    bg_error_t err;
    va_list ap;

    memset(&err, 0, sizeof(err));
    err.code = code;
    va_start(ap, fmt);
    vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
    va_end(ap);
    req_fail_err(r, &err);
}

static void req_fail_store(bc_req_t *r, store_status_t st)
{
    if (st == STORE_BUSY)
        req_fail(r, BG_ERR_STORE, "store busy: too many commands in flight");
    else
        req_fail(r, BG_ERR_STORE, "store unavailable");
}

static void answer_status(bc_req_t *r, const store_bc_status_t *s)
{
    size_t len = 0;
    char *text = outbox_broadcast_status_text(r->id, s, NULL, &len);

    if (text == NULL) {
        req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    req_answer(r, 200, 0, text, len);
}

/* ---- checking a POST's body (nothing of it needs Redis) ---- */

static int callback_ok(const char *url)
{
    return strlen(url) <= 2048 &&
           (strncmp(url, "https://", 8) == 0 || strncmp(url, "http://", 7) == 0) &&
           strcspn(url, " \t\r\n") == strlen(url);
}

/* recipients.<name>: a non-empty array of at most RECIPIENTS_MAX ids (max bytes each). */
static int check_ids(const json_t *list, const char *name, size_t max, bg_error_t *err)
{
    const json_t *v;
    size_t i;

    if (!json_is_array(list))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter recipients.%s must be an array",
                            name);
    if (json_array_size(list) == 0)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter recipients.%s must not be empty",
                            name);
    if (json_array_size(list) > RECIPIENTS_MAX)
        return bg_error_set(err, BG_ERR_LIMIT, "more than %d recipients in one broadcast",
                            RECIPIENTS_MAX);
    json_array_foreach(list, i, v) {
        const char *s = json_string_value(v);
        if (s == NULL || *s == '\0')
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter recipients.%s[%zu] must be a non-empty string", name, i);
        if (json_string_length(v) > max)
            return bg_error_set(err, BG_ERR_LIMIT,
                                "parameter recipients.%s[%zu] is longer than %zu "
                                "bytes",
                                name, i, max);
        if (!request_id_chars_ok(s) || strlen(s) != json_string_length(v))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter recipients.%s[%zu] contains a character that is not "
                                "allowed",
                                name, i);
    }
    return 0;
}

static int check_body(bc_req_t *r, bg_error_t *err)
{
    static const char *const names[] = {"channelId", "recipients",     "response",
                                        "responses", "statusCallback", NULL};
    static const char *const by_names[] = {"memberIds", "recipientIds", "tags", NULL};
    const json_t *vals[5], *by[3];
    const char *extra = request_fields(r->root, names, vals), *name;
    const json_t *resp;
    size_t i, max;
    int n = 0;

    if (extra != NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "unknown parameter %.64s", extra);
    r->channel_id = json_string_value(vals[0]);
    if (vals[0] == NULL || r->channel_id == NULL || *r->channel_id == '\0')
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            vals[0] ? "parameter channelId must be a non-empty string"
                                    : "missing parameter: channelId");
    if (json_string_length(vals[0]) > REQUEST_MAX_ID)
        return bg_error_set(err, BG_ERR_LIMIT, "parameter channelId is longer than %d bytes",
                            REQUEST_MAX_ID);
    if (!request_id_chars_ok(r->channel_id) || strlen(r->channel_id) != json_string_length(vals[0]))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter channelId contains a character that is not allowed");
    if (!json_is_object(vals[1]))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            vals[1] ? "parameter recipients must be an object"
                                    : "missing parameter: recipients");
    if ((extra = request_fields(vals[1], by_names, by)) != NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "unknown parameter recipients.%.64s", extra);
    for (int k = 0; k < 3; k++)
        if (by[k] != NULL) {
            n++;
            r->by = (bc_by_t)k;
            r->list = by[k];
        }
    if (n != 1)
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter recipients must hold one of memberIds, recipientIds, tags");
    max = r->by == BC_RECIPIENTS ? REQUEST_MAX_RECIPIENT
          : r->by == BC_TAGS     ? STORE_TAG_MAX
                                 : REQUEST_MAX_ID;
    /* a large body's ids were checked as it was (its array is empty here) */
    if ((r->big != NULL ? bc_ids_verdict(r->big, RECIPIENTS_MAX, max, err)
                        : check_ids(r->list, by_names[r->by], max, err)) < 0)
        return -1;
    if (r->by == BC_TAGS && json_array_size(r->list) > 100)
        return bg_error_set(err, BG_ERR_LIMIT, "more than 100 tags in one broadcast");
    name = vals[2] != NULL ? "response" : "responses";
    r->responses = vals[2] != NULL ? vals[2] : vals[3];
    if (!json_is_array(r->responses))
        return bg_error_set(
            err, BG_ERR_MISSING_PARAM,
            r->responses ? "parameter %s must be an array" : "missing parameter: %s", name);
    if (json_array_size(r->responses) == 0)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s must not be empty", name);
    if (json_array_size(r->responses) > REQUEST_MAX_RESPONSES)
        return bg_error_set(err, BG_ERR_LIMIT, "more than %d responses in one request",
                            REQUEST_MAX_RESPONSES);
    json_array_foreach(r->responses, i, resp) {
        char where[32];
        snprintf(where, sizeof(where), "%s[%zu]", name, i);
        /* strings with {{...}} are checked as rendered, for each member */
        if (request_check_response_flags(resp, where, REQUEST_CHECK_TEMPLATED, err) < 0)
            return -1;
    }
    if (vals[4] != NULL && !json_is_null(vals[4])) {
        r->callback = json_string_value(vals[4]);
        if (r->callback == NULL || !callback_ok(r->callback))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter statusCallback must be an http:// or https:// URL (at "
                                "most 2048 characters)");
    }
    return 0;
}

/* ---- accepting: the recipients, a slice at a time ---- */

static void accept_next(bc_req_t *r);
static void on_id_recorded(void *arg, store_status_t st);

static size_t list_size(const bc_req_t *r)
{
    return r->big != NULL ? bc_ids_count(r->big) : json_array_size(r->list);
}

/* The next n ids (from pos) into ids: from the body's value, or read again from a large body
 * (bc_ids_next). -1 when out of memory. */
static int slice_ids(bc_req_t *r, const char **ids, size_t n)
{
    if (r->big != NULL)
        return bc_ids_next(r->big, ids, n) == (int)n ? 0 : -1;
    for (size_t i = 0; i < n; i++)
        ids[i] = json_string_value(json_array_get(r->list, r->pos + i));
    return 0;
}
static void create(bc_req_t *r);

/* 202 {"ok":1,"broadcastId","total"}: the answer a key's retry gets again. */
static void answer_accepted(bc_req_t *r, const char *id, int64_t total)
{
    jsonw_t w;
    char *out;
    size_t len = 0;

    jw_init(&w);
    jw_lit(&w, "{\"ok\":1,\"broadcastId\":");
    jw_str(&w, id);
    jw_lit(&w, ",\"total\":");
    jw_int(&w, total);
    jw_lit(&w, "}");
    if (w.failed || (out = jw_steal(&w, &len)) == NULL) {
        jw_free(&w);
        req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    req_answer(r, 202, 0, out, len);
}

static void on_finished(void *arg, store_status_t st, int64_t n, const char *text)
{
    bc_req_t *r = arg;

    (void)text;
    r->call = NULL;
    if (st != STORE_OK || n < 0) {
        req_fail_store(r, st == STORE_OK ? STORE_UNAVAILABLE : st);
        return;
    }
    r->created = 0; /* it is the caller's now */
    metrics_count(&metrics(r->b)->broadcasts[0]);
    if (r->big != NULL) /* how long the loop was held at most while its body was checked */
        log_msg(LOG_INFO,
                "broadcast %s of channel %s accepted: %lld members; body of %zu ids checked in "
                "%u steps, the longest %lld us",
                r->id, r->channel_id, (long long)n, bc_ids_count(r->big), bc_ids_steps(r->big),
                (long long)bc_ids_longest_step_us(r->big));
    else
        log_msg(LOG_INFO, "broadcast %s of channel %s accepted: %lld members", r->id, r->channel_id,
                (long long)n);
    answer_accepted(r, r->id, n);
}

static void on_slice(void *arg, store_status_t st, int64_t n, const char *text)
{
    bc_req_t *r = arg;

    r->call = NULL;
    if (st != STORE_OK || n < 0) {
        req_fail_store(r, st == STORE_OK ? STORE_UNAVAILABLE : st);
        return;
    }
    if (r->by == BC_MEMBERS && text[0] != '\0') {
        req_fail(r, BG_ERR_NO_MEMBER, "member not found: recipients.memberIds has %.200s", text);
        return;
    }
    if (r->by == BC_TAGS) {
        /* the tag's next slice, or the next tag */
        snprintf(r->cursor, sizeof(r->cursor), "%s", text);
        if (strcmp(r->cursor, "0") == 0)
            r->pos++;
    } else {
        r->pos += (size_t)n;
    }
    accept_next(r);
}

/* The slice of recipient ids from pos: each one's new member, made as a sendResponses by
 * recipientId makes it (used only when the recipient has none). */
static store_bc_call_t *add_recipients(bc_req_t *r, const char *const *given, size_t n,
                                       store_status_t *st)
{
    op_env_t *env = r->b->env;
    const char **rids = calloc(n, sizeof(*rids)), **ids = calloc(n, sizeof(*ids)),
               **recs = calloc(n, sizeof(*recs));
    char *idbuf = malloc(n * 25), *rbuf = malloc(n * (REQUEST_MAX_RECIPIENT + 1));
    store_bc_call_t *c = NULL;
    size_t i;

    *st = STORE_BUSY;
    if (rids == NULL || ids == NULL || recs == NULL || idbuf == NULL || rbuf == NULL)
        goto out;
    for (i = 0; i < n; i++) {
        const char *rid = given[i];
        char *norm = rbuf + i * (REQUEST_MAX_RECIPIENT + 1);
        json_t *fresh;
        if (r->ops->phone_recipients) {
            request_normalize_phone(rid, norm, REQUEST_MAX_RECIPIENT + 1);
            if (norm[0] == '\0') {
                *st = STORE_BAD_RECORD;
                r->pos += i; /* names it */
                goto out;
            }
            rid = norm;
        }
        rids[i] = rid;
        rng_hex(&env->deliver.rng, idbuf + 25 * i, 24);
        ids[i] = idbuf + 25 * i;
        fresh = member_new(ids[i], r->channel_id, r->token.app, rid, r->ops->type, clock_wall_ms());
        recs[i] = fresh != NULL ? json_dumps(fresh, JSON_COMPACT) : NULL;
        json_decref(fresh);
        if (recs[i] == NULL)
            goto out;
    }
    c = store_bc_add_recipients(env->deliver.store, r->channel_id, r->id, rids, ids, recs, n,
                                on_slice, r, st);
out:
    for (i = 0; recs != NULL && i < n; i++)
        free((char *)recs[i]);
    free(rids);
    free(ids);
    free(recs);
    free(idbuf);
    free(rbuf);
    return c;
}

static void accept_next(bc_req_t *r)
{
    store_t *store = r->b->env->deliver.store;
    size_t total = list_size(r), n = total - r->pos < SLICE ? total - r->pos : SLICE;
    store_status_t st = STORE_OK;
    const char *ids[SLICE];

    if (r->b->env->draining) {
        req_fail(r, BG_ERR_UNAVAILABLE, "server is shutting down");
        return;
    }
    if (r->pos >= total) {
        const config_t *cfg = r->b->env->deliver.cfg;
        int64_t keep = ((int64_t)cfg->outbox_ttl_s + cfg->idempotency_ttl_s) * 1000;
        r->call = store_bc_finish(store, r->channel_id, r->id, keep, on_finished, r, &st);
    } else if (r->by != BC_TAGS && slice_ids(r, ids, n) < 0) {
        req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    } else if (r->by == BC_MEMBERS) {
        r->call = store_bc_add_members(store, r->channel_id, r->id, ids, n, on_slice, r, &st);
    } else if (r->by == BC_TAGS) {
        r->call = store_bc_add_tag(store, r->channel_id, r->id,
                                   json_string_value(json_array_get(r->list, r->pos)), r->cursor,
                                   TAG_COUNT, on_slice, r, &st);
    } else {
        r->call = add_recipients(r, ids, n, &st);
    }
    if (r->call != NULL)
        return;
    if (st == STORE_BAD_RECORD && r->by == BC_RECIPIENTS)
        req_fail(r, BG_ERR_MISSING_PARAM,
                 "parameter recipients.recipientIds[%zu] is not a phone "
                 "number",
                 r->pos);
    else
        req_fail_store(r, st);
}

static void on_created(void *arg, store_status_t st, int64_t n, const char *text)
{
    bc_req_t *r = arg;

    (void)n;
    (void)text;
    r->call = NULL;
    if (st != STORE_OK) {
        req_fail_store(r, st);
        return;
    }
    r->created = 1;
    strcpy(r->cursor, "0");
    accept_next(r);
}

/* The broadcast's record, made from the body kept. */
static void create(bc_req_t *r)
{
    store_status_t st = STORE_OK;

    r->call = store_bc_create(r->b->env->deliver.store, r->channel_id, r->id, r->token.app, r->kept,
                              r->kept_len, r->callback != NULL ? r->callback : "", 3600 * 1000,
                              (unsigned)r->b->env->deliver.cfg->outbox_shards, on_created, r, &st);
    if (r->call == NULL)
        req_fail_store(r, st);
}

static void on_id_recorded(void *arg, store_status_t st)
{
    bc_req_t *r = arg;

    r->idem = NULL;
    if (st == STORE_CONFLICT) { /* taken over as dead: the one that took it answers */
        r->idem_owner = 0;
        req_fail(r, BG_ERR_IDEM_RUNNING, "a request with this Idempotency-Key is still running");
        return;
    }
    if (st != STORE_OK) {
        req_fail_store(r, st);
        return;
    }
    create(r);
}

/* The token and the channel are known: the checks of a send against them. */
static void post_checked(bc_req_t *r)
{
    op_env_t *env = r->b->env;
    const char *type;
    const json_t *resp;
    size_t i, len = 0;
    char *body;
    store_status_t st = STORE_OK;

    if (!auth_sees_channel(&r->token, r->channel_id,
                           json_string_value(json_object_get(r->channel, "app")))) {
        req_fail(r, BG_ERR_NO_CHANNEL, "channel not found");
        return;
    }
    if (json_is_false(json_object_get(r->channel, "on"))) {
        req_fail(r, BG_ERR_CHANNEL_OFF, "channel is not live");
        return;
    }
    type = json_string_value(json_object_get(r->channel, "type"));
    if ((r->ops = adapter_find(type)) == NULL) {
        req_fail(r, BG_ERR_UNSUPPORTED, "channel type %.40s is not supported",
                 type ? type : "(none)");
        return;
    }
    json_array_foreach(r->responses, i, resp) {
        const json_t *fallback, *checked = resp;
        char msg[BG_ERROR_MSG_MAX - 32];
        int code = adapter_check_response(r->ops, resp, NULL, 0);
        const char *part = "";
        if (code == BG_ERR_UNSUPPORTED && (fallback = json_object_get(resp, "fallback")) != NULL) {
            part = ".fallback";
            checked = fallback;
            code = adapter_check_response(r->ops, fallback, NULL, 0);
        }
        if (code != 0) {
            adapter_check_response(r->ops, checked, msg, sizeof(msg));
            req_fail(r, code, "response[%zu]%s: %s", i, part, msg);
            return;
        }
    }
    /* what each member's request is made from (the recipients are the record's set) */
    {
        json_t *kept = json_pack("{s:O}", "response", r->responses);
        body = kept != NULL ? jw_dump(kept, &len) : NULL;
        json_decref(kept);
    }
    if (body == NULL) {
        req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    free(r->kept);
    r->kept = body;
    r->kept_len = len;
    rng_hex(&env->deliver.rng, r->id, ID_LEN);
    if (r->idem_owner) {
        /* the id goes to the key's record before the broadcast exists: a retry that finds the
         * record's holder dead knows which broadcast it may have made (idem_resumed) */
        r->idem = store_idem_progress(env->deliver.store, r->idem_record, r->idem_owner_id, 0,
                                      r->id, ID_LEN, on_id_recorded, r, &st);
        if (r->idem == NULL)
            req_fail_store(r, st);
        return;
    }
    create(r);
}

/* ---- Idempotency-Key (contract.md section 7): the same key and body, the same broadcast ---- */

static void idem_begin(bc_req_t *r);
static void post_channel_read(bc_req_t *r);

static void idem_ask_again(bc_req_t *r)
{
    if (r->idem != NULL) {
        r->idem_stale = 1; /* asked again when its answer says "wait" */
        return;
    }
    idem_begin(r);
}

static void on_idem_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    idem_ask_again(arg);
}

static void on_idem_message(void *arg, const char *msg, size_t len)
{
    (void)msg; /* (re)subscribed, or the record changed */
    (void)len;
    idem_ask_again(arg);
}

/* The first request with the key is still accepting: wait for its answer on the record's
 * channel (a dead instance never publishes: the timer asks again at its lease's end), until
 * this request's own deadline. */
static void idem_wait(bc_req_t *r, int64_t wait_ms)
{
    const config_t *cfg = r->b->env->deliver.cfg;
    int64_t left_ms = (r->started_us - clock_mono_us()) / 1000 + cfg->request_timeout_ms;

    if (left_ms <= 0) {
        req_fail(r, BG_ERR_IDEM_RUNNING, "a request with this Idempotency-Key is still running");
        return;
    }
    if (r->idem_timer == NULL &&
        (r->idem_timer = evtimer_new(r->b->env->deliver.base, on_idem_timer, r)) == NULL) {
        req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    outbox_arm(r->idem_timer, wait_ms < left_ms ? (wait_ms > 0 ? wait_ms : 1) : left_ms);
    if (r->idem_sub != NULL)
        return;
    r->idem_sub = store_watch_key(r->b->env->deliver.store, r->idem_record, on_idem_message, r);
    if (r->idem_sub == NULL)
        req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
    /* an answer published before the subscription took: the subscription's confirmation
     * (on_idem_message with no message) asks again */
}

static void answer_accepted(bc_req_t *r, const char *id, int64_t total);

/* A retry found the key's first request dead with broadcast id recorded: that broadcast is
 * the answer once it was accepted; one still accepting (its accepting died with it) is
 * dropped and this request accepts afresh. */
static void on_resumed_status(void *arg, store_status_t st, const store_bc_status_t *s)
{
    bc_req_t *r = arg;

    r->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        req_fail_store(r, st);
        return;
    }
    if (st == STORE_OK && strcmp(s->state, "accepting") != 0) {
        answer_accepted(r, r->id, s->total);
        return;
    }
    if (st == STORE_OK)
        store_bc_abort(r->b->env->deliver.store, r->channel_id, r->id);
    post_channel_read(r);
}

static void on_idem(void *arg, store_status_t st, const store_idem_t *res)
{
    bc_req_t *r = arg;
    store_status_t cst = STORE_OK;

    r->idem = NULL;
    r->idem_begun = 0;
    if (st != STORE_OK) {
        req_fail_store(r, st == STORE_BAD_RECORD ? STORE_UNAVAILABLE : st);
        return;
    }
    switch (res->state) {
    case STORE_IDEM_RUN:
        r->idem_owner = 1;
        post_channel_read(r);
        return;
    case STORE_IDEM_RESUME:
        r->idem_owner = 1;
        if (res->n_elements == 0 || res->elements[0] == NULL || res->element_lens[0] != ID_LEN) {
            post_channel_read(r); /* it died before it named a broadcast */
            return;
        }
        memcpy(r->id, res->elements[0], ID_LEN);
        r->id[ID_LEN] = '\0';
        r->call = store_bc_status(r->b->env->deliver.store, r->channel_id, r->id, on_resumed_status,
                                  r, &cst);
        if (r->call == NULL)
            req_fail_store(r, cst);
        return;
    case STORE_IDEM_CONFLICT:
        req_fail(r, BG_ERR_IDEM_MISMATCH,
                 "Idempotency-Key was used for another request: nothing was run");
        return;
    case STORE_IDEM_DONE: {
        char *text = malloc(res->len + 1);
        if (text == NULL) {
            req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
            return;
        }
        memcpy(text, res->body, res->len);
        text[res->len] = '\0';
        r->idem_replayed = 1;
        req_answer(r, res->status, res->code, text, res->len);
        return;
    }
    case STORE_IDEM_WAIT:
        if (r->idem_stale) {
            r->idem_stale = 0;
            idem_begin(r);
        } else {
            idem_wait(r, res->wait_ms);
        }
        return;
    }
}

static void idem_begin(bc_req_t *r)
{
    store_status_t st = STORE_OK;

    r->idem_stale = 0;
    r->idem =
        store_idem_begin(r->b->env->deliver.store, r->idem_record, r->idem_fp, r->idem_owner_id,
                         IDEM_LEASE_MS, r->b->env->deliver.cfg->idempotency_ttl_s, on_idem, r, &st);
    if (r->idem == NULL)
        req_fail_store(r, st);
    else
        r->idem_begun = 1;
}

/* The token is known (the key's scope is its app): the key's record decides. */
static void idem_start(bc_req_t *r)
{
    char record[STORE_KEY_MAX];
    int n = store_idem_key(r->b->env->deliver.store, record, sizeof(record), r->token.app,
                           IDEM_ROUTE, r->idem_key);

    if (n < 0 || (r->idem_record = strndup(record, (size_t)n)) == NULL) {
        req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    rng_hex(&r->b->env->deliver.rng, r->idem_owner_id, 16);
    idem_begin(r);
}

/* ---- the token (every route) and the channel (POST) ---- */

static void token_known(bc_req_t *r, store_status_t st, const json_t *record);

static void post_channel(bc_req_t *r, store_status_t st, json_t *record)
{
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        json_decref(record);
        req_fail_store(r, st);
        return;
    }
    if (st != STORE_OK || !json_is_object(record)) {
        json_decref(record);
        req_fail(r, BG_ERR_NO_CHANNEL, "channel not found");
        return;
    }
    r->channel = record;
    post_checked(r);
}

static void on_channel(void *arg, store_status_t st, json_t *value)
{
    bc_req_t *r = arg;

    r->channel_call = NULL;
    post_channel(r, st, value);
}

static void on_status(void *arg, store_status_t st, const store_bc_status_t *s);
static void on_cancelled(void *arg, store_status_t st, int64_t n, const char *text);

/* GET or DELETE: the broadcast's channel is known. */
static void on_id_channel(void *arg, store_status_t st, int64_t n, const char *text)
{
    bc_req_t *r = arg;
    store_t *store = r->b->env->deliver.store;
    store_status_t cst = STORE_OK;

    (void)n;
    r->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        req_fail_store(r, st);
        return;
    }
    if (st != STORE_OK || strlen(text) >= sizeof(r->channel_buf)) {
        req_fail(r, BG_ERR_NOT_FOUND, "not found");
        return;
    }
    strcpy(r->channel_buf, text);
    r->channel_id = r->channel_buf;
    if (r->route == R_GET)
        r->call = store_bc_status(store, r->channel_id, r->id, on_status, r, &cst);
    else
        r->call =
            store_bc_cancel_run(store, r->channel_id, r->id, r->token.app, on_cancelled, r, &cst);
    if (r->call == NULL)
        req_fail_store(r, cst);
}

static void idem_start(bc_req_t *r);

static void token_known(bc_req_t *r, store_status_t st, const json_t *record)
{
    store_t *store = r->b->env->deliver.store;
    store_status_t cst = STORE_OK;

    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        req_fail_store(r, st);
        return;
    }
    if (st != STORE_OK || auth_token_decode(record, &r->token) < 0 ||
        !auth_allows(&r->token, AUTH_ACCEPT_BROADCAST, clock_wall_ms())) {
        req_fail(r, BG_ERR_UNAUTHORIZED, "User is not authorized");
        return;
    }
    if (r->route != R_POST) {
        r->call = store_bc_channel(store, r->id, on_id_channel, r, &cst);
        if (r->call == NULL)
            req_fail_store(r, cst);
        return;
    }
    if (r->idem_key != NULL) {
        idem_start(r);
        return;
    }
    post_channel_read(r);
}

/* POST: the channel's record, cached or read. */
static void post_channel_read(bc_req_t *r)
{
    store_t *store = r->b->env->deliver.store;
    store_status_t cst = STORE_OK;
    json_t *cached;

    if ((cached = store_cached_channel(store, r->channel_id)) != NULL) {
        post_channel(r, STORE_OK, cached);
        return;
    }
    r->channel_call = store_get_channel(store, r->channel_id, on_channel, r, &cst);
    if (r->channel_call == NULL)
        req_fail_store(r, cst);
}

static void on_token(void *arg, store_status_t st, json_t *value)
{
    bc_req_t *r = arg;

    r->token_call = NULL;
    token_known(r, st, value);
    json_decref(value);
}

static void take_token(bc_req_t *r)
{
    store_t *store = r->b->env->deliver.store;
    store_status_t st = STORE_OK;
    json_t *cached = store_cached_token(store, r->token_hash);

    if (cached != NULL) {
        token_known(r, STORE_OK, cached);
        json_decref(cached);
        return;
    }
    r->token_call = store_get_token(store, r->token_hash, on_token, r, &st);
    if (r->token_call == NULL)
        req_fail_store(r, st);
}

/* A request of one of the routes: NULL when it was answered already. */
static bc_req_t *req_new(broadcasts_t *b, struct evhttp_request *req, bc_route_t route)
{
    bc_req_t *r = calloc(1, sizeof(*r));

    if (r == NULL) {
        http_refuse(b->env->http, req);
        return NULL;
    }
    r->b = b;
    r->req = req;
    r->route = route;
    r->started_us = clock_mono_us();
    rng_hex(&b->env->deliver.rng, r->request_id, 16);
    DLIST_APPEND(b->reqs, b->reqs_last, r);
    b->env->in_flight++;
    if (b->env->outbox == NULL) {
        req_fail(r, BG_ERR_UNAVAILABLE, "broadcasts need the outbox");
        return NULL;
    }
    if (b->env->draining) {
        req_fail(r, BG_ERR_UNAVAILABLE, "server is shutting down");
        return NULL;
    }
    if (op_request_token(req, r->token_hash) < 0) {
        req_fail(r, BG_ERR_UNAUTHORIZED, "User is not authorized");
        return NULL;
    }
    return r;
}

/* The request's Idempotency-Key, if it has one (given once, valid), and its fingerprint: the
 * route and the body as received (a large body's was made as it was checked). */
static int idem_take(bc_req_t *r, struct evhttp_request *req, size_t len, bg_error_t *err)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    struct evkeyval *kv;
    const char *key = NULL;

    TAILQ_FOREACH(kv, evhttp_request_get_input_headers(req), next)
    {
        if (evutil_ascii_strcasecmp(kv->key, "Idempotency-Key") != 0)
            continue;
        if (key != NULL)
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter Idempotency-Key must be given once: the request has "
                                "two");
        key = kv->value;
    }
    if (key == NULL)
        return 0;
    if (!idem_key_valid(key))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter Idempotency-Key must be 1-255 printable ASCII characters");
    if ((r->idem_key = strdup(key)) == NULL)
        return bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
    if (r->big != NULL)
        snprintf(r->idem_fp, sizeof(r->idem_fp), "%s", bc_ids_fingerprint(r->big));
    else
        idem_fingerprint(IDEM_ROUTE, len ? (const char *)evbuffer_pullup(in, -1) : "", len,
                         r->idem_fp);
    return 0;
}

/* A large body was checked (bc_ids_check): the checks of a small one's value follow. */
static void on_big_checked(void *arg, json_t *root, const bg_error_t *checked)
{
    bc_req_t *r = arg;
    bg_error_t err;

    memset(&err, 0, sizeof(err));
    if (checked != NULL) {
        req_fail_err(r, checked);
        return;
    }
    r->root = root;
    if (check_body(r, &err) < 0 || idem_take(r, r->req, 0, &err) < 0) {
        req_fail_err(r, &err);
        return;
    }
    take_token(r);
}

void broadcasts_post_route(void *arg, struct evhttp_request *req)
{
    broadcasts_t *b = arg;
    bc_req_t *r = req_new(b, req, R_POST);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    bg_error_t err;

    if (r == NULL)
        return;
    memset(&err, 0, sizeof(err));
    if (len > REQUEST_MAX_BODY &&
        b->big_bytes + len > (size_t)b->env->deliver.cfg->max_reading_mb * 1024 * 1024) {
        /* held until answered, past the reading budget (conn.c): as many again at most */
        req_fail(r, BG_ERR_UNAVAILABLE, "too many large broadcasts being accepted; retry");
        return;
    }
    if (len > REQUEST_MAX_BODY) {
        /* up to a million ids (conn.c let it be read): checked in steps of the loop */
        const char *fp =
            evhttp_find_header(evhttp_request_get_input_headers(req), "Idempotency-Key") != NULL
                ? IDEM_ROUTE
                : NULL;
        r->big = bc_ids_check(b->env->deliver.base, in, fp, on_big_checked, r);
        if (r->big == NULL)
            req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
        else
            b->big_bytes += len;
        return;
    }
    if (request_parse_json(len ? (const char *)evbuffer_pullup(in, -1) : "", len, &r->root, &err) <
            0 ||
        check_body(r, &err) < 0 || idem_take(r, req, len, &err) < 0) {
        req_fail_err(r, &err);
        return;
    }
    take_token(r);
}

/* ---- GET and DELETE /broadcasts/<id> ---- */

static void on_status(void *arg, store_status_t st, const store_bc_status_t *s)
{
    bc_req_t *r = arg;
    store_status_t cst = STORE_OK;

    r->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        req_fail_store(r, st);
        return;
    }
    /* another app's broadcast is answered exactly like one that does not exist, and so is
     * one still being accepted (its id is not given out yet) */
    if (st != STORE_OK || strcmp(s->app, r->token.app) != 0 || strcmp(s->state, "accepting") == 0) {
        req_fail(r, BG_ERR_NOT_FOUND, "not found");
        return;
    }
    /* DELETE: answered once no attempt of the broadcast may still send */
    if (r->route == R_DELETE && s->sending > 0 && clock_mono_us() < r->wait_until_us) {
        outbox_arm(r->timer, CANCEL_POLL_MS);
        return;
    }
    if (r->route == R_DELETE && s->sending > 0)
        log_msg(LOG_WARN, "broadcast %s cancelled with %lld attempts still running", r->id,
                (long long)s->sending);
    (void)cst;
    answer_status(r, s);
}

static void on_cancel_poll(evutil_socket_t fd, short what, void *arg)
{
    bc_req_t *r = arg;
    store_status_t st = STORE_OK;

    (void)fd;
    (void)what;
    r->call = store_bc_status(r->b->env->deliver.store, r->channel_id, r->id, on_status, r, &st);
    if (r->call == NULL)
        req_fail_store(r, st);
}

static void on_cancelled(void *arg, store_status_t st, int64_t n, const char *text)
{
    bc_req_t *r = arg;
    const config_t *cfg = r->b->env->deliver.cfg;

    r->call = NULL;
    if (st != STORE_OK) {
        req_fail_store(r, st);
        return;
    }
    if (n < 0 || strcmp(text, "accepting") == 0) {
        req_fail(r, BG_ERR_NOT_FOUND, "not found");
        return;
    }
    if (strcmp(text, "running") == 0) /* this one cancelled it (the delivery queues its callback) */
        metrics_count(&metrics(r->b)->broadcasts[2]);
    r->wait_until_us =
        clock_mono_us() + ((int64_t)cfg->request_timeout_ms + CANCEL_WAIT_EXTRA) * 1000;
    if ((r->timer = evtimer_new(r->b->env->deliver.base, on_cancel_poll, r)) == NULL) {
        req_fail(r, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    on_cancel_poll(-1, 0, r);
}

void broadcasts_id_route(void *arg, struct evhttp_request *req)
{
    broadcasts_t *b = arg;
    const char *id = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req)) + sizeof(PATH) - 1;
    bc_route_t route = evhttp_request_get_command(req) == EVHTTP_REQ_DELETE ? R_DELETE : R_GET;
    bc_req_t *r = req_new(b, req, route);

    if (r == NULL)
        return;
    if (strlen(id) != ID_LEN || strspn(id, "0123456789abcdef") != ID_LEN) {
        /* not one of ours: not found, once the token is known to be allowed */
        memset(r->id, '0', ID_LEN);
    } else {
        memcpy(r->id, id, ID_LEN + 1);
    }
    take_token(r);
}

/* ---- the worker's broadcasts ---- */

broadcasts_t *broadcasts_new(op_env_t *env)
{
    broadcasts_t *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->env = env;
    if ((b->pump = bcpump_new(env)) == NULL) {
        free(b);
        return NULL;
    }
    return b;
}

void broadcasts_free(broadcasts_t *b)
{
    if (b == NULL)
        return;
    while (b->reqs != NULL) {
        bc_req_t *r = b->reqs;
        if (r->req != NULL) {
            r->created = r->route == R_POST && r->created;
            req_fail(r, BG_ERR_UNAVAILABLE, "server is shutting down");
        } else {
            req_free(r);
        }
    }
    bcpump_free(b->pump);
    free(b);
}
