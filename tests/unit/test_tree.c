/* test_tree.c - tree file validation: a valid tree passes, each fault is refused by place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_util.h"

#include "core/request.h"
#include "core/tree.h"
#include "script/script.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *valid_tree =
    "{\"_id\":\"T1\",\"app\":\"A1\",\"name\":\"Orders\",\"nodes\":{"
    "\"N1\":{\"name\":\"Order shipped\","
    "\"preAction\":[{\"type\":\"set\",\"path\":\"member.botMeta.tempData.order\","
    "\"value\":\"{{agendaMeta.orderId}}\"},"
    "{\"type\":\"set\",\"path\":\"member.meta.{{agendaMeta.k}}\",\"value\":{\"a\":[1]}},"
    "{\"type\":\"set\",\"path\":\"member.botMeta.subscribed\",\"value\":true},"
    "{\"type\":\"set\",\"path\":\"member.customLocale\",\"value\":null},"
    "{\"type\":\"webhook\",\"url\":\"https://api.example.com/o/{{agendaMeta.orderId}}\","
    "\"method\":\"POST\",\"body\":{\"id\":\"{{agendaMeta.orderId}}\"},\"saveAs\":\"lookup_1\","
    "\"timeoutMs\":3000},"
    "{\"type\":\"webhook\",\"url\":\"http://h/x\"}],"
    "\"response\":[{\"type\":\"TEXT\",\"text\":\"Hi {{member.firstName}}\"},"
    "{\"type\":\"IMAGE\",\"url\":\"https://cdn/x.png\"},"
    "{\"type\":\"IMAGE\",\"url\":\"{{agendaMeta.img}}\"},"
    "{\"type\":\"TEMPLATE\",\"elementName\":\"e\",\"languageCode\":\"en\",\"components\":[]},"
    "{\"type\":\"TEMPLATE\",\"elementName\":\"e\",\"languageCode\":\"en\"},"
    "{\"type\":\"TEXT\",\"text\":\"{{member.firstName}}?\",\"quickReplies\":[{\"title\":"
    "\"Yes\",\"payload\":\"Y\"}]},{\"type\":\"LOCATION\",\"latitude\":1,\"longitude\":2,"
    "\"fallback\":{\"type\":\"IMAGE\",\"url\":\"{{meta.map}}\"}}],"
    "\"responseByLocale\":{\"zh-HK\":[{\"type\":\"TEXT\",\"text\":\"...\"}],\"fr\":[]},"
    "\"postAction\":[{\"type\":\"addTags\",\"tags\":[\"shipped\"]},"
    "{\"type\":\"removeTags\",\"tags\":[]}],"
    "\"redirect\":{\"tree\":\"T2\",\"nodeCompositeId\":\"N9\",\"runPreAction\":true,"
    "\"sendResponse\":false,\"runPostAction\":null},"
    "\"extra\":\"let through\"},"
    "\"N2\":{},"
    "\"N3\":{\"redirect\":null}}}";

static void test_valid_tree(void **state)
{
    json_t *t = load(valid_tree), *meta;
    bg_error_t err;

    (void)state;
    bg_error_clear(&err);
    if (tree_validate(t, &script_nodecode, &err) != 0)
        fail_msg("valid tree refused: %s", err.msg);
    meta = tree_meta_json(t);
    assert_int_equal(json_object_size(meta), 2);
    assert_string_equal(json_string_value(json_object_get(meta, "app")), "A1");
    assert_string_equal(json_string_value(json_object_get(meta, "name")), "Orders");
    json_decref(meta);
    json_decref(t);
    assert_null(tree_meta_json(NULL));
}

/* Expects tree_json to be refused with code and a message that names place. */
static void refuse_with(const char *tree_json, int code, const char *place)
{
    json_t *t = load(tree_json);
    bg_error_t err;

    bg_error_clear(&err);
    if (tree_validate(t, &script_nodecode, &err) == 0)
        fail_msg("accepted, expected a refusal at %s", place);
    assert_int_equal(err.code, code);
    if (strstr(err.msg, place) == NULL)
        fail_msg("message \"%s\" does not name %s", err.msg, place);
    json_decref(t);
}

