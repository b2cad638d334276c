/* test_auth.c - token hashing, scopes, token records, expiry, tenancy and token extraction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_util.h"

#include "core/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decodes a record given as JSON text; fails the test when it is refused. */
static void decode_ok(const char *text, auth_token_t *t)
{
    json_t *rec = load(text);

    if (auth_token_decode(rec, t) != 0)
        fail_msg("refused: %s", text);
    json_decref(rec);
}

static void decode_refused(const char *text)
{
    json_t *rec = load(text);
    auth_token_t t;

    if (auth_token_decode(rec, &t) == 0) {
        auth_token_free(&t);
        fail_msg("accepted: %s", text);
    }
    assert_null(t.channels);
    json_decref(rec);
}

static void test_hash_vectors(void **state)
{
    char out[AUTH_HASH_HEX];

    (void)state;
    memset(out, 'Z', sizeof(out));
    auth_hash_token("", 0, out);
    assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

    auth_hash_token("abc", 3, out);
    assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

    /* the length is honoured, not the terminator */
    auth_hash_token("abcdef", 3, out);
    assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

    /* FIPS 180-2 two-block vector */
    {
        static const char msg[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        auth_hash_token(msg, strlen(msg), out);
        assert_string_equal(out,
                            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    }
    assert_int_equal(strlen(out), AUTH_HASH_HEX - 1);
}

static void test_scope_bits(void **state)
{
    static const char *const unknown[] = {"",          "bot:Admin", "bot:admin ",
                                          "api:Admin", "bot:send",  "bot:sendResponse",
                                          "admin",     "bot:*",     "bot:sendResponses\n"};

    (void)state;
    assert_int_equal(auth_scope_bit("bot:sendResponses"), AUTH_SCOPE_SEND);
    assert_int_equal(auth_scope_bit("bot:redirectMemberToNode"), AUTH_SCOPE_REDIRECT);
    assert_int_equal(auth_scope_bit("bot:admin"), AUTH_SCOPE_BOT_ADMIN);
    assert_int_equal(auth_scope_bit("api:admin"), AUTH_SCOPE_API_ADMIN);
    /* four different single bits */
    assert_int_equal(
        AUTH_SCOPE_SEND | AUTH_SCOPE_REDIRECT | AUTH_SCOPE_BOT_ADMIN | AUTH_SCOPE_API_ADMIN, 0xF);
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++)
        assert_int_equal(auth_scope_bit(unknown[i]), 0);
    assert_int_equal(auth_scope_bit(NULL), 0);
}

static void test_decode_valid(void **state)
{
    auth_token_t t;

    (void)state;
    /* contract.md's example record */
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:sendResponses\"],\"label\":\"crm\","
              "\"expiresAt\":null,\"channels\":null}",
              &t);
    assert_string_equal(t.app, "A1");
    assert_int_equal(t.scopes, AUTH_SCOPE_SEND);
    assert_int_equal(t.expires_at, 0);
    assert_null(t.channels);
    auth_token_free(&t);

    /* optional fields absent */
    decode_ok("{\"app\":\"A2\",\"scopes\":[\"bot:admin\",\"api:admin\"]}", &t);
    assert_string_equal(t.app, "A2");
    assert_int_equal(t.scopes, AUTH_SCOPE_BOT_ADMIN | AUTH_SCOPE_API_ADMIN);
    assert_int_equal(t.expires_at, 0);
    assert_null(t.channels);
    auth_token_free(&t);

    /* expiresAt as an integer and as a real, channels as a list */
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:redirectMemberToNode\"],"
              "\"expiresAt\":1700000000000,\"channels\":[\"C1\",\"C2\"]}",
              &t);
    assert_int_equal(t.expires_at, 1700000000000LL);
    assert_non_null(t.channels);
    assert_int_equal(json_array_size(t.channels), 2);
    assert_string_equal(json_string_value(json_array_get(t.channels, 1)), "C2");
    auth_token_free(&t);
    assert_null(t.channels);
    auth_token_free(&t); /* twice is harmless */

    decode_ok("{\"app\":\"A1\",\"scopes\":[],\"expiresAt\":1700000000000.0}", &t);
    assert_int_equal(t.expires_at, 1700000000000LL);
    assert_int_equal(t.scopes, 0);
    auth_token_free(&t);

    /* unknown scopes and non-string entries are ignored, known ones still count */
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:everything\",5,null,\"bot:sendResponses\","
              "\"bot:sendResponses\"]}",
              &t);
    assert_int_equal(t.scopes, AUTH_SCOPE_SEND);
    auth_token_free(&t);

    /* an empty channel list is a list that allows nothing */
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"channels\":[]}", &t);
    assert_non_null(t.channels);
    assert_int_equal(json_array_size(t.channels), 0);
    assert_int_equal(auth_sees_channel(&t, "C1", "A1"), 0);
    auth_token_free(&t);

    /* the longest app id that fits (128 bytes) */
    {
        char rec[300], app[129];
        memset(app, 'a', 128);
        app[128] = '\0';
        snprintf(rec, sizeof(rec), "{\"app\":\"%s\",\"scopes\":[]}", app);
        decode_ok(rec, &t);
        assert_string_equal(t.app, app);
        auth_token_free(&t);
        assert_null(t.record); /* the reference to the record went with it */
        /* one more is refused, never cut: a cut id could name another app */
        snprintf(rec, sizeof(rec), "{\"app\":\"%sa\",\"scopes\":[]}", app);
        decode_refused(rec);
    }
}

