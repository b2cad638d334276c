/* test_adapter_facebook.c - the Messenger adapter: calls built, Graph answers read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapter_cases.h"

#include <stdlib.h>
#include <string.h>

#define BASE      "https://graph.example.com/v19.0"
#define TOKEN     "EAAB+tok/en=SECRET"
#define TOKEN_ENC "EAAB%2Btok%2Fen%3DSECRET"
#define TO        "6543210987654321"
#define URL       BASE "/me/messages?access_token=" TOKEN_ENC
#define TEXT_A    "{\"type\":\"TEXT\",\"text\":\"a\"}"

static const char *const secrets[] = {TOKEN, TOKEN_ENC, "SECRET", NULL};

static const case_fixture_t fx = {
    .type = "facebook",
    .base_url = BASE,
    .info = "{\"accessToken\":\"" TOKEN "\",\"pageId\":\"1029384756\"}",
    .to = TO,
    .now_ms = 1700000000000LL,
    .secrets = secrets,
};

static void test_table(void **state)
{
    static const ops_want_t want = {
        .api_version = "v19.0",
        .from_field = "pageId",
        .response_types = ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_VIDEO | ADAPTER_AUDIO |
                          ADAPTER_FILE | ADAPTER_BUTTON | ADAPTER_CAROUSEL | ADAPTER_NATIVE,
        .recipient_invalid_code = 104,
        .errors =
            {
                {ADAPTER_RECIPIENT_INVALID, 104},
                {ADAPTER_AUTH_INVALID, 104},
                {ADAPTER_UNSUPPORTED, 117},
                {ADAPTER_RATE_LIMITED, 120},
                {ADAPTER_SERVER_ERROR, 113},
                {ADAPTER_REJECTED, 113},
                {ADAPTER_WINDOW_CLOSED, 127},
            },
    };

    (void)state;
    check_ops(&fx, &want);
}

static void test_build(void **state)
{
    static const build_case_t cases[] = {
        {.response = "{\"type\":\"TEXT\",\"text\":\"héllo \\\"you\\\"\\n\\t\\\\ \\u0001\"}",
         .method = "POST",
         .url = URL,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"messaging_type\":\"RESPONSE\",\"recipient\":{\"id\":\"" TO "\"},"
                 "\"message\":{\"text\":\"héllo \\\"you\\\"\\n\\t\\\\ \\u0001\"}}"},
        /* A trailing '/' on the base URL does not double. */
        {.base_url = BASE "/",
         .response = "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/a.png\"}",
         .method = "POST",
         .url = URL,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"messaging_type\":\"RESPONSE\",\"recipient\":{\"id\":\"" TO "\"},"
                 "\"message\":{\"attachment\":{\"type\":\"image\",\"payload\":"
                 "{\"url\":\"https://img.example.com/a.png\",\"is_reusable\":true}}}}"},
        /* a messageTag: sent as a MESSAGE_TAG, which Messenger takes outside the 24 h window */
        {.response = "{\"type\":\"TEXT\",\"text\":\"a\",\"messageTag\":\"ACCOUNT_UPDATE\"}",
         .method = "POST",
         .url = URL,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"messaging_type\":\"MESSAGE_TAG\",\"tag\":\"ACCOUNT_UPDATE\","
                 "\"recipient\":{\"id\":\"" TO "\"},\"message\":{\"text\":\"a\"}}",
         .body_exact = 1},
        {.response =
             "{\"type\":\"IMAGE\",\"url\":\"https://i/a.png\",\"messageTag\":\"HUMAN_AGENT\"}",
         .method = "POST",
         .url = URL,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"messaging_type\":\"MESSAGE_TAG\",\"tag\":\"HUMAN_AGENT\","
                 "\"recipient\":{\"id\":\"" TO "\"},\"message\":{\"attachment\":{\"type\":"
                 "\"image\",\"payload\":{\"url\":\"https://i/a.png\",\"is_reusable\":true}}}}",
         .body_exact = 1},
        {.response = "{\"type\":\"TEXT\",\"text\":\"a\",\"quickReplies\":[{\"title\":\"R\","
                     "\"payload\":\"P\"}],\"messageTag\":\"POST_PURCHASE_UPDATE\"}",
         .method = "POST",
         .url = URL,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"messaging_type\":\"MESSAGE_TAG\",\"tag\":\"POST_PURCHASE_UPDATE\","
                 "\"recipient\":{\"id\":\"" TO "\"},\"message\":{\"text\":\"a\",\"quick_replies\":"
                 "[{\"content_type\":\"text\",\"title\":\"R\",\"payload\":\"P\"}]}}",
         .body_exact = 1},
        {.response = "{\"type\":\"NATIVE\",\"message\":{\"message\":{\"text\":\"n\"}},"
                     "\"messageTag\":\"CONFIRMED_EVENT_UPDATE\"}",
         .method = "POST",
         .url = URL,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"messaging_type\":\"MESSAGE_TAG\",\"tag\":\"CONFIRMED_EVENT_UPDATE\","
                 "\"message\":{\"text\":\"n\"},\"recipient\":{\"id\":\"" TO "\"}}",
         .body_exact = 1},
        {.response = "{\"type\":\"NATIVE\",\"message\":{\"recipient\":{},\"message\":"
                     "{\"text\":\"n\"}},\"messageTag\":\"HUMAN_AGENT\"}",
         .method = "POST",
         .url = URL,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"messaging_type\":\"MESSAGE_TAG\",\"tag\":\"HUMAN_AGENT\",\"recipient\":"
                 "{\"id\":\"" TO "\"},\"message\":{\"text\":\"n\"}}",
         .body_exact = 1},
        {.response = "{\"type\":\"TEMPLATE\",\"elementName\":\"x\",\"languageCode\":\"en\","
                     "\"components\":[]}",
         .status = ADAPTER_UNSUPPORTED,
         .err_code = 117},
        {.response = "{\"type\":\"LIST\",\"text\":\"u\"}", .status = ADAPTER_UNSUPPORTED},
        {.response = "{\"text\":\"no type\"}", .status = ADAPTER_REJECTED},
        {.response = "{\"type\":\"TEXT\"}",
         .status = ADAPTER_REJECTED,
         .error = "facebook: response has no text"},
        {.response = "{\"type\":\"IMAGE\",\"url\":7}",
         .status = ADAPTER_REJECTED,
         .error = "facebook: response has no url"},
        {.no_base = 1, .response = TEXT_A, .status = ADAPTER_SERVER_ERROR},
        {.info = "{\"pageId\":\"1\"}",
         .response = TEXT_A,
         .status = ADAPTER_AUTH_INVALID,
         .error = "channel has no accessToken"},
        {.info = "{\"accessToken\":\"\"}", .response = TEXT_A, .status = ADAPTER_AUTH_INVALID},
        {.info = "{\"accessToken\":5}",
         .response = TEXT_A,
         .status = ADAPTER_AUTH_INVALID,
         .err_code = 104},
    };

    (void)state;
    RUN_CASES(&fx, "build", cases, run_build_case);
}

