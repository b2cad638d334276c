/* test_adapter_wechat.c - the WeChat adapter: access token, media upload, custom messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapter_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW       1700000000000LL
#define BASE      "https://api.wechat.example.com"
#define TOKEN     "78_AbCdEf+gh/ij=WXTOKENSECRET"
#define TOKEN_ENC "78_AbCdEf%2Bgh%2Fij%3DWXTOKENSECRET"
#define APPSECRET "a1b2c3&d4=APPSECRET"
#define INFO                                                                                       \
    "{\"accessToken\":\"" TOKEN                                                                    \
    "\",\"accessTokenExpiry\":1700000600000,\"appId\":\"wx1234 5678\","                            \
    "\"appsecret\":\"" APPSECRET "\",\"botOpenId\":\"gh_abc\"}"
#define TO               "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"
#define SEND             BASE "/cgi-bin/message/custom/send?access_token=" TOKEN_ENC
#define TEXT_A           "{\"type\":\"TEXT\",\"text\":\"a\"}"
#define WXERR(code, msg) "{\"errcode\":" #code ",\"errmsg\":\"" msg "\"}"

static const char *const secrets[] = {TOKEN,           TOKEN_ENC,   APPSECRET,
                                      "WXTOKENSECRET", "APPSECRET", NULL};

static const case_fixture_t fx = {
    .type = "wechat",
    .base_url = BASE,
    .info = INFO,
    .to = TO,
    .now_ms = NOW,
    .secrets = secrets,
};

static void test_table(void **state)
{
    static const ops_want_t want = {
        .api_version = "cgi-bin",
        .from_field = "botOpenId",
        .cred_field = "accessToken",
        .response_types = ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_VIDEO | ADAPTER_AUDIO |
                          ADAPTER_BUTTON | ADAPTER_CAROUSEL | ADAPTER_LIST | ADAPTER_NATIVE,
        .recipient_invalid_code = 104,
        .image_by_upload = 1,
        .has_cred = 1,
        .has_upload = 1,
        .errors =
            {
                {ADAPTER_RECIPIENT_INVALID, 104},
                {ADAPTER_AUTH_EXPIRED, 104},
            },
    };

    (void)state;
    check_ops(&fx, &want);
}

static void test_needs_refresh(void **state)
{
    /* Expiry 1700000600000: refresh from 5 minutes before it on. */
    static const needs_case_t cases[] = {
        {INFO, 1700000600000LL - 300001, 0},
        {INFO, 1700000600000LL - 300000, 1},
        {INFO, 1700000600000LL - 299999, 1},
        {INFO, 1700000600000LL + 1000, 1},
        {"{\"accessTokenExpiry\":1800000000000}", NOW, 1},
        {"{\"accessToken\":\"\",\"accessTokenExpiry\":1800000000000}", NOW, 1},
        {"{\"accessToken\":\"t\"}", NOW, 1},
        {"{\"accessToken\":\"t\",\"accessTokenExpiry\":\"1800000000000\"}", NOW, 1},
        {"{\"accessToken\":\"t\",\"accessTokenExpiry\":1800000000000}", NOW, 0},
    };

    (void)state;
    RUN_CASES(&fx, "needs refresh", cases, run_needs_case);
}

static void test_build(void **state)
{
    static const build_case_t cases[] = {
        {.step = CASE_CRED,
         .base_url = BASE "/",
         .method = "GET",
         .url = BASE "/cgi-bin/token?grant_type=client_credential"
                     "&appid=wx1234%205678&secret=a1b2c3%26d4%3DAPPSECRET"},
        {.step = CASE_CRED,
         .info = "{\"appId\":\"wx1\"}",
         .status = ADAPTER_AUTH_INVALID,
         .error = "channel has no appsecret"},
        {.step = CASE_CRED,
         .info = "{\"appsecret\":\"" APPSECRET "\"}",
         .status = ADAPTER_AUTH_INVALID,
         .error = "channel has no appId"},
        {.response = "{\"type\":\"TEXT\",\"text\":\"你好\"}",
         .method = "POST",
         .url = SEND,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"touser\":\"" TO "\",\"msgtype\":\"text\",\"text\":{\"content\":\"你好\"}}"},
        {.response = "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/a.png\"}",
         .media_id = "MEDIA_ID_1",
         .method = "POST",
         .url = SEND,
         .headers = {ADAPTER_JSON_HEADER},
         .body = "{\"touser\":\"" TO "\",\"msgtype\":\"image\",\"image\":{\"media_id\":"
                 "\"MEDIA_ID_1\"}}"},
        {.response = "{\"type\":\"IMAGE\",\"url\":\"https://x/a.png\"}",
         .status = ADAPTER_REJECTED},
        {.response = "{\"type\":\"TEMPLATE\",\"elementName\":\"a\",\"languageCode\":\"zh_CN\"}",
         .status = ADAPTER_UNSUPPORTED},
        {.response = "{\"type\":\"TEXT\"}", .status = ADAPTER_REJECTED},
        {.info = "{\"appId\":\"wx1\",\"appsecret\":\"" APPSECRET "\"}",
         .response = TEXT_A,
         .status = ADAPTER_AUTH_EXPIRED,
         .error = "channel has no accessToken"},
    };

    (void)state;
    RUN_CASES(&fx, "build", cases, run_build_case);
}

