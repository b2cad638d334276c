/* test_adapter_facebook.c - the Messenger adapter: calls built, Graph answers read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapters/adapter.h"

#include <stdlib.h>
#include <string.h>

#define NOW   1700000000000LL
#define BASE  "https://graph.example.com/v19.0"
#define TOKEN "EAAB+tok/en=SECRET"
#define INFO  "{\"accessToken\":\"" TOKEN "\",\"pageId\":\"1029384756\"}"
#define TO    "6543210987654321"

static const char *const secret_values[] = {TOKEN, "EAAB%2Btok%2Fen%3DSECRET", NULL};

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
    return adapter_find("facebook");
}

static int build(const char *base, const char *info_json, const char *response_json,
                 adapter_call_t *call, adapter_result_t *res)
{
    json_t *info = json_loads(info_json, 0, NULL);
    json_t *response = json_loads(response_json, 0, NULL);
    adapter_target_t t = {.base_url = base, .info = info, .to = TO, .now_ms = NOW};
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

static adapter_status_t parse(long status, const char *body, adapter_result_t *res)
{
    json_t *info = json_loads(INFO, 0, NULL);
    adapter_target_t t = {.base_url = BASE, .info = info, .to = TO, .now_ms = NOW};
    adapter_answer_t a = {.status = status, .body = body, .body_len = strlen(body)};

    adapter_result_init(res);
    ops()->parse_send(&t, &a, res);
    assert_no_secret(res);
    json_decref(info);
    return res->status;
}

static void test_table(void **state)
{
    const adapter_ops_t *o = ops();

    (void)state;
    assert_non_null(o);
    assert_string_equal(o->type, "facebook");
    assert_string_equal(o->api_version, "v19.0");
    assert_string_equal(o->from_field, "pageId");
    assert_int_equal(o->response_types, ADAPTER_TEXT | ADAPTER_IMAGE);
    assert_int_equal(o->recipient_invalid_code, 104);
    assert_int_equal(o->server_error_aborts, 0);
    assert_int_equal(o->phone_recipients, 0);
    assert_int_equal(o->image_by_upload, 0);
    assert_null(o->cred_needs_refresh);
    assert_null(o->build_check);
    assert_null(o->build_upload);
}

static void test_build_text(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(
        build(BASE, INFO, "{\"type\":\"TEXT\",\"text\":\"héllo \\\"you\\\"\\n\\t\\\\ \\u0001\"}", &call,
              &res),
        0);
    assert_string_equal(call.method, "POST");
    assert_string_equal(call.url, BASE "/me/messages?access_token=EAAB%2Btok%2Fen%3DSECRET");
    assert_int_equal(header_count(&call), 1);
    assert_true(has_header(&call, "Content-Type: application/json"));
    assert_json_body(&call, "{\"messaging_type\":\"RESPONSE\",\"recipient\":{\"id\":\"" TO "\"},"
                            "\"message\":{\"text\":\"héllo \\\"you\\\"\\n\\t\\\\ \\u0001\"}}");
    adapter_call_free(&call);
}

static void test_build_image(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    /* A trailing '/' on the base URL does not double. */
    assert_int_equal(build(BASE "/", INFO,
                           "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/a.png\"}", &call,
                           &res),
                     0);
    assert_string_equal(call.url, BASE "/me/messages?access_token=EAAB%2Btok%2Fen%3DSECRET");
    assert_json_body(&call, "{\"messaging_type\":\"RESPONSE\",\"recipient\":{\"id\":\"" TO "\"},"
                            "\"message\":{\"attachment\":{\"type\":\"image\",\"payload\":"
                            "{\"url\":\"https://img.example.com/a.png\",\"is_reusable\":true}}}}");
    adapter_call_free(&call);
}