#define GRAPH(code, sub, msg)                                                                      \
    "{\"error\":{\"message\":\"" msg "\",\"type\":\"OAuthException\",\"code\":" #code              \
    ",\"error_subcode\":" #sub ",\"fbtrace_id\":\"AbCdEf\"}}"

static void test_parse(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(200,
                "{\"recipient_id\":\"1254477777772919\",\"message_id\":\"m_AG5Hz2Uq7tuwNEh"
                "XfYYKj8mJEM_QPpz5jdCK48PnKAjSdjfipqxqMvK8ma6AC8fplwlqLP_5cgXIbu7I3rBN0P\"}",
                ADAPTER_OK, 0),
         .message_id = "m_AG5Hz2Uq7tuwNEhXfYYKj8mJEM_QPpz5jdCK48PnKAjSdjfipqxqMvK8ma6"
                       "AC8fplwlqLP_5cgXIbu7I3rBN0P",
         .chat_id = "1254477777772919"},
        /* escaped keys and values read like plain ones */
        {ANSWER(200, "{\"recipient\\u005fid\":\"12\",\"message_id\":\"m_\\u00e9\\\"\"}", ADAPTER_OK,
                0),
         .message_id = "m_\xc3\xa9\"", .chat_id = "12"},
        /* an answer without recipient_id still counts: the chat is the recipient */
        {ANSWER(201, "{ \"message_id\" : \"m_2\" }", ADAPTER_OK, 0), .message_id = "m_2"},
        {ANSWER(400, GRAPH(100, 2018001, "(#100) No matching user found"),
                ADAPTER_RECIPIENT_INVALID, 100),
         .error = "facebook: (#100) No matching user found (code 100)", .err_code = 104},
        {ANSWER(400, GRAPH(100, 33, "(#100) Invalid parameter"), ADAPTER_REJECTED, 100)},
        {ANSWER(400,
                "{\"error\":{\"message\":\"(#100) Param recipient[id] must be a valid ID string\","
                "\"code\":100}}",
                ADAPTER_REJECTED, 100)},
        {ANSWER(400, GRAPH(551, 1545041, "This person isn't available right now."),
                ADAPTER_RECIPIENT_INVALID, 551)},
        /* outside the 24 h window: 127, the platform's whole message kept */
        {ANSWER(400,
                GRAPH(10, 2018278,
                      "(#10) This message is sent outside of allowed window. Learn more about "
                      "the new policy here: https://developers.facebook.com/docs/messenger-"
                      "platform/policy-overview"),
                ADAPTER_WINDOW_CLOSED, 10),
         .error = "facebook: (#10) This message is sent outside of allowed window. Learn more "
                  "about the new policy here: https://developers.facebook.com/docs/messenger-"
                  "platform/policy-overview (code 10)",
         .err_code = 127},
        /* code 10 otherwise: a permission the page lacks for this person */
        {ANSWER(403, GRAPH(10, 2018065, "(#10) This message is sent outside of allowed window."),
                ADAPTER_RECIPIENT_INVALID, 10)},
        {ANSWER(400, GRAPH(190, 460, "Error validating access token"), ADAPTER_AUTH_INVALID, 190)},
        /* Decided by code, not by status: a 500 with code 190 is still the token. */
        {ANSWER(500, GRAPH(190, 463, "Session has expired"), ADAPTER_AUTH_INVALID, 190)},
        {ANSWER(400, GRAPH(4, 0, "(#4) Application request limit reached"), ADAPTER_RATE_LIMITED,
                4)},
        {ANSWER(400, GRAPH(613, 0, "Calls to this api have exceeded the rate limit."),
                ADAPTER_RATE_LIMITED, 613)},
        {ANSWER(500, GRAPH(1200, 0, "Temporary send message failure. Please try again later"),
                ADAPTER_SERVER_ERROR, 1200)},
        {ANSWER(503, GRAPH(2, 0, "An unexpected error has occurred."), ADAPTER_SERVER_ERROR, 2)},
        {ANSWER(200, GRAPH(2, 0, "Service temporarily unavailable"), ADAPTER_SERVER_ERROR, 2)},
        {ANSWER(502, GRAPH(9999, 0, "Something new"), ADAPTER_SERVER_ERROR, 9999)},
        {ANSWER(400, GRAPH(9999, 0, "Something new"), ADAPTER_REJECTED, 9999)},
        {ANSWER(400, GRAPH(200, 1545041, "(#200) Permissions error"), ADAPTER_REJECTED, 200)},
        {ANSWER(502, "<html><body>Bad gateway</body></html>", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(400, "not json", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "[1,2]", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "{\"recipient_id\":\"1\"}", ADAPTER_SERVER_ERROR, 0)},
        /* a message_id beside an error object, or an empty one: still a failure */
        {ANSWER(200, "{\"message_id\":\"m_1\",\"error\":{\"message\":\"x\",\"code\":2}}",
                ADAPTER_SERVER_ERROR, 2)},
        {ANSWER(200, "{\"message_id\":\"m_1\",\"\\u0065rror\":{\"message\":\"x\",\"code\":2}}",
                ADAPTER_SERVER_ERROR, 2)},
        {ANSWER(200, "{\"message_id\":\"\",\"recipient_id\":\"1\"}", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "{\"message_id\":\"m_1\"", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(503, "{}", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(404, "{}", ADAPTER_REJECTED, 0)},
        {ANSWER(0, "", ADAPTER_SERVER_ERROR, 0)},
        /* Platforms echo parameters: the token must not come back through the error text. */
        {ANSWER(400,
                "{\"error\":{\"message\":\"Invalid OAuth access token: " TOKEN " (or " TOKEN_ENC
                ")\",\"code\":190}}",
                ADAPTER_AUTH_INVALID, 190),
         .masked = 1},
        {ANSWER(400, "{\"error\":{\"message\":\"" TOKEN "\",\"code\":100}}", ADAPTER_REJECTED,
                100)},
    };

    (void)state;
    RUN_CASES(&fx, "parse", cases, run_parse_case);
}

/* Error texts made from long platform messages: bodies written at run time. */
static void test_error_text(void **state)
{
    parse_case_t c = {ANSWER(400, NULL, ADAPTER_RATE_LIMITED, 4), .error_has = "(code 4)"};
    char body[2048], longmsg[600];

    (void)state;
    /* A long platform message is cut, the code stays readable. */
    memset(longmsg, 'x', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"code\":4}}", longmsg);
    c.body = body;
    run_parse_case(&fx, "long message", &c);
    /* Cut inside a multi-byte character, the text stays valid UTF-8 (the runner checks it). */
    snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%.*s\",\"code\":4}}", 200,
             "ééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé"
             "éééééééééééééééééééééééééééééééééééééééééééééééééééééééééé");
    run_parse_case(&fx, "multi-byte message", &c);
}