static void test_token_parse(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(200, "{\"access_token\":\"NEW_TOKEN\",\"expires_in\":7200}", ADAPTER_OK, 0),
         .step = CASE_CRED, .token = "NEW_TOKEN", .expiry_ms = NOW + 7200000},
        {ANSWER(200, "{\"access_token\":\"T2\",\"expires_in\":600}", ADAPTER_OK, 0),
         .step = CASE_CRED, .token = "T2", .expiry_ms = NOW + 600000},
        {ANSWER(200, WXERR(40125, "invalid appsecret, rid: 6580"), ADAPTER_AUTH_INVALID, 40125),
         .step = CASE_CRED, .error = "wechat token refused (errcode 40125)"},
        {ANSWER(200, WXERR(40013, "invalid appid"), ADAPTER_AUTH_INVALID, 40013), .step = CASE_CRED,
         .error = "wechat token refused (errcode 40013)"},
        {ANSWER(200, WXERR(-1, "system error"), ADAPTER_SERVER_ERROR, -1), .step = CASE_CRED},
        {ANSWER(200, "garbage", ADAPTER_SERVER_ERROR, 0), .step = CASE_CRED},
        {ANSWER(502, "<html>", ADAPTER_SERVER_ERROR, 0), .step = CASE_CRED},
        {ANSWER(500, "{\"access_token\":\"x\",\"expires_in\":7200}", ADAPTER_SERVER_ERROR, 0),
         .step = CASE_CRED},
        {ANSWER(200, "{\"expires_in\":7200}", ADAPTER_SERVER_ERROR, 0), .step = CASE_CRED},
        {ANSWER(0, "", ADAPTER_SERVER_ERROR, 0), .step = CASE_CRED},
        {ANSWER(200, WXERR(40125, "bad secret " APPSECRET), ADAPTER_AUTH_INVALID, 40125),
         .step = CASE_CRED},
    };

    (void)state;
    RUN_CASES(&fx, "token parse", cases, run_parse_case);
}

/* A send answer that succeeds: no message id, the chat is the recipient. */
#define SENT(http, text)                                                                           \
    {                                                                                              \
        ANSWER(http, text, ADAPTER_OK, 0), .chat_id = TO                                           \
    }

