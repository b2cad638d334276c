/* test_adapter_slack.c - the Slack adapter: chat.postMessage built, ok/error answers read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapter_cases.h"

#define BASE    "https://slack.example.com/api"
#define TOKEN   "xoxb-1111-2222-SLACKSECRET"
#define SIGNING "8f742231b10e8888abcd99yyyzzz85a5"
#define TO      "D024BE91L"
#define TEXT_A  "{\"type\":\"TEXT\",\"text\":\"a\"}"

static const char *const secrets[] = {TOKEN, SIGNING, "SLACKSECRET", NULL};

static const case_fixture_t fx = {
    .type = "slack",
    .base_url = BASE,
    .info = "{\"botAccessToken\":\"" TOKEN "\",\"botId\":\"B0123\",\"signingSecret\":\"" SIGNING
            "\",\"teamId\":\"T0001\"}",
    .to = TO,
    .now_ms = 1700000000000LL,
    .secrets = secrets,
};

static void test_table(void **state)
{
    static const ops_want_t want = {
        .api_version = "web-api",
        .from_field = "botId",
        .response_types = ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_VIDEO | ADAPTER_AUDIO |
                          ADAPTER_FILE | ADAPTER_BUTTON | ADAPTER_CAROUSEL | ADAPTER_LIST |
                          ADAPTER_NATIVE,
        .recipient_invalid_code = 104,
        .errors =
            {
                {ADAPTER_AUTH_INVALID, 104},
                {ADAPTER_RECIPIENT_INVALID, 104},
                {ADAPTER_RATE_LIMITED, 120},
            },
    };

    (void)state;
    check_ops(&fx, &want);
}

static void test_build(void **state)
{
    static const build_case_t cases[] = {
        {.response = "{\"type\":\"TEXT\",\"text\":\"Hello *world*\"}",
         .method = "POST",
         .url = BASE "/chat.postMessage",
         .headers = {"Authorization: Bearer " TOKEN, ADAPTER_JSON_HEADER},
         .body = "{\"channel\":\"" TO "\",\"text\":\"Hello *world*\"}"},
        {.response = "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/c.gif\"}",
         .method = "POST",
         .url = BASE "/chat.postMessage",
         .headers = {"Authorization: Bearer " TOKEN, ADAPTER_JSON_HEADER},
         .body = "{\"channel\":\"" TO "\",\"text\":\"image\",\"blocks\":[{\"type\":"
                 "\"image\",\"image_url\":\"https://img.example.com/c.gif\","
                 "\"alt_text\":\"image\"}]}"},
        {.response = "{\"type\":\"TEMPLATE\",\"elementName\":\"a\",\"languageCode\":\"en\"}",
         .status = ADAPTER_UNSUPPORTED},
        {.info = "{\"accessToken\":\"xoxp-other\",\"botId\":\"B1\"}",
         .response = TEXT_A,
         .status = ADAPTER_AUTH_INVALID,
         .error = "channel has no botAccessToken"},
        {.response = "{\"type\":\"IMAGE\",\"text\":\"no url\"}",
         .status = ADAPTER_REJECTED,
         .error = "slack: response has no url"},
        /* A credential that would add a header line is not sent. */
        {.info = "{\"botAccessToken\":\"x\\r\\nX-Evil: 1\"}",
         .response = TEXT_A,
         .status = ADAPTER_SERVER_ERROR},
    };

    (void)state;
    RUN_CASES(&fx, "build", cases, run_build_case);
}

static void test_parse(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(200,
                "{\"ok\":true,\"channel\":\"C123ABC456\",\"ts\":\"1503435956.000247\","
                "\"message\":{\"text\":\"Here's a message for you\",\"type\":\"message\"}}",
                ADAPTER_OK, 0),
         .message_id = "1503435956.000247", .chat_id = "C123ABC456"},
        {ANSWER(200, "{\"ok\":true,\"ts\":\"1.2\"}", ADAPTER_OK, 0), .message_id = "1.2",
         .chat_id = TO},
        {ANSWER(500, "", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(503, "<html>down</html>", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "garbage", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "{}", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(0, "", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "{\"ok\":false}", ADAPTER_REJECTED, 0)},
        {ANSWER(404, "{\"oops\":1}", ADAPTER_REJECTED, 0)},
        {ANSWER(200, "{\"ok\":false,\"error\":\"invalid_auth " TOKEN " / " SIGNING "\"}",
                ADAPTER_REJECTED, 0),
         .masked = 1},
    };

    (void)state;
    RUN_CASES(&fx, "parse", cases, run_parse_case);
}

/* An ok:false answer named error: its status, and the name as the error text. */
#define NAMED(name, st)                                                                            \
    {                                                                                              \
        ANSWER(200, "{\"ok\":false,\"error\":\"" name "\"}", st, 0), .error = "slack: " name       \
    }