/* The rate-limit answer with a Retry-After (a hostile or future Graph API): the pause is the one
 * it asks for, at most 60 s, never the doubling default. */
static void test_retry_after(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(429, GRAPH(4, 0, "(#4) Application request limit reached"), ADAPTER_RATE_LIMITED,
                4),
         .retry_after = "3", .retry_after_s = 3},
        {ANSWER(400, GRAPH(613, 0, "Calls to this api have exceeded the rate limit."),
                ADAPTER_RATE_LIMITED, 613),
         .retry_after = "Tue, 14 Nov 2023 22:13:25 GMT", .retry_after_s = 5},
        {ANSWER(429, GRAPH(4, 0, "(#4) Application request limit reached"), ADAPTER_RATE_LIMITED,
                4),
         .retry_after = "2147483647", .retry_after_s = 60},
        /* a 429 the Graph body does not explain is a rate limit too */
        {ANSWER(429, "{\"error\":{\"message\":\"slow down\",\"code\":9999}}", ADAPTER_RATE_LIMITED,
                9999),
         .retry_after = "7", .retry_after_s = 7},
        {ANSWER(500, GRAPH(2, 0, "Service temporarily unavailable"), ADAPTER_SERVER_ERROR, 2),
         .retry_after = "3", .retry_after_s = -1},
    };

    (void)state;
    RUN_CASES(&fx, "retry-after", cases, run_parse_case);
}

