/* test_adapter_slack.c - the Slack adapter: chat.postMessage built, ok/error answers read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapters/adapter.h"

#include <stdlib.h>
#include <string.h>

#define NOW     1700000000000LL
#define BASE    "https://slack.example.com/api"
#define TOKEN   "xoxb-1111-2222-SLACKSECRET"
#define SIGNING "8f742231b10e8888abcd99yyyzzz85a5"
#define INFO                                                                                       \
    "{\"botAccessToken\":\"" TOKEN "\",\"botId\":\"B0123\",\"signingSecret\":\"" SIGNING "\","     \
    "\"teamId\":\"T0001\"}"
#define TO "D024BE91L"

static const char *const secret_values[] = {TOKEN, SIGNING, "SLACKSECRET", NULL};

static void assert_no_secret(const adapter_result_t *res)
{
    for (int i = 0; secret_values[i]; i++)
        if (strstr(res->error, secret_values[i]) != NULL)
            fail_msg("secret in error text: %s", res->error);
}

static void assert_json_body(const adapter_call_t *c, const char *expected)
{
    json_t *got = json_loadb(c->body ? c->body : "", c->body_len, 0, NULL);
    json_t *want = json_loads(expected, 0, NULL);

    assert_non_null(want);
    if (got == NULL || !json_equal(got, want))
        fail_msg("body %.*s, expected %s", (int)c->body_len, c->body ? c->body : "", expected);
    json_decref(got);
    json_decref(want);
}

static int has_header(const adapter_call_t *c, const char *line)
{
    for (int i = 0; c->headers[i]; i++)
        if (strcmp(c->headers[i], line) == 0)
            return 1;
    return 0;
}

static int header_count(const adapter_call_t *c)
{
    int n = 0;

    while (c->headers[n])
        n++;
    return n;
}

static const adapter_ops_t *ops(void)
{
    return adapter_find("slack");
}

static int build(const char *info_json, const char *response_json, adapter_call_t *call,
                 adapter_result_t *res)
{
    json_t *info = json_loads(info_json, 0, NULL);
    json_t *response = json_loads(response_json, 0, NULL);
    adapter_target_t t = {.base_url = BASE, .info = info, .to = TO, .now_ms = NOW};
    int rc;

    assert_non_null(info);
    assert_non_null(response);
    adapter_result_init(res);
    rc = ops()->build_send(&t, response, NULL, call, res);
    if (rc < 0) {
        assert_null(call->url);
        assert_null(call->body);
        assert_null(call->headers[0]);
        assert_true(res->error[0] != '\0');
    }
    assert_no_secret(res);
    json_decref(info);
    json_decref(response);
    return rc;
}

static adapter_status_t parse_ra(long status, const char *body, const char *retry_after,
                                 adapter_result_t *res)
{
    json_t *info = json_loads(INFO, 0, NULL);
    adapter_target_t t = {.base_url = BASE, .info = info, .to = TO, .now_ms = NOW};
    adapter_answer_t a = {
        .status = status, .body = body, .body_len = strlen(body), .retry_after = retry_after};

    adapter_result_init(res);
    ops()->parse_send(&t, &a, res);
    assert_no_secret(res);
    json_decref(info);
    return res->status;
}

static adapter_status_t parse(long status, const char *body, adapter_result_t *res)
{
    return parse_ra(status, body, NULL, res);
}

static void test_table(void **state)
{
    const adapter_ops_t *o = ops();

    (void)state;
    assert_non_null(o);
    assert_string_equal(o->type, "slack");
    assert_string_equal(o->api_version, "web-api");
    assert_string_equal(o->from_field, "botId");
    assert_int_equal(o->response_types, ADAPTER_TEXT | ADAPTER_IMAGE);
    assert_int_equal(o->recipient_invalid_code, 104);
    assert_int_equal(o->server_error_aborts, 0);
    assert_int_equal(o->phone_recipients, 0);
    assert_int_equal(o->image_by_upload, 0);
    assert_null(o->cred_needs_refresh);
    assert_null(o->build_check);
    assert_null(o->build_upload);
    assert_int_equal(adapter_err_code(o, ADAPTER_AUTH_INVALID), 104);
    assert_int_equal(adapter_err_code(o, ADAPTER_RECIPIENT_INVALID), 104);
    assert_int_equal(adapter_err_code(o, ADAPTER_RATE_LIMITED), 120);
}

static void test_build(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(build(INFO, "{\"type\":\"TEXT\",\"text\":\"Hello *world*\"}", &call, &res), 0);
    assert_string_equal(call.method, "POST");
    assert_string_equal(call.url, BASE "/chat.postMessage");
    assert_int_equal(header_count(&call), 2);
    assert_true(has_header(&call, "Authorization: Bearer " TOKEN));
    assert_true(has_header(&call, "Content-Type: application/json"));
    assert_json_body(&call, "{\"channel\":\"" TO "\",\"text\":\"Hello *world*\"}");
    adapter_call_free(&call);

    assert_int_equal(
        build(INFO, "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/c.gif\"}", &call, &res),
        0);
    assert_string_equal(call.url, BASE "/chat.postMessage");
    assert_json_body(&call, "{\"channel\":\"" TO "\",\"text\":\"image\",\"blocks\":[{\"type\":"
                            "\"image\",\"image_url\":\"https://img.example.com/c.gif\","
                            "\"alt_text\":\"image\"}]}");
    adapter_call_free(&call);
}

static void test_build_refused(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(build(INFO,
                           "{\"type\":\"TEMPLATE\",\"elementName\":\"a\",\"languageCode\":\"en\"}",
                           &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_UNSUPPORTED);
    assert_int_equal(build("{\"accessToken\":\"xoxp-other\",\"botId\":\"B1\"}",
                           "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "channel has no botAccessToken");
    assert_int_equal(build(INFO, "{\"type\":\"IMAGE\",\"text\":\"no url\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_string_equal(res.error, "slack: response has no url");
    /* A credential that would add a header line is not sent. */
    assert_int_equal(build("{\"botAccessToken\":\"x\\r\\nX-Evil: 1\"}",
                           "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res),
                     -1);
}