static void test_parse_send(void **state)
{
    static const parse_case_t cases[] = {
        SENT(200, WXERR(0, "ok")),
        SENT(200, "{}"),
        {ANSWER(200,
                WXERR(40001, "invalid credential, access_token is invalid or not latest rid: 6580"),
                ADAPTER_AUTH_EXPIRED, 40001)},
        {ANSWER(200, WXERR(40014, "invalid access_token"), ADAPTER_AUTH_EXPIRED, 40014)},
        {ANSWER(200, WXERR(42001, "access_token expired"), ADAPTER_AUTH_EXPIRED, 42001)},
        {ANSWER(200, WXERR(40003, "invalid openid"), ADAPTER_RECIPIENT_INVALID, 40003),
         .err_code = 104},
        /* past 48 h since the user last wrote: 127 */
        {ANSWER(200, WXERR(45015, "response out of time limit or subscription is canceled"),
                ADAPTER_WINDOW_CLOSED, 45015),
         .error = "wechat: response out of time limit or subscription is canceled (errcode 45015)",
         .err_code = 127},
        {ANSWER(200, WXERR(45047, "out of response count limit"), ADAPTER_RATE_LIMITED, 45047)},
        {ANSWER(200, WXERR(-1, "system error"), ADAPTER_SERVER_ERROR, -1)},
        {ANSWER(200, WXERR(45002, "content size out of limit"), ADAPTER_REJECTED, 45002),
         .error = "wechat: content size out of limit (errcode 45002)"},
        {ANSWER(500, "", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(503, "{}", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(200, "<html>", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(0, "", ADAPTER_SERVER_ERROR, 0)},
        {ANSWER(404, "{}", ADAPTER_REJECTED, 0)},
        {ANSWER(200,
                WXERR(40001, "invalid credential " TOKEN " url ?access_token=" TOKEN_ENC
                             " secret " APPSECRET),
                ADAPTER_AUTH_EXPIRED, 40001),
         .masked = 1},
    };

    (void)state;
    RUN_CASES(&fx, "parse send", cases, run_parse_case);
}

/* An upload built: the refusals leave no call behind, and no secret in their text. */
static int upload(const char *info_json, const char *data, size_t len, const char *ctype,
                  adapter_call_t *call, adapter_result_t *res)
{
    json_t *info = json_loads(info_json, 0, NULL);
    adapter_target_t t = {.base_url = BASE, .info = info, .to = TO, .now_ms = NOW};
    int rc;

    adapter_result_init(res);
    rc = case_ops(&fx)->build_upload(&t, data, len, ctype, call, res);
    if (rc < 0)
        case_no_call("upload", call, res);
    case_no_secret(&fx, "upload", res);
    json_decref(info);
    return rc;
}

/* Checks the multipart body of an upload call around data; returns the boundary (static). */
static const char *check_multipart(const adapter_call_t *c, const char *data, size_t len,
                                   const char *part_type, const char *filename)
{
    static const char prefix[] = "Content-Type: multipart/form-data; boundary=";
    static char boundary[128];
    char head[512], tail[160];
    int hlen, tlen, seen = 0;
    const char *p;

    assert_string_equal(c->method, "POST");
    assert_string_equal(c->url, BASE "/cgi-bin/media/upload?access_token=" TOKEN_ENC "&type=image");
    assert_int_equal(case_header_count((const char *const *)c->headers), 1);
    assert_memory_equal(c->headers[0], prefix, strlen(prefix));
    snprintf(boundary, sizeof(boundary), "%s", c->headers[0] + strlen(prefix));
    assert_true(strlen(boundary) > 0 && strlen(boundary) <= 70);
    assert_null(memmem(data, len, boundary, strlen(boundary)));
    hlen = snprintf(head, sizeof(head),
                    "--%s\r\nContent-Disposition: form-data; name=\"media\"; filename=\"%s\"\r\n"
                    "Content-Type: %s\r\n\r\n",
                    boundary, filename, part_type);
    tlen = snprintf(tail, sizeof(tail), "\r\n--%s--\r\n", boundary);
    assert_int_equal(c->body_len, (size_t)hlen + len + (size_t)tlen);
    assert_memory_equal(c->body, head, (size_t)hlen);
    assert_memory_equal(c->body + hlen, data, len);
    assert_memory_equal(c->body + hlen + len, tail, (size_t)tlen);
    /* The boundary occurs exactly twice: the opening and the closing delimiter. */
    for (p = c->body;
         (p = memmem(p, c->body_len - (size_t)(p - c->body), boundary, strlen(boundary))) != NULL;
         p++)
        seen++;
    assert_int_equal(seen, 2);
    return boundary;
}

static void test_upload_build(void **state)
{
    static const char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01--\r\n\0end";
    adapter_call_t call = {0};
    adapter_result_t res;
    char first[128], second[128], *data;
    size_t len;

    (void)state;
    assert_int_equal(upload(INFO, png, sizeof(png) - 1, "image/png", &call, &res), 0);
    snprintf(first, sizeof(first), "%s",
             check_multipart(&call, png, sizeof(png) - 1, "image/png", "image.png"));
    adapter_call_free(&call);

    /* Data that holds the first boundary gets another one, absent from it. */
    len = (size_t)asprintf(&data, "xx\r\n--%s\r\n%c%s--yy", first, '\0', first);
    assert_int_equal(upload(INFO, data, len, "image/jpeg", &call, &res), 0);
    snprintf(second, sizeof(second), "%s",
             check_multipart(&call, data, len, "image/jpeg", "image.jpg"));
    assert_string_not_equal(first, second);
    adapter_call_free(&call);
    free(data);
    len = (size_t)asprintf(&data, "%s|%s", first, second);
    assert_int_equal(upload(INFO, data, len, "image/gif", &call, &res), 0);
    check_multipart(&call, data, len, "image/gif", "image.gif");
    adapter_call_free(&call);
    free(data);

    /* Types: parameters kept, extension from the media type, unknown or unsafe types. */
    assert_int_equal(upload(INFO, "abc", 3, "IMAGE/JPEG; q=1", &call, &res), 0);
    check_multipart(&call, "abc", 3, "IMAGE/JPEG; q=1", "image.jpg");
    adapter_call_free(&call);
    assert_int_equal(upload(INFO, "abc", 3, "image/x-unknown", &call, &res), 0);
    check_multipart(&call, "abc", 3, "image/x-unknown", "image");
    adapter_call_free(&call);
    assert_int_equal(upload(INFO, "abc", 3, NULL, &call, &res), 0);
    check_multipart(&call, "abc", 3, "application/octet-stream", "image");
    adapter_call_free(&call);
    assert_int_equal(upload(INFO, "abc", 3, "image/png\r\nX-Evil: 1", &call, &res), 0);
    check_multipart(&call, "abc", 3, "application/octet-stream", "image");
    adapter_call_free(&call);

    /* Refusals. */
    assert_int_equal(upload(INFO, "", 0, "image/png", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_int_equal(upload("{\"appId\":\"wx\"}", "abc", 3, "image/png", &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_AUTH_EXPIRED);
}

static void test_upload_parse(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(200,
                "{\"type\":\"image\",\"media_id\":\"3Xk9_media-ID\",\"created_at\":1700000000}",
                ADAPTER_OK, 0),
         .step = CASE_UPLOAD, .ref = "3Xk9_media-ID"},
        {ANSWER(200, WXERR(40001, "invalid credential"), ADAPTER_AUTH_EXPIRED, 40001),
         .step = CASE_UPLOAD},
        {ANSWER(200, WXERR(40005, "invalid file type"), ADAPTER_REJECTED, 40005),
         .step = CASE_UPLOAD},
        {ANSWER(200, WXERR(-1, "system error"), ADAPTER_SERVER_ERROR, -1), .step = CASE_UPLOAD},
        {ANSWER(200, "{\"type\":\"image\"}", ADAPTER_SERVER_ERROR, 0), .step = CASE_UPLOAD},
        {ANSWER(502, "", ADAPTER_SERVER_ERROR, 0), .step = CASE_UPLOAD},
        {ANSWER(0, "", ADAPTER_SERVER_ERROR, 0), .step = CASE_UPLOAD},
        {ANSWER(200, "{\"errcode\":40007,\"errmsg\":\"" TOKEN "\"}", ADAPTER_REJECTED, 40007),
         .step = CASE_UPLOAD},
    };

    (void)state;
    RUN_CASES(&fx, "upload parse", cases, run_parse_case);
}

/* WeChat answers HTTP 200, but a Retry-After on a quota answer is read like anywhere else. */
static void test_retry_after(void **state)
{
    static const parse_case_t cases[] = {
        {ANSWER(200, WXERR(45047, "out of response count limit"), ADAPTER_RATE_LIMITED, 45047),
         .retry_after = "3", .retry_after_s = 3},
        {ANSWER(200, WXERR(45047, "out of response count limit"), ADAPTER_RATE_LIMITED, 45047),
         .retry_after = "86400", .retry_after_s = 60},
    };

    (void)state;
    RUN_CASES(&fx, "retry-after", cases, run_parse_case);
}

static void test_check(void **state)
{
    static const check_case_t cases[] = {
        {CHECK_QR(13), 0, NULL},
        {CHECK_ONE("{\"type\":\"IMAGE\",\"url\":\"https://x\",\"caption\":\"c\"}"), 117, "caption"},
        {CHECK_BUTTONS(CHECK_PB "," CHECK_PB), 0, NULL},
        {CHECK_BUTTONS(CHECK_URL), 0, NULL},
        {CHECK_BUTTONS(CHECK_PB "," CHECK_URL), 117, "buttons"},
        {CHECK_CARDS(1, ""), 0, NULL},
        {CHECK_CARDS(2, ""), 118, "cards"},
        {CHECK_CARDS(1, ",\"buttons\":[" CHECK_PB "]"), 117, "buttons"},
        {CHECK_ONE("{\"type\":\"FILE\",\"url\":\"https://x\"}"), 117, "FILE"},
    };

    (void)state;
    RUN_CASES(&fx, "check", cases, run_check_case);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),         cmocka_unit_test(test_check),
        cmocka_unit_test(test_needs_refresh), cmocka_unit_test(test_build),
        cmocka_unit_test(test_token_parse),   cmocka_unit_test(test_parse_send),
        cmocka_unit_test(test_upload_build),  cmocka_unit_test(test_upload_parse),
        cmocka_unit_test(test_retry_after),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
