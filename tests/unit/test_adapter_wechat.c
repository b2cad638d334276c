/* test_adapter_wechat.c - the WeChat adapter: access token, media upload, custom messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapters/adapter.h"

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
#define TO "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"

static const char *const secret_values[] = {TOKEN,           TOKEN_ENC,   APPSECRET,
                                            "WXTOKENSECRET", "APPSECRET", NULL};

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
    return adapter_find("wechat");
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

static int build(const char *info_json, const char *response_json, const char *media_id,
                 adapter_call_t *call, adapter_result_t *res)
{
    json_t *info = json_loads(info_json, 0, NULL);
    json_t *response = json_loads(response_json, 0, NULL);
    adapter_target_t t = {.base_url = BASE, .info = info, .to = TO, .now_ms = NOW};
    int rc;

    assert_non_null(info);
    assert_non_null(response);
    adapter_result_init(res);
    rc = ops()->build_send(&t, response, media_id, call, res);
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
    adapter_target_t t = {.base_url = BASE, .info = info, .to = TO, .now_ms = NOW};
    adapter_answer_t a = {.status = status, .body = body, .body_len = strlen(body)};

    adapter_result_init(res);
    fn(&t, &a, res);
    assert_no_secret(res);
    json_decref(info);
    return res->status;
}

static json_t *token(long status, const char *body, adapter_result_t *res)
{
    json_t *info = json_loads(INFO, 0, NULL), *cred;
    adapter_target_t t = {.base_url = BASE, .info = info, .to = TO, .now_ms = NOW};
    adapter_answer_t a = {.status = status, .body = body, .body_len = strlen(body)};

    adapter_result_init(res);
    cred = ops()->parse_cred(&t, &a, res);
    assert_no_secret(res);
    assert_true((cred != NULL) == (res->status == ADAPTER_OK));
    json_decref(info);
    return cred;
}

static int upload(const char *info_json, const char *data, size_t len, const char *ctype,
                  adapter_call_t *call, adapter_result_t *res)
{
    json_t *info = json_loads(info_json, 0, NULL);
    adapter_target_t t = {.base_url = BASE, .info = info, .to = TO, .now_ms = NOW};
    int rc;

    adapter_result_init(res);
    rc = ops()->build_upload(&t, data, len, ctype, call, res);
    assert_failed_call(rc, call, res);
    json_decref(info);
    return rc;
}

static void test_table(void **state)
{
    const adapter_ops_t *o = ops();

    (void)state;
    assert_non_null(o);
    assert_string_equal(o->type, "wechat");
    assert_string_equal(o->api_version, "cgi-bin");
    assert_string_equal(o->from_field, "botOpenId");
    assert_int_equal(o->response_types, ADAPTER_TEXT | ADAPTER_IMAGE);
    assert_int_equal(o->recipient_invalid_code, 104);
    assert_int_equal(o->server_error_aborts, 0);
    assert_int_equal(o->phone_recipients, 0);
    assert_int_equal(o->image_by_upload, 1);
    assert_non_null(o->cred_needs_refresh);
    assert_non_null(o->build_upload);
    assert_non_null(o->parse_upload);
    assert_null(o->build_check);
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
    /* Expiry 1700000600000: refresh from 5 minutes before it on. */
    assert_int_equal(needs(INFO, 1700000600000LL - 300001), 0);
    assert_int_equal(needs(INFO, 1700000600000LL - 300000), 1);
    assert_int_equal(needs(INFO, 1700000600000LL - 299999), 1);
    assert_int_equal(needs(INFO, 1700000600000LL + 1000), 1);
    assert_int_equal(needs("{\"accessTokenExpiry\":1800000000000}", NOW), 1);
    assert_int_equal(needs("{\"accessToken\":\"\",\"accessTokenExpiry\":1800000000000}", NOW), 1);
    assert_int_equal(needs("{\"accessToken\":\"t\"}", NOW), 1);
    assert_int_equal(needs("{\"accessToken\":\"t\",\"accessTokenExpiry\":\"1800000000000\"}", NOW),
                     1);
    assert_int_equal(needs("{\"accessToken\":\"t\",\"accessTokenExpiry\":1800000000000}", NOW), 0);
}