static void test_parse_error_names(void **state)
{
    static const parse_case_t cases[] = {
        NAMED("channel_not_found", ADAPTER_RECIPIENT_INVALID),
        NAMED("not_in_channel", ADAPTER_RECIPIENT_INVALID),
        NAMED("user_not_found", ADAPTER_RECIPIENT_INVALID),
        NAMED("is_archived", ADAPTER_RECIPIENT_INVALID),
        NAMED("invalid_auth", ADAPTER_AUTH_INVALID),
        NAMED("not_authed", ADAPTER_AUTH_INVALID),
        NAMED("token_revoked", ADAPTER_AUTH_INVALID),
        NAMED("account_inactive", ADAPTER_AUTH_INVALID),
        NAMED("token_expired", ADAPTER_AUTH_INVALID),
        NAMED("ratelimited", ADAPTER_RATE_LIMITED),
        NAMED("internal_error", ADAPTER_SERVER_ERROR),
        NAMED("fatal_error", ADAPTER_SERVER_ERROR),
        NAMED("service_unavailable", ADAPTER_SERVER_ERROR),
        NAMED("request_timeout", ADAPTER_SERVER_ERROR),
        NAMED("msg_too_long", ADAPTER_REJECTED),
        NAMED("invalid_blocks", ADAPTER_REJECTED),
    };

    (void)state;
    RUN_CASES(&fx, "error names", cases, run_parse_case);
}

/* A 429 with a Retry-After header: the wait in whole seconds (at most 60), -1 when unreadable;
 * a wait of a second at most is the conversation's limit (conv 1), a longer one the bot's.
 * The fixture's now is Tue, 14 Nov 2023 22:13:20 GMT. */
#define WAIT(header, s, conv)                                                                      \
    {                                                                                              \
        ANSWER(429, "", ADAPTER_RATE_LIMITED, 0), .retry_after = header, .retry_after_s = s,       \
                                                  .rate_recipient = conv                           \
    }

static void test_retry_after(void **state)
{
    static const parse_case_t cases[] = {
        WAIT("30", 30, 0),
        WAIT("1", 1, 1),
        WAIT("0", 0, 1),
        WAIT("2", 2, 0),
        WAIT(" 7 ", 7, 0),
        WAIT("120\r\n", 60, 0),
        WAIT("2147483647", 60, 0),
        WAIT("99999999999999999999", 60, 0),
        WAIT(NULL, -1, 0),
        WAIT("", -1, 0),
        WAIT("soon", -1, 0),
        WAIT("-3", -1, 0),
        WAIT("1.5", -1, 0),
        WAIT("12abc", -1, 0),
        /* the three forms of an HTTP-date (RFC 9110 5.6.7), rounded up to whole seconds */
        WAIT("Tue, 14 Nov 2023 22:13:23 GMT", 3, 0),
        WAIT("Tuesday, 14-Nov-23 22:13:23 GMT", 3, 0),
        WAIT("Tue Nov 14 22:13:23 2023", 3, 0),
        WAIT("Tue Nov  9 22:13:23 2023", 0, 1),
        WAIT("Tue, 14 Nov 2023 22:13:21 GMT", 1, 1),
        WAIT("Tue, 14 Nov 2023 22:13:00 GMT", 0, 1),
        WAIT("Wed, 21 Oct 2015 07:28:00 GMT", 0, 1),
        WAIT("Fri, 01 Jan 2100 00:00:00 GMT", 60, 0),
        WAIT("Tue, 14 Nov 2023 22:13:23 UTC", -1, 0),
        WAIT("Tue, 14 Foo 2023 22:13:23 GMT", -1, 0),
        WAIT("Tue, 14 Nov 2023 25:13:23 GMT", -1, 0),
        WAIT("Tue, 14 Nov 2023 22:13:23 GMT and more", -1, 0),
        /* ok:false ratelimited carries the header too. */
        {ANSWER(200, "{\"ok\":false,\"error\":\"ratelimited\"}", ADAPTER_RATE_LIMITED, 0),
         .retry_after = "4", .retry_after_s = 4},
        {ANSWER(200, "{\"ok\":false,\"error\":\"ratelimited\"}", ADAPTER_RATE_LIMITED, 0),
         .retry_after = "1", .retry_after_s = 1, .rate_recipient = 1},
        {ANSWER(200, "{\"ok\":false,\"error\":\"ratelimited\"}", ADAPTER_RATE_LIMITED, 0)},
        /* the workspace's message limit: 429 without Retry-After, the whole bot */
        {ANSWER(429, "{\"ok\":false,\"error\":\"message_limit_exceeded\"}", ADAPTER_RATE_LIMITED,
                0)},
        /* Other failures leave it unknown. */
        {ANSWER(500, "", ADAPTER_SERVER_ERROR, 0), .retry_after = "10", .retry_after_s = -1},
    };

    (void)state;
    RUN_CASES(&fx, "retry-after", cases, run_parse_case);
}

static void test_check(void **state)
{
    static const check_case_t cases[] = {
        {CHECK_QR(13), 0, NULL},
        {CHECK_BUTTONS(CHECK_PB "," CHECK_URL), 0, NULL},
        {CHECK_BUTTONS(CHECK_PB "," CHECK_PHONE), 117, "phone"},
        {CHECK_CARDS(2, ",\"buttons\":[" CHECK_PHONE "]"), 117, "phone"},
        {CHECK_ROW("title", "description", 75), 0, NULL},
        {CHECK_ROW("title", "description", 76), 118, "title"},
        {CHECK_ROW("description", "title", 75), 0, NULL},
        {CHECK_ROW("description", "title", 76), 118, "description"},
        {CHECK_LOCATION, 117, "LOCATION"},
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
        cmocka_unit_test(test_parse_error_names),
        cmocka_unit_test(test_retry_after),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
