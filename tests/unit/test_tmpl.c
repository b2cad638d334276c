/* test_tmpl.c - {{path}} rendering: values, paths, secrets, escaping, JSON-level rendering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_util.h"

#include "core/tmpl.h"

#include <stdlib.h>
#include <string.h>

static json_t *test_scope(void)
{
    json_t *meta = load("{\"orderId\":\"A-17\",\"n\":42,\"neg\":-7,\"price\":9.99,\"whole\":3.0,"
                        "\"tenth\":0.1,\"yes\":true,\"no\":false,\"nothing\":null,"
                        "\"obj\":{\"a\":1,\"b\":[1,2]},\"list\":[\"x\",{\"y\":\"z\"}],"
                        "\"quote\":\"say \\\"hi\\\"\",\"slash\":\"a\\\\b\",\"nl\":\"l1\\nl2\","
                        "\"uni\":\"caf\\u00e9 \\u4f60\\u597d \\ud83d\\ude00\","
                        "\"braces\":\"{{member.firstName}}\",\"digits\":{\"0\":\"zero\"},"
                        "\"url\":\"a b/c?d=e&f\"}");
    json_t *member = load("{\"_id\":\"M1\",\"firstName\":\"Ann\",\"tags\":[\"vip\",\"new\"],"
                          "\"meta\":{\"deep\":{\"er\":{\"est\":\"bottom\"}}}}");
    json_t *channel = load("{\"_id\":\"C1\",\"type\":\"facebook\",\"name\":\"Shop\","
                           "\"info\":{\"accessToken\":\"SECRET\",\"pageId\":\"123\"}}");
    json_t *scope = tmpl_scope(meta, member, channel);

    json_decref(meta);
    json_decref(member);
    json_decref(channel);
    return scope;
}

static void expect(const json_t *scope, const char *in, const char *want)
{
    char *got = tmpl_render(in, scope);

    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_plain_and_spaces(void **state)
{
    json_t *s = test_scope();

    (void)state;
    expect(s, "no placeholders", "no placeholders");
    expect(s, "", "");
    expect(s, "Hi {{member.firstName}}!", "Hi Ann!");
    expect(s, "Hi {{ member.firstName }}!", "Hi Ann!");
    expect(s, "Hi {{\tmember.firstName  }}!", "Hi Ann!");
    expect(s, "{{agendaMeta.orderId}}{{agendaMeta.orderId}}", "A-17A-17");
    expect(s, "{{member.firstName}} ordered {{agendaMeta.orderId}}.", "Ann ordered A-17.");
    {
        char *got = tmpl_render(NULL, s);
        assert_string_equal(got, "");
        free(got);
    }
    json_decref(s);
}

static void test_missing_paths(void **state)
{
    json_t *s = test_scope();

    (void)state;
    expect(s, "[{{member.lastName}}]", "[]");
    expect(s, "[{{nope.x}}]", "[]");
    expect(s, "[{{agendaMeta.orderId.more}}]", "[]");
    expect(s, "[{{}}]", "[]");
    expect(s, "[{{   }}]", "[]");
    expect(s, "[{{member..firstName}}]", "[]");
    expect(s, "[{{member.firstName.}}]", "[]");
    expect(s, "[{{.member}}]", "[]");
    expect(s, "[{{member.tags.9}}]", "[]");
    expect(s, "[{{member.tags.x}}]", "[]");
    expect(s, "[{{member.tags.-1}}]", "[]");
    expect(s, "[{{member.first Name}}]", "[]");
    {
        char *got = tmpl_render("[{{member.firstName}}]", NULL);
        assert_string_equal(got, "[]");
        free(got);
    }
    json_decref(s);
}

static void test_nested_and_index(void **state)
{
    json_t *s = test_scope();

    (void)state;
    expect(s, "{{member.meta.deep.er.est}}", "bottom");
    expect(s, "{{member.tags.0}}/{{member.tags.1}}", "vip/new");
    expect(s, "{{agendaMeta.list.1.y}}", "z");
    expect(s, "{{agendaMeta.obj.b.1}}", "2");
    /* a digit segment on an object is a key */
    expect(s, "{{agendaMeta.digits.0}}", "zero");
    json_decref(s);
}

