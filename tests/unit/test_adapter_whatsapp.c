/* test_adapter_whatsapp.c - the on-premises WhatsApp adapter: login, contacts, messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapter_cases.h"
#include "adapter_whatsapp_checks.h"

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
#define TEXT_A     "{\"type\":\"TEXT\",\"text\":\"a\"}"
#define HEADERS                                                                                    \
    {                                                                                              \
        "Authorization: Bearer " TOKEN, ADAPTER_JSON_HEADER                                        \
    }

static const char *const secrets[] = {TOKEN, PASSWORD, "ADMINTOKEN", NULL};

static const case_fixture_t fx = {
    .type = "whatsapp",
    .base_url = NULL,
    .info = INFO,
    .to = TO,
    .now_ms = NOW,
    .secrets = secrets,
};

static void test_table(void **state)
{
    static const ops_want_t want = {
        .api_version = "",
        .from_field = "waId",
        .cred_field = "adminAuthToken",
        .response_types = ADAPTER_WHATSAPP_TYPES,
        .recipient_invalid_code = 100,
        .server_error_aborts = 1,
        .phone_recipients = 1,
        .has_cred = 1,
        .has_check = 1,
        .errors =
            {
                {ADAPTER_RECIPIENT_INVALID, 100},
                {ADAPTER_SERVER_ERROR, 113},
                {ADAPTER_WINDOW_CLOSED, 127},
            },
    };

    (void)state;
    check_ops(&fx, &want);
}

/* A message built: apiPath's trailing '/' is dropped. */
#define MESSAGE(response_json, body_json)                                                          \
    {                                                                                              \
        .response = response_json, .method = "POST", .url = API "/v1/messages",                    \
        .headers = HEADERS, .body = body_json                                                      \
    }

static void test_build_send(void **state)
{
    static const build_case_t cases[] = {
        MESSAGE("{\"type\":\"TEXT\",\"text\":\"Hello ☺\"}",
                "{\"recipient_type\":\"individual\",\"to\":\"" TO "\",\"type\":\"text\","
                "\"text\":{\"body\":\"Hello ☺\"}}"),
        MESSAGE("{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/a.jpg\"}",
                "{\"recipient_type\":\"individual\",\"to\":\"" TO "\",\"type\":\"image\","
                "\"image\":{\"link\":\"https://img.example.com/a.jpg\"}}"),
        MESSAGE("{\"type\":\"TEMPLATE\",\"elementName\":\"order_update\",\"languageCode\":"
                "\"en_US\",\"components\":[{\"type\":\"body\",\"parameters\":[{\"type\":\"text\","
                "\"text\":\"42\"}]}]}",
                "{\"to\":\"" TO "\",\"type\":\"template\",\"template\":{\"name\":\"order_update\","
                "\"language\":{\"policy\":\"deterministic\",\"code\":\"en_US\"},"
                "\"components\":[{\"type\":\"body\",\"parameters\":[{\"type\":\"text\","
                "\"text\":\"42\"}]}]}}"),
        /* No components given: none sent. */
        MESSAGE("{\"type\":\"TEMPLATE\",\"elementName\":\"hi\",\"languageCode\":\"zh_HK\"}",
                "{\"to\":\"" TO "\",\"type\":\"template\",\"template\":{\"name\":\"hi\","
                "\"language\":{\"policy\":\"deterministic\",\"code\":\"zh_HK\"}}}"),
        /* The template namespace of info goes into the template. */
        {.info = "{\"apiPath\":\"" API "\",\"adminAuthToken\":\"" TOKEN "\","
                 "\"namespace\":\"cdb2b0c4_5f2d_4e1c\"}",
         .response = "{\"type\":\"TEMPLATE\",\"elementName\":\"t\",\"languageCode\":\"en\","
                     "\"components\":[]}",
         .method = "POST",
         .url = API "/v1/messages",
         .headers = HEADERS,
         .body = "{\"to\":\"" TO "\",\"type\":\"template\",\"template\":{\"name\":\"t\","
                 "\"namespace\":\"cdb2b0c4_5f2d_4e1c\",\"language\":{\"policy\":"
                 "\"deterministic\",\"code\":\"en\"},\"components\":[]}}"},
        {.info = "{\"adminAuthToken\":\"" TOKEN "\"}",
         .response = TEXT_A,
         .status = ADAPTER_AUTH_INVALID,
         .error = "channel has no apiPath"},
        {.info = "{\"apiPath\":\"" API "\",\"adminAuthToken\":\"\"}",
         .response = TEXT_A,
         .status = ADAPTER_AUTH_EXPIRED},
        {.response = "{\"type\":\"TEMPLATE\",\"languageCode\":\"en\"}",
         .status = ADAPTER_REJECTED,
         .error = "whatsapp: response has no elementName"},
        {.response = "{\"type\":\"TEMPLATE\",\"elementName\":\"x\"}",
         .status = ADAPTER_REJECTED,
         .error = "whatsapp: response has no languageCode"},
        {.response = "{\"type\":\"IMAGE\"}", .status = ADAPTER_REJECTED},
        {.response = "{\"type\":\"CAROUSEL\",\"cards\":[]}", .status = ADAPTER_UNSUPPORTED},
        {.response = "{}", .status = ADAPTER_REJECTED},
    };

    (void)state;
    RUN_CASES(&fx, "build send", cases, run_build_case);
}

