/* adapter_cases.h - the one runner of the adapter unit tests: each platform's test file states
 * its cases as tables of rows (build a call, parse an answer, map an error) and this header runs
 * them. Include after <cmocka.h>. Every failure names its table and row. */
#ifndef BOTGATE_TESTS_ADAPTER_CASES_H
#define BOTGATE_TESTS_ADAPTER_CASES_H

#include "adapters/adapter.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CASES(table) (sizeof(table) / sizeof((table)[0]))

/* What every case of one platform shares. */
typedef struct case_fixture {
    const char *type;     /* the adapter_find() name */
    const char *base_url; /* the target's base URL (NULL for whatsapp: info.apiPath) */
    const char *info;     /* the channel's info as JSON, unless a row gives its own */
    const char *to;       /* the member's address */
    int64_t now_ms;
    const char *const *secrets; /* NULL-terminated: none may stand in any error text */
} case_fixture_t;

/* Which call of the adapter a row exercises. */
typedef enum {
    CASE_SEND = 0, /* build_send / parse_send */
    CASE_CRED,     /* build_cred / parse_cred */
    CASE_CHECK,    /* build_check / parse_check */
    CASE_UPLOAD,   /* parse_upload (uploads are built by the wechat test itself) */
} case_step_t;

/* The err_code a status maps to on a platform. */
typedef struct err_map {
    adapter_status_t status;
    int err_code;
} err_map_t;

/* What the ops table of a platform must say. */
typedef struct ops_want {
    const char *api_version, *from_field, *cred_field;
    unsigned response_types;
    int recipient_invalid_code, server_error_aborts, phone_recipients, image_by_upload;
    int has_cred, has_check, has_upload; /* 1: the hooks of that step are set, 0: all NULL */
    err_map_t errors[8];                 /* what statuses map to; ends at an err_code of 0 */
} ops_want_t;

/* Build a call. status OK expects the call below; any other status expects -1, that status
 * and no call at all. */
typedef struct build_case {
    case_step_t step;
    const char *info;     /* NULL: the fixture's */
    const char *base_url; /* NULL: the fixture's (unless no_base) */
    int no_base;          /* 1: the target has no base URL */
    const char *response; /* CASE_SEND: the response JSON */
    const char *media_id; /* CASE_SEND: the uploaded image, NULL for none */
    adapter_status_t status;
    const char *error; /* failure: the exact text (NULL: any non-empty text) */
    int err_code;      /* failure: what status maps to (0: not checked here) */
    const char *method, *url;
    const char *headers[ADAPTER_MAX_HEADERS + 1]; /* all of the call's header lines */
    const char *body;                             /* compared as JSON; NULL: no body */
    int body_exact;                               /* 1: compared byte for byte as well */
} build_case_t;

/* Parse an answer. Strings left NULL expect "" (meta: NULL). */
typedef struct parse_case {
    long status;
    const char *body;
    adapter_status_t want;
    long code;             /* platform_code */
    const char *error;     /* the exact text; NULL: any non-empty text on failure, "" on success */
    const char *error_has; /* a part the error text must hold (NULL: none) */
    int err_code;          /* what want maps to (0: not checked here) */
    const char *message_id, *chat_id, *ref, *meta;
    const char *retry_after; /* the Retry-After header, NULL when absent */
    int retry_after_s;       /* expected with a Retry-After header; without one it must be -1 */
    int rate_recipient;      /* 1: the refusal pauses the recipient's limit, not the sender's */
    int masked;              /* 1: the error text shows "***" where a secret was */
    case_step_t step;
    const char *token;   /* CASE_CRED success: the new credential in info[cred_field] */
    long long expiry_ms; /* CASE_CRED success: info[cred_field + "Expiry"] */
} parse_case_t;

/* The first fields of a parse row: the answer and what it must mean. */
#define ANSWER(http, text, st, pcode)                                                              \
    .status = (http), .body = (text), .want = (st), .code = (pcode)

