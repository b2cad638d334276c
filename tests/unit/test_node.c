/* test_node.c - the node run state machine, driven by a fake gateway: flags, redirects, the
 * chain limit, missing nodes, locales, webhooks and the member delta. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_util.h"

#include "core/member.h"
#include "core/node.h"
#include "script/script.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW 1700000000000LL

static const json_t *at(const json_t *v, const char *path)
{
    char buf[256], *seg, *save = NULL;

    snprintf(buf, sizeof(buf), "%s", path);
    for (seg = strtok_r(buf, ".", &save); seg && v; seg = strtok_r(NULL, ".", &save))
        v = json_object_get(v, seg);
    return v;
}

/* The fake gateway: a node store, a platform and a webhook server that record everything. */
typedef struct fake {
    json_t *nodes;   /* {"T/N": node} */
    json_t *fetched; /* ["T/N", ...] */
    json_t *sent;    /* rendered responses, in order */
    json_t *hooks;   /* rendered webhook requests, in order */
    json_t *answers; /* [{"ok":1,"answer":..}, ...] given to the webhooks in order */
    size_t next_answer;
    int fail_send; /* index of the send that fails, -1 for none */
} fake_t;

static void fake_init(fake_t *f, const char *nodes_json)
{
    memset(f, 0, sizeof(*f));
    f->nodes = load(nodes_json);
    f->fetched = json_array();
    f->sent = json_array();
    f->hooks = json_array();
    f->answers = json_array();
    f->fail_send = -1;
}

static void fake_free(fake_t *f)
{
    json_decref(f->nodes);
    json_decref(f->fetched);
    json_decref(f->sent);
    json_decref(f->hooks);
    json_decref(f->answers);
}

static void drive(fake_t *f, node_run_t *run)
{
    node_need_t need;
    int guard;

    for (guard = 0; guard < 1000; guard++) {
        node_step_t step = node_run_next(run, &need);
        char key[600];
        json_t *node, *el, *ans;

        switch (step) {
        case NODE_NEED_NODE:
            assert_non_null(need.tree);
            assert_non_null(need.node_id);
            assert_null(need.response);
            assert_null(need.webhook);
            snprintf(key, sizeof(key), "%s/%s", need.tree, need.node_id);
            json_array_append_new(f->fetched, json_string(key));
            node = json_object_get(f->nodes, key);
            node_run_node_loaded(run, node ? json_deep_copy(node) : NULL);
            break;
        case NODE_NEED_SEND:
            assert_non_null(need.response);
            assert_null(need.tree);
            json_array_append_new(f->sent, json_deep_copy(need.response));
            if ((int)json_array_size(f->sent) - 1 == f->fail_send)
                el = load("{\"ok\":0,\"messageEvent\":{},\"error\":{\"err_code\":113,"
                          "\"err\":\"platform down\"}}");
            else
                el = json_pack("{s:i,s:{s:O}}", "ok", 1, "messageEvent", "data", need.response);
            node_run_send_done(run, el);
            break;
        case NODE_NEED_WEBHOOK:
            assert_non_null(need.webhook);
            json_array_append_new(f->hooks, json_deep_copy(need.webhook));
            ans = json_array_get(f->answers, f->next_answer++);
            if (ans == NULL)
                node_run_webhook_done(run, 1, NULL);
            else
                node_run_webhook_done(run, json_is_true(json_object_get(ans, "ok")),
                                      json_deep_copy(json_object_get(ans, "answer")));
            break;
        case NODE_NEED_HTTP: {
            const char *body;
            assert_non_null(need.http);
            json_array_append_new(f->hooks, json_deep_copy(need.http));
            ans = json_array_get(f->answers, f->next_answer++);
            body = json_string_value(json_object_get(ans, "body"));
            node_run_http_done(run, (long)json_integer_value(json_object_get(ans, "status")), body,
                               body ? strlen(body) : 0, "application/json",
                               ans ? NULL : "no answer");
            break;
        }
        case NODE_DONE:
            return;
        }
    }
    fail_msg("the run did not end");
}

static json_t *base_member(void)
{
    json_t *m = member_new("M1", "C1", "A1", "1234", "facebook", 1000);

    json_object_set_new(m, "firstName", json_string("Ann"));
    return m;
}

static const char *channel_json =
    "{\"_id\":\"C1\",\"app\":\"A1\",\"type\":\"facebook\",\"name\":\"Shop\","
    "\"info\":{\"accessToken\":\"SECRET\",\"pageId\":\"99\"}}";

/* Runs tree/node with flags against the fake; returns the finished run. */
static node_run_t *run_node(fake_t *f, const json_t *member, const json_t *meta, const char *tree,
                            const char *node, node_flags_t flags)
{
    json_t *channel = load(channel_json);
    node_run_t *run = node_run_new(member, channel, meta, tree, node, flags, NOW);

    json_decref(channel);
    assert_non_null(run);
    node_run_set_code(run, &script_nodecode, NULL);
    drive(f, run);
    return run;
}