/* The app ids botgatectl and the token lookup accept (auth_app_valid). */
static void test_app_ids(void **state)
{
    static const char *const good[] = {"A1",   "app-idem", "my app", "\xc3\xa9t\xc3\xa9",
                                       "a{b}", "~"};
    static const char *const bad[] = {"",     ":",    "A:B",   "A1:",     ":A1",
                                      "A\tB", "A\nB", "A\x7f", "\x1b[31m"};
    char app[AUTH_APP_MAX + 2];

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (!auth_app_valid(good[i]))
            fail_msg("refused app \"%s\"", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (auth_app_valid(bad[i]))
            fail_msg("accepted app \"%s\"", bad[i]);
    assert_false(auth_app_valid(NULL));
    memset(app, 'a', sizeof(app) - 1);
    app[sizeof(app) - 1] = '\0';
    assert_false(auth_app_valid(app));
    app[AUTH_APP_MAX] = '\0';
    assert_true(auth_app_valid(app));
    /* a NUL inside the JSON string would end the id early: the record is refused */
    {
        json_error_t e;
        json_t *rec =
            json_loads("{\"app\":\"A1\\u0000x\",\"scopes\":[\"bot:admin\"]}", JSON_ALLOW_NUL, &e);
        auth_token_t t;
        assert_non_null(rec);
        assert_int_equal(auth_token_decode(rec, &t), -1);
        json_decref(rec);
    }
}

static void test_decode_refused(void **state)
{
    static const char *const records[] = {
        /* not a record */
        "[]",
        "\"A1\"",
        "null",
        "42",
        /* app missing, empty or not a string */
        "{\"scopes\":[\"bot:admin\"]}",
        "{\"app\":\"\",\"scopes\":[\"bot:admin\"]}",
        "{\"app\":null,\"scopes\":[\"bot:admin\"]}",
        "{\"app\":7,\"scopes\":[\"bot:admin\"]}",
        "{\"app\":[\"A1\"],\"scopes\":[\"bot:admin\"]}",
        /* app ids with ':' or a control character (issue 27: "A:sendResponses:B" shared the
         * Idempotency-Key records of app "A") */
        "{\"app\":\"A:sendResponses:B\",\"scopes\":[\"bot:admin\"]}",
        "{\"app\":\":\",\"scopes\":[\"bot:admin\"]}",
        "{\"app\":\"A1\\n\",\"scopes\":[\"bot:admin\"]}",
        "{\"app\":\"A\\u0001B\",\"scopes\":[\"bot:admin\"]}",
        "{\"app\":\"A\\u007f\",\"scopes\":[\"bot:admin\"]}",
        /* expiresAt neither null nor a number */
        "{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":\"1700000000000\"}",
        "{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":true}",
        "{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":{}}",
        /* expiresAt that no int64 holds */
        "{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":1e300}",
        "{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":-1e300}",
        /* channels neither null nor an array */
        "{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"channels\":\"C1\"}",
        "{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"channels\":{\"C1\":true}}",
        "{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"channels\":false}",
    };
    auth_token_t t;

    (void)state;
    for (size_t i = 0; i < sizeof(records) / sizeof(records[0]); i++)
        decode_refused(records[i]);
    assert_int_equal(auth_token_decode(NULL, &t), -1);
    assert_null(t.channels);
}