/* Does the credential want refreshing at now_ms. */
typedef struct needs_case {
    const char *info;
    int64_t now_ms;
    int want;
} needs_case_t;

#define CASE_STR(row, what, got, want)                                                             \
    do {                                                                                           \
        const char *got_ = (got), *want_ = (want);                                                 \
        if (got_ == NULL || strcmp(got_, want_) != 0)                                              \
            fail_msg("%s: %s is \"%s\", want \"%s\"", row, what, got_ ? got_ : "(null)", want_);   \
    } while (0)

#define CASE_INT(row, what, got, want)                                                             \
    do {                                                                                           \
        long long got_ = (long long)(got), want_ = (long long)(want);                              \
        if (got_ != want_)                                                                         \
            fail_msg("%s: %s is %lld, want %lld", row, what, got_, want_);                         \
    } while (0)

static inline const adapter_ops_t *case_ops(const case_fixture_t *fx)
{
    const adapter_ops_t *ops = adapter_find(fx->type);

    if (ops == NULL)
        fail_msg("no adapter for %s", fx->type);
    return ops;
}

static inline json_t *case_json(const char *row, const char *what, const char *text)
{
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);

    if (v == NULL)
        fail_msg("%s: bad test JSON in %s: %s", row, what, text);
    return v;
}

static inline void case_no_secret(const case_fixture_t *fx, const char *row,
                                  const adapter_result_t *res)
{
    for (int i = 0; fx->secrets[i]; i++)
        if (strstr(res->error, fx->secrets[i]) != NULL)
            fail_msg("%s: secret in error text: %s", row, res->error);
}

/* A call that was refused leaves nothing behind and says why. */
static inline void case_no_call(const char *row, const adapter_call_t *call,
                                const adapter_result_t *res)
{
    if (call->url != NULL || call->body != NULL || call->headers[0] != NULL)
        fail_msg("%s: a refused call keeps url, body or headers", row);
    if (res->error[0] == '\0')
        fail_msg("%s: a refused call has no error text", row);
}

/* Every error text fits its buffer and is valid UTF-8, however the platform's text was cut. */
static inline void case_error_text(const char *row, const adapter_result_t *res)
{
    json_t *s;

    if (strnlen(res->error, sizeof(res->error)) >= sizeof(res->error))
        fail_msg("%s: error text not terminated", row);
    s = json_string(res->error);
    if (s == NULL)
        fail_msg("%s: error text is not UTF-8: %s", row, res->error);
    json_decref(s);
}

static inline void case_json_equal(const char *row, const char *what, const char *text, size_t len,
                                   const char *expected)
{
    json_t *got = json_loadb(text ? text : "", len, 0, NULL);
    json_t *want = case_json(row, what, expected);

    if (got == NULL || !json_equal(got, want))
        fail_msg("%s: %s %.*s, want %s", row, what, (int)len, text ? text : "", expected);
    json_decref(got);
    json_decref(want);
}

static inline int case_header_count(const char *const *headers)
{
    int n = 0;

    while (headers[n])
        n++;
    return n;
}

/* The call's header lines are exactly the expected ones, in any order. */
static inline void case_headers(const char *row, const adapter_call_t *call,
                                const char *const *want)
{
    CASE_INT(row, "header count", case_header_count((const char *const *)call->headers),
             case_header_count(want));
    for (int i = 0; want[i]; i++) {
        int found = 0;

        for (int j = 0; call->headers[j]; j++)
            found |= strcmp(call->headers[j], want[i]) == 0;
        if (!found)
            fail_msg("%s: no header \"%s\"", row, want[i]);
    }
}