static void test_check(void **state)
{
    static const check_case_t cases[] = {
        {CHECK_QR(13), 0, NULL},
        {CHECK_ONE("{\"type\":\"VIDEO\",\"url\":\"https://x\",\"caption\":\"c\"}"), 117, "caption"},
        {CHECK_ONE("{\"type\":\"FILE\",\"url\":\"https://x\",\"filename\":\"f\"}"), 117,
         "filename"},
        {"{\"type\":\"BUTTON\",\"buttons\":[" CHECK_PB "],\"text\":\"", "x", 640, "", "\"}", 0,
         NULL},
        {"{\"type\":\"BUTTON\",\"buttons\":[" CHECK_PB "],\"text\":\"", "x", 641, "", "\"}", 118,
         "640"},
        {CHECK_BUTTONS(CHECK_PB "," CHECK_URL "," CHECK_PHONE), 0, NULL},
        {CHECK_LOCATION, 117, "LOCATION"},
        {CHECK_CARDS(10, ""), 0, NULL},
        {CHECK_ONE("{\"type\":\"TEXT\",\"text\":\"t\",\"messageTag\":\"HUMAN_AGENT\"}"), 0, NULL},
        /* a NATIVE message that types itself and a messageTag: one of them */
        {CHECK_ONE("{\"type\":\"NATIVE\",\"message\":{\"messaging_type\":\"UPDATE\","
                   "\"message\":{\"text\":\"n\"}},\"messageTag\":\"HUMAN_AGENT\"}"),
         108, "messaging_type"},
        {CHECK_ONE("{\"type\":\"NATIVE\",\"message\":{\"tag\":\"HUMAN_AGENT\","
                   "\"message\":{\"text\":\"n\"}},\"messageTag\":\"HUMAN_AGENT\"}"),
         108, "tag"},
        {CHECK_ONE("{\"type\":\"NATIVE\",\"message\":{\"messaging_type\":\"MESSAGE_TAG\","
                   "\"tag\":\"HUMAN_AGENT\",\"message\":{\"text\":\"n\"}}}"),
         0, NULL},
    };

    (void)state;
    RUN_CASES(&fx, "check", cases, run_check_case);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),      cmocka_unit_test(test_check),
        cmocka_unit_test(test_build),      cmocka_unit_test(test_parse),
        cmocka_unit_test(test_error_text), cmocka_unit_test(test_retry_after),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
