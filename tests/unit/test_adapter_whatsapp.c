/* test_adapter_whatsapp.c - the on-premises WhatsApp adapter: login, contacts, messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapters/adapter.h"

#include <stdlib.h>
#include <string.h>

#define NOW      1700000000000LL
#define API      "https://wa.example.com:9090"
#define TOKEN    "eyJhbGciOiJIUzI1NiJ9.ADMINTOKEN"
#define PASSWORD "s3cr3t-P4ss"
#define INFO                                                                                       \
    "{\"apiPath\":\"" API "/\",\"adminUsername\":\"admin\",\"adminPassword\":\"" PASSWORD "\","    \
    "\"adminAuthToken\":\"" TOKEN                                                                  \
    "\",\"adminAuthTokenExpiry\":1800000000000,\"waId\":\"85200000\"}"
#define TO         "85291234567"
#define SEVEN_DAYS (7 * 86400000LL)

static const char *const secret_values[] = {TOKEN, PASSWORD, "ADMINTOKEN", NULL};

static void assert_no_secret(const adapter_result_t *res)
{
    for (int i = 0; secret_values[i]; i++)
        if (strstr(res->error, secret_values[i]) != NULL)
            fail_msg("secret in error text: %s", res->error);
}

static void assert_json_text(const char *text, size_t len, const char *expected)
{
    json_t *got = json_loadb(text ? text : "", len, 0, NULL);
    json_t *want = json_loads(expected, 0, NULL);

    assert_non_null(want);
    if (got == NULL || !json_equal(got, want))
        fail_msg("got %.*s, expected %s", (int)len, text ? text : "", expected);
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
    return adapter_find("whatsapp");
}

static void assert_failed_call(int rc, const adapter_call_t *call, const adapter_result_t *res)
{
    if (rc < 0) {
        assert_null(call->url);
        assert_null(call->body);
        assert_null(call->headers[0]);
        assert_true(res->error[0] != '\0');
    }
    assert_no_secret(res);
}

static int build(const char *info_json, const char *response_json, adapter_call_t *call,
                 adapter_result_t *res)
{
    json_t *info = json_loads(info_json, 0, NULL);
    json_t *response = json_loads(response_json, 0, NULL);
    adapter_target_t t = {.base_url = NULL, .info = info, .to = TO, .now_ms = NOW};
    int rc;

    assert_non_null(info);
    assert_non_null(response);
    adapter_result_init(res);
    rc = ops()->build_send(&t, response, NULL, call, res);
    assert_failed_call(rc, call, res);
    json_decref(info);
    json_decref(response);
    return rc;
}

typedef void (*parse_fn)(const adapter_target_t *, const adapter_answer_t *, adapter_result_t *);

static adapter_status_t parse_with(parse_fn fn, long status, const char *body,
                                   adapter_result_t *res)
{
    json_t *info = json_loads(INFO, 0, NULL);
    adapter_target_t t = {.info = info, .to = TO, .now_ms = NOW};
    adapter_answer_t a = {.status = status, .body = body, .body_len = strlen(body)};

    adapter_result_init(res);
    fn(&t, &a, res);
    assert_no_secret(res);
    json_decref(info);
    return res->status;
}

static json_t *login(long status, const char *body, adapter_result_t *res)
{
    json_t *info = json_loads(INFO, 0, NULL), *cred;
    adapter_target_t t = {.info = info, .to = TO, .now_ms = NOW};
    adapter_answer_t a = {.status = status, .body = body, .body_len = strlen(body)};

    adapter_result_init(res);
    cred = ops()->parse_cred(&t, &a, res);
    assert_no_secret(res);
    assert_true((cred != NULL) == (res->status == ADAPTER_OK));
    json_decref(info);
    return cred;
}

static void test_table(void **state)
{
    const adapter_ops_t *o = ops();

    (void)state;
    assert_non_null(o);
    assert_string_equal(o->type, "whatsapp");
    assert_string_equal(o->api_version, "");
    assert_string_equal(o->from_field, "waId");
    assert_int_equal(o->response_types, ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_TEMPLATE);
    assert_int_equal(o->recipient_invalid_code, 100);
    assert_int_equal(o->server_error_aborts, 1);
    assert_int_equal(o->phone_recipients, 1);
    assert_int_equal(o->image_by_upload, 0);
    assert_non_null(o->cred_needs_refresh);
    assert_non_null(o->build_check);
    assert_null(o->build_upload);
}

static void test_build_messages(void **state)
{
    static const struct {
        const char *response, *body;
    } cases[] = {
        {"{\"type\":\"TEXT\",\"text\":\"Hello ☺\"}",
         "{\"recipient_type\":\"individual\",\"to\":\"" TO "\",\"type\":\"text\","
         "\"text\":{\"body\":\"Hello ☺\"}}"},
        {"{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/a.jpg\"}",
         "{\"recipient_type\":\"individual\",\"to\":\"" TO "\",\"type\":\"image\","
         "\"image\":{\"link\":\"https://img.example.com/a.jpg\"}}"},
        {"{\"type\":\"TEMPLATE\",\"elementName\":\"order_update\",\"languageCode\":\"en_US\","
         "\"components\":[{\"type\":\"body\",\"parameters\":[{\"type\":\"text\",\"text\":\"42\"}]}]"
         "}",
         "{\"to\":\"" TO "\",\"type\":\"template\",\"template\":{\"name\":\"order_update\","
         "\"language\":{\"policy\":\"deterministic\",\"code\":\"en_US\"},"
         "\"components\":[{\"type\":\"body\",\"parameters\":[{\"type\":\"text\",\"text\":\"42\"}]}]"
         "}}"},
        /* No components given: none sent. */
        {"{\"type\":\"TEMPLATE\",\"elementName\":\"hi\",\"languageCode\":\"zh_HK\"}",
         "{\"to\":\"" TO "\",\"type\":\"template\",\"template\":{\"name\":\"hi\","
         "\"language\":{\"policy\":\"deterministic\",\"code\":\"zh_HK\"}}}"},
    };
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(build(INFO, cases[i].response, &call, &res), 0);
        assert_string_equal(call.method, "POST");
        /* apiPath's trailing '/' is dropped. */
        assert_string_equal(call.url, API "/v1/messages");
        assert_int_equal(header_count(&call), 2);
        assert_true(has_header(&call, "Content-Type: application/json"));
        assert_true(has_header(&call, "Authorization: Bearer " TOKEN));
        assert_json_text(call.body, call.body_len, cases[i].body);
        adapter_call_free(&call);
    }
}