static inline void check_ops(const case_fixture_t *fx, const ops_want_t *w)
{
    const adapter_ops_t *o = case_ops(fx);
    const char *row = fx->type;

    CASE_STR(row, "type", o->type, fx->type);
    CASE_STR(row, "api_version", o->api_version, w->api_version);
    CASE_STR(row, "from_field", o->from_field, w->from_field);
    if (w->cred_field != NULL)
        CASE_STR(row, "cred_field", o->cred_field, w->cred_field);
    else if (o->cred_field != NULL)
        fail_msg("%s: cred_field is %s, want none", row, o->cred_field);
    CASE_INT(row, "response_types", o->response_types, w->response_types);
    CASE_INT(row, "recipient_invalid_code", o->recipient_invalid_code, w->recipient_invalid_code);
    CASE_INT(row, "server_error_aborts", o->server_error_aborts, w->server_error_aborts);
    CASE_INT(row, "phone_recipients", o->phone_recipients, w->phone_recipients);
    CASE_INT(row, "image_by_upload", o->image_by_upload, w->image_by_upload);
    CASE_INT(row, "cred_needs_refresh set", o->cred_needs_refresh != NULL, w->has_cred);
    CASE_INT(row, "build_cred set", o->build_cred != NULL, w->has_cred);
    CASE_INT(row, "parse_cred set", o->parse_cred != NULL, w->has_cred);
    CASE_INT(row, "build_check set", o->build_check != NULL, w->has_check);
    CASE_INT(row, "parse_check set", o->parse_check != NULL, w->has_check);
    CASE_INT(row, "build_upload set", o->build_upload != NULL, w->has_upload);
    CASE_INT(row, "parse_upload set", o->parse_upload != NULL, w->has_upload);
    for (int i = 0; w->errors[i].err_code != 0; i++)
        CASE_INT(row, "err_code", adapter_err_code(o, w->errors[i].status), w->errors[i].err_code);
}

static inline void run_build_case(const case_fixture_t *fx, const char *row, const build_case_t *c)
{
    const adapter_ops_t *ops = case_ops(fx);
    json_t *info = case_json(row, "info", c->info ? c->info : fx->info);
    json_t *response = c->step == CASE_SEND ? case_json(row, "response", c->response) : NULL;
    adapter_target_t t = {.base_url = c->no_base    ? NULL
                                      : c->base_url ? c->base_url
                                                    : fx->base_url,
                          .info = info,
                          .to = fx->to,
                          .now_ms = fx->now_ms};
    adapter_call_t call = {0};
    adapter_result_t res;
    int rc = -1;

    adapter_result_init(&res);
    if (c->step == CASE_SEND)
        rc = ops->build_send(&t, response, c->media_id, &call, &res);
    else if (c->step == CASE_CRED)
        rc = ops->build_cred(&t, &call, &res);
    else if (c->step == CASE_CHECK)
        rc = ops->build_check(&t, &call, &res);
    else
        fail_msg("%s: no such build step", row);
    case_no_secret(fx, row, &res);
    CASE_INT(row, "status", res.status, c->status);
    if (c->status != ADAPTER_OK) {
        CASE_INT(row, "rc", rc, -1);
        case_no_call(row, &call, &res);
        if (c->error != NULL)
            CASE_STR(row, "error", res.error, c->error);
        if (c->err_code != 0)
            CASE_INT(row, "err_code", adapter_err_code(ops, res.status), c->err_code);
    } else {
        CASE_INT(row, "rc", rc, 0);
        if (c->method == NULL || c->url == NULL)
            fail_msg("%s: a row that builds a call must give its method and url", row);
        CASE_STR(row, "method", call.method, c->method);
        CASE_STR(row, "url", call.url, c->url);
        case_headers(row, &call, c->headers);
        if (c->body == NULL) {
            if (call.body != NULL)
                fail_msg("%s: body %.*s, want none", row, (int)call.body_len, call.body);
        } else {
            case_json_equal(row, "body", call.body, call.body_len, c->body);
            if (c->body_exact) {
                CASE_INT(row, "body length", call.body_len, strlen(c->body));
                CASE_STR(row, "body", call.body, c->body);
            }
        }
    }
    adapter_call_free(&call);
    json_decref(info);
    json_decref(response);
}