static void test_token_build(void **state)
{
    json_t *info = json_loads(INFO, 0, NULL);
    adapter_target_t t = {.base_url = BASE "/", .info = info, .to = TO, .now_ms = NOW};
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    adapter_result_init(&res);
    assert_int_equal(ops()->build_cred(&t, &call, &res), 0);
    assert_string_equal(call.method, "GET");
    assert_string_equal(call.url, BASE "/cgi-bin/token?grant_type=client_credential"
                                       "&appid=wx1234%205678&secret=a1b2c3%26d4%3DAPPSECRET");
    assert_null(call.body);
    assert_int_equal(header_count(&call), 0);
    adapter_call_free(&call);
    json_decref(info);

    info = json_loads("{\"appId\":\"wx1\"}", 0, NULL);
    t.info = info;
    assert_int_equal(ops()->build_cred(&t, &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "channel has no appsecret");
    assert_failed_call(-1, &call, &res);
    json_decref(info);
    info = json_loads("{\"appsecret\":\"" APPSECRET "\"}", 0, NULL);
    t.info = info;
    assert_int_equal(ops()->build_cred(&t, &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "channel has no appId");
    assert_failed_call(-1, &call, &res);
    json_decref(info);
}

static void test_token_parse(void **state)
{
    adapter_result_t res;
    json_t *cred;

    (void)state;
    cred = token(200, "{\"access_token\":\"NEW_TOKEN\",\"expires_in\":7200}", &res);
    assert_non_null(cred);
    assert_string_equal(json_string_value(json_object_get(cred, "accessToken")), "NEW_TOKEN");
    assert_int_equal(json_integer_value(json_object_get(cred, "accessTokenExpiry")), NOW + 7200000);
    assert_int_equal(json_object_size(cred), 2);
    json_decref(cred);
    cred = token(200, "{\"access_token\":\"T2\",\"expires_in\":600}", &res);
    assert_int_equal(json_integer_value(json_object_get(cred, "accessTokenExpiry")), NOW + 600000);
    json_decref(cred);

    assert_null(
        token(200, "{\"errcode\":40125,\"errmsg\":\"invalid appsecret, rid: 6580\"}", &res));
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "wechat token refused (errcode 40125)");
    assert_int_equal(res.platform_code, 40125);
    assert_null(token(200, "{\"errcode\":40013,\"errmsg\":\"invalid appid\"}", &res));
    assert_int_equal(res.status, ADAPTER_AUTH_INVALID);
    assert_string_equal(res.error, "wechat token refused (errcode 40013)");
    assert_null(token(200, "{\"errcode\":-1,\"errmsg\":\"system error\"}", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(token(200, "garbage", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(token(502, "<html>", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(token(500, "{\"access_token\":\"x\",\"expires_in\":7200}", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(token(200, "{\"expires_in\":7200}", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
    assert_null(token(0, "", &res));
    assert_int_equal(res.status, ADAPTER_SERVER_ERROR);
}

static void test_build_send(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(build(INFO, "{\"type\":\"TEXT\",\"text\":\"你好\"}", NULL, &call, &res), 0);
    assert_string_equal(call.method, "POST");
    assert_string_equal(call.url, BASE "/cgi-bin/message/custom/send?access_token=" TOKEN_ENC);
    assert_int_equal(header_count(&call), 1);
    assert_true(has_header(&call, "Content-Type: application/json"));
    assert_json_body(&call, "{\"touser\":\"" TO "\",\"msgtype\":\"text\",\"text\":{\"content\":"
                            "\"你好\"}}");
    adapter_call_free(&call);

    assert_int_equal(build(INFO, "{\"type\":\"IMAGE\",\"url\":\"https://img.example.com/a.png\"}",
                           "MEDIA_ID_1", &call, &res),
                     0);
    assert_string_equal(call.url, BASE "/cgi-bin/message/custom/send?access_token=" TOKEN_ENC);
    assert_json_body(&call, "{\"touser\":\"" TO "\",\"msgtype\":\"image\",\"image\":{\"media_id\":"
                            "\"MEDIA_ID_1\"}}");
    adapter_call_free(&call);
}

static void test_build_send_refused(void **state)
{
    adapter_call_t call = {0};
    adapter_result_t res;

    (void)state;
    assert_int_equal(
        build(INFO, "{\"type\":\"IMAGE\",\"url\":\"https://x/a.png\"}", NULL, &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_int_equal(build(INFO,
                           "{\"type\":\"TEMPLATE\",\"elementName\":\"a\","
                           "\"languageCode\":\"zh_CN\"}",
                           NULL, &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_UNSUPPORTED);
    assert_int_equal(build(INFO, "{\"type\":\"TEXT\"}", NULL, &call, &res), -1);
    assert_int_equal(res.status, ADAPTER_REJECTED);
    assert_int_equal(build("{\"appId\":\"wx1\",\"appsecret\":\"" APPSECRET "\"}",
                           "{\"type\":\"TEXT\",\"text\":\"a\"}", NULL, &call, &res),
                     -1);
    assert_int_equal(res.status, ADAPTER_AUTH_EXPIRED);
    assert_string_equal(res.error, "channel has no accessToken");
}

static void test_parse_send(void **state)
{
    static const struct {
        long status;
        const char *body;
        adapter_status_t want;
        long code;
    } cases[] = {
        {200, "{\"errcode\":0,\"errmsg\":\"ok\"}", ADAPTER_OK, 0},
        {200, "{}", ADAPTER_OK, 0},
        {200,
         "{\"errcode\":40001,\"errmsg\":\"invalid credential, access_token is invalid or not "
         "latest rid: 6580\"}",
         ADAPTER_AUTH_EXPIRED, 40001},
        {200, "{\"errcode\":40014,\"errmsg\":\"invalid access_token\"}", ADAPTER_AUTH_EXPIRED,
         40014},
        {200, "{\"errcode\":42001,\"errmsg\":\"access_token expired\"}", ADAPTER_AUTH_EXPIRED,
         42001},
        {200, "{\"errcode\":40003,\"errmsg\":\"invalid openid\"}", ADAPTER_RECIPIENT_INVALID,
         40003},
        {200,
         "{\"errcode\":45015,\"errmsg\":\"response out of time limit or subscription is "
         "canceled\"}",
         ADAPTER_RATE_LIMITED, 45015},
        {200, "{\"errcode\":45047,\"errmsg\":\"out of response count limit\"}",
         ADAPTER_RATE_LIMITED, 45047},
        {200, "{\"errcode\":-1,\"errmsg\":\"system error\"}", ADAPTER_SERVER_ERROR, -1},
        {200, "{\"errcode\":45002,\"errmsg\":\"content size out of limit\"}", ADAPTER_REJECTED,
         45002},
        {500, "", ADAPTER_SERVER_ERROR, 0},
        {503, "{}", ADAPTER_SERVER_ERROR, 0},
        {200, "<html>", ADAPTER_SERVER_ERROR, 0},
        {0, "", ADAPTER_SERVER_ERROR, 0},
        {404, "{}", ADAPTER_REJECTED, 0},
    };
    adapter_result_t res;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (parse_with(ops()->parse_send, cases[i].status, cases[i].body, &res) != cases[i].want)
            fail_msg("case %zu: status %d, want %d (%s)", i, res.status, cases[i].want, res.error);
        assert_int_equal(res.platform_code, cases[i].code);
        assert_string_equal(res.message_id, "");
        if (cases[i].want == ADAPTER_OK)
            assert_string_equal(res.chat_id, TO);
        else
            assert_true(res.error[0] != '\0');
    }
    parse_with(ops()->parse_send, 200,
               "{\"errcode\":45002,\"errmsg\":\"content size out of limit\"}", &res);
    assert_string_equal(res.error, "wechat: content size out of limit (errcode 45002)");
    parse_with(ops()->parse_send, 200, "{\"errcode\":40003,\"errmsg\":\"invalid openid\"}", &res);
    assert_int_equal(adapter_err_code(ops(), res.status), 104);
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
    assert_int_equal(header_count(c), 1);
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
    adapter_result_t res;

    (void)state;
    assert_int_equal(parse_with(ops()->parse_upload, 200,
                                "{\"type\":\"image\",\"media_id\":\"3Xk9_media-ID\",\"created_at\":"
                                "1700000000}",
                                &res),
                     ADAPTER_OK);
    assert_string_equal(res.ref, "3Xk9_media-ID");
    assert_int_equal(parse_with(ops()->parse_upload, 200,
                                "{\"errcode\":40001,\"errmsg\":\"invalid credential\"}", &res),
                     ADAPTER_AUTH_EXPIRED);
    assert_string_equal(res.ref, "");
    assert_int_equal(parse_with(ops()->parse_upload, 200,
                                "{\"errcode\":40005,\"errmsg\":\"invalid file type\"}", &res),
                     ADAPTER_REJECTED);
    assert_int_equal(
        parse_with(ops()->parse_upload, 200, "{\"errcode\":-1,\"errmsg\":\"system error\"}", &res),
        ADAPTER_SERVER_ERROR);
    assert_int_equal(parse_with(ops()->parse_upload, 200, "{\"type\":\"image\"}", &res),
                     ADAPTER_SERVER_ERROR);
    assert_int_equal(parse_with(ops()->parse_upload, 502, "", &res), ADAPTER_SERVER_ERROR);
    assert_int_equal(parse_with(ops()->parse_upload, 0, "", &res), ADAPTER_SERVER_ERROR);
}

static void test_no_secret_in_errors(void **state)
{
    adapter_result_t res;

    (void)state;
    parse_with(ops()->parse_send, 200,
               "{\"errcode\":40001,\"errmsg\":\"invalid credential " TOKEN
               " url ?access_token=" TOKEN_ENC " secret " APPSECRET "\"}",
               &res);
    assert_int_equal(res.status, ADAPTER_AUTH_EXPIRED);
    assert_non_null(strstr(res.error, "***"));
    parse_with(ops()->parse_upload, 200, "{\"errcode\":40007,\"errmsg\":\"" TOKEN "\"}", &res);
    assert_null(token(200, "{\"errcode\":40125,\"errmsg\":\"bad secret " APPSECRET "\"}", &res));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),        cmocka_unit_test(test_needs_refresh),
        cmocka_unit_test(test_token_build),  cmocka_unit_test(test_token_parse),
        cmocka_unit_test(test_build_send),   cmocka_unit_test(test_build_send_refused),
        cmocka_unit_test(test_parse_send),   cmocka_unit_test(test_upload_build),
        cmocka_unit_test(test_upload_parse), cmocka_unit_test(test_no_secret_in_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