/* Replaces nodes.N1 of a minimal tree by node_json. */
static void refuse_node(const char *node_json, int code, const char *place)
{
    char buf[9000];

    snprintf(buf, sizeof(buf),
             "{\"_id\":\"T1\",\"app\":\"A1\",\"name\":\"n\",\"nodes\":{\"N0\":{},\"N1\":%s}}",
             node_json);
    refuse_with(buf, code, place);
}

static void test_top_level_refused(void **state)
{
    json_t *t;
    bg_error_t err;

    (void)state;
    refuse_with("[]", BG_ERR_MISSING_PARAM, "tree");
    refuse_with("{\"app\":\"A1\",\"name\":\"n\",\"nodes\":{\"N\":{}}}", BG_ERR_MISSING_PARAM,
                "_id");
    refuse_with("{\"_id\":\"\",\"app\":\"A1\",\"name\":\"n\",\"nodes\":{\"N\":{}}}",
                BG_ERR_MISSING_PARAM, "_id");
    refuse_with("{\"_id\":5,\"app\":\"A1\",\"name\":\"n\",\"nodes\":{\"N\":{}}}",
                BG_ERR_MISSING_PARAM, "_id");
    refuse_with("{\"_id\":\"T\\u0001\",\"app\":\"A1\",\"name\":\"n\",\"nodes\":{\"N\":{}}}",
                BG_ERR_MISSING_PARAM, "_id");
    refuse_with("{\"_id\":\"T\",\"name\":\"n\",\"nodes\":{\"N\":{}}}", BG_ERR_MISSING_PARAM, "app");
    refuse_with("{\"_id\":\"T\",\"app\":\"\",\"name\":\"n\",\"nodes\":{\"N\":{}}}",
                BG_ERR_MISSING_PARAM, "app");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"nodes\":{\"N\":{}}}", BG_ERR_MISSING_PARAM, "name");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"name\":1,\"nodes\":{\"N\":{}}}",
                BG_ERR_MISSING_PARAM, "name");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"name\":\"n\"}", BG_ERR_MISSING_PARAM, "nodes");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"name\":\"n\",\"nodes\":{}}", BG_ERR_MISSING_PARAM,
                "nodes");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"name\":\"n\",\"nodes\":[{}]}", BG_ERR_MISSING_PARAM,
                "nodes");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"name\":\"n\",\"nodes\":{\"\":{}}}",
                BG_ERR_MISSING_PARAM, "nodes");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"name\":\"n\",\"nodes\":{\"a\\nb\":{}}}",
                BG_ERR_MISSING_PARAM, "nodes");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"name\":\"n\",\"nodes\":{\"_tree\":{}}}",
                BG_ERR_MISSING_PARAM, "nodes._tree");
    refuse_with("{\"_id\":\"T\",\"app\":\"A\",\"name\":\"n\",\"nodes\":{\"N\":[]}}",
                BG_ERR_MISSING_PARAM, "nodes.N");

    /* ids up to 256 bytes pass, 257 do not */
    t = load("{\"app\":\"A\",\"name\":\"n\",\"nodes\":{\"N\":{}}}");
    {
        char id[258];
        memset(id, 'x', 257);
        id[256] = '\0';
        json_object_set_new(t, "_id", json_string(id));
        assert_int_equal(tree_validate(t, &script_nodecode, &err), 0);
        id[256] = 'x';
        id[257] = '\0';
        json_object_set_new(t, "_id", json_string(id));
        assert_int_equal(tree_validate(t, &script_nodecode, &err), -1);
        json_object_set_new(t, "_id", json_string("T"));
        json_object_set_new(json_object_get(t, "nodes"), id, json_object());
        assert_int_equal(tree_validate(t, &script_nodecode, &err), -1);
        assert_non_null(strstr(err.msg, "nodes"));
    }
    json_decref(t);
}