/* A new credential: exactly the token and its expiry under the ops' cred_field. */
static inline void case_cred(const char *row, const adapter_ops_t *ops, const json_t *cred,
                             const parse_case_t *c)
{
    char expiry[64];

    if (c->token == NULL)
        fail_msg("%s: a credential row must give its token", row);
    snprintf(expiry, sizeof(expiry), "%sExpiry", ops->cred_field);
    CASE_STR(row, "token", json_string_value(json_object_get(cred, ops->cred_field)), c->token);
    CASE_INT(row, "expiry", json_integer_value(json_object_get(cred, expiry)), c->expiry_ms);
    CASE_INT(row, "credential fields", json_object_size(cred), 2);
}

static inline void run_parse_case(const case_fixture_t *fx, const char *row, const parse_case_t *c)
{
    const adapter_ops_t *ops = case_ops(fx);
    json_t *info = case_json(row, "info", fx->info);
    adapter_target_t t = {
        .base_url = fx->base_url, .info = info, .to = fx->to, .now_ms = fx->now_ms};
    adapter_answer_t a = {.status = c->status,
                          .body = c->body,
                          .body_len = strlen(c->body),
                          .retry_after = c->retry_after};
    adapter_result_t res;
    json_t *cred = NULL;

    adapter_result_init(&res);
    if (c->step == CASE_SEND)
        adapter_parse_send(ops, &t, &a, &res);
    else if (c->step == CASE_CRED)
        cred = ops->parse_cred(&t, &a, &res);
    else if (c->step == CASE_CHECK)
        ops->parse_check(&t, &a, &res);
    else
        ops->parse_upload(&t, &a, &res);
    case_no_secret(fx, row, &res);
    if (res.status != c->want)
        fail_msg("%s: status %d, want %d (%s)", row, res.status, c->want, res.error);
    CASE_INT(row, "platform_code", res.platform_code, c->code);
    if (c->error != NULL)
        CASE_STR(row, "error", res.error, c->error);
    else if (c->want == ADAPTER_OK)
        CASE_STR(row, "error", res.error, "");
    else if (res.error[0] == '\0')
        fail_msg("%s: a failure without error text", row);
    if (c->error_has != NULL && strstr(res.error, c->error_has) == NULL)
        fail_msg("%s: error text without \"%s\": %s", row, c->error_has, res.error);
    case_error_text(row, &res);
    if (c->masked && strstr(res.error, "***") == NULL)
        fail_msg("%s: error text not masked: %s", row, res.error);
    if (c->err_code != 0)
        CASE_INT(row, "err_code", adapter_err_code(ops, res.status), c->err_code);
    CASE_STR(row, "message_id", res.message_id, c->message_id ? c->message_id : "");
    CASE_STR(row, "chat_id", res.chat_id, c->chat_id ? c->chat_id : "");
    CASE_STR(row, "ref", res.ref, c->ref ? c->ref : "");
    CASE_INT(row, "retry_after_s", res.retry_after_s, c->retry_after ? c->retry_after_s : -1);
    CASE_INT(row, "rate_recipient", res.rate_recipient, c->rate_recipient);
    if (c->meta == NULL) {
        if (res.meta != NULL)
            fail_msg("%s: a meta object where none was expected", row);
    } else {
        char *got = res.meta ? json_dumps(res.meta, JSON_COMPACT) : NULL;

        case_json_equal(row, "meta", got, got ? strlen(got) : 0, c->meta);
        free(got);
    }
    if (c->step == CASE_CRED) {
        /* A credential comes back exactly when the answer is a success. */
        CASE_INT(row, "credential returned", cred != NULL, c->want == ADAPTER_OK);
        if (cred != NULL)
            case_cred(row, ops, cred, c);
        json_decref(cred);
    }
    adapter_result_clear(&res);
    if (res.meta != NULL)
        fail_msg("%s: adapter_result_clear keeps meta", row);
    json_decref(info);
}

static inline void run_needs_case(const case_fixture_t *fx, const char *row, const needs_case_t *c)
{
    json_t *info = case_json(row, "info", c->info);

    CASE_INT(row, "needs refresh", case_ops(fx)->cred_needs_refresh(info, c->now_ms), c->want);
    json_decref(info);
}

