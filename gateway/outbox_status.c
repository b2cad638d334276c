/* outbox_status.c - the status of a queued request (contract.md section 12): the status object
 * the callbacks carry, and GET /requests/<id>, answered only to the request's app (any other
 * app's id, or one botgate never made, is 129 "not found" alike). */
#include "outbox_status.h"

#include "../core/clock.h"
#include "../core/dlist.h"
#include "../core/rng.h"
#include "log.h"

#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATUS_PATH "/requests/"

typedef struct ob_get ob_get_t;

/* One worker's, from outbox_status_new to outbox_status_free. */
struct outbox_status {
    op_env_t *env;
    ob_get_t *gets, *gets_last;
};

/* A GET /requests/<id> in flight. */
struct ob_get {
    outbox_status_t *os;
    ob_get_t *prev, *next;
    struct evhttp_request *req;
    store_call_t *token_call;
    store_outbox_call_t *call;
    auth_token_t token;
    unsigned shard;
    int64_t started_us;
    char id[OUTBOX_REQUEST_ID_LEN + 1];
    char request_id[17];
};

/* The shard a request id names, -1 when it is not one of ours (24 lower-case hex). */
static int id_shard(const char *id)
{
    if (strlen(id) != OUTBOX_REQUEST_ID_LEN ||
        strspn(id, "0123456789abcdef") != OUTBOX_REQUEST_ID_LEN)
        return -1;
    return (int)strtol((char[]){id[0], id[1], '\0'}, NULL, 16);
}

/* The receipts of the platforms' webhooks (contract.md section 14) into the elements of the
 * status text: element i of sendResult.result gets "receipt":"delivered|read|failed". The text
 * is taken over; the new one is returned (the old one when there is nothing to add). */
static char *add_receipts(char *text, size_t *len, const char *receipts)
{
    json_t *rc = receipts[0] ? json_loads(receipts, 0, NULL) : NULL, *st, *results, *v;
    const char *k;
    char *out;

    if (json_object_size(rc) == 0 || (st = json_loadb(text, *len, 0, NULL)) == NULL) {
        json_decref(rc);
        return text;
    }
    results = json_object_get(json_object_get(st, "sendResult"), "result");
    json_object_foreach(rc, k, v) {
        json_t *el = json_array_get(results, (size_t)strtoul(k, NULL, 10));
        if (json_is_object(el) && json_is_string(v))
            json_object_set(el, "receipt", v);
    }
    if ((out = jw_dump(st, len)) != NULL) {
        free(text);
        text = out;
    }
    json_decref(st);
    json_decref(rc);
    return text;
}

/* A status object's start: {"ok":1, then "eventId" for a callback, then its id as name. */
static void status_head(jsonw_t *w, const char *event_id, const char *name, const char *id)
{
    jw_init(w);
    jw_lit(w, "{\"ok\":1,");
    if (event_id != NULL) {
        jw_lit(w, "\"eventId\":");
        jw_str(w, event_id);
        jw_lit(w, ",");
    }
    jw_lit(w, name);
    jw_str(w, id);
}

char *outbox_status_text(const char *id, const store_outbox_status_t *s, const char *event_id,
                         size_t *len)
{
    jsonw_t w;
    char *text;

    status_head(&w, event_id, "\"requestId\":", id);
    jw_lit(&w, ",\"status\":");
    jw_str(&w, s->status);
    jw_lit(&w, ",\"attempts\":");
    jw_int(&w, s->attempts);
    jw_lit(&w, ",\"createdAt\":");
    jw_int(&w, s->created_ms);
    jw_lit(&w, ",\"updatedAt\":");
    jw_int(&w, s->updated_ms);
    jw_lit(&w, ",");
    if (s->result != NULL) {
        jw_raw(&w, s->result, s->result_len);
    } else {
        /* the elements so far; a response not recorded yet has none */
        int ok = 1, first = 1;
        for (unsigned i = 0; i < s->n_elements; i++)
            if (memmem(s->elements[i], s->element_lens[i], "\"error\":{", 9) != NULL)
                ok = 0;
        jw_lit(&w, ok ? "\"sendResult\":{\"ok\":1,\"member\":"
                      : "\"sendResult\":{\"ok\":0,\"member\":");
        jw_str(&w, s->member_id);
        jw_lit(&w, ",\"result\":[");
        for (unsigned i = 0; i < s->n_elements; i++) {
            if (s->element_lens[i] == 0)
                continue;
            if (!first)
                jw_lit(&w, ",");
            jw_raw(&w, s->elements[i], s->element_lens[i]);
            first = 0;
        }
        jw_lit(&w, "]}");
    }
    jw_lit(&w, "}");
    if (w.failed || (text = jw_steal(&w, len)) == NULL) {
        jw_free(&w);
        return NULL;
    }
    return s->receipts != NULL ? add_receipts(text, len, s->receipts) : text;
}

static void get_free(ob_get_t *g)
{
    store_cancel(g->token_call);
    store_outbox_cancel(g->call);
    auth_token_free(&g->token);
    DLIST_UNLINK(g->os->gets, g->os->gets_last, g);
    free(g);
}

/* Answers (text taken over) and frees g. */
static void get_answer(ob_get_t *g, int status, int code, char *text, size_t len)
{
    op_env_t *env = g->os->env;
    http_answer_t a;

    memset(&a, 0, sizeof(a));
    a.status = status;
    a.code = code;
    a.route = METRICS_ROUTE_REQUESTS;
    a.request_id = g->request_id;
    a.app = g->token.record != NULL ? g->token.app : NULL;
    a.started_us = g->started_us;
    a.close = env->draining != 0;
    http_answer(env->http, g->req, &a, text, len);
    get_free(g);
}