static void test_node_fields_refused(void **state)
{
    (void)state;
    refuse_node("{\"name\":5}", BG_ERR_MISSING_PARAM, "nodes.N1.name");
    refuse_node("{\"preAction\":{}}", BG_ERR_MISSING_PARAM, "nodes.N1.preAction");
    refuse_node("{\"postAction\":\"x\"}", BG_ERR_MISSING_PARAM, "nodes.N1.postAction");
    refuse_node("{\"response\":{}}", BG_ERR_MISSING_PARAM, "nodes.N1.response");
    refuse_node("{\"responseByLocale\":[]}", BG_ERR_MISSING_PARAM, "nodes.N1.responseByLocale");
    refuse_node("{\"responseByLocale\":{\"fr\":{}}}", BG_ERR_MISSING_PARAM,
                "nodes.N1.responseByLocale.fr");
    refuse_node("{\"responseByLocale\":{\"fr\":[{\"type\":\"TEXT\"}]}}", BG_ERR_MISSING_PARAM,
                "nodes.N1.responseByLocale.fr[0].text");
    refuse_node("{\"responseByLocale\":{\"\":[]}}", BG_ERR_MISSING_PARAM,
                "nodes.N1.responseByLocale");
    refuse_node("{\"redirect\":\"N2\"}", BG_ERR_MISSING_PARAM, "nodes.N1.redirect");
    refuse_node("{\"redirect\":{\"nodeCompositeId\":\"N2\"}}", BG_ERR_MISSING_PARAM,
                "nodes.N1.redirect.tree");
    refuse_node("{\"redirect\":{\"tree\":\"T\"}}", BG_ERR_MISSING_PARAM,
                "nodes.N1.redirect.nodeCompositeId");
    refuse_node("{\"redirect\":{\"tree\":\"T\",\"nodeCompositeId\":\"\"}}", BG_ERR_MISSING_PARAM,
                "nodes.N1.redirect.nodeCompositeId");
    refuse_node("{\"redirect\":{\"tree\":\"T\",\"nodeCompositeId\":\"N\",\"sendResponse\":1}}",
                BG_ERR_MISSING_PARAM, "nodes.N1.redirect.sendResponse");
    refuse_node("{\"redirect\":{\"tree\":\"T\",\"nodeCompositeId\":\"N\",\"runPreAction\":\"y\"}}",
                BG_ERR_MISSING_PARAM, "nodes.N1.redirect.runPreAction");
    refuse_node("{\"redirect\":{\"tree\":\"T\",\"nodeCompositeId\":\"N\",\"runPostAction\":[]}}",
                BG_ERR_MISSING_PARAM, "nodes.N1.redirect.runPostAction");
}

