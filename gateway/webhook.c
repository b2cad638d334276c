/* webhook.c - GET|POST /webhooks/<channelId>: the platforms' own webhooks verified, parsed by
 * the channel's adapter and stored as events (contract.md section 14). One request is a small
 * machine: CHANNEL -> (slack, wechat: REPLAY) -> for each event: MEMBER (the first beside the
 * app's subscriptions; INBOUND when lastInboundAt is left to a compare-and-set) -> for each
 * event: STORE -> the answer. Nothing of a request is parsed before its signature or token has
 * been checked. */
#include "webhook.h"

#include "../core/clock.h"
#include "../core/hint.h"
#include "../core/member.h"
#include "../core/rng.h"
#include "../store/hook.h"
#include "../store/outbox.h"
#include "../store/store.h"
#include "log.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOOK_PREFIX        "/webhooks/"
#define HOOK_CHANNEL_MAX   128 /* bytes of a channel id in the path */
#define HOOK_SKEW_S        300 /* slack, wechat: a timestamp further from now is refused */
#define HOOK_SEEN_MS       (2 * HOOK_SKEW_S * 1000) /* a signature is remembered this long */
#define HOOK_CHALLENGE_MAX 512
/* an event's id is remembered this long (a platform's retries are taken once), and its
 * member's order to a subscription kept: past the 24 h its posts are tried */
#define HOOK_KEEP_MS (25LL * 3600 * 1000)

typedef enum { HK_CHANNEL, HK_REPLAY, HK_MEMBER, HK_INBOUND, HK_STORE } hk_phase_t;

/* One webhook request, from its arrival to its answer. Owned by the webhook_t's list; freed
 * by hk_free once answered (or by webhook_free). */
typedef struct hook_req {
    struct webhook *wh;
    struct evhttp_request *req;
    struct hook_req *prev, *next;
    hk_phase_t phase;
    char id[17];
    char channel_id[HOOK_CHANNEL_MAX + 1];
    int post;
    json_t *channel;          /* the channel record (a reference) */
    const adapter_ops_t *ops; /* its adapter */
    const char *app;          /* the channel's app (in channel) */
    char *body;               /* the raw body, NUL-terminated (POST) */
    size_t len;
    char signature[65];           /* slack, wechat: the hex signature, remembered against replays */
    int seen;                     /* ...remembered now: forgotten again if the request fails */
    adapter_hook_t hook;          /* the events, parsed once verified */
    size_t next_event;            /* the event whose member is being found, then stored */
    char member_id[64];           /* its member */
    uint64_t hint;                /* its sender's place among the member ids remembered */
    int64_t inbound_at;           /* its lastInboundAt (0: a receipt) */
    int64_t now_ms;               /* the wall clock when it was looked for */
    uint64_t member_seq;          /* store_write_seq when the member was read */
    store_call_t *call;           /* the store call in flight, or NULL */
    store_hook_call_t *hcall;     /* or the member's or an event's script */
    store_hook_call_t *subs_call; /* the subscriptions' read, beside the first member's */
    json_t *subs;                 /* the app's subscriptions, once read */
    int members_done;             /* every event has its member: stored once subs is in */
    int64_t started_us;
} hook_req_t;

struct webhook {
    op_env_t *env;
    hook_req_t *reqs; /* in flight */
    int freeing;      /* webhook_free: the worker is past its drain */
    /* The member script names the member's key among its KEYS, so it must know the member's
     * id before it runs: the worker remembers the id it last found for each sender (a guess:
     * one that went wrong costs a round trip, never a wrong member), in the store's table of
     * recipients (store_recipient_hints), which a send by recipientId learns from too. */
};

webhook_t *webhook_new(op_env_t *env)
{
    struct webhook *wh = calloc(1, sizeof(*wh));

    if (wh != NULL)
        wh->env = env;
    return wh;
}

static void hk_free(hook_req_t *h)
{
    struct webhook *wh = h->wh;
    op_env_t *env = wh->env;

    if (h->call != NULL)
        store_cancel(h->call);
    store_hook_cancel(h->hcall);
    store_hook_cancel(h->subs_call);
    json_decref(h->subs);
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        h->wh->reqs = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    json_decref(h->channel);
    free(h->body);
    adapter_hook_clear(&h->hook);
    free(h);
    /* counted with the API's requests: a drain waits for it as for them */
    if (--env->in_flight == 0 && env->draining && env->done != NULL && !wh->freeing)
        env->done(env->done_arg);
}

void webhook_free(struct webhook *wh)
{
    if (wh == NULL)
        return;
    wh->freeing = 1;
    while (wh->reqs != NULL)
        hk_free(wh->reqs);
    free(wh);
}

/* ---- answers ---- */

