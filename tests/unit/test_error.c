/* test_error.c - error values, their JSON forms, UTF-8 trimming and adapter status mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapters/adapter.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Strict UTF-8 check (no overlongs, surrogates or code points past U+10FFFF), independent of
 * jansson's. */
static int utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    while (*p) {
        unsigned c = *p, need, cp;
        if (c < 0x80) {
            p++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            need = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3, cp = c & 0x07;
        else
            return 0;
        for (unsigned i = 1; i <= need; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        p += need + 1;
    }
    return 1;
}

static const int wire_codes[] = {100, 104, 108, 112, 113, 114, 115,
                                 116, 117, 118, 119, 120, 121, 122};

static void test_set_and_clear(void **state)
{
    bg_error_t err;

    (void)state;
    memset(&err, 0x5A, sizeof(err));
    assert_int_equal(bg_error_set(&err, BG_ERR_MISSING_PARAM, "missing parameter: %s", "x"), -1);
    assert_int_equal(err.code, 108);
    assert_int_equal(err.http_status, 500);
    assert_string_equal(err.msg, "missing parameter: x");

    bg_error_clear(&err);
    assert_int_equal(err.code, BG_OK);
    assert_int_equal(err.http_status, 200);
    assert_string_equal(err.msg, "");

    /* a set after a 413 resets the status */
    err.http_status = 413;
    bg_error_set(&err, BG_ERR_LIMIT, "over");
    assert_int_equal(err.http_status, 500);

    /* a long ASCII message is cut to the buffer, terminated */
    {
        char big[1000];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        bg_error_set(&err, BG_ERR_LIMIT, "%s", big);
        assert_int_equal(strlen(err.msg), BG_ERROR_MSG_MAX - 1);
    }
}

static void test_to_json_wire_codes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(wire_codes) / sizeof(wire_codes[0]); i++) {
        bg_error_t err;
        json_t *j, *code;

        bg_error_set(&err, wire_codes[i], "failure %d \xc3\xa9", wire_codes[i]);
        j = bg_error_to_json(&err);
        assert_non_null(j);
        assert_int_equal(json_object_size(j), 4);
        assert_true(json_is_integer(json_object_get(j, "ok")));
        assert_int_equal(json_integer_value(json_object_get(j, "ok")), 0);
        code = json_object_get(j, "err_code");
        assert_true(json_is_integer(code)); /* a number, not a string */
        assert_int_equal(json_integer_value(code), wire_codes[i]);
        assert_string_equal(json_string_value(json_object_get(j, "err")), err.msg);
        assert_string_equal(json_string_value(json_object_get(j, "error")), err.msg);
        json_decref(j);
    }
}

static void test_to_json_without_code(void **state)
{
    static const int codes[] = {BG_ERR_UNAUTHORIZED};
    bg_error_t err;
    json_t *j;
    char *text;

    (void)state;
    for (size_t i = 0; i < 1; i++) {
        bg_error_set(&err, codes[i], "User is not authorized");
        j = bg_error_to_json(&err);
        assert_int_equal(json_object_size(j), 3);
        assert_null(json_object_get(j, "err_code"));
        assert_int_equal(json_integer_value(json_object_get(j, "ok")), 0);
        assert_string_equal(json_string_value(json_object_get(j, "err")), "User is not authorized");
        assert_string_equal(json_string_value(json_object_get(j, "error")),
                            "User is not authorized");
        json_decref(j);
    }
    /* exactly contract.md's body for an unauthorized request */
    bg_error_set(&err, BG_ERR_UNAUTHORIZED, "User is not authorized");
    j = bg_error_to_json(&err);
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(text,
                        "{\"err\":\"User is not authorized\",\"error\":\"User is not authorized\","
                        "\"ok\":0}");
    free(text);
    json_decref(j);
}