static void test_responses_refused(void **state)
{
    char buf[8192];
    size_t i, n;

    (void)state;
    refuse_node("{\"response\":[5]}", BG_ERR_MISSING_PARAM, "nodes.N1.response[0]");
    refuse_node("{\"response\":[{\"text\":\"x\"}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.response[0].type");
    refuse_node("{\"response\":[{\"type\":7}]}", BG_ERR_MISSING_PARAM, "nodes.N1.response[0].type");
    refuse_node("{\"response\":[{\"type\":\"TEXT\",\"text\":\"ok\"},{\"type\":\"TEXT\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.response[1].text");
    refuse_node("{\"response\":[{\"type\":\"TEXT\",\"text\":[]}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.response[0].text");
    /* every type of contract.md section 11 and its limits, named by node and place */
    refuse_node("{\"response\":[{\"type\":\"TEXT\",\"text\":\"a\",\"buttons\":[]}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.response[0].buttons");
    refuse_node("{\"response\":[{\"type\":\"QUICK_REPLY\"}]}", BG_ERR_UNSUPPORTED,
                "nodes.N1.response[0]");
    refuse_node(
        "{\"responseByLocale\":{\"fr\":[{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":["
        "{\"type\":\"postback\",\"title\":\"123456789012345678901\",\"payload\":\"p\"}]}]}}",
        BG_ERR_LIMIT, "nodes.N1.responseByLocale.fr[0].buttons[0].title");
    refuse_node("{\"response\":[{\"type\":\"LOCATION\",\"latitude\":1,\"longitude\":2,"
                "\"fallback\":{\"type\":\"TEXT\"}}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.response[0].fallback.text");
    refuse_node("{\"response\":[{\"type\":\"IMAGE\"}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.response[0].url");
    refuse_node("{\"response\":[{\"type\":\"IMAGE\",\"url\":\"ftp://x\"}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.response[0].url");
    refuse_node("{\"response\":[{\"type\":\"TEMPLATE\",\"languageCode\":\"en\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.response[0].elementName");
    refuse_node("{\"response\":[{\"type\":\"TEMPLATE\",\"elementName\":\"e\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.response[0].languageCode");
    refuse_node("{\"response\":[{\"type\":\"TEMPLATE\",\"elementName\":\"e\","
                "\"languageCode\":\"en\",\"components\":{}}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.response[0].components");
    /* more than 50 responses in one list */
    n = (size_t)snprintf(buf, sizeof(buf), "{\"response\":[");
    for (i = 0; i < 51; i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s{\"type\":\"TEXT\",\"text\":\"t\"}",
                              i ? "," : "");
    snprintf(buf + n, sizeof(buf) - n, "]}");
    refuse_node(buf, BG_ERR_LIMIT, "nodes.N1.response");
}

static void test_actions_refused(void **state)
{
    (void)state;
    refuse_node("{\"preAction\":[\"set\"]}", BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0]");
    refuse_node("{\"preAction\":[{\"path\":\"member.meta.a\"}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.preAction[0].type");
    refuse_node("{\"preAction\":[{\"type\":\"explode\"}]}", BG_ERR_UNSUPPORTED,
                "nodes.N1.preAction[0].type");
    /* set */
    refuse_node("{\"preAction\":[{\"type\":\"set\",\"value\":1}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.preAction[0].path");
    refuse_node("{\"preAction\":[{\"type\":\"set\",\"path\":5,\"value\":1}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.preAction[0].path");
    refuse_node("{\"preAction\":[{\"type\":\"addTags\",\"tags\":[]},"
                "{\"type\":\"set\",\"path\":\"member._id\",\"value\":1}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[1].path");
    refuse_node("{\"postAction\":[{\"type\":\"set\",\"path\":\"member.botMeta.tree\","
                "\"value\":1}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.postAction[0].path");
    refuse_node("{\"postAction\":[{\"type\":\"set\",\"path\":\"member.meta.\",\"value\":1}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.postAction[0].path");
    refuse_node("{\"postAction\":[{\"type\":\"set\",\"path\":\"member.meta.a\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.postAction[0].value");
    /* tags */
    refuse_node("{\"postAction\":[{\"type\":\"addTags\"}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.postAction[0].tags");
    refuse_node("{\"postAction\":[{\"type\":\"addTags\",\"tags\":\"a\"}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.postAction[0].tags");
    refuse_node("{\"postAction\":[{\"type\":\"removeTags\",\"tags\":[\"a\",2]}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.postAction[0].tags[1]");
    /* webhook */
    refuse_node("{\"preAction\":[{\"type\":\"webhook\"}]}", BG_ERR_MISSING_PARAM,
                "nodes.N1.preAction[0].url");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"ftp://x\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].url");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"{{agendaMeta.u}}\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].url");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\","
                "\"method\":\"PUT\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].method");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\",\"method\":1}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].method");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\","
                "\"saveAs\":\"a.b\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].saveAs");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\",\"saveAs\":\"\"}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].saveAs");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\",\"saveAs\":3}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].saveAs");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\","
                "\"timeoutMs\":0}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].timeoutMs");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\","
                "\"timeoutMs\":30001}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].timeoutMs");
    refuse_node("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\","
                "\"timeoutMs\":1.5}]}",
                BG_ERR_MISSING_PARAM, "nodes.N1.preAction[0].timeoutMs");
}

static void test_action_and_response_checks_direct(void **state)
{
    json_t *a = load("{\"type\":\"webhook\",\"url\":\"https://x\",\"timeoutMs\":30000,"
                     "\"method\":\"GET\",\"body\":null}");
    json_t *r = load("{\"type\":\"CAROUSEL\",\"cards\":[{\"title\":\"{{meta.t}}\"}]}");
    bg_error_t err;

    (void)state;
    assert_int_equal(tree_check_action(a, "here", &script_nodecode, &err), 0);
    assert_int_equal(tree_check_response(r, "here", &err), 0);
    assert_true(tree_id_ok("N-1 x"));
    assert_false(tree_id_ok(""));
    assert_false(tree_id_ok("a\x7f"));
    assert_false(tree_id_ok(NULL));
    json_decref(a);
    json_decref(r);
}