/* scopes given as something other than an array grant nothing */
static void test_decode_scopes_not_a_list(void **state)
{
    static const char *const records[] = {
        "{\"app\":\"A1\",\"scopes\":\"bot:admin\"}",
        "{\"app\":\"A1\",\"scopes\":{\"bot:admin\":true}}",
        "{\"app\":\"A1\",\"scopes\":null}",
        "{\"app\":\"A1\"}",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(records) / sizeof(records[0]); i++) {
        json_t *rec = load(records[i]);
        auth_token_t t;

        if (auth_token_decode(rec, &t) == 0) {
            assert_int_equal(t.scopes, 0);
            assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, 1), 0);
            assert_int_equal(auth_allows(&t, AUTH_ACCEPT_REDIRECT, 1), 0);
            auth_token_free(&t);
        }
        json_decref(rec);
    }
}

static void test_allows_scopes(void **state)
{
    /* interface.md: sendResponses takes bot:sendResponses or bot:admin; redirectMemberToNode
     * takes bot:redirectMemberToNode, bot:admin or api:admin */
    static const struct {
        const char *scope;
        int send, redirect;
    } table[] = {
        {"bot:sendResponses", 1, 0}, {"bot:redirectMemberToNode", 0, 1},
        {"bot:admin", 1, 1},         {"api:admin", 0, 1},
        {"bot:other", 0, 0},
    };
    auth_token_t t;

    (void)state;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        memset(&t, 0, sizeof(t));
        t.app = "A1";
        t.scopes = auth_scope_bit(table[i].scope);
        if (auth_allows(&t, AUTH_ACCEPT_SEND, 1000) != table[i].send)
            fail_msg("%s on sendResponses: want %d", table[i].scope, table[i].send);
        if (auth_allows(&t, AUTH_ACCEPT_REDIRECT, 1000) != table[i].redirect)
            fail_msg("%s on redirectMemberToNode: want %d", table[i].scope, table[i].redirect);
    }
    /* every combination of the four scopes: any one accepted scope is enough */
    for (unsigned set = 0; set < 16; set++) {
        memset(&t, 0, sizeof(t));
        t.scopes = set;
        assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, 1),
                         (set & (AUTH_SCOPE_SEND | AUTH_SCOPE_BOT_ADMIN)) != 0);
        assert_int_equal(
            auth_allows(&t, AUTH_ACCEPT_REDIRECT, 1),
            (set & (AUTH_SCOPE_REDIRECT | AUTH_SCOPE_BOT_ADMIN | AUTH_SCOPE_API_ADMIN)) != 0);
    }
}

static void test_allows_expiry(void **state)
{
    auth_token_t t;
    const int64_t at = 1700000000000LL;

    (void)state;
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":1700000000000}", &t);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, 0), 1);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, at - 1), 1);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, at), 0); /* expired at that moment */
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_REDIRECT, at), 0);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, at + 1), 0);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, INT64_MAX), 0);
    auth_token_free(&t);

    /* no expiry: valid at any time */
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":null}", &t);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, INT64_MAX), 1);
    auth_token_free(&t);

    /* an expiry at or before the epoch has passed: a number is a moment, never "no expiry" */
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":0}", &t);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, 1700000000000LL), 0);
    auth_token_free(&t);
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"expiresAt\":-5}", &t);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, 1700000000000LL), 0);
    auth_token_free(&t);

    /* an unexpired token without the scope is still refused */
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"api:admin\"],\"expiresAt\":1700000000000}", &t);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_SEND, at - 1), 0);
    assert_int_equal(auth_allows(&t, AUTH_ACCEPT_REDIRECT, at - 1), 1);
    auth_token_free(&t);
}

static void test_sees_channel(void **state)
{
    auth_token_t t;

    (void)state;
    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:admin\"]}", &t);
    assert_int_equal(auth_sees_channel(&t, "C1", "A1"), 1);
    assert_int_equal(auth_sees_channel(&t, "anything", "A1"), 1);
    assert_int_equal(auth_sees_channel(&t, "C1", "A2"), 0);
    assert_int_equal(auth_sees_channel(&t, "C1", "A10"), 0); /* no prefix match */
    assert_int_equal(auth_sees_channel(&t, "C1", "a1"), 0);
    assert_int_equal(auth_sees_channel(&t, "C1", ""), 0);
    assert_int_equal(auth_sees_channel(&t, "C1", NULL), 0); /* a record without app */
    auth_token_free(&t);

    decode_ok("{\"app\":\"A1\",\"scopes\":[\"bot:admin\"],\"channels\":[\"C1\",7,null,\"C3\"]}",
              &t);
    assert_int_equal(auth_sees_channel(&t, "C1", "A1"), 1);
    assert_int_equal(auth_sees_channel(&t, "C3", "A1"), 1);
    assert_int_equal(auth_sees_channel(&t, "C2", "A1"), 0);
    assert_int_equal(auth_sees_channel(&t, "C", "A1"), 0);
    assert_int_equal(auth_sees_channel(&t, "C10", "A1"), 0);
    assert_int_equal(auth_sees_channel(&t, "7", "A1"), 0);
    /* the list never lets a token see another app's channel */
    assert_int_equal(auth_sees_channel(&t, "C1", "A2"), 0);
    auth_token_free(&t);
}