#define WAERR(code, title)                                                                         \
    "{\"errors\":[{\"code\":" #code ",\"title\":\"" title "\",\"details\":\"d\"}],"                \
    "\"meta\":{\"api_status\":\"stable\",\"version\":\"2.45.1\"}}"

static void test_parse_send(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(201,
                "{\"messages\":[{\"id\":\"gBEGkYiEB1VXAglK1ZEqA1YKPrU\"}],"
                "\"meta\":{\"api_status\":\"stable\",\"version\":\"2.45.1\"}}",
                ADAPTER_OK, 0),
         .message_id = "gBEGkYiEB1VXAglK1ZEqA1YKPrU", .chat_id = TO,
         .meta = "{\"api_status\":\"stable\",\"version\":\"2.45.1\"}"},
        /* No meta in the answer: none reported. */
        {ANSWER(200, "{\"messages\":[{\"id\":\"x\"}]}", ADAPTER_OK, 0), .message_id = "x",
         .chat_id = TO},
        {ANSWER(400, WAERR(1013, "User is not valid"), ADAPTER_RECIPIENT_INVALID, 1013),
         .error = "whatsapp: User is not valid: d (code 1013)", .err_code = 100},
        {ANSWER(400, WAERR(1026, "Receiver is incapable of receiving this message"),
                ADAPTER_RECIPIENT_INVALID, 1026)},
        /* outside the 24 h window: 127, title and details whole */
        {ANSWER(400,
                "{\"errors\":[{\"code\":470,\"title\":\"Message failed to send because more "
                "than 24 hours have passed since the customer last replied to this number\","
                "\"details\":\"Re-engagement message: send a template\"}]}",
                ADAPTER_WINDOW_CLOSED, 470),
         .error = "whatsapp: Message failed to send because more than 24 hours have passed since "
                  "the customer last replied to this number: Re-engagement message: send a "
                  "template (code 470)",
         .err_code = 127},
        {ANSWER(401, "{\"errors\":[{\"code\":1005,\"title\":\"Access denied\"}]}",
                ADAPTER_AUTH_EXPIRED, 0)},
        {ANSWER(401, "", ADAPTER_AUTH_EXPIRED, 0)},
        {ANSWER(429, "", ADAPTER_RATE_LIMITED, 0)},
        {ANSWER(429, WAERR(1015, "Too many requests"), ADAPTER_RATE_LIMITED, 1015)},
        {ANSWER(400, WAERR(1015, "Too many requests"), ADAPTER_RATE_LIMITED, 1015)},
        {ANSWER(500, WAERR(1014, "Internal error"), ADAPTER_SERVER_ERROR, 1014), .err_code = 113},
        {ANSWER(503, WAERR(1016, "System overloaded"), ADAPTER_SERVER_ERROR, 1016)},
        {ANSWER(400, WAERR(1014, "Internal error"), ADAPTER_SERVER_ERROR, 1014)},
        {ANSWER(500, WAERR(1000, "Generic error"), ADAPTER_SERVER_ERROR, 1000)},
        {ANSWER(502, "<html>bad gateway</html>", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(500, "{}", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "garbage", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "{\"messages\":[]}", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(0, "", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(400, WAERR(1008, "Required parameter is missing"), ADAPTER_REJECTED, 1008)},
        {ANSWER(404, "{}", ADAPTER_REJECTED, 0)},
        {ANSWER(400,
                "{\"errors\":[{\"code\":1008,\"title\":\"Bad token " TOKEN "\","
                "\"details\":\"password " PASSWORD " refused\"}]}",
                ADAPTER_REJECTED, 1008),
         .masked = 1},
    };

    (void)state;
    RUN_CASES(&fx, "parse send", cases, run_parse_case);
}

static void test_build_login_contacts(void **state)
{
    static const build_case_t cases[] = {
        /* Basic base64("admin:s3cr3t-P4ss"), and an empty JSON object as the body. */
        {.step = CASE_CRED,
         .method = "POST",
         .url = API "/v1/users/login",
         .headers = {"Authorization: Basic YWRtaW46czNjcjN0LVA0c3M=", ADAPTER_JSON_HEADER},
         .body = "{}",
         .body_exact = 1},
        {.step = CASE_CRED,
         .info = "{\"adminUsername\":\"admin\",\"adminPassword\":\"" PASSWORD "\"}",
         .status = ADAPTER_AUTH_INVALID},
        {.step = CASE_CRED,
         .info = "{\"apiPath\":\"" API "\",\"adminPassword\":\"" PASSWORD "\"}",
         .status = ADAPTER_AUTH_INVALID},
        {.step = CASE_CRED,
         .info = "{\"apiPath\":\"" API "\",\"adminUsername\":\"admin\"}",
         .status = ADAPTER_AUTH_INVALID},
        {.step = CASE_CRED,
         .info = "{\"apiPath\":\"" API "\",\"adminUsername\":\"admin\",\"adminPassword\":\"\"}",
         .status = ADAPTER_AUTH_INVALID},
        {.step = CASE_CHECK,
         .method = "POST",
         .url = API "/v1/contacts",
         .headers = HEADERS,
         .body = "{\"blocking\":\"wait\",\"contacts\":[\"+" TO "\"]}"},
        {.step = CASE_CHECK, .info = "{\"apiPath\":\"" API "\"}", .status = ADAPTER_AUTH_EXPIRED},
    };

    (void)state;
    RUN_CASES(&fx, "build login/contacts", cases, run_build_case);
}

/* A login answer with expires_after as given (JSON text), and the expiry it must mean. */
#define LOGIN(expires, ms)                                                                         \
    {                                                                                              \
        ANSWER(200, "{\"users\":[{\"token\":\"NEWTOKEN\",\"expires_after\":" expires "}]}",        \
               ADAPTER_OK, 0),                                                                     \
            .step = CASE_CRED, .token = "NEWTOKEN", .expiry_ms = ms                                \
    }
#define LOGIN_FAILS(http, text, st)                                                                \
    {                                                                                              \
        ANSWER(http, text, st, 0), .step = CASE_CRED                                               \
    }

static void test_login_parse(void **state)
{
    static const parse_case_t cases[] = {
        LOGIN("\"2026-11-29 15:29:26+00:00\"", 1795966166000LL),
        LOGIN("\"2026-11-29 15:29:26+08:00\"", 1795937366000LL),
        LOGIN("\"2026-11-29T15:29:26Z\"", 1795966166000LL),
        LOGIN("\"2026-11-29 15:29:26\"", 1795966166000LL),
        LOGIN("\"2026-11-29 15:29:26.123+0000\"", 1795966166000LL),
        LOGIN("\"2024-02-29 23:59:59-05:30\"", 1709270999000LL),
        LOGIN("\"2000-03-01 00:00:00+00:00\"", 951868800000LL),
        LOGIN("\"1969-12-31 00:00:00+00:00\"", -86400000LL),
        /* Missing or unreadable: a week from now. */
        {ANSWER(200, "{\"users\":[{\"token\":\"NEWTOKEN\"}]}", ADAPTER_OK, 0), .step = CASE_CRED,
         .token = "NEWTOKEN", .expiry_ms = NOW + SEVEN_DAYS},
        LOGIN("\"tomorrow\"", NOW + SEVEN_DAYS),
        LOGIN("\"2026-02-29 10:00:00+00:00\"", NOW + SEVEN_DAYS),
        LOGIN("\"2026-11-29 25:00:00+00:00\"", NOW + SEVEN_DAYS),
        LOGIN("\"2026-11-29 15:29:26+00:00 junk\"", NOW + SEVEN_DAYS),
        LOGIN("\"2026-11-29 15:29\"", NOW + SEVEN_DAYS),
        LOGIN("12345", NOW + SEVEN_DAYS),
        {ANSWER(401, "{\"errors\":[{\"code\":1005,\"title\":\"Access denied\"}]}",
                ADAPTER_AUTH_INVALID, 0),
         .step = CASE_CRED, .error = "whatsapp admin login refused"},
        LOGIN_FAILS(500, "{}", ADAPTER_SERVER_ERROR),
        LOGIN_FAILS(200, "not json", ADAPTER_SERVER_ERROR),
        LOGIN_FAILS(200, "{\"users\":[{\"token\":\"\"}]}", ADAPTER_SERVER_ERROR),
        LOGIN_FAILS(200, "{\"users\":[]}", ADAPTER_SERVER_ERROR),
        LOGIN_FAILS(0, "", ADAPTER_SERVER_ERROR),
        LOGIN_FAILS(400, "{\"errors\":[{\"code\":1000,\"title\":\"x\"}]}", ADAPTER_SERVER_ERROR),
        LOGIN_FAILS(401, "{\"errors\":[{\"title\":\"" PASSWORD "\"}]}", ADAPTER_AUTH_INVALID),
        LOGIN_FAILS(500, "{\"errors\":[{\"title\":\"" TOKEN "\"}]}", ADAPTER_SERVER_ERROR),
    };

    (void)state;
    RUN_CASES(&fx, "login parse", cases, run_parse_case);
}

static void test_needs_refresh(void **state)
{
    /* Expiry 1800000000000: refresh from 60 s before it on. */
    static const needs_case_t cases[] = {
        {INFO, 1800000000000LL - 60001, 0},
        {INFO, 1800000000000LL - 60000, 1},
        {INFO, 1800000000000LL - 59999, 1},
        {INFO, 1800000000000LL + 5, 1},
        {INFO, NOW, 0},
        {"{\"adminAuthTokenExpiry\":1800000000000}", NOW, 1},
        {"{\"adminAuthToken\":\"\",\"adminAuthTokenExpiry\":1800000000000}", NOW, 1},
        {"{\"adminAuthToken\":\"t\"}", NOW, 1},
        {"{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":null}", NOW, 1},
        {"{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":\"1800000000000\"}", NOW, 1},
        {"{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":1.8e12}", NOW, 0},
        {"{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":1e300}", NOW, 0},
        {"{\"adminAuthToken\":\"t\",\"adminAuthTokenExpiry\":-1e300}", NOW, 1},
    };

    (void)state;
    RUN_CASES(&fx, "needs refresh", cases, run_needs_case);
}

#define CONTACT(http, text, st)                                                                    \
    {                                                                                              \
        ANSWER(http, text, st, 0), .step = CASE_CHECK                                              \
    }

static void test_contacts_parse(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(200,
                "{\"contacts\":[{\"input\":\"+85291234567\",\"status\":\"valid\","
                "\"wa_id\":\"85291234567\"}],\"meta\":{\"api_status\":\"stable\"}}",
                ADAPTER_OK, 0),
         .step = CASE_CHECK, .ref = "85291234567"},
        /* The platform may answer with another form of the number: that one is used. */
        {ANSWER(200,
                "{\"contacts\":[{\"input\":\"+85291234567\",\"status\":\"valid\","
                "\"wa_id\":\"852091234567\"}]}",
                ADAPTER_OK, 0),
         .step = CASE_CHECK, .ref = "852091234567"},
        {ANSWER(200, "{\"contacts\":[{\"input\":\"+85291234567\",\"status\":\"invalid\"}]}",
                ADAPTER_RECIPIENT_INVALID, 0),
         .step = CASE_CHECK, .err_code = 100},
        CONTACT(401, "", ADAPTER_AUTH_EXPIRED),
        CONTACT(500, "{}", ADAPTER_SERVER_ERROR),
        CONTACT(200, "<html>", ADAPTER_SERVER_ERROR),
        CONTACT(200, "{\"contacts\":[]}", ADAPTER_SERVER_ERROR),
        CONTACT(200, "{\"contacts\":[{\"status\":\"processing\"}]}", ADAPTER_SERVER_ERROR),
        CONTACT(0, "", ADAPTER_SERVER_ERROR),
    };

    (void)state;
    RUN_CASES(&fx, "contacts parse", cases, run_parse_case);
}