/* Ids inside a tree obey the character rules of a request's ids (core/request.c): a tree
 * could otherwise store a node that no redirect request may name, or an id with a brace that
 * ends a Redis key's hash tag. Each id is refused in every place a tree holds one, and by a
 * request alike. */
static void test_ids_follow_request_rules(void **state)
{
    static const char *const refused[] = {
        "a{b",       "a}b",       "a\x01",     "a\x1f",         "a\x7f",
        "a\xc2\x80", "a\xc2\x85", "a\xc2\x9f", "a\xe2\x80\xa8", "a\xe2\x80\xa9",
    };
    static const char *const allowed[] = {"N-1 x", "caf\xc3\xa9", "a\xc2\xa0", "a\xe2\x80\xa7"};
    char buf[512];
    bg_error_t err;

    (void)state;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        json_t *id = json_string(refused[i]);
        char *esc = json_dumps(id, JSON_ENCODE_ANY);

        assert_non_null(esc);
        if (tree_id_ok(refused[i]))
            fail_msg("tree_id_ok accepted id #%zu", i);
        snprintf(buf, sizeof(buf),
                 "{\"_id\":%s,\"app\":\"A1\",\"name\":\"n\",\"nodes\":{\"N1\":{}}}", esc);
        refuse_with(buf, BG_ERR_MISSING_PARAM, "tree._id");
        snprintf(buf, sizeof(buf),
                 "{\"_id\":\"T1\",\"app\":\"A1\",\"name\":\"n\",\"nodes\":{%s:{}}}", esc);
        refuse_with(buf, BG_ERR_MISSING_PARAM, "node id");
        snprintf(buf, sizeof(buf), "{\"redirect\":{\"tree\":\"T2\",\"nodeCompositeId\":%s}}", esc);
        refuse_node(buf, BG_ERR_MISSING_PARAM, "nodes.N1.redirect.nodeCompositeId");
        assert_false(request_id_chars_ok(refused[i]));
        json_decref(id);
        free(esc);
    }
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
        json_t *t;

        if (!tree_id_ok(allowed[i]) || !request_id_chars_ok(allowed[i]))
            fail_msg("allowed id #%zu refused", i);
        t = json_pack("{s:s,s:s,s:s,s:{s:{s:{s:s,s:s}}}}", "_id", allowed[i], "app", "A1", "name",
                      "n", "nodes", allowed[i], "redirect", "tree", allowed[i], "nodeCompositeId",
                      allowed[i]);
        bg_error_clear(&err);
        if (tree_validate(t, &script_nodecode, &err) != 0)
            fail_msg("allowed id #%zu refused: %s", i, err.msg);
        json_decref(t);
    }
}

/* Node code must compile: the refusal names the node, the place and the line. */
static void test_scripts_compiled(void **state)
{
    json_t *t = load("{\"_id\":\"T1\",\"app\":\"A1\",\"name\":\"n\",\"nodes\":{\"N1\":{"
                     "\"preAction\":[{\"type\":\"script\",\"code\":\"local x = 1\"}],"
                     "\"transform\":\"return {{type = 'TEXT', text = 'hi'}}\"}}}");
    bg_error_t err;

    (void)state;
    if (tree_validate(t, &script_nodecode, &err) != 0)
        fail_msg("valid scripts refused: %s", err.msg);
    json_decref(t);
    refuse_node("{\"transform\":\"local a = 1\\nreturn {{type = }}\"}", 126,
                "nodes.N1.transform:2:");
    refuse_node("{\"postAction\":[{\"type\":\"set\",\"path\":\"member.meta.a\",\"value\":1},"
                "{\"type\":\"script\",\"code\":\"\\n\\nif then\"}]}",
                126, "nodes.N1.postAction[1].code:3:");
    refuse_node("{\"preAction\":[{\"type\":\"script\"}]}", 108, "nodes.N1.preAction[0].code");
    refuse_node("{\"transform\":5}", 108, "nodes.N1.transform must be a string");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_tree),
        cmocka_unit_test(test_top_level_refused),
        cmocka_unit_test(test_node_fields_refused),
        cmocka_unit_test(test_responses_refused),
        cmocka_unit_test(test_actions_refused),
        cmocka_unit_test(test_action_and_response_checks_direct),
        cmocka_unit_test(test_ids_follow_request_rules),
        cmocka_unit_test(test_scripts_compiled),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