/* What a platform refuses of a valid response before anything is sent (adapter_check_response):
 * code 0, 117 or 118, and a part the message must hold. The response is head, then n copies of
 * item (its %d the copy's index) joined by sep, then tail: limits are tested at the limit and
 * one over without pages of literals. */
typedef struct check_case {
    const char *head, *item;
    int n;
    const char *sep, *tail;
    int code;
    const char *msg_has; /* NULL: not checked */
} check_case_t;

static inline void run_check_case(const case_fixture_t *fx, const char *row, const check_case_t *c)
{
    size_t cap = strlen(c->head) + strlen(c->tail ? c->tail : "") + 1, len;
    char *text, *p;
    json_t *response;
    char msg[256] = "";

    if (c->item != NULL)
        cap += (size_t)c->n * (strlen(c->item) + strlen(c->sep ? c->sep : "") + 12);
    p = text = malloc(cap);
    assert_non_null(text);
    p += sprintf(p, "%s", c->head);
    for (int i = 0; c->item != NULL && i < c->n; i++) {
        if (i > 0 && c->sep != NULL)
            p += sprintf(p, "%s", c->sep);
        len = (size_t)snprintf(p, cap - (size_t)(p - text), c->item, i);
        p += len;
    }
    sprintf(p, "%s", c->tail ? c->tail : "");
    response = case_json(row, "response", text);
    CASE_INT(row, "check code", adapter_check_response(case_ops(fx), response, msg, sizeof(msg)),
             c->code);
    if (c->msg_has != NULL && strstr(msg, c->msg_has) == NULL)
        fail_msg("%s: message \"%s\" does not hold \"%s\"", row, msg, c->msg_has);
    json_decref(response);
    free(text);
}

/* Rows shared by the platforms' check tables. */
#define CHECK_QR(n) /* TEXT with n quick replies */                                                \
    "{\"type\":\"TEXT\",\"text\":\"t\",\"quickReplies\":[",                                        \
        "{\"title\":\"T%d\",\"payload\":\"P\"}", n, ",", "]}"
#define CHECK_ONE(json) json, NULL, 0, NULL, NULL /* a response written out */
#define CHECK_PB        "{\"type\":\"postback\",\"title\":\"a\",\"payload\":\"A\"}"
#define CHECK_URL       "{\"type\":\"url\",\"title\":\"u\",\"url\":\"https://x\"}"
#define CHECK_PHONE     "{\"type\":\"phone\",\"title\":\"p\",\"phone\":\"+852\"}"
#define CHECK_BUTTONS(...)                                                                         \
    CHECK_ONE("{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":[" __VA_ARGS__ "]}")
#define CHECK_LOCATION CHECK_ONE("{\"type\":\"LOCATION\",\"latitude\":1,\"longitude\":2}")
/* n cards, each with the members in more */
#define CHECK_CARDS(n, more)                                                                       \
    "{\"type\":\"CAROUSEL\",\"cards\":[", "{\"title\":\"c%d\"" more "}", n, ",", "]}"
/* a LIST row whose member key is n characters and whose other member is short */
#define CHECK_ROW(key, other, n)                                                                   \
    "{\"type\":\"LIST\",\"text\":\"t\",\"button\":\"b\",\"sections\":[{\"rows\":[{\"id\":\"1\","   \
    "\"" key "\":\"",                                                                              \
        "x", n, "", "\",\"" other "\":\"r\"}]}]}"

/* Runs every row of a table (an array) through run, one of the run_*_case functions; a failure
 * names the platform, the table and the row. */
#define RUN_CASES(fx, table, cases, run)                                                           \
    do {                                                                                           \
        char row_[96];                                                                             \
        for (size_t i_ = 0; i_ < N_CASES(cases); i_++) {                                           \
            snprintf(row_, sizeof(row_), "%s %s row %zu", (fx)->type, table, i_);                  \
            run(fx, row_, &(cases)[i_]);                                                           \
        }                                                                                          \
    } while (0)

#endif
