/* test_adapter_whatsapp_cloud.c - the WhatsApp Cloud API adapter: calls built, answers read. */
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
#define TOKEN "EAAGm0PX4ZCpsBACLOUDSECRET"
#define PNID  "106540352242922"
#define INFO                                                                                       \
    "{\"accessToken\":\"" TOKEN "\",\"phoneNumberId\":\"" PNID                                     \
    "\",\"wabaId\":\"102290129340398\","                                                           \
    "\"namespace\":\"ignored_ns\"}"
#define TO "85291234567"

static const char *const secret_values[] = {TOKEN, "CLOUDSECRET", NULL};

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
    return adapter_find("whatsapp-cloud");
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
    assert_string_equal(o->type, "whatsapp-cloud");
    assert_string_equal(o->api_version, "v19.0");
    assert_string_equal(o->from_field, "phoneNumberId");
    assert_int_equal(o->response_types, ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_TEMPLATE);
    assert_int_equal(o->recipient_invalid_code, 100);
    assert_int_equal(o->server_error_aborts, 1);
    assert_int_equal(o->phone_recipients, 1);
    assert_int_equal(o->image_by_upload, 0);
    assert_null(o->cred_needs_refresh);
    assert_null(o->build_check);
    assert_null(o->build_upload);
}

static void test_build_messages(void **state)
{
    static const struct {
        const char *response, *body;
    } cases[] = {
        {"{\"type\":\"TEXT\",\"text\":\"Hello\"}",
         "{\"messaging_product\":\"whatsapp\",\"recipient_type\":\"individual\",\"to\":\"" TO "\","
         "\"type\":\"text\",\"text\":{\"body\":\"Hello\"}}"},
        {"{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/a.jpg\"}",
         "{\"messaging_product\":\"whatsapp\",\"recipient_type\":\"individual\",\"to\":\"" TO "\","
         "\"type\":\"image\",\"image\":{\"link\":\"https://img.example.com/a.jpg\"}}"},
        /* language is {"code"} only, and no namespace even when info has one. */
        {"{\"type\":\"TEMPLATE\",\"elementName\":\"hello_world\",\"languageCode\":\"en_US\","
         "\"components\":[{\"type\":\"header\",\"parameters\":[{\"type\":\"image\","
         "\"image\":{\"link\":\"https://x/y.png\"}}]}]}",
         "{\"messaging_product\":\"whatsapp\",\"to\":\"" TO "\",\"type\":\"template\","
         "\"template\":{\"name\":\"hello_world\",\"language\":{\"code\":\"en_US\"},"
         "\"components\":[{\"type\":\"header\",\"parameters\":[{\"type\":\"image\","
         "\"image\":{\"link\":\"https://x/y.png\"}}]}]}}"},
    };
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(build(INFO, cases[i].response, &call, &res), 0);
        assert_string_equal(call.method, "POST");
        assert_string_equal(call.url, BASE "/" PNID "/messages");
        assert_int_equal(header_count(&call), 2);
        assert_true(has_header(&call, "Authorization: Bearer " TOKEN));
        assert_true(has_header(&call, "Content-Type: application/json"));
        assert_json_body(&call, cases[i].body);
        adapter_call_free(&call);
    }
}