static void test_build_template_namespace(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(build("{\"apiPath\":\"" API "\",\"adminAuthToken\":\"" TOKEN "\","
                           "\"namespace\":\"cdb2b0c4_5f2d_4e1c\"}",
                           "{\"type\":\"TEMPLATE\",\"elementName\":\"t\",\"languageCode\":\"en\","
                           "\"components\":[]}",
                           &call, &res),
                     0);
    assert_string_equal(call.url, API "/v1/messages");
    assert_json_text(call.body, call.body_len,
                     "{\"to\":\"" TO "\",\"type\":\"template\",\"template\":{\"name\":\"t\","
                     "\"namespace\":\"cdb2b0c4_5f2d_4e1c\",\"language\":{\"policy\":"
                     "\"deterministic\",\"code\":\"en\"},\"components\":[]}}");
    adapter_call_free(&call);
}

static void test_build_refused(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(build("{\"adminAuthToken\":\"" TOKEN "\"}",
                           "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "channel has no apiPath");
    assert_int_equal(build("{\"apiPath\":\"" API "\",\"adminAuthToken\":\"\"}",
                           "{\"type\":\"TEXT\",\"text\":\"a\"}", &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_AUTH_EXPIRED);
    assert_int_equal(build(INFO, "{\"type\":\"TEMPLATE\",\"languageCode\":\"en\"}", &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_string_equal(res.error, "whatsapp: response has no elementName");
    assert_int_equal(build(INFO, "{\"type\":\"TEMPLATE\",\"elementName\":\"x\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_string_equal(res.error, "whatsapp: response has no languageCode");
    assert_int_equal(build(INFO, "{\"type\":\"IMAGE\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_int_equal(build(INFO, "{\"type\":\"CAROUSEL\"}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_UNSUPPORTED);
    assert_int_equal(build(INFO, "{}", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
}

static void test_parse_success(void **state)
{
    adapter_result_t res;
    json_t *want = json_pack("{s:s,s:s}", "api_status", "stable", "version", "2.45.1");

    (void)state;
    assert_int_equal(parse_with(ops()->parse_send, 201,
                                "{\"messages\":[{\"id\":\"gBEGkYiEB1VXAglK1ZEqA1YKPrU\"}],"
                                "\"meta\":{\"api_status\":\"stable\",\"version\":\"2.45.1\"}}",
                                &res),
                     ADAPTER_OK);
    assert_string_equal(res.message_id, "gBEGkYiEB1VXAglK1ZEqA1YKPrU");
    assert_string_equal(res.chat_id, TO);
    assert_non_null(res.meta);
    assert_true(json_equal(res.meta, want));
    adapter_result_clear(&res);
    assert_null(res.meta);
    /* No meta in the answer: none reported. */
    assert_int_equal(parse_with(ops()->parse_send, 200, "{\"messages\":[{\"id\":\"x\"}]}", &res),
                     ADAPTER_OK);
    assert_null(res.meta);
    json_decref(want);
}

#define WAERR(code, title)                                                                         \
    "{\"errors\":[{\"code\":" #code ",\"title\":\"" title "\",\"details\":\"d\"}],"                \
    "\"meta\":{\"api_status\":\"stable\",\"version\":\"2.45.1\"}}"

static void test_parse_errors(void **state)
{
    static const struct {
        long status;
        const char *body;
        adapter_status_t want;
        long code;
    } cases[] = {
        {400, WAERR(1013, "User is not valid"), ADAPTER_RECIPIENT_INVALID, 1013},
        {400, WAERR(1026, "Receiver is incapable of receiving this message"),
         ADAPTER_RECIPIENT_INVALID, 1026},
        {401, "{\"errors\":[{\"code\":1005,\"title\":\"Access denied\"}]}", ADAPTER_AUTH_EXPIRED,
         0},
        {401, "", ADAPTER_AUTH_EXPIRED, 0},
        {429, "", ADAPTER_RATE_LIMITED, 0},
        {429, WAERR(1015, "Too many requests"), ADAPTER_RATE_LIMITED, 1015},
        {400, WAERR(1015, "Too many requests"), ADAPTER_RATE_LIMITED, 1015},
        {500, WAERR(1014, "Internal error"), ADAPTER_SERVER_ERROR, 1014},
        {503, WAERR(1016, "System overloaded"), ADAPTER_SERVER_ERROR, 1016},
        {400, WAERR(1014, "Internal error"), ADAPTER_SERVER_ERROR, 1014},
        {500, WAERR(1000, "Generic error"), ADAPTER_SERVER_ERROR, 1000},
        {502, "<html>bad gateway</html>", ADAPTER_SERVER_ERROR, 0},
        {500, "{}", ADAPTER_SERVER_ERROR, 0},
        {200, "garbage", ADAPTER_SERVER_ERROR, 0},
        {200, "{\"messages\":[]}", ADAPTER_SERVER_ERROR, 0},
        {0, "", ADAPTER_SERVER_ERROR, 0},
        {400, WAERR(1008, "Required parameter is missing"), ADAPTER_REJECTED, 1008},
        {404, "{}", ADAPTER_REJECTED, 0},
    };
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (parse_with(ops()->parse_send, cases[i].status, cases[i].body, &res) != cases[i].want)
            fail_msg("case %zu: status %d, want %d (%s)", i, res.status, cases[i].want, res.error);
        assert_int_equal(res.platform_code, cases[i].code);
        assert_true(res.error[0] != '\0');
        assert_null(res.meta);
        adapter_result_clear(&res);
    }
    parse_with(ops()->parse_send, 400, WAERR(1013, "User is not valid"), &res);
    assert_string_equal(res.error, "whatsapp: User is not valid: d (code 1013)");
    assert_int_equal(adapter_err_code(ops(), res.status), 100);
    parse_with(ops()->parse_send, 500, WAERR(1014, "Internal error"), &res);
    assert_int_equal(adapter_err_code(ops(), res.status), 113);
}

static void test_login_build(void **state)
{
    json_t *info = json_loads(INFO, 0, NULL);
    adapter_target_t t = {.info = info, .to = TO, .now_ms = NOW};
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    adapter_result_init(&res);
    assert_int_equal(ops()->build_cred(&t, &call, &res), 0);
    assert_string_equal(call.method, "POST");
    assert_string_equal(call.url, API "/v1/users/login");
    assert_int_equal(header_count(&call), 2);
    /* base64("admin:s3cr3t-P4ss") */
    assert_true(has_header(&call, "Authorization: Basic YWRtaW46czNjcjN0LVA0c3M="));
    assert_true(has_header(&call, "Content-Type: application/json"));
    assert_int_equal(call.body_len, 2);
    assert_string_equal(call.body, "{}");
    adapter_call_free(&call);
    json_decref(info);
}

static void test_login_build_refused(void **state)
{
    static const char *const infos[] = {
        "{\"adminUsername\":\"admin\",\"adminPassword\":\"" PASSWORD "\"}",
        "{\"apiPath\":\"" API "\",\"adminPassword\":\"" PASSWORD "\"}",
        "{\"apiPath\":\"" API "\",\"adminUsername\":\"admin\"}",
        "{\"apiPath\":\"" API "\",\"adminUsername\":\"admin\",\"adminPassword\":\"\"}",
    };
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(infos) / sizeof(infos[0]); i++) {
        json_t *info = json_loads(infos[i], 0, NULL);
        adapter_target_t t = {.info = info, .to = TO, .now_ms = NOW};
        adapter_result_init(&res);
        assert_int_equal(ops()->build_cred(&t, &call, &res), -1);
        assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
        assert_failed_call(-1, &call, &res);
        json_decref(info);
    }
}

static void test_login_parse(void **state)
{
    static const struct {
        const char *expires;
        long long ms;
    } cases[] = {
        {"\"2026-11-29 15:29:26+00:00\"", 1795966166000LL},
        {"\"2026-11-29 15:29:26+08:00\"", 1795937366000LL},
        {"\"2026-11-29T15:29:26Z\"", 1795966166000LL},
        {"\"2026-11-29 15:29:26\"", 1795966166000LL},
        {"\"2026-11-29 15:29:26.123+0000\"", 1795966166000LL},
        {"\"2024-02-29 23:59:59-05:30\"", 1709270999000LL},
        {"\"2000-03-01 00:00:00+00:00\"", 951868800000LL},
        {"\"1969-12-31 00:00:00+00:00\"", -86400000LL},
        /* Missing or unreadable: a week from now. */
        {NULL, NOW + SEVEN_DAYS},
        {"\"tomorrow\"", NOW + SEVEN_DAYS},
        {"\"2026-02-29 10:00:00+00:00\"", NOW + SEVEN_DAYS},
        {"\"2026-11-29 25:00:00+00:00\"", NOW + SEVEN_DAYS},
        {"\"2026-11-29 15:29:26+00:00 junk\"", NOW + SEVEN_DAYS},
        {"\"2026-11-29 15:29\"", NOW + SEVEN_DAYS},
        {"12345", NOW + SEVEN_DAYS},
    };
    adapter_result_t res;
    char body[256];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *cred;
        if (cases[i].expires)
            snprintf(body, sizeof(body),
                     "{\"users\":[{\"token\":\"NEWTOKEN\",\"expires_after\":%s}]}",
                     cases[i].expires);
        else
            snprintf(body, sizeof(body), "{\"users\":[{\"token\":\"NEWTOKEN\"}]}");
        cred = login(200, body, &res);
        if (cred == NULL)
            fail_msg("case %zu: %s", i, res.error);
        assert_string_equal(json_string_value(json_object_get(cred, "adminAuthToken")), "NEWTOKEN");
        if (json_integer_value(json_object_get(cred, "adminAuthTokenExpiry")) != cases[i].ms)
            fail_msg("case %zu: expiry %lld, want %lld", i,
                     (long long)json_integer_value(json_object_get(cred, "adminAuthTokenExpiry")),
                     cases[i].ms);
        assert_int_equal(json_object_size(cred), 2);
        json_decref(cred);
    }
}

static void test_login_parse_failures(void **state)
{
    adapter_result_t res;

    (void)state;
    assert_null(login(401, "{\"errors\":[{\"code\":1005,\"title\":\"Access denied\"}]}", &res));
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "whatsapp admin login refused");
    assert_null(login(500, "{}", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(login(200, "not json", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(login(200, "{\"users\":[{\"token\":\"\"}]}", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(login(200, "{\"users\":[]}", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(login(0, "", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(login(400, "{\"errors\":[{\"code\":1000,\"title\":\"x\"}]}", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
}

static int needs(const char *info_json, int64_t now)
{
    json_t *info = json_loads(info_json, 0, NULL);
    int r;

    assert_non_null(info);
    r = ops()->cred_needs_refresh(info, now);
    json_decref(info);
    return r;
}

static void test_needs_refresh(void **state)
{
    (void)state;
    /* Expiry 1800000000000: refresh from 60 s before it on. */
    assert_int_equal(needs(INFO, 1800000000000LL - 60001), 0);
    assert_int_equal(needs(INFO, 1800000000000LL - 60000), 1);
    assert_int_equal(needs(INFO, 1800000000000LL - 59999), 1);
    assert_int_equal(needs(INFO, 1800000000000LL + 5), 1);
    assert_int_equal(needs(INFO, NOW), 0);
    assert_int_equal(needs("{\"adminAuthTokenExpiry\":1800000000000}", NOW), 1);
    assert_int_equal(needs("{\"adminAuthToken\":\"\",\"adminAuthTokenExpiry\":1800000000000}", NOW),
                     1);
    assert_int_equal(needs("{\"adminAuthToken\":\"t\"}", NOW), 1);
    assert_int_equal(needs("{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":null}", NOW), 1);
    assert_int_equal(
        needs("{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":\"1800000000000\"}", NOW), 1);
    assert_int_equal(needs("{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":1.8e12}", NOW), 0);
    assert_int_equal(needs("{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":1e300}", NOW), 0);
    assert_int_equal(needs("{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":-1e300}", NOW), 1);
}

static void test_contacts_build(void **state)
{
    json_t *info = json_loads(INFO, 0, NULL);
    adapter_target_t t = {.info = info, .to = TO, .now_ms = NOW};
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    adapter_result_init(&res);
    assert_int_equal(ops()->build_check(&t, &call, &res), 0);
    assert_string_equal(call.method, "POST");
    assert_string_equal(call.url, API "/v1/contacts");
    assert_int_equal(header_count(&call), 2);
    assert_true(has_header(&call, "Authorization: Bearer " TOKEN));
    assert_true(has_header(&call, "Content-Type: application/json"));
    assert_json_text(call.body, call.body_len,
                     "{\"blocking\":\"wait\",\"contacts\":[\"+" TO "\"]}");
    adapter_call_free(&call);
    json_decref(info);

    info = json_loads("{\"apiPath\":\"" API "\"}", 0, NULL);
    t.info = info;
    assert_int_equal(ops()->build_check(&t, &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_AUTH_EXPIRED);
    assert_failed_call(-1, &call, &res);
    json_decref(info);
}

static void test_contacts_parse(void **state)
{
    adapter_result_t res;

    (void)state;
    assert_int_equal(parse_with(ops()->parse_check, 200,
                                "{\"contacts\":[{\"input\":\"+85291234567\",\"status\":\"valid\","
                                "\"wa_id\":\"85291234567\"}],\"meta\":{\"api_status\":\"stable\"}}",
                                &res),
                     ADAPTER_OK);
    assert_string_equal(res.ref, "85291234567");
    /* The platform may answer with another form of the number: that one is used. */
    assert_int_equal(parse_with(ops()->parse_check, 200,
                                "{\"contacts\":[{\"input\":\"+85291234567\",\"status\":\"valid\","
                                "\"wa_id\":\"852091234567\"}]}",
                                &res),
                     ADAPTER_OK);
    assert_string_equal(res.ref, "852091234567");
    assert_int_equal(
        parse_with(ops()->parse_check, 200,
                   "{\"contacts\":[{\"input\":\"+85291234567\",\"status\":\"invalid\"}]}", &res),
        ADAPTER_RECIPIENT_INVALID);
    assert_int_equal(adapter_err_code(ops(), res.status), 100);
    assert_int_equal(parse_with(ops()->parse_check, 401, "", &res), ADAPTER_AUTH_EXPIRED);
    assert_int_equal(parse_with(ops()->parse_check, 500, "{}", &res), ADAPTER_SERVER_ERROR);
    assert_int_equal(parse_with(ops()->parse_check, 200, "<html>", &res), ADAPTER_SERVER_ERROR);
    assert_int_equal(parse_with(ops()->parse_check, 200, "{\"contacts\":[]}", &res),
                     ADAPTER_SERVER_ERROR);
    assert_int_equal(
        parse_with(ops()->parse_check, 200, "{\"contacts\":[{\"status\":\"processing\"}]}", &res),
        ADAPTER_SERVER_ERROR);
    assert_int_equal(parse_with(ops()->parse_check, 0, "", &res), ADAPTER_SERVER_ERROR);
}

static void test_no_secret_in_errors(void **state)
{
    adapter_result_t res;

    (void)state;
    parse_with(ops()->parse_send, 400,
               "{\"errors\":[{\"code\":1008,\"title\":\"Bad token " TOKEN "\","
               "\"details\":\"password " PASSWORD " refused\"}]}",
               &res);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_non_null(strstr(res.error, "***"));
    adapter_result_clear(&res);
    assert_null(login(401, "{\"errors\":[{\"title\":\"" PASSWORD "\"}]}", &res));
    assert_null(login(500, "{\"errors\":[{\"title\":\"" TOKEN "\"}]}", &res));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_build_messages),
        cmocka_unit_test(test_build_template_namespace),
        cmocka_unit_test(test_build_refused),
        cmocka_unit_test(test_parse_success),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_login_build),
        cmocka_unit_test(test_login_build_refused),
        cmocka_unit_test(test_login_parse),
        cmocka_unit_test(test_login_parse_failures),
        cmocka_unit_test(test_needs_refresh),
        cmocka_unit_test(test_contacts_build),
        cmocka_unit_test(test_contacts_parse),
        cmocka_unit_test(test_no_secret_in_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