static void test_element_json(void **state)
{
    bg_error_t err;
    json_t *j;

    (void)state;
    for (size_t i = 0; i < sizeof(wire_codes) / sizeof(wire_codes[0]); i++) {
        bg_error_set(&err, wire_codes[i], "element %zu", i);
        j = bg_error_element_json(&err);
        assert_int_equal(json_object_size(j), 2);
        assert_true(json_is_integer(json_object_get(j, "err_code")));
        assert_int_equal(json_integer_value(json_object_get(j, "err_code")), wire_codes[i]);
        assert_string_equal(json_string_value(json_object_get(j, "err")), err.msg);
        assert_null(json_object_get(j, "ok"));
        assert_null(json_object_get(j, "error"));
        json_decref(j);
    }
    /* an element always carries a wire code: an unauthorized one counts as a platform error */
    bg_error_set(&err, BG_ERR_UNAUTHORIZED, "refused");
    j = bg_error_element_json(&err);
    assert_int_equal(json_integer_value(json_object_get(j, "err_code")), BG_ERR_PLATFORM);
    assert_string_equal(json_string_value(json_object_get(j, "err")), "refused");
    json_decref(j);
}

/* The sequences of each length, and what a cut prefix must become. */
static const char *const seqs[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};

static void test_utf8_trim_cut_sequences(void **state)
{
    static const char *const prefixes[] = {
        "", "ab", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "x\xf0\x9f\x98\x80"};
    char buf[32];

    (void)state;
    for (size_t p = 0; p < sizeof(prefixes) / sizeof(prefixes[0]); p++) {
        for (size_t s = 0; s < 3; s++) {
            size_t len = strlen(seqs[s]);

            /* every cut position: 1 .. len-1 bytes of the sequence */
            for (size_t cut = 1; cut < len; cut++) {
                snprintf(buf, sizeof(buf), "%s%.*s", prefixes[p], (int)cut, seqs[s]);
                bg_utf8_trim(buf);
                assert_string_equal(buf, prefixes[p]);
                assert_true(utf8_valid(buf));
            }
            /* the complete sequence is kept */
            snprintf(buf, sizeof(buf), "%s%s", prefixes[p], seqs[s]);
            bg_utf8_trim(buf);
            assert_int_equal(strlen(buf), strlen(prefixes[p]) + len);
            assert_true(utf8_valid(buf));
        }
    }
    /* plain ASCII and the empty string are left alone */
    snprintf(buf, sizeof(buf), "%s", "hello");
    bg_utf8_trim(buf);
    assert_string_equal(buf, "hello");
    buf[0] = '\0';
    bg_utf8_trim(buf);
    assert_string_equal(buf, "");
}

/* "%.3s" of a caller's text can cut a character in the middle of a message. */
static void test_sanitize_cut_in_the_middle(void **state)
{
    bg_error_t err;
    char buf[32];
    json_t *j;

    (void)state;
    bg_error_set(&err, BG_ERR_UNSUPPORTED, "type %.3s is not supported",
                 "\xe2\x82\xac\xe2\x82\xac");
    assert_string_equal(err.msg, "type \xe2\x82\xac is not supported");
    bg_error_set(&err, BG_ERR_UNSUPPORTED, "type %.2s is not supported", "\xe2\x82\xac");
    assert_string_equal(err.msg, "type ?? is not supported");
    j = bg_error_to_json(&err);
    assert_non_null(json_object_get(j, "err"));
    json_decref(j);
    /* overlong forms and surrogates are not UTF-8 either */
    snprintf(buf, sizeof(buf),
             "a\xc0\xaf"
             "b\xed\xa0\x80"
             "c");
    bg_utf8_sanitize(buf);
    assert_string_equal(buf, "a??b???c");
    snprintf(buf, sizeof(buf), "ok \xf0\x9f\x98\x80 ok");
    bg_utf8_sanitize(buf);
    assert_string_equal(buf, "ok \xf0\x9f\x98\x80 ok");
}