static void get_fail(ob_get_t *g, int code, const char *msg)
{
    bg_error_t err;
    json_t *body;
    char *text;
    size_t len = 0;

    bg_error_set(&err, code, "%s", msg);
    body = bg_error_to_json(&err);
    text = body != NULL ? jw_dump(body, &len) : NULL;
    json_decref(body);
    get_answer(g, 500, code, text, len);
}

static void on_get_status(void *arg, store_status_t st, const store_outbox_status_t *s)
{
    ob_get_t *g = arg;
    char *text;
    size_t len = 0;

    g->call = NULL;
    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        get_fail(g, BG_ERR_STORE, "store unavailable");
        return;
    }
    /* another app's request is answered exactly like one that does not exist */
    if (st != STORE_OK || strcmp(s->app, g->token.app) != 0) {
        get_fail(g, BG_ERR_NOT_FOUND, "not found");
        return;
    }
    if ((text = outbox_status_text(g->id, s, NULL, &len)) == NULL) {
        get_fail(g, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    get_answer(g, 200, 0, text, len);
}

/* The token is known: is it allowed, and is the request its app's? */
static void get_check(ob_get_t *g, store_status_t st, const json_t *record)
{
    store_status_t cst = STORE_OK;

    if (st == STORE_UNAVAILABLE || st == STORE_BUSY) {
        get_fail(g, BG_ERR_STORE, "store unavailable");
        return;
    }
    if (st != STORE_OK || auth_token_decode(record, &g->token) < 0 ||
        !auth_allows(&g->token, AUTH_ACCEPT_SEND, clock_wall_ms())) {
        get_fail(g, BG_ERR_UNAUTHORIZED, "User is not authorized");
        return;
    }
    if (g->shard >= 256) {
        get_fail(g, BG_ERR_NOT_FOUND, "not found");
        return;
    }
    g->call =
        store_outbox_status(g->os->env->deliver.store, g->shard, g->id, on_get_status, g, &cst);
    if (g->call == NULL)
        get_fail(g, BG_ERR_STORE, "store unavailable");
}

static void on_get_token(void *arg, store_status_t st, json_t *value)
{
    ob_get_t *g = arg;

    g->token_call = NULL;
    get_check(g, st, value);
    json_decref(value);
}

void outbox_status_get(outbox_status_t *os, struct evhttp_request *req)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *id = evhttp_uri_get_path(uri) + sizeof(STATUS_PATH) - 1;
    char hash[AUTH_HASH_HEX];
    ob_get_t *g = calloc(1, sizeof(*g));
    store_status_t st = STORE_OK;
    json_t *cached;
    int shard = id_shard(id);

    if (g == NULL) {
        http_send_json(req, 503, "Service Unavailable",
                       "{\"ok\":0,\"err_code\":121,\"err\":\"out of memory\","
                       "\"error\":\"out of memory\"}");
        return;
    }
    g->os = os;
    g->req = req;
    g->started_us = clock_mono_us();
    g->shard = shard < 0 ? 256 : (unsigned)shard; /* not one of ours: not found, once allowed */
    if (shard >= 0)
        memcpy(g->id, id, OUTBOX_REQUEST_ID_LEN + 1);
    rng_hex(&os->env->deliver.rng, g->request_id, 16);
    DLIST_APPEND(os->gets, os->gets_last, g);
    if (op_request_token(req, hash) < 0) {
        get_fail(g, BG_ERR_UNAUTHORIZED, "User is not authorized");
        return;
    }
    if ((cached = store_cached_token(os->env->deliver.store, hash)) != NULL) {
        get_check(g, STORE_OK, cached);
        json_decref(cached);
        return;
    }
    g->token_call = store_get_token(os->env->deliver.store, hash, on_get_token, g, &st);
    if (g->token_call == NULL)
        get_fail(g, BG_ERR_STORE, "store unavailable");
}

outbox_status_t *outbox_status_new(op_env_t *env)
{
    outbox_status_t *os = calloc(1, sizeof(*os));

    if (os != NULL)
        os->env = env;
    return os;
}

void outbox_status_free(outbox_status_t *os)
{
    if (os == NULL)
        return;
    while (os->gets != NULL)
        get_free(os->gets);
    free(os);
}

char *outbox_broadcast_status_text(const char *id, const store_bc_status_t *s, const char *event_id,
                                   size_t *len)
{
    int64_t queued = s->total - s->sent - s->failed - s->unknown - s->cancelled;
    jsonw_t w;
    char *text;

    status_head(&w, event_id, "\"broadcastId\":", id);
    jw_lit(&w, ",\"state\":");
    jw_str(&w, strcmp(s->state, "accepting") == 0 ? "running" : s->state);
    {
        const struct {
            const char *name;
            int64_t v;
        } n[] = {{",\"total\":", s->total},
                 {",\"queued\":", queued > 0 ? queued : 0},
                 {",\"sent\":", s->sent},
                 {",\"failed\":", s->failed},
                 {",\"unknown\":", s->unknown},
                 {",\"cancelled\":", s->cancelled},
                 {",\"createdAt\":", s->created_ms},
                 {",\"updatedAt\":", s->updated_ms}};
        for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
            jw_lit(&w, n[i].name);
            jw_int(&w, n[i].v);
        }
    }
    jw_lit(&w, "}");
    if (w.failed || (text = jw_steal(&w, len)) == NULL) {
        jw_free(&w);
        return NULL;
    }
    return text;
}