static const node_flags_t ALL = {1, 1, 1};

static const char *text_of(const json_t *sent, size_t i)
{
    return json_string_value(json_object_get(json_array_get(sent, i), "text"));
}

static const char *last_op(const node_run_t *run)
{
    const json_t *d = node_run_delta(run);

    return json_string_value(json_object_get(json_array_get(d, json_array_size(d) - 1), "op"));
}

static int err_code_of(const json_t *el)
{
    return (int)json_integer_value(json_object_get(json_object_get(el, "error"), "err_code"));
}

/* The delta written back to the record the run started from gives the run's member. */
static void check_delta_matches_member(const json_t *start, const node_run_t *run)
{
    json_t *m = json_deep_copy(start);
    bg_error_t err;

    assert_int_equal(member_apply_delta(m, node_run_delta(run), NOW, &err), 0);
    assert_true(json_equal(m, node_run_member(run)));
    json_decref(m);
}

static const char *three_phase_node =
    "{\"T1/N1\":{\"name\":\"three\","
    "\"preAction\":[{\"type\":\"set\",\"path\":\"member.meta.pre\",\"value\":\"yes\"},"
    "{\"type\":\"addTags\",\"tags\":[\"pre\"]}],"
    "\"response\":[{\"type\":\"TEXT\",\"text\":\"hello {{member.meta.pre}}\"},"
    "{\"type\":\"TEXT\",\"text\":\"tags {{member.tags}}\"}],"
    "\"postAction\":[{\"type\":\"set\",\"path\":\"member.meta.post\",\"value\":\"yes\"},"
    "{\"type\":\"addTags\",\"tags\":[\"post\"]}]}}";

static void test_all_flag_combinations(void **state)
{
    int mask;

    (void)state;
    for (mask = 0; mask < 8; mask++) {
        node_flags_t flags = {mask & 1, (mask >> 1) & 1, (mask >> 2) & 1};
        json_t *member = base_member(), *results;
        const json_t *m;
        fake_t f;
        node_run_t *run;
        size_t ops = 0;

        fake_init(&f, three_phase_node);
        run = run_node(&f, member, NULL, "T1", "N1", flags);
        m = node_run_member(run);
        assert_int_equal(node_run_error(run, NULL), 0);

        /* what was sent */
        assert_int_equal(json_array_size(f.sent), flags.send_response ? 2 : 0);
        if (flags.send_response) {
            assert_string_equal(text_of(f.sent, 0), flags.run_pre ? "hello yes" : "hello ");
            assert_string_equal(text_of(f.sent, 1), flags.run_pre ? "tags [\"pre\"]" : "tags []");
        }
        results = node_run_results(run);
        assert_int_equal(json_array_size(results), json_array_size(f.sent));
        json_decref(results);
        assert_int_equal(node_run_ok(run), 1);

        /* what changed */
        if (flags.run_pre) {
            assert_string_equal(json_string_value(at(m, "meta.pre")), "yes");
            ops += 2;
        } else {
            assert_null(at(m, "meta.pre"));
        }
        if (flags.run_post) {
            assert_string_equal(json_string_value(at(m, "meta.post")), "yes");
            ops += 2;
        } else {
            assert_null(at(m, "meta.post"));
        }
        assert_int_equal(json_array_size(json_object_get(m, "tags")),
                         (size_t)(flags.run_pre + flags.run_post));

        /* position, even with nothing run */
        assert_int_equal(json_array_size(node_run_delta(run)), ops + 1);
        assert_string_equal(last_op(run), "position");
        assert_string_equal(json_string_value(at(m, "botMeta.tree")), "T1");
        assert_string_equal(json_string_value(at(m, "botMeta.nodeCompositeId")), "N1");
        assert_int_equal(json_integer_value(json_object_get(m, "updatedAt")), NOW);
        check_delta_matches_member(member, run);

        node_run_free(run);
        fake_free(&f);
        json_decref(member);
    }
}

static void test_pre_action_visible_in_response(void **state)
{
    json_t *member = base_member(), *meta = load("{\"orderId\":\"A-17\",\"name\":\"Bo\"}");
    fake_t f;
    node_run_t *run;

    (void)state;
    fake_init(&f, "{\"T1/N1\":{"
                  "\"preAction\":[{\"type\":\"set\",\"path\":\"member.firstName\","
                  "\"value\":\"{{agendaMeta.name}}\"},"
                  "{\"type\":\"set\",\"path\":\"member.botMeta.tempData.order\","
                  "\"value\":\"{{agendaMeta.orderId}}\"}],"
                  "\"response\":[{\"type\":\"TEXT\",\"text\":\"Hi {{member.firstName}}, order "
                  "{{member.botMeta.tempData.order}} ({{agendaMeta.orderId}}) "
                  "[{{channel.name}}|{{channel.info.accessToken}}]\"}]}}");
    run = run_node(&f, member, meta, "T1", "N1", ALL);
    assert_int_equal(json_array_size(f.sent), 1);
    assert_string_equal(text_of(f.sent, 0), "Hi Bo, order A-17 (A-17) [Shop|]");
    assert_string_equal(json_string_value(json_object_get(node_run_member(run), "firstName")),
                        "Bo");
    /* the caller's member is not touched */
    assert_string_equal(json_string_value(json_object_get(member, "firstName")), "Ann");
    check_delta_matches_member(member, run);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
    json_decref(meta);
}