/* Sends text (taken over; NULL: none) with status and frees h. content_type NULL: JSON. */
static void hk_answer(hook_req_t *h, int status, int code, const char *content_type, char *text)
{
    op_env_t *env = h->wh->env;
    http_answer_t a;

    memset(&a, 0, sizeof(a));
    a.status = status;
    a.code = code;
    a.route = METRICS_ROUTE_WEBHOOKS;
    a.request_id = h->id;
    a.channel = h->channel_id[0] ? h->channel_id : NULL;
    a.member = h->member_id[0] ? h->member_id : NULL;
    a.app = h->app;
    a.started_us = h->started_us;
    a.close = env->draining != 0;
    if (content_type != NULL)
        evhttp_add_header(evhttp_request_get_output_headers(h->req), "Content-Type", content_type);
    /* not taken: Slack tries again, perhaps with the same signature, which must then pass */
    if (status >= 500 && h->seen)
        store_hook_forget(env->deliver.store, h->channel_id, h->signature);
    http_answer(env->http, h->req, &a, text, text ? strlen(text) : 0);
    h->req = NULL;
    hk_free(h);
}

static void hk_fail(hook_req_t *h, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The interface's failure answer: {"ok":0,"err_code":N,"err":msg,"error":msg}. */
static void hk_fail(hook_req_t *h, int status, int code, const char *fmt, ...)
{
    bg_error_t err;
    va_list ap;
    json_t *j;

    bg_error_clear(&err);
    err.code = code;
    va_start(ap, fmt);
    vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
    va_end(ap);
    bg_utf8_sanitize(err.msg);
    j = bg_error_to_json(&err);
    hk_answer(h, status, code, NULL, jw_dump(j, NULL));
    json_decref(j);
}

/* The challenge of a webhook's 401 (RFC 9110 section 11.6.1 wants one on every 401). Its
 * credential is the platform's signature (or whatsapp's token, or Meta's verify token in a
 * handshake), never a Bearer token: the API's "Bearer" would send whoever reads the answer
 * looking for a token to get. No registered scheme names a signature over the request, so
 * "Signature", with where the platform puts it. */
static const char *hk_challenge(const hook_req_t *h)
{
    const char *type = h->ops->type;

    if (strcmp(type, "slack") == 0)
        return "Signature realm=\"webhooks\", header=\"X-Slack-Signature\"";
    if (strcmp(type, "wechat") == 0)
        return "Signature realm=\"webhooks\", param=\"signature\"";
    if (strcmp(type, "whatsapp") == 0)
        return "Signature realm=\"webhooks\", param=\"token\"";
    return h->post ? "Signature realm=\"webhooks\", header=\"X-Hub-Signature-256\""
                   : "Signature realm=\"webhooks\", param=\"hub.verify_token\"";
}

/* A signature or token missing or wrong: 401, counted; nothing of the request is read. */
static void hk_refuse(hook_req_t *h, metrics_hook_refusal_t why, const char *msg)
{
    metrics_hook_refused(h->wh->env->deliver.metrics, h->ops->type, why);
    evhttp_add_header(evhttp_request_get_output_headers(h->req), "WWW-Authenticate",
                      hk_challenge(h));
    hk_fail(h, 401, BG_ERR_SIGNATURE, "%s", msg);
}

static void hk_fail_store(hook_req_t *h, store_status_t st)
{
    if (st == STORE_BAD_RECORD)
        hk_fail(h, 500, BG_ERR_STORE, "a stored record is not valid");
    else
        hk_fail(h, 503, BG_ERR_STORE, "store unavailable");
}

static void hk_answer_text(hook_req_t *h, const char *text)
{
    hk_answer(h, 200, 0, "text/plain; charset=utf-8", strdup(text));
}

/* ---- verification: every secret compared in constant time ---- */

/* Whether given equals the secret: their SHA-256 compared with CRYPTO_memcmp, so that neither
 * the time nor the length tells anything of the secret. */
static int same_secret(const char *given, const char *secret)
{
    unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];

    if (given == NULL || secret == NULL || *secret == '\0')
        return 0;
    SHA256((const unsigned char *)given, strlen(given), a);
    SHA256((const unsigned char *)secret, strlen(secret), b);
    return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

static void to_hex(const unsigned char *d, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Whether given (hex, either case) is the hex of mac (n bytes), in constant time. */
static int same_hex(const char *given, const unsigned char *mac, size_t n)
{
    char want[2 * EVP_MAX_MD_SIZE + 1], got[2 * EVP_MAX_MD_SIZE + 1];
    size_t len = given ? strlen(given) : 0;

    if (len != 2 * n)
        return 0;
    for (size_t i = 0; i < len; i++)
        got[i] = (char)(given[i] >= 'A' && given[i] <= 'F' ? given[i] - 'A' + 'a' : given[i]);
    got[len] = '\0';
    to_hex(mac, n, want);
    return CRYPTO_memcmp(got, want, len) == 0;
}

/* HMAC-SHA256 of the parts (joined) with key into mac (32 bytes); -1 when out of memory. */
static int hmac256(const char *key, const char *const *parts, const size_t *lens, int n,
                   unsigned char *mac)
{
    size_t total = 0, at = 0;
    unsigned int maclen = 0;
    unsigned char *buf;
    int ok;

    for (int i = 0; i < n; i++)
        total += lens[i];
    if ((buf = malloc(total + 1)) == NULL)
        return -1;
    for (int i = 0; i < n; i++) {
        memcpy(buf + at, parts[i], lens[i]);
        at += lens[i];
    }
    ok =
        HMAC(EVP_sha256(), key, (int)strlen(key), buf, total, mac, &maclen) != NULL && maclen == 32;
    free(buf);
    return ok ? 0 : -1;
}

static const char *info_str(const hook_req_t *h, const char *field)
{
    return adapter_info_str(json_object_get(h->channel, "info"), field);
}

static const char *header(const hook_req_t *h, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(h->req), name);
}

/* Meta (facebook, whatsapp-cloud): X-Hub-Signature-256: sha256=<hex HMAC of the raw body>. */
static int meta_signed(hook_req_t *h, const char **why)
{
    const char *secret = info_str(h, "appSecret"), *sig = header(h, "X-Hub-Signature-256");
    unsigned char mac[32];
    const char *parts[] = {h->body};
    size_t lens[] = {h->len};

    if (secret == NULL)
        return *why = "the channel has no info.appSecret to verify X-Hub-Signature-256", 0;
    if (sig == NULL || strncmp(sig, "sha256=", 7) != 0)
        return *why = "X-Hub-Signature-256 is missing", 0;
    if (hmac256(secret, parts, lens, 1, mac) < 0 || !same_hex(sig + 7, mac, sizeof(mac)))
        return *why = "X-Hub-Signature-256 does not match the body", 0;
    return 1;
}

/* slack: X-Slack-Signature: v0=<hex HMAC of "v0:<X-Slack-Request-Timestamp>:<body>">, the
 * timestamp within 5 minutes of now. 0 with *why; *replay set when only the time is wrong. */
/* Whether ts (unix seconds, digits only) is within HOOK_SKEW_S of now: 1, 0 when it is
 * further, -1 when it is not a number. */
static int fresh_time(const char *ts)
{
    int64_t now_s = clock_wall_ms() / 1000;
    char *end = NULL;
    long long t;

    if (ts == NULL || *ts < '0' || *ts > '9')
        return -1;
    t = strtoll(ts, &end, 10);
    if (*end != '\0' || t <= 0)
        return -1;
    return t >= now_s - HOOK_SKEW_S && t <= now_s + HOOK_SKEW_S;
}

static int slack_signed(hook_req_t *h, const char **why, int *replay)
{
    const char *secret = info_str(h, "signingSecret"), *sig = header(h, "X-Slack-Signature");
    const char *ts = header(h, "X-Slack-Request-Timestamp");
    unsigned char mac[32];
    int fresh = fresh_time(ts);
    const char *parts[] = {"v0:", ts, ":", h->body};
    size_t lens[] = {3, ts ? strlen(ts) : 0, 1, h->len};

    *replay = 0;
    if (secret == NULL)
        return *why = "the channel has no info.signingSecret to verify X-Slack-Signature", 0;
    if (sig == NULL || strncmp(sig, "v0=", 3) != 0)
        return *why = "X-Slack-Signature is missing", 0;
    if (fresh < 0)
        return *why = "X-Slack-Request-Timestamp is missing or not a number", 0;
    if (hmac256(secret, parts, lens, 4, mac) < 0 || !same_hex(sig + 3, mac, sizeof(mac)))
        return *why = "X-Slack-Signature does not match the timestamp and body", 0;
    if (!fresh) {
        *replay = 1;
        return *why = "X-Slack-Request-Timestamp is more than 5 minutes from now", 0;
    }
    return 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* wechat: signature = hex SHA-1 of the sorted concatenation of token, timestamp and nonce. */
static int wechat_signed(hook_req_t *h, const struct evkeyvalq *q, const char **why)
{
    const char *token = info_str(h, "token");
    const char *parts[3] = {token, evhttp_find_header(q, "timestamp"),
                            evhttp_find_header(q, "nonce")};
    const char *sig = evhttp_find_header(q, "signature");
    unsigned char md[SHA_DIGEST_LENGTH];
    char joined[3 * HOOK_CHALLENGE_MAX + 1];

    if (token == NULL)
        return *why = "the channel has no info.token to verify the signature", 0;
    if (sig == NULL || parts[1] == NULL || parts[2] == NULL)
        return *why = "signature, timestamp or nonce is missing", 0;
    if (strlen(parts[0]) + strlen(parts[1]) + strlen(parts[2]) >= sizeof(joined))
        return *why = "timestamp or nonce is too long", 0;
    qsort(parts, 3, sizeof(parts[0]), cmp_str);
    snprintf(joined, sizeof(joined), "%s%s%s", parts[0], parts[1], parts[2]);
    SHA1((const unsigned char *)joined, strlen(joined), md);
    if (!same_hex(sig, md, sizeof(md)))
        return *why = "signature does not match", 0;
    return 1;
}

/* A handshake answer must be plain text of a sane size, or the platform's check fails. */
static int challenge_ok(const char *c)
{
    size_t n = c ? strlen(c) : 0;

    if (n == 0 || n > HOOK_CHALLENGE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f)
            return 0;
    return 1;
}

/* GET: the platform checks that the URL is botgate's (Meta, wechat), or an operator checks a
 * whatsapp on-premises URL. Answered here. */
static void hk_handshake(hook_req_t *h, const struct evkeyvalq *q)
{
    const char *type = h->ops->type, *why = NULL;

    if (strcmp(type, "facebook") == 0 || strcmp(type, "whatsapp-cloud") == 0) {
        const char *mode = evhttp_find_header(q, "hub.mode");
        const char *challenge = evhttp_find_header(q, "hub.challenge");
        if (info_str(h, "verifyToken") == NULL) {
            hk_refuse(h, METRICS_HOOK_SIGNATURE,
                      "the channel has no info.verifyToken to check hub.verify_token");
            return;
        }
        if (!same_secret(evhttp_find_header(q, "hub.verify_token"), info_str(h, "verifyToken"))) {
            hk_refuse(h, METRICS_HOOK_SIGNATURE, "hub.verify_token is missing or wrong");
            return;
        }
        if (mode == NULL || strcmp(mode, "subscribe") != 0 || !challenge_ok(challenge)) {
            hk_fail(h, 400, BG_ERR_MISSING_PARAM,
                    "parameter hub.mode (subscribe) or hub.challenge is missing or wrong");
            return;
        }
        hk_answer_text(h, challenge);
        return;
    }
    if (strcmp(type, "wechat") == 0) {
        const char *echostr = evhttp_find_header(q, "echostr");
        if (!wechat_signed(h, q, &why)) {
            hk_refuse(h, METRICS_HOOK_SIGNATURE, why);
            return;
        }
        if (!challenge_ok(echostr)) {
            hk_fail(h, 400, BG_ERR_MISSING_PARAM, "parameter echostr is missing or wrong");
            return;
        }
        hk_answer_text(h, echostr);
        return;
    }
    if (strcmp(type, "whatsapp") == 0) {
        if (!same_secret(evhttp_find_header(q, "token"), info_str(h, "verifyToken"))) {
            hk_refuse(h, METRICS_HOOK_SIGNATURE,
                      "parameter token is missing or is not the channel's "
                      "info.verifyToken");
            return;
        }
        hk_answer(h, 200, 0, NULL, strdup("{\"ok\":1}"));
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(h->req), "Allow", "POST");
    hk_fail(h, 405, BG_ERR_NO_ROUTE, "%s webhooks are POSTed only", type);
}

/* ---- the events ---- */

static void hk_next(hook_req_t *h);
static void hk_store_next(hook_req_t *h);

static void hk_done(hook_req_t *h)
{
    const char *type = h->ops->type;

    metrics_hook_events(h->wh->env->deliver.metrics, type,
                        (unsigned)json_array_size(h->hook.events));
    /* what each platform takes for "received" */
    if (strcmp(type, "wechat") == 0)
        hk_answer_text(h, "success");
    else
        hk_answer(h, 200, 0, NULL, strdup("{\"ok\":1}"));
}

/* ---- each event's member ---- */

/* The time a message or a tap moves member.lastInboundAt to: the platform's time of it, never
 * later than now (a clock ahead would open a window that has not begun); 0 for a receipt. */
static int64_t inbound_time(const json_t *ev, int64_t now)
{
    const char *type = json_string_value(json_object_get(ev, "eventType"));
    int64_t at = json_integer_value(json_object_get(ev, "timestamp"));

    if (strcmp(type, "INBOUND") != 0 && strcmp(type, "POSTBACK") != 0)
        return 0;
    return at <= 0 || at > now ? now : at;
}

static void on_inbound(void *arg, store_status_t st, json_t *value)
{
    hook_req_t *h = arg;

    h->call = NULL;
    json_decref(value);
    if (st != STORE_OK) {
        hk_fail_store(h, st);
        return;
    }
    hk_next(h);
}

/* The event has its member: its id goes into the event. lastInboundAt was kept by the same
 * script, unless the record holds it in a form only member_mark_inbound reads (record): then
 * by compare-and-set against the record the script read, a round trip more. */
static void on_member(void *arg, store_status_t st, const char *member_id, json_t *record)
{
    hook_req_t *h = arg;
    json_t *ev = json_array_get(h->hook.events, h->next_event), *change;
    store_status_t sst;

    h->hcall = NULL;
    if (st != STORE_OK) {
        hk_fail_store(h, st);
        return;
    }
    snprintf(h->member_id, sizeof(h->member_id), "%s", member_id);
    json_object_set_new(ev, "memberId", json_string(member_id));
    hint_put(store_recipient_hints(h->wh->env->deliver.store), h->hint, member_id);
    h->next_event++;
    if (record == NULL) {
        hk_next(h);
        return;
    }
    change = json_pack("{s:I}", "lastInboundAt", (json_int_t)h->inbound_at);
    h->phase = HK_INBOUND;
    h->call = store_update_member(h->wh->env->deliver.store, h->channel_id, h->member_id, record,
                                  h->member_seq, member_mark_inbound, change, h->now_ms, on_inbound,
                                  h, &sst);
    json_decref(change);
    json_decref(record);
    if (h->call == NULL)
        hk_fail_store(h, sst);
}

/* ---- the events into the outbox, one after the other (a member's stay in order) ---- */

/* The event's id: the same for the platform's retries of it (a hash of the channel, the kind
 * and the platform's id), so that a subscriber can tell a repeat. */
static void event_id(const char *channel, const json_t *ev, char out[33])
{
    const char *parts[] = {channel, json_string_value(json_object_get(ev, "eventType")),
                           json_string_value(json_object_get(ev, "id"))};
    unsigned char md[SHA256_DIGEST_LENGTH];
    char *text;
    size_t n = 0;

    for (int i = 0; i < 3; i++)
        n += strlen(parts[i]) + 1;
    if ((text = malloc(n + 1)) != NULL) {
        snprintf(text, n + 1, "%s\n%s\n%s\n", parts[0], parts[1], parts[2]);
        SHA256((const unsigned char *)text, n, md);
        free(text);
    } else {
        memset(md, 0, sizeof(md));
    }
    to_hex(md, 16, out);
}

/* Whether subscription sub takes an event of type on this channel. */
static int sub_matches(const json_t *sub, const char *channel, const char *type)
{
    const json_t *only = json_object_get(sub, "channel"), *types = json_object_get(sub, "events");
    size_t i;
    json_t *t;

    if (json_is_string(only) && strcmp(json_string_value(only), channel) != 0)
        return 0;
    if (!json_is_array(types))
        return 1;
    json_array_foreach(types, i, t) {
        if (json_is_string(t) && strcmp(json_string_value(t), type) == 0)
            return 1;
    }
    return 0;
}

static void on_event_added(void *arg, store_status_t st, int queued)
{
    hook_req_t *h = arg;

    (void)queued; /* 0: a retry of an event queued before: nothing more to do either */
    h->hcall = NULL;
    if (st != STORE_OK) {
        hk_fail_store(h, st);
        return;
    }
    h->next_event++;
    hk_store_next(h);
}

/* A receipt's word for the element of the request that sent the message, NULL for an event
 * that is not a receipt. */
static const char *receipt_word(const char *type)
{
    return strcmp(type, "DELIVERED") == 0 ? "delivered"
           : strcmp(type, "READ") == 0    ? "read"
           : strcmp(type, "FAILED") == 0  ? "failed"
                                          : NULL;
}

/* The k-th platform message id a receipt names (whatsapp: one; a Messenger delivery: its mids),
 * NULL past the last. */
static const char *receipt_id(const json_t *ev, size_t k)
{
    const json_t *data = json_object_get(ev, "data");
    const char *one = json_string_value(json_object_get(data, "messageId"));

    if (one != NULL)
        return k == 0 ? one : NULL;
    return json_string_value(json_array_get(json_object_get(data, "messageIds"), k));
}

/* The next event, in the shape subscribers get, queued for every subscription it matches; a
 * receipt also marks the elements of the queued requests that sent its messages (contract
 * section 14), in the same script. */
static void hk_store_next(hook_req_t *h)
{
    json_t *ev = json_array_get(h->hook.events, h->next_event), *out, *sub;
    const char *type = json_string_value(json_object_get(ev, "eventType"));
    const char *member = json_string_value(json_object_get(ev, "memberId"));
    store_hook_event_t he;
    const char *msg;
    char id[33], *text = NULL;
    store_status_t st;
    size_t i;

    if (ev == NULL) {
        hk_done(h);
        return;
    }
    memset(&he, 0, sizeof(he));
    json_array_foreach(h->subs, i, sub) {
        if (he.n_subs < STORE_HOOK_SUBS_MAX && sub_matches(sub, h->channel_id, type)) {
            he.sub_ids[he.n_subs] = json_string_value(json_object_get(sub, "_id"));
            he.urls[he.n_subs++] = json_string_value(json_object_get(sub, "url"));
        }
    }
    he.receipt = receipt_word(type);
    for (i = 0;
         he.receipt != NULL && i < STORE_HOOK_MESSAGES_MAX && (msg = receipt_id(ev, i)) != NULL;
         i++)
        if (*msg != '\0' && strlen(msg) < ADAPTER_ID_MAX)
            he.message_ids[he.n_messages++] = msg;
    if (he.n_subs == 0 && he.n_messages == 0) { /* nobody wants it */
        h->next_event++;
        hk_store_next(h);
        return;
    }
    event_id(h->channel_id, ev, id);
    if (he.n_subs > 0) {
        out = json_pack("{s:s,s:s,s:s,s:s,s:O,s:O,s:O}", "eventId", id, "eventType", type,
                        "channelId", h->channel_id, "memberId", member, "timestamp",
                        json_object_get(ev, "timestamp"), "data", json_object_get(ev, "data"),
                        "platform", json_object_get(ev, "platform"));
        text = out ? json_dumps(out, JSON_COMPACT) : NULL;
        json_decref(out);
        if (text == NULL) {
            hk_fail(h, 503, BG_ERR_UNAVAILABLE, "out of memory");
            return;
        }
    }
    he.event_id = id;
    he.app = h->app;
    he.channel_id = h->channel_id;
    he.member_id = member;
    he.body = text ? text : "";
    he.body_len = strlen(he.body);
    h->hcall = store_hook_event(
        h->wh->env->deliver.store,
        store_outbox_shard((unsigned)h->wh->env->deliver.cfg->outbox_shards, h->channel_id, member),
        &he, HOOK_KEEP_MS, on_event_added, h, &st);
    free(text);
    if (h->hcall == NULL)
        hk_fail_store(h, st);
}

/* Every event has its member and the app's subscriptions are in: the events into the outbox.
 * A worker without its outbox (none was made) keeps the members and queues nothing. */
static void hk_store(hook_req_t *h)
{
    if (h->wh->env->outbox == NULL) {
        hk_done(h);
        return;
    }
    h->phase = HK_STORE;
    h->next_event = 0;
    hk_store_next(h);
}

static void on_subscriptions(void *arg, store_status_t st, const json_t *subs)
{
    hook_req_t *h = arg;

    h->subs_call = NULL;
    if (st != STORE_OK) {
        hk_fail_store(h, st);
        return;
    }
    h->subs = json_incref((json_t *)subs);
    if (h->members_done)
        hk_store(h);
}

/* The member of the next event, made when new (as a send by recipientId makes it), with its
 * lastInboundAt; once every event has its member (and the subscriptions are in), the events
 * are stored. */
static void hk_next(hook_req_t *h)
{
    json_t *ev = json_array_get(h->hook.events, h->next_event), *fresh, *change;
    const char *from = json_string_value(json_object_get(ev, "from"));
    char rid[ADAPTER_ID_MAX], mid[25];
    store_hook_member_t m;
    store_status_t st;
    op_env_t *env = h->wh->env;

    if (ev == NULL) {
        h->members_done = 1;
        if (h->subs_call == NULL)
            hk_store(h);
        return;
    }
    snprintf(rid, sizeof(rid), "%s", from);
    if (h->ops->phone_recipients)
        request_normalize_phone(from, rid, sizeof(rid));
    if (rid[0] == '\0') {
        hk_fail(h, 400, BG_ERR_MISSING_PARAM, "an event's sender is not a phone number");
        return;
    }
    h->now_ms = clock_wall_ms();
    h->inbound_at = inbound_time(ev, h->now_ms);
    rng_hex(&env->deliver.rng, mid, 24);
    fresh = member_new(mid, h->channel_id, h->app, rid, h->ops->type, h->now_ms);
    change =
        h->inbound_at > 0 ? json_pack("{s:I}", "lastInboundAt", (json_int_t)h->inbound_at) : NULL;
    if (fresh == NULL || (h->inbound_at > 0 &&
                          (change == NULL || member_mark_inbound(fresh, change, h->now_ms) < 0))) {
        json_decref(fresh);
        json_decref(change);
        hk_fail(h, 503, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    json_decref(change);
    h->hint = hint_hash(h->channel_id, rid);
    memset(&m, 0, sizeof(m));
    m.channel_id = h->channel_id;
    m.recipient_id = rid;
    m.guess_id = hint_get(store_recipient_hints(env->deliver.store), h->hint);
    m.fresh = fresh;
    m.inbound_at = h->inbound_at;
    m.now_ms = h->now_ms;
    h->phase = HK_MEMBER;
    h->member_seq = store_write_seq(env->deliver.store);
    h->hcall = store_hook_member(env->deliver.store, &m, on_member, h, &st);
    json_decref(fresh);
    if (h->hcall == NULL)
        hk_fail_store(h, st);
}

/* The body's events: the app's subscriptions are read beside the first event's member (one
 * round trip: both go in one write), then each event's member, then the events. */
static void hk_events(hook_req_t *h)
{
    store_status_t st;

    if (json_array_size(h->hook.events) == 0) {
        hk_done(h);
        return;
    }
    if (h->wh->env->outbox != NULL) {
        h->subs_call =
            store_hook_subscriptions(h->wh->env->deliver.store, h->app, on_subscriptions, h, &st);
        if (h->subs_call == NULL) {
            hk_fail_store(h, st);
            return;
        }
    }
    h->next_event = 0;
    hk_next(h);
}

/* The body is verified: parsed by the adapter, then its events taken one by one. */
static void hk_parse(hook_req_t *h)
{
    if (h->ops->parse_hook(h->body, h->len, header(h, "Content-Type"), &h->hook) < 0) {
        hk_fail(h, 400, BG_ERR_MISSING_PARAM, "%s", h->hook.error);
        return;
    }
    if (h->hook.challenge != NULL) { /* slack's url_verification */
        json_t *j = json_pack("{s:s}", "challenge", h->hook.challenge);
        hk_answer(h, 200, 0, NULL, jw_dump(j, NULL));
        json_decref(j);
        return;
    }
    hk_events(h);
}

static void on_replay_checked(void *arg, store_status_t st, json_t *value)
{
    hook_req_t *h = arg;

    h->call = NULL;
    json_decref(value);
    if (st == STORE_NOT_FOUND) {
        hk_refuse(h, METRICS_HOOK_REPLAY,
                  strcmp(h->ops->type, "slack") == 0
                      ? "this X-Slack-Signature was seen before: a replay"
                      : "this signature (timestamp and nonce) was seen before: a replay");
        return;
    }
    if (st != STORE_OK) {
        hk_fail_store(h, st);
        return;
    }
    h->seen = 1;
    hk_parse(h);
}

/* A signature verified (hex; slack's, wechat's) is remembered for as long as its timestamp is
 * accepted: the same one again is a replay, refused. WeChat's signs no body, so without this a
 * POST seen once could be sent again with any body for 5 minutes. The signature alone is the
 * key: it commits to the timestamp and the nonce (and a sorted concatenation that reads the
 * same with the two cut elsewhere gives the same key, refused too). */
static void hk_remember(hook_req_t *h, const char *sig)
{
    store_status_t st;

    snprintf(h->signature, sizeof(h->signature), "%s", sig);
    for (char *p = h->signature; *p; p++) /* one form per signature in the replay key */
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    h->phase = HK_REPLAY;
    h->call = store_hook_seen(h->wh->env->deliver.store, h->channel_id, h->signature, HOOK_SEEN_MS,
                              on_replay_checked, h, &st);
    if (h->call == NULL)
        hk_fail_store(h, st);
}

/* POST: the signature (or whatsapp's token) first; nothing else of the body is read before. */
static void hk_receive(hook_req_t *h, const struct evkeyvalq *q)
{
    const char *type = h->ops->type, *why = NULL;
    int replay = 0;

    if (strcmp(type, "facebook") == 0 || strcmp(type, "whatsapp-cloud") == 0) {
        if (!meta_signed(h, &why)) {
            hk_refuse(h, METRICS_HOOK_SIGNATURE, why);
            return;
        }
    } else if (strcmp(type, "whatsapp") == 0) {
        if (!same_secret(evhttp_find_header(q, "token"), info_str(h, "verifyToken"))) {
            hk_refuse(h, METRICS_HOOK_SIGNATURE,
                      "parameter token is missing or is not the channel's "
                      "info.verifyToken");
            return;
        }
    } else if (strcmp(type, "wechat") == 0) {
        const char *enc = evhttp_find_header(q, "encrypt_type");
        if (!wechat_signed(h, q, &why)) {
            hk_refuse(h, METRICS_HOOK_SIGNATURE, why);
            return;
        }
        /* the signature covers the query, not the body: a URL seen once is good for any body,
         * so its time bounds how long, and hk_remember takes it once within that time */
        if (fresh_time(evhttp_find_header(q, "timestamp")) != 1) {
            hk_refuse(h, METRICS_HOOK_REPLAY, "timestamp is more than 5 minutes from now");
            return;
        }
        if (enc != NULL && strcmp(enc, "raw") != 0) {
            hk_fail(h, 400, BG_ERR_UNSUPPORTED,
                    "encrypt_type %.20s is not supported: set the account's message "
                    "encryption to plain text",
                    enc);
            return;
        }
        hk_remember(h, evhttp_find_header(q, "signature"));
        return;
    } else if (strcmp(type, "slack") == 0) {
        if (!slack_signed(h, &why, &replay)) {
            hk_refuse(h, replay ? METRICS_HOOK_REPLAY : METRICS_HOOK_SIGNATURE, why);
            return;
        }
        hk_remember(h, header(h, "X-Slack-Signature") + 3);
        return;
    }
    hk_parse(h);
}

/* ---- the route ---- */

static void on_channel(void *arg, store_status_t st, json_t *channel)
{
    hook_req_t *h = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(h->req);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    struct evkeyvalq q;
    const char *type;

    h->call = NULL;
    if (st == STORE_NOT_FOUND) {
        hk_fail(h, 404, BG_ERR_NO_CHANNEL, "channel not found");
        return;
    }
    if (st != STORE_OK) {
        hk_fail_store(h, st);
        return;
    }
    h->channel = channel;
    type = json_string_value(json_object_get(channel, "type"));
    h->app = json_string_value(json_object_get(channel, "app"));
    h->ops = type ? adapter_find(type) : NULL;
    if (h->ops == NULL || h->app == NULL) {
        hk_fail(h, 500, BG_ERR_STORE, "the channel record is not valid");
        return;
    }
    if (h->ops->parse_hook == NULL) {
        hk_fail(h, 404, BG_ERR_UNSUPPORTED, "%s has no webhooks", type);
        return;
    }
    if (evhttp_parse_query_str(query ? query : "", &q) < 0) {
        hk_fail(h, 400, BG_ERR_MISSING_PARAM, "the query string is not valid");
        return;
    }
    if (h->post)
        hk_receive(h, &q);
    else
        hk_handshake(h, &q);
    evhttp_clear_headers(&q);
}

static int channel_id_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > HOOK_CHANNEL_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
            return 0;
    return 1;
}

void webhook_route(void *arg, struct evhttp_request *req)
{
    struct webhook *wh = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    hook_req_t *h = calloc(1, sizeof(*h));
    json_t *channel;
    store_status_t st;

    if (h == NULL) {
        http_refuse(wh->env->http, req);
        return;
    }
    h->wh = wh;
    h->req = req;
    h->started_us = clock_mono_us();
    rng_hex(&wh->env->deliver.rng, h->id, 16);
    adapter_hook_init(&h->hook);
    if ((h->next = wh->reqs) != NULL)
        h->next->prev = h;
    wh->reqs = h;
    wh->env->in_flight++;
    h->post = evhttp_request_get_command(req) == EVHTTP_REQ_POST;
    if (h->hook.events == NULL) {
        hk_fail(h, 503, BG_ERR_UNAVAILABLE, "out of memory");
        return;
    }
    if (wh->env->draining == OP_DRAIN_OVER) { /* before that, answered like any request */
        hk_fail(h, 503, BG_ERR_UNAVAILABLE, "shutting down");
        return;
    }
    path = path ? path + strlen(HOOK_PREFIX) : "";
    if (!channel_id_ok(path)) {
        hk_fail(h, 404, BG_ERR_NO_CHANNEL, "channel not found");
        return;
    }
    snprintf(h->channel_id, sizeof(h->channel_id), "%s", path);
    if (h->post) {
        h->len = evbuffer_get_length(in);
        if (h->len > REQUEST_MAX_BODY) {
            hk_fail(h, 413, BG_ERR_LIMIT, "request body too large");
            return;
        }
        if (h->len == 0) {
            hk_fail(h, 400, BG_ERR_MISSING_PARAM, "the body is empty");
            return;
        }
        if ((h->body = malloc(h->len + 1)) == NULL) {
            hk_fail(h, 503, BG_ERR_UNAVAILABLE, "out of memory");
            return;
        }
        evbuffer_copyout(in, h->body, h->len);
        h->body[h->len] = '\0';
    }
    h->phase = HK_CHANNEL;
    /* the worker's cached record when it has one (kept coherent by Redis, as for the API's
     * requests): a round trip less before the platform is answered */
    if ((channel = store_cached_channel(wh->env->deliver.store, h->channel_id)) != NULL) {
        on_channel(h, STORE_OK, channel);
        return;
    }
    h->call = store_get_channel(wh->env->deliver.store, h->channel_id, on_channel, h, &st);
    if (h->call == NULL)
        hk_fail_store(h, st);
}
