/* test_adapter_whatsapp_cloud.c - the WhatsApp Cloud API adapter: calls built, answers read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapter_cases.h"
#include "adapter_whatsapp_checks.h"

#define BASE   "https://graph.example.com/v19.0"
#define TOKEN  "EAAGm0PX4ZCpsBACLOUDSECRET"
#define PNID   "106540352242922"
#define TO     "85291234567"
#define TEXT_A "{\"type\":\"TEXT\",\"text\":\"a\"}"
#define HEADERS                                                                                    \
    {                                                                                              \
        "Authorization: Bearer " TOKEN, ADAPTER_JSON_HEADER                                        \
    }

static const char *const secrets[] = {TOKEN, "CLOUDSECRET", NULL};

static const case_fixture_t fx = {
    .type = "whatsapp-cloud",
    .base_url = BASE,
    .info = "{\"accessToken\":\"" TOKEN "\",\"phoneNumberId\":\"" PNID
            "\",\"wabaId\":\"102290129340398\",\"namespace\":\"ignored_ns\"}",
    .to = TO,
    .now_ms = 1700000000000LL,
    .secrets = secrets,
};

static void test_table(void **state)
{
    static const ops_want_t want = {
        .api_version = "v19.0",
        .from_field = "phoneNumberId",
        .response_types = ADAPTER_WHATSAPP_TYPES,
        .recipient_invalid_code = 100,
        .server_error_aborts = 1,
        .phone_recipients = 1,
        .errors =
            {
                {ADAPTER_RECIPIENT_INVALID, 100},
                {ADAPTER_AUTH_INVALID, 104},
            },
    };

    (void)state;
    check_ops(&fx, &want);
}

static void test_build(void **state)
{
    static const build_case_t cases[] = {
        {.response = "{\"type\":\"TEXT\",\"text\":\"Hello\"}",
         .method = "POST",
         .url = BASE "/" PNID "/messages",
         .headers = HEADERS,
         .body = "{\"messaging_product\":\"whatsapp\",\"recipient_type\":\"individual\",\"to\":"
                 "\"" TO "\",\"type\":\"text\",\"text\":{\"body\":\"Hello\"}}"},
        {.response = "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/a.jpg\"}",
         .method = "POST",
         .url = BASE "/" PNID "/messages",
         .headers = HEADERS,
         .body = "{\"messaging_product\":\"whatsapp\",\"recipient_type\":\"individual\",\"to\":"
                 "\"" TO "\",\"type\":\"image\",\"image\":{\"link\":\"https://img.example.com/"
                 "a.jpg\"}}"},
        /* language is {"code"} only, and no namespace even when info has one. */
        {.response = "{\"type\":\"TEMPLATE\",\"elementName\":\"hello_world\",\"languageCode\":"
                     "\"en_US\",\"components\":[{\"type\":\"header\",\"parameters\":[{\"type\":"
                     "\"image\",\"image\":{\"link\":\"https://x/y.png\"}}]}]}",
         .method = "POST",
         .url = BASE "/" PNID "/messages",
         .headers = HEADERS,
         .body = "{\"messaging_product\":\"whatsapp\",\"to\":\"" TO "\",\"type\":\"template\","
                 "\"template\":{\"name\":\"hello_world\",\"language\":{\"code\":\"en_US\"},"
                 "\"components\":[{\"type\":\"header\",\"parameters\":[{\"type\":\"image\","
                 "\"image\":{\"link\":\"https://x/y.png\"}}]}]}}"},
        {.info = "{\"accessToken\":\"" TOKEN "\"}",
         .response = TEXT_A,
         .status = ADAPTER_AUTH_INVALID,
         .error = "channel has no phoneNumberId"},
        {.info = "{\"phoneNumberId\":\"" PNID "\"}",
         .response = TEXT_A,
         .status = ADAPTER_AUTH_INVALID,
         .error = "channel has no accessToken",
         .err_code = 104},
        {.response = "{\"type\":\"TEMPLATE\",\"elementName\":\"x\"}", .status = ADAPTER_REJECTED},
        {.response = "{\"type\":\"TEXT\",\"text\":\"\"}", .status = ADAPTER_REJECTED},
        {.response = "{\"type\":\"CAROUSEL\",\"cards\":[]}", .status = ADAPTER_UNSUPPORTED},
    };

    (void)state;
    RUN_CASES(&fx, "build", cases, run_build_case);
}

#define GRAPH(code, msg, details)                                                                  \
    "{\"error\":{\"message\":\"" msg "\",\"type\":\"OAuthException\",\"code\":" #code              \
    ",\"error_data\":{\"messaging_product\":\"whatsapp\",\"details\":\"" details "\"},"            \
    "\"fbtrace_id\":\"AbC\"}}"