static void test_parse_success(void **state)
{
    adapter_result_t res;

    (void)state;
    assert_int_equal(
        parse(200,
              "{\"ok\":true,\"channel\":\"C123ABC456\",\"ts\":\"1503435956.000247\","
              "\"message\":{\"text\":\"Here's a message for you\",\"type\":\"message\"}}",
              &res),
        ADAPTER_OK);
    assert_string_equal(res.message_id, "1503435956.000247");
    assert_string_equal(res.chat_id, "C123ABC456");
    assert_int_equal(parse(200, "{\"ok\":true,\"ts\":\"1.2\"}", &res), ADAPTER_OK);
    assert_string_equal(res.chat_id, TO);
}

static void test_parse_errors(void **state)
{
    static const struct {
        const char *error;
        adapter_status_t want;
    } names[] = {
        {"channel_not_found", ADAPTER_RECIPIENT_INVALID},
        {"not_in_channel", ADAPTER_RECIPIENT_INVALID},
        {"user_not_found", ADAPTER_RECIPIENT_INVALID},
        {"is_archived", ADAPTER_RECIPIENT_INVALID},
        {"invalid_auth", ADAPTER_AUTH_INVALID},
        {"not_authed", ADAPTER_AUTH_INVALID},
        {"token_revoked", ADAPTER_AUTH_INVALID},
        {"account_inactive", ADAPTER_AUTH_INVALID},
        {"token_expired", ADAPTER_AUTH_INVALID},
        {"ratelimited", ADAPTER_RATE_LIMITED},
        {"internal_error", ADAPTER_SERVER_ERROR},
        {"fatal_error", ADAPTER_SERVER_ERROR},
        {"service_unavailable", ADAPTER_SERVER_ERROR},
        {"request_timeout", ADAPTER_SERVER_ERROR},
        {"msg_too_long", ADAPTER_REJECTED},
        {"invalid_blocks", ADAPTER_REJECTED},
    };
    static const struct {
        long status;
        const char *body;
        adapter_status_t want;
    } others[] = {
        {500, "", ADAPTER_SERVER_ERROR},         {503, "<html>down</html>", ADAPTER_SERVER_ERROR},
        {200, "garbage", ADAPTER_SERVER_ERROR},  {200, "{}", ADAPTER_SERVER_ERROR},
        {0, "", ADAPTER_SERVER_ERROR},           {200, "{\"ok\":false}", ADAPTER_REJECTED},
        {404, "{\"oops\":1}", ADAPTER_REJECTED},
    };
    adapter_result_t res;
    char body[128], text[128];

    (void)state;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(body, sizeof(body), "{\"ok\":false,\"error\":\"%s\"}", names[i].error);
        if (parse(200, body, &res) != names[i].want)
            fail_msg("%s: status %d, want %d", names[i].error, res.status, names[i].want);
        snprintf(text, sizeof(text), "slack: %s", names[i].error);
        assert_string_equal(res.error, text);
        assert_string_equal(res.message_id, "");
    }
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        if (parse(others[i].status, others[i].body, &res) != others[i].want)
            fail_msg("case %zu: status %d, want %d (%s)", i, res.status, others[i].want, res.error);
        assert_true(res.error[0] != '\0');
    }
}

static void test_retry_after(void **state)
{
    static const struct {
        const char *header;
        int want;
    } cases[] = {
        {"30", 30},
        {"0", 0},
        {" 7 ", 7},
        {"120\r\n", 120},
        {NULL, -1},
        {"", -1},
        {"soon", -1},
        {"-3", -1},
        {"1.5", -1},
        {"12abc", -1},
        {"99999999999999999999", -1},
        {"Wed, 21 Oct 2015 07:28:00 GMT", -1},
    };
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(parse_ra(429, "", cases[i].header, &res), ADAPTER_RATE_LIMITED);
        if (res.retry_after_s != cases[i].want)
            fail_msg("Retry-After \"%s\": %d, want %d",
                     cases[i].header ? cases[i].header : "(null)", res.retry_after_s,
                     cases[i].want);
    }
    /* ok:false ratelimited carries the header too. */
    assert_int_equal(parse_ra(200, "{\"ok\":false,\"error\":\"ratelimited\"}", "4", &res),
                     ADAPTER_RATE_LIMITED);
    assert_int_equal(res.retry_after_s, 4);
    assert_int_equal(parse_ra(200, "{\"ok\":false,\"error\":\"ratelimited\"}", NULL, &res),
                     ADAPTER_RATE_LIMITED);
    assert_int_equal(res.retry_after_s, -1);
    /* Other failures leave it unknown. */
    assert_int_equal(parse_ra(500, "", "10", &res), ADAPTER_SERVER_ERROR);
    assert_int_equal(res.retry_after_s, -1);
}

static void test_no_secret_in_errors(void **state)
{
    adapter_result_t res;

    (void)state;
    parse(200, "{\"ok\":false,\"error\":\"invalid_auth " TOKEN " / " SIGNING "\"}", &res);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_non_null(strstr(res.error, "***"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_build),
        cmocka_unit_test(test_build_refused),
        cmocka_unit_test(test_parse_success),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_no_secret_in_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