static void test_redirect_chain_across_trees(void **state)
{
    json_t *member = base_member(), *want;
    node_flags_t target_flags = {1, 0, 1};
    fake_t f;
    node_run_t *run;

    (void)state;
    fake_init(&f,
              "{\"T1/N1\":{\"preAction\":[{\"type\":\"addTags\",\"tags\":[\"n1pre\"]}],"
              "\"response\":[{\"type\":\"TEXT\",\"text\":\"n1\"}],"
              "\"postAction\":[{\"type\":\"addTags\",\"tags\":[\"n1post\"]}],"
              "\"redirect\":{\"tree\":\"T2\",\"nodeCompositeId\":\"A\",\"runPreAction\":false,"
              "\"sendResponse\":true,\"runPostAction\":true}},"
              "\"T2/A\":{\"preAction\":[{\"type\":\"addTags\",\"tags\":[\"apre\"]}],"
              "\"response\":[{\"type\":\"TEXT\",\"text\":\"a {{member.tags}}\"}],"
              "\"postAction\":[{\"type\":\"addTags\",\"tags\":[\"apost\"]}],"
              "\"redirect\":{\"tree\":\"T3\",\"nodeCompositeId\":\"B\"}},"
              "\"T3/B\":{\"preAction\":[{\"type\":\"addTags\",\"tags\":[\"bpre\"]}],"
              "\"response\":[{\"type\":\"TEXT\",\"text\":\"b\"}],"
              "\"postAction\":[{\"type\":\"addTags\",\"tags\":[\"bpost\"]}],"
              "\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"STOP\",\"runPreAction\":false,"
              "\"sendResponse\":false,\"runPostAction\":false}},"
              "\"T1/STOP\":{\"preAction\":[{\"type\":\"addTags\",\"tags\":[\"never\"]}],"
              "\"response\":[{\"type\":\"TEXT\",\"text\":\"never\"}]}}");
    run = run_node(&f, member, NULL, "T1", "N1", target_flags);
    want = load("[\"T1/N1\",\"T2/A\",\"T3/B\",\"T1/STOP\"]");
    assert_true(json_equal(f.fetched, want));
    json_decref(want);
    /* N1 sent nothing (request flag), A and B sent with their redirect's flags */
    assert_int_equal(json_array_size(f.sent), 2);
    assert_string_equal(text_of(f.sent, 0), "a [\"n1pre\",\"n1post\"]");
    assert_string_equal(text_of(f.sent, 1), "b");
    want = load("[\"n1pre\",\"n1post\",\"apost\",\"bpre\",\"bpost\"]");
    assert_true(json_equal(json_object_get(node_run_member(run), "tags"), want));
    json_decref(want);
    /* the last node reached, though nothing ran on it */
    assert_string_equal(json_string_value(at(node_run_member(run), "botMeta.tree")), "T1");
    assert_string_equal(json_string_value(at(node_run_member(run), "botMeta.nodeCompositeId")),
                        "STOP");
    assert_string_equal(last_op(run), "position");
    assert_int_equal(node_run_ok(run), 1);
    check_delta_matches_member(member, run);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static void test_chain_limit(void **state)
{
    char nodes[8192];
    size_t n = 0;
    int i;
    json_t *member = base_member(), *results, *last;
    fake_t f;
    node_run_t *run;

    (void)state;
    n += (size_t)snprintf(nodes + n, sizeof(nodes) - n, "{");
    for (i = 0; i <= 12; i++)
        n += (size_t)snprintf(nodes + n, sizeof(nodes) - n,
                              "%s\"T/L%d\":{\"response\":[{\"type\":\"TEXT\",\"text\":\"%d\"}],"
                              "\"redirect\":{\"tree\":\"T\",\"nodeCompositeId\":\"L%d\"}}",
                              i ? "," : "", i, i, i + 1);
    snprintf(nodes + n, sizeof(nodes) - n, "}");
    fake_init(&f, nodes);
    run = run_node(&f, member, NULL, "T", "L0", ALL);
    assert_int_equal(json_array_size(f.fetched), 11); /* the target and 10 redirects */
    assert_string_equal(json_string_value(json_array_get(f.fetched, 10)), "T/L10");
    assert_int_equal(json_array_size(f.sent), 11);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 12);
    last = json_array_get(results, 11);
    assert_int_equal(json_integer_value(json_object_get(last, "ok")), 0);
    assert_int_equal(err_code_of(last), 118);
    assert_string_equal(json_string_value(json_object_get(json_object_get(last, "error"), "err")),
                        "redirect chain longer than 10");
    assert_null(json_object_get(last, "messageEvent"));
    json_decref(results);
    assert_int_equal(node_run_ok(run), 0);
    assert_int_equal(node_run_error(run, NULL), 0);
    assert_string_equal(json_string_value(at(node_run_member(run), "botMeta.nodeCompositeId")),
                        "L10");
    node_run_free(run);
    fake_free(&f);

    /* a node that redirects to itself stops the same way */
    fake_init(&f, "{\"T/S\":{\"postAction\":[{\"type\":\"addTags\",\"tags\":[\"x\"]}],"
                  "\"redirect\":{\"tree\":\"T\",\"nodeCompositeId\":\"S\"}}}");
    run = run_node(&f, member, NULL, "T", "S", ALL);
    assert_int_equal(json_array_size(f.fetched), 11);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 1);
    assert_int_equal(err_code_of(json_array_get(results, 0)), 118);
    json_decref(results);
    assert_int_equal(json_array_size(json_object_get(node_run_member(run), "tags")), 1);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static void test_missing_target(void **state)
{
    json_t *member = base_member(), *results;
    fake_t f;
    node_run_t *run;
    bg_error_t err;

    (void)state;
    fake_init(&f, "{\"T1/N1\":{\"response\":[{\"type\":\"TEXT\",\"text\":\"x\"}]}}");
    run = run_node(&f, member, NULL, "T1", "NOPE", ALL);
    assert_int_equal(node_run_error(run, &err), 1);
    assert_int_equal(err.code, BG_ERR_NO_TREE);
    assert_int_equal(err.http_status, 500);
    assert_string_equal(err.msg, "tree or node not found");
    assert_int_equal(json_array_size(f.sent), 0);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 0);
    json_decref(results);
    assert_int_equal(json_array_size(node_run_delta(run)), 0);
    assert_true(json_equal(node_run_member(run), member));
    node_run_free(run);
    fake_free(&f);

    /* a stored value that is not a node counts as missing */
    fake_init(&f, "{\"T1/N1\":\"garbage\"}");
    run = run_node(&f, member, NULL, "T1", "N1", ALL);
    assert_int_equal(node_run_error(run, &err), 1);
    assert_int_equal(err.code, BG_ERR_NO_TREE);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static void test_missing_hop(void **state)
{
    json_t *member = base_member(), *results;
    fake_t f;
    node_run_t *run;

    (void)state;
    fake_init(&f, "{\"T1/N1\":{\"response\":[{\"type\":\"TEXT\",\"text\":\"one\"}],"
                  "\"postAction\":[{\"type\":\"addTags\",\"tags\":[\"t\"]}],"
                  "\"redirect\":{\"tree\":\"T9\",\"nodeCompositeId\":\"GONE\"}}}");
    run = run_node(&f, member, NULL, "T1", "N1", ALL);
    assert_int_equal(node_run_error(run, NULL), 0);
    assert_int_equal(json_array_size(f.sent), 1);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(results, 0), "ok")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(results, 1), "ok")), 0);
    assert_int_equal(err_code_of(json_array_get(results, 1)), 115);
    json_decref(results);
    assert_int_equal(node_run_ok(run), 0);
    /* the position stays at the last node that ran; its changes are kept */
    assert_string_equal(json_string_value(at(node_run_member(run), "botMeta.tree")), "T1");
    assert_string_equal(json_string_value(at(node_run_member(run), "botMeta.nodeCompositeId")),
                        "N1");
    assert_string_equal(last_op(run), "position");
    assert_int_equal(json_array_size(json_object_get(node_run_member(run), "tags")), 1);
    check_delta_matches_member(member, run);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static const char *locale_node =
    "{\"T/N\":{\"response\":[{\"type\":\"TEXT\",\"text\":\"default\"}],"
    "\"responseByLocale\":{\"zh-HK\":[{\"type\":\"TEXT\",\"text\":\"hk\"}],"
    "\"fr\":[{\"type\":\"TEXT\",\"text\":\"fr\"},{\"type\":\"TEXT\",\"text\":\"fr2\"}],"
    "\"en\":\"not a list\"}}}";