static void test_build_refused(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(
        build("{\"accessToken\":\"" TOKEN "\"}", "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res),
        -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "channel has no phoneNumberId");
    assert_int_equal(build("{\"phoneNumberId\":\"" PNID "\"}", "{\"type\":\"TEXT\",\"text\":\"a\"}",
                           &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "channel has no accessToken");
    assert_int_equal(adapter_err_code(ops(), res.status), 104);
    assert_int_equal(build(INFO, "{\"type\":\"TEMPLATE\",\"elementName\":\"x\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_int_equal(build(INFO, "{\"type\":\"TEXT\",\"text\":\"\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_int_equal(build(INFO, "{\"type\":\"LOCATION\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_UNSUPPORTED);
}

static void test_parse_success(void **state)
{
    adapter_result_t res;

    (void)state;
    assert_int_equal(
        parse(200,
              "{\"messaging_product\":\"whatsapp\",\"contacts\":[{\"input\":\"+852 9123 "
              "4567\",\"wa_id\":\"85291234568\"}],\"messages\":[{\"id\":\"wamid."
              "HBgLMTY0NjcwNDM1OTUVAgARGBI1RjQyNUE3NEYxMzAzMzQ5MkEA\"}]}",
              &res),
        ADAPTER_OK);
    assert_string_equal(res.message_id,
                        "wamid.HBgLMTY0NjcwNDM1OTUVAgARGBI1RjQyNUE3NEYxMzAzMzQ5MkEA");
    assert_string_equal(res.chat_id, "85291234568");
    assert_null(res.meta);
    assert_int_equal(parse(200, "{\"messages\":[{\"id\":\"wamid.X\"}]}", &res), ADAPTER_OK);
    assert_string_equal(res.chat_id, TO);
}

#define GRAPH(code, msg, details)                                                                  \
    "{\"error\":{\"message\":\"" msg "\",\"type\":\"OAuthException\",\"code\":" #code              \
    ",\"error_data\":{\"messaging_product\":\"whatsapp\",\"details\":\"" details "\"},"            \
    "\"fbtrace_id\":\"AbC\"}}"

static void test_parse_errors(void **state)
{
    static const struct {
        long status;
        const char *body;
        adapter_status_t want;
    } cases[] = {
        {400, GRAPH(131026, "Message Undeliverable.", "Message Undeliverable."),
         ADAPTER_RECIPIENT_INVALID},
        {400, GRAPH(100, "(#100) Invalid parameter", "Invalid parameter: to"),
         ADAPTER_RECIPIENT_INVALID},
        {400, GRAPH(100, "(#100) Param to must be a valid phone number", ""),
         ADAPTER_RECIPIENT_INVALID},
        {400, GRAPH(100, "(#100) Invalid parameter", "The parameter 'to' is invalid"),
         ADAPTER_RECIPIENT_INVALID},
        {400, "{\"error\":{\"message\":\"(#100) The to field is required\",\"code\":100}}",
         ADAPTER_RECIPIENT_INVALID},
        {400, GRAPH(100, "(#100) Invalid parameter", "Param text['body'] must be 4096 chars max"),
         ADAPTER_REJECTED},
        {400, GRAPH(100, "(#100) Unable to process the parameter", "Failed to parse template"),
         ADAPTER_REJECTED},
        {401, GRAPH(190, "Error validating access token: Session has expired", ""),
         ADAPTER_AUTH_INVALID},
        {429, GRAPH(130429, "Rate limit hit", "Cloud API message throughput has been reached."),
         ADAPTER_RATE_LIMITED},
        {400, GRAPH(131056, "(Business Account, Consumer Account) pair rate limit hit", ""),
         ADAPTER_RATE_LIMITED},
        {400, GRAPH(80007, "Rate limit issues", ""), ADAPTER_RATE_LIMITED},
        {400, GRAPH(4, "(#4) Application request limit reached", ""), ADAPTER_RATE_LIMITED},
        {500, GRAPH(131000, "Something went wrong", ""), ADAPTER_SERVER_ERROR},
        {503, GRAPH(131016, "Service unavailable", ""), ADAPTER_SERVER_ERROR},
        {500, GRAPH(131057, "Account in maintenance mode", ""), ADAPTER_SERVER_ERROR},
        {500, GRAPH(1, "An unknown error occurred", ""), ADAPTER_SERVER_ERROR},
        {503, GRAPH(2, "Service temporarily unavailable", ""), ADAPTER_SERVER_ERROR},
        {502, GRAPH(999999, "Brand new", ""), ADAPTER_SERVER_ERROR},
        {400, GRAPH(131051, "Unsupported message type", ""), ADAPTER_REJECTED},
        {502, "<html>Bad Gateway</html>", ADAPTER_SERVER_ERROR},
        {500, "", ADAPTER_SERVER_ERROR},
        {200, "{\"messaging_product\":\"whatsapp\"}", ADAPTER_SERVER_ERROR},
        {200, "nonsense", ADAPTER_SERVER_ERROR},
        {0, "", ADAPTER_SERVER_ERROR},
        {400, "{}", ADAPTER_REJECTED},
    };
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (parse(cases[i].status, cases[i].body, &res) != cases[i].want)
            fail_msg("case %zu: status %d, want %d (%s)", i, res.status, cases[i].want, res.error);
        assert_true(res.error[0] != '\0');
        assert_string_equal(res.message_id, "");
    }
    parse(400, GRAPH(131026, "Message Undeliverable.", "Message Undeliverable."), &res);
    assert_int_equal(res.platform_code, 131026);
    assert_string_equal(
        res.error, "whatsapp-cloud: Message Undeliverable.: Message Undeliverable. (code 131026)");
    assert_int_equal(adapter_err_code(ops(), res.status), 100);
    parse(400, GRAPH(100, "(#100) Invalid parameter", "Invalid parameter: to"), &res);
    assert_int_equal(adapter_err_code(ops(), res.status), 100);
}

static void test_no_secret_in_errors(void **state)
{
    adapter_result_t res;

    (void)state;
    parse(401,
          "{\"error\":{\"message\":\"Invalid OAuth access token - Cannot parse access token " TOKEN
          "\",\"code\":190,\"error_data\":\"token " TOKEN "\"}}",
          &res);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_non_null(strstr(res.error, "***"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),         cmocka_unit_test(test_build_messages),
        cmocka_unit_test(test_build_refused), cmocka_unit_test(test_parse_success),
        cmocka_unit_test(test_parse_errors),  cmocka_unit_test(test_no_secret_in_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