static void test_parse(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(200,
                "{\"messaging_product\":\"whatsapp\",\"contacts\":[{\"input\":\"+852 9123 "
                "4567\",\"wa_id\":\"85291234568\"}],\"messages\":[{\"id\":\"wamid."
                "HBgLMTY0NjcwNDM1OTUVAgARGBI1RjQyNUE3NEYxMzAzMzQ5MkEA\"}]}",
                ADAPTER_OK, 0),
         .message_id = "wamid.HBgLMTY0NjcwNDM1OTUVAgARGBI1RjQyNUE3NEYxMzAzMzQ5MkEA",
         .chat_id = "85291234568"},
        {ANSWER(200, "{\"messages\":[{\"id\":\"wamid.X\"}]}", ADAPTER_OK, 0),
         .message_id = "wamid.X", .chat_id = TO},
        {ANSWER(400, GRAPH(131026, "Message Undeliverable.", "Message Undeliverable."),
                ADAPTER_RECIPIENT_INVALID, 131026),
         .error = "whatsapp-cloud: Message Undeliverable.: Message Undeliverable. (code 131026)",
         .err_code = 100},
        /* outside the 24 h window: 127, message and details whole */
        {ANSWER(400,
                GRAPH(131047, "Re-engagement message",
                      "Message failed to send because more than 24 hours have passed since the "
                      "customer last replied to this number."),
                ADAPTER_WINDOW_CLOSED, 131047),
         .error = "whatsapp-cloud: Re-engagement message: Message failed to send because more "
                  "than 24 hours have passed since the customer last replied to this number. "
                  "(code 131047)",
         .err_code = 127},
        {ANSWER(400, GRAPH(100, "(#100) Invalid parameter", "Invalid parameter: to"),
                ADAPTER_RECIPIENT_INVALID, 100),
         .err_code = 100},
        {ANSWER(400, GRAPH(100, "(#100) Param to must be a valid phone number", ""),
                ADAPTER_RECIPIENT_INVALID, 100)},
        {ANSWER(400, GRAPH(100, "(#100) Invalid parameter", "The parameter 'to' is invalid"),
                ADAPTER_RECIPIENT_INVALID, 100)},
        {ANSWER(400, "{\"error\":{\"message\":\"(#100) The to field is required\",\"code\":100}}",
                ADAPTER_RECIPIENT_INVALID, 100)},
        {ANSWER(400,
                GRAPH(100, "(#100) Invalid parameter", "Param text['body'] must be 4096 chars max"),
                ADAPTER_REJECTED, 100)},
        {ANSWER(400,
                GRAPH(100, "(#100) Unable to process the parameter", "Failed to parse template"),
                ADAPTER_REJECTED, 100)},
        {ANSWER(401, GRAPH(190, "Error validating access token: Session has expired", ""),
                ADAPTER_AUTH_INVALID, 190)},
        {ANSWER(429,
                GRAPH(130429, "Rate limit hit", "Cloud API message throughput has been reached."),
                ADAPTER_RATE_LIMITED, 130429)},
        {ANSWER(400, GRAPH(131056, "(Business Account, Consumer Account) pair rate limit hit", ""),
                ADAPTER_RATE_LIMITED, 131056),
         .rate_recipient = 1},
        {ANSWER(400, GRAPH(80007, "Rate limit issues", ""), ADAPTER_RATE_LIMITED, 80007)},
        {ANSWER(400, GRAPH(4, "(#4) Application request limit reached", ""), ADAPTER_RATE_LIMITED,
                4)},
        {ANSWER(500, GRAPH(131000, "Something went wrong", ""), ADAPTER_SERVER_ERROR, 131000)},
        {ANSWER(503, GRAPH(131016, "Service unavailable", ""), ADAPTER_SERVER_ERROR, 131016)},
        {ANSWER(500, GRAPH(131057, "Account in maintenance mode", ""), ADAPTER_SERVER_ERROR,
                131057)},
        {ANSWER(500, GRAPH(1, "An unknown error occurred", ""), ADAPTER_SERVER_ERROR, 1)},
        {ANSWER(503, GRAPH(2, "Service temporarily unavailable", ""), ADAPTER_SERVER_ERROR, 2)},
        {ANSWER(502, GRAPH(999999, "Brand new", ""), ADAPTER_SERVER_ERROR, 999999)},
        {ANSWER(400, GRAPH(131051, "Unsupported message type", ""), ADAPTER_REJECTED, 131051)},
        {ANSWER(502, "<html>Bad Gateway</html>", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(500, "", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "{\"messaging_product\":\"whatsapp\"}", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "nonsense", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(0, "", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(400, "{}", ADAPTER_REJECTED, 0)},
        {ANSWER(401,
                "{\"error\":{\"message\":\"Invalid OAuth access token - Cannot parse access "
                "token " TOKEN "\",\"code\":190,\"error_data\":\"token " TOKEN "\"}}",
                ADAPTER_AUTH_INVALID, 190),
         .masked = 1},
    };

    (void)state;
    RUN_CASES(&fx, "parse", cases, run_parse_case);
}

/* The rate-limit answer with a Retry-After: the pause is the one it asks for, at most 60 s; the
 * pair rate (131056) pauses the recipient's limit only. */
static void test_retry_after(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(429, GRAPH(130429, "Rate limit hit", ""), ADAPTER_RATE_LIMITED, 130429),
         .retry_after = "3", .retry_after_s = 3},
        {ANSWER(429, GRAPH(130429, "Rate limit hit", ""), ADAPTER_RATE_LIMITED, 130429),
         .retry_after = "Tuesday, 14-Nov-23 22:13:23 GMT", .retry_after_s = 3},
        {ANSWER(429, GRAPH(130429, "Rate limit hit", ""), ADAPTER_RATE_LIMITED, 130429),
         .retry_after = "99999999999999999999", .retry_after_s = 60},
        {ANSWER(400, GRAPH(131056, "pair rate limit hit", ""), ADAPTER_RATE_LIMITED, 131056),
         .retry_after = "6", .retry_after_s = 6, .rate_recipient = 1},
        {ANSWER(429, "{}", ADAPTER_RATE_LIMITED, 0), .retry_after = "2", .retry_after_s = 2},
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
        cmocka_unit_test(test_table),       cmocka_unit_test(test_check),
        cmocka_unit_test(test_build),       cmocka_unit_test(test_parse),
        cmocka_unit_test(test_retry_after),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