static void check_locale(const char *custom_json, const char *locale, const char *want,
                         size_t count)
{
    json_t *member = base_member();
    fake_t f;
    node_run_t *run;

    json_object_set_new(member, "customLocale", load(custom_json));
    json_object_set_new(member, "locale", json_string(locale));
    fake_init(&f, locale_node);
    run = run_node(&f, member, NULL, "T", "N", ALL);
    assert_int_equal(json_array_size(f.sent), count);
    assert_string_equal(text_of(f.sent, 0), want);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static void test_locale_choice(void **state)
{
    json_t *member = base_member();
    fake_t f;
    node_run_t *run;

    (void)state;
    check_locale("\"zh-HK\"", "fr", "hk", 1);   /* customLocale wins */
    check_locale("\"de\"", "fr", "fr", 2);      /* customLocale has no list: locale */
    check_locale("null", "fr", "fr", 2);        /* no customLocale: locale */
    check_locale("null", "de", "default", 1);   /* neither: response */
    check_locale("\"de\"", "it", "default", 1); /* neither: response */
    check_locale("null", "en", "default", 1);   /* a list that is not an array is skipped */

    /* a customLocale set by the pre-action chooses the list */
    fake_init(&f, "{\"T/N\":{\"preAction\":[{\"type\":\"set\",\"path\":\"member.customLocale\","
                  "\"value\":\"zh-HK\"}],\"response\":[{\"type\":\"TEXT\",\"text\":\"d\"}],"
                  "\"responseByLocale\":{\"zh-HK\":[{\"type\":\"TEXT\",\"text\":\"hk\"}]}}}");
    run = run_node(&f, member, NULL, "T", "N", ALL);
    assert_string_equal(text_of(f.sent, 0), "hk");
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static void test_webhook_save_visible(void **state)
{
    json_t *member = base_member(), *meta = load("{\"orderId\":\"A 17/x\"}"), *hook, *op;
    fake_t f;
    node_run_t *run;
    const json_t *delta;

    (void)state;
    fake_init(&f, "{\"T/N\":{\"preAction\":[{\"type\":\"webhook\","
                  "\"url\":\"https://api.example.com/o/{{agendaMeta.orderId}}\","
                  "\"body\":{\"id\":\"{{agendaMeta.orderId}}\",\"who\":\"{{member.firstName}}\","
                  "\"n\":3},\"saveAs\":\"lookup\"}],"
                  "\"response\":[{\"type\":\"TEXT\",\"text\":\"status "
                  "{{member.botMeta.tempData.lookup.status}}\"}],"
                  "\"postAction\":[{\"type\":\"webhook\",\"url\":\"http://h/{{member.botMeta."
                  "tempData.lookup.status}}\",\"timeoutMs\":500}]}}");
    json_array_append_new(f.answers, load("{\"ok\":true,\"answer\":{\"status\":\"shipped\"}}"));
    json_array_append_new(f.answers, load("{\"ok\":true,\"answer\":{\"ignored\":1}}"));
    run = run_node(&f, member, meta, "T", "N", ALL);

    assert_int_equal(json_array_size(f.hooks), 2);
    hook = json_array_get(f.hooks, 0);
    assert_string_equal(json_string_value(json_object_get(hook, "url")),
                        "https://api.example.com/o/A%2017%2Fx");
    assert_string_equal(json_string_value(json_object_get(hook, "method")), "POST");
    assert_string_equal(json_string_value(at(hook, "body.id")), "A 17/x");
    assert_string_equal(json_string_value(at(hook, "body.who")), "Ann");
    assert_int_equal(json_integer_value(at(hook, "body.n")), 3);
    assert_int_equal(json_integer_value(json_object_get(hook, "timeoutMs")), 3000);
    assert_string_equal(json_string_value(json_object_get(hook, "saveAs")), "lookup");
    hook = json_array_get(f.hooks, 1);
    assert_string_equal(json_string_value(json_object_get(hook, "url")), "http://h/shipped");
    assert_string_equal(json_string_value(json_object_get(hook, "method")), "GET");
    assert_true(json_is_null(json_object_get(hook, "body")));
    assert_true(json_is_null(json_object_get(hook, "saveAs")));
    assert_int_equal(json_integer_value(json_object_get(hook, "timeoutMs")), 500);

    assert_string_equal(text_of(f.sent, 0), "status shipped");
    delta = node_run_delta(run);
    assert_int_equal(json_array_size(delta), 2); /* the save, the position */
    op = json_array_get(delta, 0);
    assert_string_equal(json_string_value(json_object_get(op, "op")), "set");
    assert_string_equal(json_string_value(json_object_get(op, "path")),
                        "member.botMeta.tempData.lookup");
    assert_string_equal(json_string_value(at(op, "value.status")), "shipped");
    assert_int_equal(node_run_ok(run), 1);
    check_delta_matches_member(member, run);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
    json_decref(meta);
}

static void test_webhook_failure(void **state)
{
    json_t *member = base_member(), *results, *el;
    fake_t f;
    node_run_t *run;

    (void)state;
    fake_init(&f, "{\"T/N\":{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x/\","
                  "\"saveAs\":\"s\"},{\"type\":\"addTags\",\"tags\":[\"after\"]}],"
                  "\"response\":[{\"type\":\"TEXT\",\"text\":\"[{{member.botMeta.tempData.s}}]\"}"
                  "]}}");
    json_array_append_new(f.answers, load("{\"ok\":false,\"answer\":{\"status\":\"x\"}}"));
    run = run_node(&f, member, NULL, "T", "N", ALL);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 2);
    el = json_array_get(results, 0);
    assert_int_equal(json_integer_value(json_object_get(el, "ok")), 0);
    assert_int_equal(err_code_of(el), 113);
    assert_non_null(strstr(json_string_value(at(el, "error.err")), "webhook"));
    /* the run went on */
    assert_string_equal(text_of(f.sent, 0), "[]");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(results, 1), "ok")), 1);
    assert_int_equal(json_array_size(json_object_get(node_run_member(run), "tags")), 1);
    assert_null(at(node_run_member(run), "botMeta.tempData.s"));
    assert_int_equal(node_run_ok(run), 0);
    json_decref(results);
    node_run_free(run);
    fake_free(&f);

    /* ok without a JSON answer saves nothing and is no failure */
    fake_init(&f, "{\"T/N\":{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x/\","
                  "\"saveAs\":\"s\"}]}}");
    run = run_node(&f, member, NULL, "T", "N", ALL);
    assert_int_equal(json_array_size(f.hooks), 1);
    assert_int_equal(node_run_ok(run), 1);
    assert_int_equal(json_array_size(node_run_delta(run)), 1);
    node_run_free(run);
    fake_free(&f);

    /* a malformed webhook action (as another system may store it) is an error element */
    fake_init(&f, "{\"T/N\":{\"preAction\":[{\"type\":\"webhook\",\"url\":\"ftp://x/\"},"
                  "{\"type\":\"webhook\",\"url\":\"https://x\",\"method\":\"DELETE\"},"
                  "{\"type\":\"webhook\",\"url\":\"https://x\",\"timeoutMs\":999999},"
                  "{\"type\":\"webhook\",\"url\":\"https://x\",\"saveAs\":\"a.b\"}]}}");
    run = run_node(&f, member, NULL, "T", "N", ALL);
    assert_int_equal(json_array_size(f.hooks), 0);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 4);
    assert_int_equal(err_code_of(json_array_get(results, 3)), 108);
    json_decref(results);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static void test_bad_actions_are_elements(void **state)
{
    json_t *member = base_member(), *results;
    fake_t f;
    node_run_t *run;

    (void)state;
    fake_init(&f, "{\"T/N\":{\"preAction\":["
                  "{\"type\":\"set\",\"path\":\"member._id\",\"value\":\"X\"},"
                  "{\"type\":\"set\",\"path\":\"member.botMeta.subscribed\",\"value\":\"maybe\"},"
                  "{\"type\":\"set\",\"path\":\"member.meta.{{agendaMeta.missing}}\",\"value\":1},"
                  "{\"type\":\"explode\"},"
                  "{\"kind\":\"set\"},"
                  "7,"
                  "{\"type\":\"addTags\",\"tags\":\"nope\"},"
                  "{\"type\":\"set\",\"path\":\"member.meta.ok\",\"value\":1}],"
                  "\"response\":[{\"type\":\"TEXT\",\"text\":\"x\"}]}}");
    run = run_node(&f, member, NULL, "T", "N", ALL);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 8);
    assert_int_equal(err_code_of(json_array_get(results, 0)), 108);
    assert_non_null(
        strstr(json_string_value(at(json_array_get(results, 0), "error.err")), "member._id"));
    assert_int_equal(err_code_of(json_array_get(results, 1)), 108);
    assert_int_equal(err_code_of(json_array_get(results, 2)), 108);
    assert_int_equal(err_code_of(json_array_get(results, 3)), 117);
    assert_int_equal(err_code_of(json_array_get(results, 4)), 117);
    assert_int_equal(err_code_of(json_array_get(results, 5)), 117);
    assert_int_equal(err_code_of(json_array_get(results, 6)), 108);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(results, 7), "ok")), 1);
    json_decref(results);
    /* nothing of the refused sets reached the member; the good one did */
    assert_string_equal(json_string_value(json_object_get(node_run_member(run), "_id")), "M1");
    assert_true(json_is_true(at(node_run_member(run), "botMeta.subscribed")));
    assert_int_equal(json_integer_value(at(node_run_member(run), "meta.ok")), 1);
    assert_int_equal(json_object_size(json_object_get(node_run_member(run), "meta")), 1);
    assert_int_equal(json_array_size(node_run_delta(run)), 2);
    check_delta_matches_member(member, run);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static void test_send_failure_and_order(void **state)
{
    json_t *member = base_member(), *results;
    fake_t f;
    node_run_t *run;

    (void)state;
    fake_init(&f, "{\"T/N\":{\"response\":[{\"type\":\"TEXT\",\"text\":\"1\"},"
                  "{\"type\":\"TEXT\",\"text\":\"2\"},5,{\"type\":\"TEXT\",\"text\":\"3\"}]}}");
    f.fail_send = 1;
    run = run_node(&f, member, NULL, "T", "N", ALL);
    assert_int_equal(json_array_size(f.sent), 3);
    assert_string_equal(text_of(f.sent, 0), "1");
    assert_string_equal(text_of(f.sent, 1), "2");
    assert_string_equal(text_of(f.sent, 2), "3");
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 4);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(results, 0), "ok")), 1);
    assert_int_equal(err_code_of(json_array_get(results, 1)), 113);
    assert_int_equal(err_code_of(json_array_get(results, 2)), 108); /* 5 is no response */
    assert_int_equal(json_integer_value(json_object_get(json_array_get(results, 3), "ok")), 1);
    json_decref(results);
    assert_int_equal(node_run_ok(run), 0);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