static void expect_token_n(const char *authz, const char *query, size_t query_len, const char *want)
{
    size_t len = 12345;
    const char *got = auth_request_token(authz, query, query_len, &len);

    if (want == NULL) {
        if (got != NULL)
            fail_msg("[%s] [%s]: got a token, want none", authz ? authz : "(null)",
                     query ? query : "(null)");
        return;
    }
    if (got == NULL)
        fail_msg("[%s] [%s]: no token, want %s", authz ? authz : "(null)", query ? query : "(null)",
                 want);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(got, want, len);
    /* a pointer into one of the inputs, not a copy */
    assert_true((authz && got >= authz && got < authz + strlen(authz)) ||
                (query && got >= query && got < query + query_len + 1));
}

static void expect_token(const char *authz, const char *query, const char *want)
{
    expect_token_n(authz, query, query ? strlen(query) : 0, want);
}

static void test_request_token(void **state)
{
    (void)state;
    /* the header wins */
    expect_token("Bearer tok-header", "tok-query", "tok-header");
    expect_token("Bearer tok-header", NULL, "tok-header");
    /* the scheme is case-insensitive */
    expect_token("bearer abc", "q", "abc");
    expect_token("BEARER abc", "q", "abc");
    expect_token("BeArEr abc", NULL, "abc");
    /* spaces around the token are trimmed */
    expect_token("Bearer    abc", NULL, "abc");
    expect_token("Bearer abc   ", NULL, "abc");
    expect_token("Bearer   abc  ", "q", "abc");
    /* a header that is there but no usable Bearer token is refused: no fall back to the query */
    expect_token("Bearer ", "q", NULL);
    expect_token("Bearer      ", "q", NULL);
    expect_token("Bearer", "q", NULL);
    expect_token("Basic dXNlcjpwYXNz", "q", NULL);
    expect_token("Bearerabc", "q", NULL);
    expect_token("Token abc", "q", NULL);
    expect_token("", "q", NULL);
    /* no header: the query token */
    expect_token(NULL, "q", "q");
    /* neither */
    expect_token(NULL, NULL, NULL);
    expect_token(NULL, "", NULL);
    expect_token("", "", NULL);
    expect_token("Bearer ", "", NULL);
    expect_token("Bearer    ", NULL, NULL);
    expect_token("Basic dXNlcjpwYXNz", NULL, NULL);
}

/* A NUL or another control character makes a token invalid: TOKEN%00junk is not TOKEN. */
static void test_request_token_control_chars(void **state)
{
    static const char nul_query[] = "TOKEN\0junk";

    (void)state;
    expect_token_n(NULL, nul_query, sizeof(nul_query) - 1, NULL);
    expect_token_n(NULL, "TOKEN\0", 6, NULL);
    expect_token(NULL, "TOK\tEN", NULL);
    expect_token(NULL, "TOKEN\r\n", NULL);
    expect_token(NULL, "TOK\x7f", NULL);
    expect_token("Bearer TOK\x01EN", NULL, NULL);
    expect_token("Bearer TOK\tEN", "q", NULL);
    /* the same bytes without them pass */
    expect_token_n(NULL, nul_query, 5, "TOKEN");
    expect_token(NULL, "TOKEN-._~+/=", "TOKEN-._~+/=");
}

/* The token found in a request hashes to the stored key form. */
static void test_token_to_hash(void **state)
{
    size_t len = 0;
    const char *tok = auth_request_token("Bearer abc  ", NULL, 0, &len);
    char out[AUTH_HASH_HEX];

    (void)state;
    assert_non_null(tok);
    auth_hash_token(tok, len, out);
    assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_vectors),
        cmocka_unit_test(test_scope_bits),
        cmocka_unit_test(test_decode_valid),
        cmocka_unit_test(test_app_ids),
        cmocka_unit_test(test_decode_refused),
        cmocka_unit_test(test_decode_scopes_not_a_list),
        cmocka_unit_test(test_allows_scopes),
        cmocka_unit_test(test_allows_expiry),
        cmocka_unit_test(test_sees_channel),
        cmocka_unit_test(test_request_token),
        cmocka_unit_test(test_request_token_control_chars),
        cmocka_unit_test(test_token_to_hash),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
