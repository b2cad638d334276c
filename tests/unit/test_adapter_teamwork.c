/* test_adapter_teamwork.c - the team-collaboration adapter: calls built, answers read by status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapters/adapter.h"

#include <stdlib.h>
#include <string.h>

#define NOW        1700000000000LL
#define BASE       "https://teamwork.example.com/api"
#define KEY        "tw-key-0123456789-TWSECRET"
#define MODULE_KEY "mod-key-TWMODULE"
#define INFO                                                                                       \
    "{\"apiKey\":\"" KEY "\",\"apiToken\":\"tw-token-TWAPITOKEN\",\"moduleKey\":\"" MODULE_KEY     \
    "\","                                                                                          \
    "\"tbId\":\"tb-42\",\"env\":\"prod\"}"
#define TO "user-7788"

static const char *const secret_values[] = {KEY, MODULE_KEY, "TWSECRET", "TWAPITOKEN", NULL};

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
    return adapter_find("teamwork");
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
    assert_string_equal(o->type, "teamwork");
    assert_string_equal(o->api_version, "appstore-v1");
    assert_string_equal(o->from_field, "tbId");
    assert_int_equal(o->response_types, ADAPTER_TEXT | ADAPTER_IMAGE);
    assert_int_equal(o->recipient_invalid_code, 104);
    assert_int_equal(o->server_error_aborts, 0);
    assert_int_equal(o->phone_recipients, 0);
    assert_int_equal(o->image_by_upload, 0);
    assert_null(o->cred_needs_refresh);
    assert_null(o->build_check);
    assert_null(o->build_upload);
}

static void test_build(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(build(INFO, "{\"type\":\"TEXT\",\"text\":\"Hi team\"}", &call, &res), 0);
    assert_string_equal(call.method, "POST");
    assert_string_equal(call.url, BASE "/developer/chats/message");
    assert_int_equal(header_count(&call), 2);
    assert_true(has_header(&call, "x-api-key: " KEY));
    assert_true(has_header(&call, "Content-Type: application/json"));
    assert_json_body(&call,
                     "{\"users\":[\"" TO "\"],\"messageType\":\"text\",\"text\":\"Hi team\"}");
    adapter_call_free(&call);

    assert_int_equal(
        build(INFO, "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/d.png\"}", &call, &res),
        0);
    assert_string_equal(call.url, BASE "/developer/chats/message");
    assert_json_body(&call, "{\"users\":[\"" TO "\"],\"messageType\":\"image\","
                            "\"image\":{\"url\":\"https://img.example.com/d.png\"}}");
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
    assert_int_equal(build("{\"apiToken\":\"tw-token-TWAPITOKEN\",\"tbId\":\"tb\"}",
                           "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "channel has no apiKey");
    assert_int_equal(build(INFO, "{\"type\":\"TEXT\",\"text\":null}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
}

static void test_parse_success(void **state)
{
    static const struct {
        long status;
        const char *body, *id;
    } cases[] = {
        {200, "{\"result\":{\"messageId\":\"msg-001\"}}", "msg-001"},
        {200, "{\"messageId\":\"msg-002\"}", "msg-002"},
        {201, "{\"messageId\":12345}", "12345"},
        {200, "{\"message\":\"sent\"}", ""},
        {204, "", ""},
        {200, "OK", ""},
    };
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (parse(cases[i].status, cases[i].body, &res) != ADAPTER_OK)
            fail_msg("case %zu: status %d (%s)", i, res.status, res.error);
        assert_string_equal(res.message_id, cases[i].id);
        assert_string_equal(res.chat_id, TO);
    }
}

static void test_parse_errors(void **state)
{
    static const struct {
        long status;
        const char *body;
        adapter_status_t want;
        const char *error;
    } cases[] = {
        {401, "{\"message\":\"Invalid API key\"}", ADAPTER_AUTH_INVALID,
         "teamwork: Invalid API key"},
        {403, "{\"message\":\"Forbidden\"}", ADAPTER_AUTH_INVALID, "teamwork: Forbidden"},
        {404, "{\"message\":\"User not found\"}", ADAPTER_RECIPIENT_INVALID,
         "teamwork: User not found"},
        {429, "{\"message\":\"Too many requests\"}", ADAPTER_RATE_LIMITED,
         "teamwork: Too many requests"},
        {500, "{\"message\":\"Internal\"}", ADAPTER_SERVER_ERROR, "teamwork: Internal"},
        {503, "<html>", ADAPTER_SERVER_ERROR, "teamwork: HTTP 503"},
        {0, "", ADAPTER_SERVER_ERROR, "teamwork: no answer"},
        {400, "{\"message\":\"users is required\"}", ADAPTER_REJECTED,
         "teamwork: users is required"},
        {400, "", ADAPTER_REJECTED, "teamwork: HTTP 400"},
        {422, "{\"error\":\"x\"}", ADAPTER_REJECTED, "teamwork: HTTP 422"},
    };
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (parse(cases[i].status, cases[i].body, &res) != cases[i].want)
            fail_msg("case %zu: status %d, want %d (%s)", i, res.status, cases[i].want, res.error);
        assert_string_equal(res.error, cases[i].error);
        assert_string_equal(res.message_id, "");
    }
    assert_int_equal(parse_ra(429, "", "15", &res), ADAPTER_RATE_LIMITED);
    assert_int_equal(res.retry_after_s, 15);
    assert_int_equal(parse_ra(429, "", "later", &res), ADAPTER_RATE_LIMITED);
    assert_int_equal(res.retry_after_s, -1);
    assert_int_equal(parse_ra(429, "", NULL, &res), ADAPTER_RATE_LIMITED);
    assert_int_equal(res.retry_after_s, -1);
    parse(401, "{}", &res);
    assert_int_equal(adapter_err_code(ops(), res.status), 104);
    parse(404, "{}", &res);
    assert_int_equal(adapter_err_code(ops(), res.status), 104);
}

static void test_no_secret_in_errors(void **state)
{
    adapter_result_t res;

    (void)state;
    parse(401, "{\"message\":\"API key " KEY " is not valid for module " MODULE_KEY "\"}", &res);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_non_null(strstr(res.error, "***"));
    parse(400, "{\"message\":\"tw-token-TWAPITOKEN\"}", &res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),         cmocka_unit_test(test_build),
        cmocka_unit_test(test_build_refused), cmocka_unit_test(test_parse_success),
        cmocka_unit_test(test_parse_errors),  cmocka_unit_test(test_no_secret_in_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