static void test_long_multibyte_message(void **state)
{
    char text[2048];

    (void)state;
    for (size_t s = 0; s < 3; s++) {
        size_t len = strlen(seqs[s]);

        /* 0..3 ASCII bytes first, so the 255-byte cut lands at every offset in a sequence */
        for (size_t lead = 0; lead < 4; lead++) {
            bg_error_t err;
            json_t *j, *answer;
            size_t n = 0;

            memset(text, 'x', lead);
            n = lead;
            while (n + len < sizeof(text) - 1) {
                memcpy(text + n, seqs[s], len);
                n += len;
            }
            text[n] = '\0';
            assert_true(n > BG_ERROR_MSG_MAX);

            bg_error_set(&err, BG_ERR_MISSING_PARAM, "%s", text);
            assert_true(utf8_valid(err.msg));
            /* cut only as much as needed: at most one incomplete sequence is dropped */
            assert_true(strlen(err.msg) <= BG_ERROR_MSG_MAX - 1);
            assert_true(strlen(err.msg) >= BG_ERROR_MSG_MAX - len);
            assert_memory_equal(err.msg, text, strlen(err.msg));

            j = json_string(err.msg);
            if (j == NULL)
                fail_msg("json_string refused the message (seq %zu, lead %zu)", s, lead);
            json_decref(j);
            answer = bg_error_to_json(&err);
            assert_string_equal(json_string_value(json_object_get(answer, "err")), err.msg);
            assert_string_equal(json_string_value(json_object_get(answer, "error")), err.msg);
            json_decref(answer);
            answer = bg_error_element_json(&err);
            assert_string_equal(json_string_value(json_object_get(answer, "err")), err.msg);
            json_decref(answer);
        }
    }
    /* after a format prefix too */
    {
        bg_error_t err;
        json_t *j;

        memset(text, 0, sizeof(text));
        for (size_t n = 0; n + 3 < 900; n += 3)
            memcpy(text + n, seqs[1], 3);
        for (int pre = 0; pre < 5; pre++) {
            bg_error_set(&err, BG_ERR_LIMIT, "%.*sparameter %s", pre, "!!!!!", text);
            assert_true(utf8_valid(err.msg));
            j = json_string(err.msg);
            assert_non_null(j);
            json_decref(j);
        }
    }
}

static void check_mapping(const char *type, int recipient_code)
{
    static const struct {
        adapter_status_t status;
        int code; /* -1: the adapter's recipient code */
    } map[] = {
        {ADAPTER_OK, BG_OK},
        {ADAPTER_RECIPIENT_INVALID, -1},
        {ADAPTER_AUTH_INVALID, BG_ERR_RECIPIENT_INVALID},
        {ADAPTER_AUTH_EXPIRED, BG_ERR_RECIPIENT_INVALID},
        {ADAPTER_RATE_LIMITED, BG_ERR_RATE_LIMITED},
        {ADAPTER_SERVER_ERROR, BG_ERR_PLATFORM},
        {ADAPTER_REJECTED, BG_ERR_PLATFORM},
        {ADAPTER_UNSUPPORTED, BG_ERR_UNSUPPORTED},
        {ADAPTER_WINDOW_CLOSED, BG_ERR_WINDOW},
    };
    const adapter_ops_t *ops = adapter_find(type);

    assert_non_null(ops);
    assert_string_equal(ops->type, type);
    assert_int_equal(ops->recipient_invalid_code, recipient_code);
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        int want = map[i].code < 0 ? recipient_code : map[i].code;
        int got = adapter_err_code(ops, map[i].status);
        if (got != want)
            fail_msg("%s: status %d maps to %d, want %d", type, (int)map[i].status, got, want);
    }
}

static void test_adapter_err_code(void **state)
{
    (void)state;
    /* whatsapp kinds: an invalid recipient is an invalid phone number (100) */
    check_mapping("whatsapp", BG_ERR_PHONE_INVALID);
    check_mapping("whatsapp-cloud", BG_ERR_PHONE_INVALID);
    /* facebook: an invalid page-scoped user id (104) */
    check_mapping("facebook", BG_ERR_RECIPIENT_INVALID);
    check_mapping("slack", BG_ERR_RECIPIENT_INVALID);
    check_mapping("wechat", BG_ERR_RECIPIENT_INVALID);
    check_mapping("teamwork", BG_ERR_RECIPIENT_INVALID);
    /* whatsapp on-premises aborts on a server error (113), contract.md 5 */
    assert_int_equal(adapter_find("whatsapp")->server_error_aborts, 1);

    assert_null(adapter_find("telegram"));
    assert_null(adapter_find("Facebook"));
    assert_null(adapter_find(""));
    assert_null(adapter_find(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_and_clear),
        cmocka_unit_test(test_to_json_wire_codes),
        cmocka_unit_test(test_to_json_without_code),
        cmocka_unit_test(test_element_json),
        cmocka_unit_test(test_utf8_trim_cut_sequences),
        cmocka_unit_test(test_long_multibyte_message),
        cmocka_unit_test(test_sanitize_cut_in_the_middle),
        cmocka_unit_test(test_adapter_err_code),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