static void test_non_string_values(void **state)
{
    json_t *s = test_scope();

    (void)state;
    expect(s, "{{agendaMeta.n}}", "42");
    expect(s, "{{agendaMeta.neg}}", "-7");
    expect(s, "{{agendaMeta.price}}", "9.99");
    expect(s, "{{agendaMeta.tenth}}", "0.1");
    expect(s, "{{agendaMeta.whole}}", "3.0");
    expect(s, "{{agendaMeta.yes}}/{{agendaMeta.no}}", "true/false");
    expect(s, "[{{agendaMeta.nothing}}]", "[]");
    expect(s, "{{agendaMeta.obj}}", "{\"a\":1,\"b\":[1,2]}");
    expect(s, "{{agendaMeta.list}}", "[\"x\",{\"y\":\"z\"}]");
    expect(s, "{{member.tags}}", "[\"vip\",\"new\"]");
    json_decref(s);
}

static void test_channel_info_hidden(void **state)
{
    json_t *s = test_scope(), *raw;
    char *got;

    (void)state;
    expect(s, "{{channel.name}} {{channel._id}}", "Shop C1");
    expect(s, "[{{channel.info}}]", "[]");
    expect(s, "[{{channel.info.accessToken}}]", "[]");
    expect(s, "[{{ channel.info.pageId }}]", "[]");
    got = tmpl_render("{{channel}}", s);
    assert_null(strstr(got, "SECRET"));
    assert_null(strstr(got, "info"));
    assert_non_null(strstr(got, "\"name\":\"Shop\""));
    free(got);
    assert_null(json_object_get(json_object_get(s, "channel"), "info"));
    json_decref(s);

    /* A scope built by hand, with the secrets in it, still does not show them. */
    raw = load("{\"channel\":{\"name\":\"Shop\",\"info\":{\"accessToken\":\"SECRET\"}}}");
    expect(raw, "[{{channel.info.accessToken}}]", "[]");
    expect(raw, "[{{channel.info}}]", "[]");
    got = tmpl_render("{{channel}}", raw);
    assert_null(strstr(got, "SECRET"));
    assert_string_equal(got, "{\"name\":\"Shop\"}");
    free(got);
    /* the scope itself was not changed */
    assert_non_null(json_object_get(json_object_get(raw, "channel"), "info"));
    json_decref(raw);
}

static void test_unclosed_and_odd_braces(void **state)
{
    json_t *s = test_scope();

    (void)state;
    expect(s, "Hi {{member.firstName", "Hi {{member.firstName");
    expect(s, "{{member.firstName}} and {{member.tags.0", "Ann and {{member.tags.0");
    expect(s, "{{", "{{");
    expect(s, "}}", "}}");
    expect(s, "{ {member.firstName} }", "{ {member.firstName} }");
    expect(s, "a}}b{{member.firstName}}", "a}}bAnn");
    expect(s, "{{{member.firstName}}}", "}");
    json_decref(s);
}

static void test_no_reexpansion(void **state)
{
    json_t *s = test_scope(), *v, *out;

    (void)state;
    expect(s, "{{agendaMeta.braces}}", "{{member.firstName}}");
    v = load("{\"type\":\"TEXT\",\"text\":\"x {{agendaMeta.braces}} y\"}");
    out = tmpl_render_json(v, s);
    assert_string_equal(json_string_value(json_object_get(out, "text")),
                        "x {{member.firstName}} y");
    json_decref(v);
    json_decref(out);
    json_decref(s);
}

static void test_escaping_json(void **state)
{
    json_t *s = test_scope(), *v, *out, *back;
    char *dump;

    (void)state;
    v = load("{\"type\":\"TEXT\",\"text\":\"<{{agendaMeta.quote}}|{{agendaMeta.slash}}|"
             "{{agendaMeta.nl}}|{{agendaMeta.uni}}|{{agendaMeta.obj}}>\"}");
    out = tmpl_render_json(v, s);
    assert_non_null(out);
    assert_string_equal(json_string_value(json_object_get(out, "text")),
                        "<say \"hi\"|a\\b|l1\nl2|caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd "
                        "\xf0\x9f\x98\x80|{\"a\":1,\"b\":[1,2]}>");
    /* still valid JSON on the wire, and reads back the same */
    dump = json_dumps(out, JSON_COMPACT);
    assert_non_null(dump);
    back = load(dump);
    assert_true(json_equal(back, out));
    free(dump);
    json_decref(back);
    json_decref(out);
    json_decref(v);
    json_decref(s);
}