static void test_need_repeats_and_misuse(void **state)
{
    json_t *member = base_member(), *results;
    node_flags_t flags = {1, 1, 1};
    node_run_t *run = node_run_new(member, NULL, NULL, "T", "N", flags, NOW);
    node_need_t need;

    (void)state;
    assert_int_equal(node_run_next(run, &need), NODE_NEED_NODE);
    assert_int_equal(node_run_next(run, &need), NODE_NEED_NODE);
    assert_string_equal(need.tree, "T");
    assert_string_equal(need.node_id, "N");
    /* outcomes that were not asked for are dropped */
    node_run_send_done(run, json_pack("{s:i}", "ok", 1));
    node_run_webhook_done(run, 1, json_object());
    node_run_node_loaded(run, load("{\"response\":[{\"type\":\"TEXT\",\"text\":\"t\"}]}"));
    assert_int_equal(node_run_next(run, &need), NODE_NEED_SEND);
    assert_int_equal(node_run_next(run, &need), NODE_NEED_SEND);
    assert_string_equal(json_string_value(json_object_get(need.response, "text")), "t");
    node_run_node_loaded(run, json_object());
    node_run_send_done(run, NULL); /* NULL: a failed send */
    assert_int_equal(node_run_next(run, &need), NODE_DONE);
    assert_int_equal(node_run_next(run, &need), NODE_DONE);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 1);
    assert_int_equal(err_code_of(json_array_get(results, 0)), 113);
    json_decref(results);
    assert_int_equal(json_array_size(node_run_delta(run)), 1); /* the position, once */
    node_run_free(run);

    /* freed while waiting: nothing leaks (ASan) */
    run = node_run_new(member, NULL, NULL, "T", "N", flags, NOW);
    assert_int_equal(node_run_next(run, &need), NODE_NEED_NODE);
    node_run_node_loaded(run,
                         load("{\"preAction\":[{\"type\":\"webhook\",\"url\":\"https://x\"}]}"));
    assert_int_equal(node_run_next(run, &need), NODE_NEED_WEBHOOK);
    node_run_free(run);
    node_run_free(NULL);
    json_decref(member);
}