static void test_build_refused(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(build(BASE, INFO,
                           "{\"type\":\"TEMPLATE\",\"elementName\":\"x\",\"languageCode\":\"en\","
                           "\"components\":[]}",
                           &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_UNSUPPORTED);
    assert_int_equal(adapter_err_code(ops(), res.status), 117);
    assert_int_equal(build(BASE, INFO, "{\"type\":\"VIDEO\",\"url\":\"u\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_UNSUPPORTED);
    assert_int_equal(build(BASE, INFO, "{\"text\":\"no type\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_int_equal(build(BASE, INFO, "{\"type\":\"TEXT\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_string_equal(res.error, "facebook: response has no text");
    assert_int_equal(build(BASE, INFO, "{\"type\":\"IMAGE\",\"url\":7}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_string_equal(res.error, "facebook: response has no url");
    assert_int_equal(build(NULL, INFO, "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
}

static void test_build_no_token(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(
        build(BASE, "{\"pageId\":\"1\"}", "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "channel has no accessToken");
    assert_int_equal(
        build(BASE, "{\"accessToken\":\"\"}", "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res),
        -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_int_equal(
        build(BASE, "{\"accessToken\":5}", "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_int_equal(adapter_err_code(ops(), res.status), 104);
}

static void test_parse_success(void **state)
{
    adapter_result_t res;

    (void)state;
    assert_int_equal(
        parse(200,
              "{\"recipient_id\":\"1254477777772919\",\"message_id\":\"m_AG5Hz2Uq7tuwNEh"
              "XfYYKj8mJEM_QPpz5jdCK48PnKAjSdjfipqxqMvK8ma6AC8fplwlqLP_5cgXIbu7I3rBN0P\"}",
              &res),
        ADAPTER_OK);
    assert_string_equal(res.message_id,
                        "m_AG5Hz2Uq7tuwNEhXfYYKj8mJEM_QPpz5jdCK48PnKAjSdjfipqxqMvK8ma6"
                        "AC8fplwlqLP_5cgXIbu7I3rBN0P");
    assert_string_equal(res.chat_id, "1254477777772919");
    assert_int_equal(res.platform_code, 0);
    assert_null(res.meta);
    adapter_result_clear(&res);

    /* escaped keys and values read like plain ones */
    assert_int_equal(parse(200, "{\"recipient\\u005fid\":\"12\",\"message_id\":\"m_\\u00e9\\\"\"}", &res),
                     ADAPTER_OK);
    assert_string_equal(res.message_id, "m_\xc3\xa9\"");
    assert_string_equal(res.chat_id, "12");
    adapter_result_clear(&res);
    /* an answer without recipient_id still counts: the chat is the recipient */
    assert_int_equal(parse(201, "{ \"message_id\" : \"m_2\" }", &res), ADAPTER_OK);
    assert_string_equal(res.message_id, "m_2");
    assert_string_equal(res.chat_id, "");
    adapter_result_clear(&res);
}

#define GRAPH(code, sub, msg)                                                                      \
    "{\"error\":{\"message\":\"" msg "\",\"type\":\"OAuthException\",\"code\":" #code              \
    ",\"error_subcode\":" #sub ",\"fbtrace_id\":\"AbCdEf\"}}"

static void test_parse_errors(void **state)
{
    static const struct {
        long status;
        const char *body;
        adapter_status_t want;
        long code;
    } cases[] = {
        {400, GRAPH(100, 2018001, "(#100) No matching user found"), ADAPTER_RECIPIENT_INVALID, 100},
        {400, GRAPH(100, 33, "(#100) Invalid parameter"), ADAPTER_REJECTED, 100},
        {400,
         "{\"error\":{\"message\":\"(#100) Param recipient[id] must be a valid ID string\","
         "\"code\":100}}",
         ADAPTER_REJECTED, 100},
        {400, GRAPH(551, 1545041, "This person isn't available right now."),
         ADAPTER_RECIPIENT_INVALID, 551},
        {403, GRAPH(10, 2018278, "(#10) This message is sent outside of allowed window."),
         ADAPTER_RECIPIENT_INVALID, 10},
        {400, GRAPH(190, 460, "Error validating access token"), ADAPTER_AUTH_INVALID, 190},
        /* Decided by code, not by status: a 500 with code 190 is still the token. */
        {500, GRAPH(190, 463, "Session has expired"), ADAPTER_AUTH_INVALID, 190},
        {400, GRAPH(4, 0, "(#4) Application request limit reached"), ADAPTER_RATE_LIMITED, 4},
        {400, GRAPH(613, 0, "Calls to this api have exceeded the rate limit."),
         ADAPTER_RATE_LIMITED, 613},
        {500, GRAPH(1200, 0, "Temporary send message failure. Please try again later"),
         ADAPTER_SERVER_ERROR, 1200},
        {503, GRAPH(2, 0, "An unexpected error has occurred."), ADAPTER_SERVER_ERROR, 2},
        {200, GRAPH(2, 0, "Service temporarily unavailable"), ADAPTER_SERVER_ERROR, 2},
        {502, GRAPH(9999, 0, "Something new"), ADAPTER_SERVER_ERROR, 9999},
        {400, GRAPH(9999, 0, "Something new"), ADAPTER_REJECTED, 9999},
        {400, GRAPH(200, 1545041, "(#200) Permissions error"), ADAPTER_REJECTED, 200},
        {502, "<html><body>Bad gateway</body></html>", ADAPTER_SERVER_ERROR, 0},
        {400, "not json", ADAPTER_SERVER_ERROR, 0},
        {200, "", ADAPTER_SERVER_ERROR, 0},
        {200, "[1,2]", ADAPTER_SERVER_ERROR, 0},
        {200, "{\"recipient_id\":\"1\"}", ADAPTER_SERVER_ERROR, 0},
        /* a message_id beside an error object, or an empty one: still a failure */
        {200, "{\"message_id\":\"m_1\",\"error\":{\"message\":\"x\",\"code\":2}}",
         ADAPTER_SERVER_ERROR, 2},
        {200, "{\"message_id\":\"m_1\",\"\\u0065rror\":{\"message\":\"x\",\"code\":2}}",
         ADAPTER_SERVER_ERROR, 2},
        {200, "{\"message_id\":\"\",\"recipient_id\":\"1\"}", ADAPTER_SERVER_ERROR, 0},
        {200, "{\"message_id\":\"m_1\"", ADAPTER_SERVER_ERROR, 0},
        {503, "{}", ADAPTER_SERVER_ERROR, 0},
        {404, "{}", ADAPTER_REJECTED, 0},
        {0, "", ADAPTER_SERVER_ERROR, 0},
    };
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (parse(cases[i].status, cases[i].body, &res) != cases[i].want)
            fail_msg("case %zu: status %d, want %d (%s)", i, res.status, cases[i].want, res.error);
        assert_int_equal(res.platform_code, cases[i].code);
        assert_true(res.error[0] != '\0');
        assert_string_equal(res.message_id, "");
        adapter_result_clear(&res);
    }
}

static void test_error_text(void **state)
{
    adapter_result_t res;
    char body[2048], longmsg[600];

    (void)state;
    parse(400, GRAPH(100, 2018001, "(#100) No matching user found"), &res);
    assert_string_equal(res.error, "facebook: (#100) No matching user found (code 100)");
    assert_int_equal(adapter_err_code(ops(), res.status), 104);
    /* A long platform message is cut, the code stays readable. */
    memset(longmsg, 'x', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"code\":4}}", longmsg);
    parse(400, body, &res);
    assert_true(strlen(res.error) < ADAPTER_ERROR_MAX);
    assert_non_null(strstr(res.error, "(code 4)"));
    /* Cut inside a multi-byte character, the text stays valid UTF-8. */
    snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%.*s\",\"code\":4}}", 200,
             "ééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé"
             "éééééééééééééééééééééééééééééééééééééééééééééééééééééééééé");
    parse(400, body, &res);
    json_t *s = json_string(res.error);
    assert_non_null(s);
    json_decref(s);
}

static void test_no_secret_in_errors(void **state)
{
    adapter_result_t res;

    (void)state;
    /* Platforms echo parameters: the token must not come back through the error text. */
    parse(400,
          "{\"error\":{\"message\":\"Invalid OAuth access token: " TOKEN
          " (or EAAB%2Btok%2Fen%3DSECRET)\",\"code\":190}}",
          &res);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_non_null(strstr(res.error, "***"));
    assert_null(strstr(res.error, "SECRET"));
    parse(400, "{\"error\":{\"message\":\"" TOKEN "\",\"code\":100}}", &res);
    assert_null(strstr(res.error, "SECRET"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_build_text),
        cmocka_unit_test(test_build_image),
        cmocka_unit_test(test_build_refused),
        cmocka_unit_test(test_build_no_token),
        cmocka_unit_test(test_parse_success),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_error_text),
        cmocka_unit_test(test_no_secret_in_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