static void test_render_json_values_only(void **state)
{
    json_t *s = test_scope(), *v, *out;

    (void)state;
    v = load("{\"{{member.firstName}}\":\"{{member.firstName}}\",\"n\":5,\"r\":1.5,\"b\":true,"
             "\"z\":null,\"a\":[\"{{agendaMeta.n}}\",7,[\"{{member.tags.1}}\"]]}");
    out = tmpl_render_json(v, s);
    assert_non_null(out);
    assert_string_equal(json_string_value(json_object_get(out, "{{member.firstName}}")), "Ann");
    assert_int_equal(json_integer_value(json_object_get(out, "n")), 5);
    assert_true(json_is_real(json_object_get(out, "r")));
    assert_true(json_is_true(json_object_get(out, "b")));
    assert_true(json_is_null(json_object_get(out, "z")));
    /* a number inserted into a string stays a string */
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "a"), 0)), "42");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(out, "a"), 1)), 7);
    assert_string_equal(
        json_string_value(json_array_get(json_array_get(json_object_get(out, "a"), 2), 0)), "new");
    /* the input is untouched */
    assert_string_equal(json_string_value(json_object_get(v, "{{member.firstName}}")),
                        "{{member.firstName}}");
    json_decref(out);
    json_decref(v);
    assert_null(tmpl_render_json(NULL, s));
    json_decref(s);
}

static void test_template_components_deep(void **state)
{
    json_t *s = test_scope(), *v, *out, *params;

    (void)state;
    v = load("{\"type\":\"TEMPLATE\",\"elementName\":\"order_{{agendaMeta.n}}\","
             "\"languageCode\":\"en\",\"components\":[{\"type\":\"body\",\"parameters\":["
             "{\"type\":\"text\",\"text\":\"{{member.firstName}}\"},"
             "{\"type\":\"text\",\"text\":\"{{agendaMeta.quote}}\"},"
             "{\"type\":\"currency\",\"currency\":{\"fallback_value\":\"{{agendaMeta.price}}\","
             "\"code\":\"USD\",\"amount_1000\":9990}}]}]}");
    out = tmpl_render_json(v, s);
    assert_string_equal(json_string_value(json_object_get(out, "elementName")), "order_42");
    params = json_object_get(json_array_get(json_object_get(out, "components"), 0), "parameters");
    assert_string_equal(json_string_value(json_object_get(json_array_get(params, 0), "text")),
                        "Ann");
    assert_string_equal(json_string_value(json_object_get(json_array_get(params, 1), "text")),
                        "say \"hi\"");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(json_array_get(params, 2), "currency"),
                                          "fallback_value")),
        "9.99");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_array_get(params, 2), "currency"), "amount_1000")),
                     9990);
    json_decref(out);
    json_decref(v);
    json_decref(s);
}

static void test_url_rendering(void **state)
{
    json_t *s = test_scope();
    char *got;

    (void)state;
    got = tmpl_render_url(
        "https://api.example.com/orders/{{agendaMeta.orderId}}?q={{agendaMeta.url}}", s);
    assert_string_equal(got, "https://api.example.com/orders/A-17?q=a%20b%2Fc%3Fd%3De%26f");
    free(got);
    got = tmpl_render_url("https://x/{{agendaMeta.uni}}", s);
    assert_string_equal(got, "https://x/caf%C3%A9%20%E4%BD%A0%E5%A5%BD%20%F0%9F%98%80");
    free(got);
    got = tmpl_render_url("https://x/{{channel.info.accessToken}}", s);
    assert_string_equal(got, "https://x/");
    free(got);
    json_decref(s);
}

static void test_scope_shape(void **state)
{
    json_t *meta = load("{\"k\":1}"), *scope;

    (void)state;
    scope = tmpl_scope(meta, NULL, NULL);
    assert_int_equal(json_object_size(scope), 3);
    assert_true(json_equal(json_object_get(scope, "agendaMeta"), meta));
    assert_true(json_is_object(json_object_get(scope, "member")));
    assert_true(json_is_object(json_object_get(scope, "channel")));
    /* a copy: changing the input does not change the scope */
    json_object_set_new(meta, "k", json_integer(2));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(scope, "agendaMeta"), "k")),
                     1);
    json_decref(scope);
    json_decref(meta);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_spaces),
        cmocka_unit_test(test_missing_paths),
        cmocka_unit_test(test_nested_and_index),
        cmocka_unit_test(test_non_string_values),
        cmocka_unit_test(test_channel_info_hidden),
        cmocka_unit_test(test_unclosed_and_odd_braces),
        cmocka_unit_test(test_no_reexpansion),
        cmocka_unit_test(test_escaping_json),
        cmocka_unit_test(test_render_json_values_only),
        cmocka_unit_test(test_template_components_deep),
        cmocka_unit_test(test_url_rendering),
        cmocka_unit_test(test_scope_shape),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
