/* test_adapter_teamwork.c - the team-collaboration adapter: calls built, answers read by status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapter_cases.h"

#define BASE       "https://teamwork.example.com/api"
#define KEY        "tw-key-0123456789-TWSECRET"
#define MODULE_KEY "mod-key-TWMODULE"
#define TO         "user-7788"
#define HEADERS                                                                                    \
    {                                                                                              \
        "x-api-key: " KEY, ADAPTER_JSON_HEADER                                                     \
    }

static const char *const secrets[] = {KEY, MODULE_KEY, "TWSECRET", "TWAPITOKEN", NULL};

static const case_fixture_t fx = {
    .type = "teamwork",
    .base_url = BASE,
    .info =
        "{\"apiKey\":\"" KEY "\",\"apiToken\":\"tw-token-TWAPITOKEN\",\"moduleKey\":\"" MODULE_KEY
        "\",\"tbId\":\"tb-42\",\"env\":\"prod\"}",
    .to = TO,
    .now_ms = 1700000000000LL,
    .secrets = secrets,
};

static void test_table(void **state)
{
    static const ops_want_t want = {
        .api_version = "appstore-v1",
        .from_field = "tbId",
        .response_types = ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_NATIVE,
        .recipient_invalid_code = 104,
        .errors =
            {
                {ADAPTER_AUTH_INVALID, 104},
                {ADAPTER_RECIPIENT_INVALID, 104},
            },
    };

    (void)state;
    check_ops(&fx, &want);
}

static void test_build(void **state)
{
    static const build_case_t cases[] = {
        {.response = "{\"type\":\"TEXT\",\"text\":\"Hi team\"}",
         .method = "POST",
         .url = BASE "/developer/chats/message",
         .headers = HEADERS,
         .body = "{\"users\":[\"" TO "\"],\"messageType\":\"text\",\"text\":\"Hi team\"}"},
        {.response = "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/d.png\"}",
         .method = "POST",
         .url = BASE "/developer/chats/message",
         .headers = HEADERS,
         .body = "{\"users\":[\"" TO "\"],\"messageType\":\"image\","
                 "\"image\":{\"url\":\"https://img.example.com/d.png\"}}"},
        {.response = "{\"type\":\"TEMPLATE\",\"elementName\":\"a\",\"languageCode\":\"en\"}",
         .status = ADAPTER_UNSUPPORTED},
        {.info = "{\"apiToken\":\"tw-token-TWAPITOKEN\",\"tbId\":\"tb\"}",
         .response = "{\"type\":\"TEXT\",\"text\":\"a\"}",
         .status = ADAPTER_AUTH_INVALID,
         .error = "channel has no apiKey"},
        {.response = "{\"type\":\"TEXT\",\"text\":null}", .status = ADAPTER_REJECTED},
    };

    (void)state;
    RUN_CASES(&fx, "build", cases, run_build_case);
}

/* A success: the message id the answer gives ("" for none); the chat is the recipient. */
#define SENT(http, text, id)                                                                       \
    {                                                                                              \
        ANSWER(http, text, ADAPTER_OK, 0), .message_id = id, .chat_id = TO                         \
    }

static void test_parse(void **state)
{
    static const parse_case_t cases[] = {
        SENT(200, "{\"result\":{\"messageId\":\"msg-001\"}}", "msg-001"),
        SENT(200, "{\"messageId\":\"msg-002\"}", "msg-002"),
        SENT(201, "{\"messageId\":12345}", "12345"),
        SENT(200, "{\"message\":\"sent\"}", ""),
        SENT(204, "", ""),
        SENT(200, "OK", ""),
        {ANSWER(401, "{\"message\":\"Invalid API key\"}", ADAPTER_AUTH_INVALID, 0),
         .error = "teamwork: Invalid API key"},
        {ANSWER(403, "{\"message\":\"Forbidden\"}", ADAPTER_AUTH_INVALID, 0),
         .error = "teamwork: Forbidden"},
        {ANSWER(404, "{\"message\":\"User not found\"}", ADAPTER_RECIPIENT_INVALID, 0),
         .error = "teamwork: User not found"},
        {ANSWER(429, "{\"message\":\"Too many requests\"}", ADAPTER_RATE_LIMITED, 0),
         .error = "teamwork: Too many requests"},
        {ANSWER(500, "{\"message\":\"Internal\"}", ADAPTER_SERVER_ERROR, 0),
         .error = "teamwork: Internal"},
        {ANSWER(503, "<html>", ADAPTER_SERVER_ERROR, 0), .error = "teamwork: HTTP 503"},
        {ANSWER(0, "", ADAPTER_SERVER_ERROR, 0), .error = "teamwork: no answer"},
        {ANSWER(400, "{\"message\":\"users is required\"}", ADAPTER_REJECTED, 0),
         .error = "teamwork: users is required"},
        {ANSWER(400, "", ADAPTER_REJECTED, 0), .error = "teamwork: HTTP 400"},
        {ANSWER(422, "{\"error\":\"x\"}", ADAPTER_REJECTED, 0), .error = "teamwork: HTTP 422"},
        {ANSWER(429, "", ADAPTER_RATE_LIMITED, 0), .retry_after = "15", .retry_after_s = 15},
        {ANSWER(429, "", ADAPTER_RATE_LIMITED, 0), .retry_after = "later", .retry_after_s = -1},
        {ANSWER(429, "", ADAPTER_RATE_LIMITED, 0), .retry_after = "2147483647",
         .retry_after_s = 60},
        {ANSWER(429, "", ADAPTER_RATE_LIMITED, 0)},
        {ANSWER(401, "{}", ADAPTER_AUTH_INVALID, 0), .err_code = 104},
        {ANSWER(404, "{}", ADAPTER_RECIPIENT_INVALID, 0), .err_code = 104},
        {ANSWER(401, "{\"message\":\"API key " KEY " is not valid for module " MODULE_KEY "\"}",
                ADAPTER_AUTH_INVALID, 0),
         .masked = 1},
        {ANSWER(400, "{\"message\":\"tw-token-TWAPITOKEN\"}", ADAPTER_REJECTED, 0)},
    };

    (void)state;
    RUN_CASES(&fx, "parse", cases, run_parse_case);
}

static void test_check(void **state)
{
    static const check_case_t cases[] = {
        {CHECK_ONE("{\"type\":\"TEXT\",\"text\":\"t\"}"), 0, NULL},
        {CHECK_QR(1), 117, "quickReplies"},
        {CHECK_ONE("{\"type\":\"IMAGE\",\"url\":\"https://x\",\"caption\":\"c\"}"), 117, "caption"},
        {CHECK_ONE("{\"type\":\"NATIVE\",\"message\":{\"messageType\":\"text\",\"text\":\"t\"}}"),
         0, NULL},
        {CHECK_BUTTONS(CHECK_PB), 117, "BUTTON"},
    };

    (void)state;
    RUN_CASES(&fx, "check", cases, run_check_case);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_build),
        cmocka_unit_test(test_parse),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