/* The rate-limit answer with a Retry-After: the pause is the one it asks for, at most 60 s. */
static void test_retry_after(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(429, WAERR(1015, "Too many requests"), ADAPTER_RATE_LIMITED, 1015),
         .retry_after = "3", .retry_after_s = 3},
        {ANSWER(429, "", ADAPTER_RATE_LIMITED, 0), .retry_after = "3", .retry_after_s = 3},
        {ANSWER(429, WAERR(1015, "Too many requests"), ADAPTER_RATE_LIMITED, 1015),
         .retry_after = "4000000000", .retry_after_s = 60},
        {ANSWER(429, WAERR(1015, "Too many requests"), ADAPTER_RATE_LIMITED, 1015),
         .retry_after = "in a while", .retry_after_s = -1},
        {ANSWER(500, WAERR(1014, "Internal error"), ADAPTER_SERVER_ERROR, 1014), .retry_after = "3",
         .retry_after_s = -1},
    };

    (void)state;
    RUN_CASES(&fx, "retry-after", cases, run_parse_case);
}

static void test_check(void **state)
{
    (void)state;
    RUN_CASES(&fx, "check", whatsapp_check_cases, run_check_case);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_build_send),
        cmocka_unit_test(test_parse_send),
        cmocka_unit_test(test_build_login_contacts),
        cmocka_unit_test(test_login_parse),
        cmocka_unit_test(test_needs_refresh),
        cmocka_unit_test(test_contacts_parse),
        cmocka_unit_test(test_retry_after),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