static void test_redirect_flags_and_bad_redirect(void **state)
{
    json_t *member = base_member(), *results;
    fake_t f;
    node_run_t *run;

    (void)state;
    /* non-boolean flags in a stored node default to true; a bad redirect is an element */
    fake_init(&f, "{\"T/A\":{\"redirect\":{\"tree\":\"T\",\"nodeCompositeId\":\"B\","
                  "\"sendResponse\":\"no\"}},"
                  "\"T/B\":{\"response\":[{\"type\":\"TEXT\",\"text\":\"b\"}],"
                  "\"redirect\":{\"tree\":\"T\"}}}");
    run = run_node(&f, member, NULL, "T", "A", ALL);
    assert_int_equal(json_array_size(f.sent), 1);
    results = node_run_results(run);
    assert_int_equal(json_array_size(results), 2);
    assert_int_equal(err_code_of(json_array_get(results, 1)), 108);
    json_decref(results);
    assert_string_equal(json_string_value(at(node_run_member(run), "botMeta.nodeCompositeId")),
                        "B");
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

/* A transform picks the response by agendaMeta.status and sees what a pre-action script set;
 * its responses are sent as built (not rendered). */
static void test_script_transform(void **state)
{
    fake_t f;
    json_t *member = base_member(), *meta = load("{\"status\":\"shipped\",\"id\":\"o7\"}");
    node_run_t *run;

    (void)state;
    fake_init(&f, "{\"T/N\":{\"preAction\":[{\"type\":\"script\",\"code\":"
                  "\"self.member.botMeta.tempData.seen = self.agendaMeta.id\"}],"
                  "\"response\":[{\"type\":\"TEXT\",\"text\":\"plain\"}],"
                  "\"transform\":\"local by = {shipped = 'on its way', paid = 'paid'}\\n"
                  "return {{type = 'TEXT', text = by[self.agendaMeta.status] .. ' ' .. "
                  "self.member.botMeta.tempData.seen .. ' {{member.firstName}}'}}\"}}");
    run = run_node(&f, member, meta, "T", "N", ALL);
    assert_int_equal(json_array_size(f.sent), 1);
    assert_string_equal(text_of(f.sent, 0), "on its way o7 {{member.firstName}}");
    assert_true(node_run_ok(run));
    assert_string_equal(json_string_value(at(node_run_member(run), "botMeta.tempData.seen")), "o7");
    check_delta_matches_member(member, run);
    node_run_free(run);
    fake_free(&f);

    /* sendResponse false: the transform does not run */
    fake_init(&f, "{\"T/N\":{\"transform\":\"self.member.firstName = 'X' return {}\"}}");
    {
        node_flags_t no_send = {1, 0, 1};
        run = run_node(&f, member, meta, "T", "N", no_send);
    }
    assert_string_equal(json_string_value(at(node_run_member(run), "firstName")), "Ann");
    node_run_free(run);
    fake_free(&f);

    /* more responses than a node may have: 118, nothing sent */
    fake_init(&f, "{\"T/N\":{\"transform\":\"local r = {} for i = 1, 51 do r[i] = {type = "
                  "'TEXT', text = 'x'} end return r\"}}");
    run = run_node(&f, member, meta, "T", "N", ALL);
    {
        json_t *r = node_run_results(run);
        assert_int_equal(json_array_size(f.sent), 0);
        assert_int_equal(err_code_of(json_array_get(r, 0)), BG_ERR_LIMIT);
        json_decref(r);
    }
    node_run_free(run);
    fake_free(&f);

    /* a transform that returns something else: 126, nothing sent */
    fake_init(&f, "{\"T/N\":{\"transform\":\"return 'x'\"}}");
    run = run_node(&f, member, meta, "T", "N", ALL);
    {
        json_t *r = node_run_results(run);
        assert_int_equal(json_array_size(f.sent), 0);
        assert_int_equal(err_code_of(json_array_get(r, 0)), BG_ERR_SCRIPT);
        json_decref(r);
    }
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
    json_decref(meta);
}

/* A script calls two endpoints in turn and merges both answers; a failing script adds 126 with
 * its line, writes nothing, and the run goes on. */
static void test_script_http_and_failure(void **state)
{
    fake_t f;
    json_t *member = base_member(), *r;
    node_run_t *run;
    const char *err;

    (void)state;
    fake_init(
        &f,
        "{\"T/N\":{\"preAction\":[{\"type\":\"script\",\"code\":"
        "\"local a = http.request{url = 'http://h/a'}\\n"
        "local b = http.request{url = 'http://h/b', body = {from = a.json.v}}\\n"
        "self.member.botMeta.tempData.merged = {a = a.json.v, b = b.json.w}\"},"
        "{\"type\":\"script\",\"code\":\"self.member.meta.lost = 1\\n\\nerror('bad')\"}],"
        "\"response\":[{\"type\":\"TEXT\",\"text\":\"{{member.botMeta.tempData.merged.b}}\"}]}}");
    json_array_append_new(f.answers, load("{\"status\":200,\"body\":\"{\\\"v\\\":1}\"}"));
    json_array_append_new(f.answers, load("{\"status\":200,\"body\":\"{\\\"w\\\":2}\"}"));
    run = run_node(&f, member, NULL, "T", "N", ALL);
    assert_int_equal(json_array_size(f.hooks), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(f.hooks, 1), "body")),
                        "{\"from\":1}");
    assert_int_equal(json_integer_value(at(node_run_member(run), "botMeta.tempData.merged.a")), 1);
    assert_int_equal(json_integer_value(at(node_run_member(run), "botMeta.tempData.merged.b")), 2);
    assert_null(at(node_run_member(run), "meta.lost"));
    assert_string_equal(text_of(f.sent, 0), "2");
    r = node_run_results(run);
    assert_int_equal(err_code_of(json_array_get(r, 0)), BG_ERR_SCRIPT);
    err = json_string_value(json_object_get(json_object_get(json_array_get(r, 0), "error"), "err"));
    assert_string_equal(err, "node N preAction[1]:3: bad");
    assert_false(node_run_ok(run));
    check_delta_matches_member(member, run);
    json_decref(r);
    node_run_free(run);
    fake_free(&f);
    json_decref(member);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_flag_combinations),
        cmocka_unit_test(test_pre_action_visible_in_response),
        cmocka_unit_test(test_redirect_chain_across_trees),
        cmocka_unit_test(test_chain_limit),
        cmocka_unit_test(test_missing_target),
        cmocka_unit_test(test_missing_hop),
        cmocka_unit_test(test_locale_choice),
        cmocka_unit_test(test_webhook_save_visible),
        cmocka_unit_test(test_webhook_failure),
        cmocka_unit_test(test_bad_actions_are_elements),
        cmocka_unit_test(test_send_failure_and_order),
        cmocka_unit_test(test_need_repeats_and_misuse),
        cmocka_unit_test(test_redirect_flags_and_bad_redirect),
        cmocka_unit_test(test_script_transform),
        cmocka_unit_test(test_script_http_and_failure),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
