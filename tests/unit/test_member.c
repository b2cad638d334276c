/* test_member.c - set paths, member deltas (order, tags, concurrency) and new records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_util.h"

#include "core/member.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *base_member(void)
{
    return member_new("M1", "C1", "A1", "1234", "facebook", 1000);
}

/* The value at a dotted path of plain keys, for checks. */
static const json_t *at(const json_t *v, const char *path)
{
    char buf[256], *seg, *save = NULL;

    snprintf(buf, sizeof(buf), "%s", path);
    for (seg = strtok_r(buf, ".", &save); seg && v; seg = strtok_r(NULL, ".", &save))
        v = json_object_get(v, seg);
    return v;
}

static void test_member_new_shape(void **state)
{
    json_t *m = member_new("M1", "C1", "A1", "ext-9", "whatsapp", 1700000000123LL);
    json_t *want =
        load("{\"_id\":\"M1\",\"channel\":\"C1\",\"app\":\"A1\",\"externalId\":\"ext-9\","
             "\"platform\":\"whatsapp\",\"firstName\":\"\",\"lastName\":\"\",\"locale\":\"en\","
             "\"customLocale\":null,\"tags\":[],\"meta\":{},\"botMeta\":{\"tree\":null,"
             "\"nodeCompositeId\":null,\"liveChat\":false,\"subscribed\":true,\"tempData\":{}},"
             "\"createdAt\":1700000000123,\"updatedAt\":1700000000123}");
    const char *key;
    json_t *v;
    size_t i = 0;
    static const char *const order[] = {
        "_id",    "channel",      "app",  "externalId", "platform", "firstName", "lastName",
        "locale", "customLocale", "tags", "meta",       "botMeta",  "createdAt", "updatedAt"};

    (void)state;
    assert_true(json_equal(m, want));
    json_object_foreach(m, key, v) {
        (void)v;
        assert_string_equal(key, order[i]);
        i++;
    }
    assert_int_equal(i, 14);
    json_decref(m);
    json_decref(want);

    m = member_new("M2", "C1", "A1", NULL, NULL, 5);
    assert_string_equal(json_string_value(json_object_get(m, "externalId")), "");
    json_decref(m);
}

static void set_ok(json_t *m, const char *path, const char *value_json)
{
    json_t *v = load(value_json);
    bg_error_t err;

    bg_error_clear(&err);
    if (member_apply_set(m, path, v, &err) != 0)
        fail_msg("set %s refused: %s", path, err.msg);
    json_decref(v);
}

static void set_refused(json_t *m, const char *path, const char *value_json)
{
    json_t *v = load(value_json), *before = json_deep_copy(m);
    bg_error_t err;

    bg_error_clear(&err);
    assert_int_equal(member_apply_set(m, path, v, &err), -1);
    assert_int_equal(err.code, BG_ERR_MISSING_PARAM);
    if (strlen(path) < 150)
        assert_non_null(strstr(err.msg, path));
    assert_true(json_equal(m, before)); /* nothing changed */
    json_decref(v);
    json_decref(before);
}

static void test_set_allowed(void **state)
{
    json_t *m = base_member();

    (void)state;
    set_ok(m, "member.meta.a", "1");
    set_ok(m, "member.meta.x.y.z", "\"deep\"");
    set_ok(m, "member.meta.x.y.w", "[1,2]");
    set_ok(m, "member.botMeta.tempData.order", "{\"id\":\"A-17\"}");
    set_ok(m, "member.botMeta.tempData.k.j", "null");
    set_ok(m, "member.botMeta.subscribed", "false");
    assert_true(json_is_false(at(m, "botMeta.subscribed")));
    set_ok(m, "member.botMeta.subscribed", "\"true\""); /* what a template renders */
    assert_true(json_is_true(at(m, "botMeta.subscribed")));
    set_ok(m, "member.customLocale", "\"zh-HK\"");
    assert_string_equal(json_string_value(at(m, "customLocale")), "zh-HK");
    set_ok(m, "member.customLocale", "null");
    assert_true(json_is_null(at(m, "customLocale")));
    set_ok(m, "member.firstName", "\"Ann\"");
    set_ok(m, "member.lastName", "\"Lee\"");

    assert_int_equal(json_integer_value(at(m, "meta.a")), 1);
    assert_string_equal(json_string_value(at(m, "meta.x.y.z")), "deep");
    assert_int_equal(json_array_size(at(m, "meta.x.y.w")), 2);
    assert_string_equal(json_string_value(at(m, "botMeta.tempData.order.id")), "A-17");
    assert_true(json_is_null(at(m, "botMeta.tempData.k.j")));
    assert_string_equal(json_string_value(at(m, "firstName")), "Ann");
    assert_string_equal(json_string_value(at(m, "lastName")), "Lee");
    /* an intermediate that is not an object is replaced */
    set_ok(m, "member.meta.a.b", "2");
    assert_int_equal(json_integer_value(at(m, "meta.a.b")), 2);
    json_decref(m);
}

static void test_set_copies_value(void **state)
{
    json_t *m = base_member(), *v = load("{\"k\":1}");
    bg_error_t err;

    (void)state;
    assert_int_equal(member_apply_set(m, "member.meta.obj", v, &err), 0);
    json_object_set_new(v, "k", json_integer(2));
    assert_int_equal(json_integer_value(at(m, "meta.obj.k")), 1);
    json_decref(v);
    json_decref(m);
}

static void test_set_refused(void **state)
{
    json_t *m = base_member();

    (void)state;
    set_refused(m, "member.meta", "{}");
    set_refused(m, "member.meta.", "1");
    set_refused(m, "member.meta.a..b", "1");
    set_refused(m, "member.meta.a.", "1");
    set_refused(m, "member.metadata", "1");
    set_refused(m, "member.botMeta.tempData", "{}");
    set_refused(m, "member.botMeta.tempData.", "1");
    set_refused(m, "member.botMeta.tree", "\"T9\"");
    set_refused(m, "member.botMeta.nodeCompositeId", "\"N9\"");
    set_refused(m, "member.botMeta.liveChat", "true");
    set_refused(m, "member.botMeta", "{}");
    set_refused(m, "member.tags", "[]");
    set_refused(m, "member._id", "\"M2\"");
    set_refused(m, "member.app", "\"A2\"");
    set_refused(m, "member.channel", "\"C2\"");
    set_refused(m, "member.locale", "\"fr\"");
    set_refused(m, "member.firstName.x", "\"a\"");
    set_refused(m, "meta.a", "1");
    set_refused(m, "", "1");
    set_refused(m, "channel.info.accessToken", "\"x\"");
    /* the right path with the wrong type of value */
    set_refused(m, "member.botMeta.subscribed", "\"yes\"");
    set_refused(m, "member.botMeta.subscribed", "1");
    set_refused(m, "member.customLocale", "5");
    set_refused(m, "member.firstName", "null");
    set_refused(m, "member.lastName", "{}");
    /* too deep, too long */
    set_refused(m, "member.meta.1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16.17", "1");
    {
        char path[400];
        memset(path, 'k', sizeof(path) - 1);
        path[sizeof(path) - 1] = '\0';
        memcpy(path, "member.meta.", 12);
        set_refused(m, path, "1");
    }
    set_ok(m, "member.meta.1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16", "1");
    json_decref(m);
}

static void test_path_checks(void **state)
{
    (void)state;
    assert_true(member_path_allowed("member.meta.a"));
    assert_false(member_path_allowed(NULL));
    assert_false(member_path_allowed("member.meta"));
    assert_true(member_path_prefix_allowed("member.meta.{{agendaMeta.k}}"));
    assert_true(member_path_prefix_allowed("member.firstName"));
    assert_false(member_path_prefix_allowed("member.meta."));
    assert_false(member_path_prefix_allowed("member.botMeta.tree"));
}

static void apply_ok(json_t *m, const char *delta_json, int64_t now)
{
    json_t *d = load(delta_json);
    bg_error_t err;

    bg_error_clear(&err);
    if (member_apply_delta(m, d, now, &err) != 0)
        fail_msg("delta refused: %s", err.msg);
    json_decref(d);
}

static void test_tags(void **state)
{
    json_t *m = base_member(), *want;

    (void)state;
    apply_ok(m, "[{\"op\":\"addTags\",\"tags\":[\"b\",\"a\",\"b\",\"c\",\"\"]}]", 2000);
    want = load("[\"b\",\"a\",\"c\"]");
    assert_true(json_equal(json_object_get(m, "tags"), want));
    json_decref(want);
    apply_ok(m, "[{\"op\":\"addTags\",\"tags\":[\"a\",\"d\"]}]", 2001);
    want = load("[\"b\",\"a\",\"c\",\"d\"]");
    assert_true(json_equal(json_object_get(m, "tags"), want));
    json_decref(want);
    /* a record holding duplicates: removeTags removes them all */
    json_array_append_new(json_object_get(m, "tags"), json_string("a"));
    apply_ok(m, "[{\"op\":\"removeTags\",\"tags\":[\"a\",\"zz\"]}]", 2002);
    want = load("[\"b\",\"c\",\"d\"]");
    assert_true(json_equal(json_object_get(m, "tags"), want));
    json_decref(want);
    apply_ok(m, "[{\"op\":\"removeTags\",\"tags\":[\"b\"]},{\"op\":\"addTags\",\"tags\":[\"b\"]}]",
             2003);
    want = load("[\"c\",\"d\",\"b\"]");
    assert_true(json_equal(json_object_get(m, "tags"), want));
    json_decref(want);
    assert_int_equal(json_integer_value(json_object_get(m, "updatedAt")), 2003);
    assert_int_equal(json_integer_value(json_object_get(m, "createdAt")), 1000);
    json_decref(m);
}

static void test_delta_all_ops(void **state)
{
    json_t *m = base_member();

    (void)state;
    apply_ok(m,
             "[{\"op\":\"set\",\"path\":\"member.meta.a.b\",\"value\":1},"
             "{\"op\":\"set\",\"path\":\"member.botMeta.tempData.t\",\"value\":\"x\"},"
             "{\"op\":\"addTags\",\"tags\":[\"shipped\"]},"
             "{\"op\":\"position\",\"tree\":\"T1\",\"node\":\"N2\"}]",
             5000);
    assert_int_equal(json_integer_value(at(m, "meta.a.b")), 1);
    assert_string_equal(json_string_value(at(m, "botMeta.tempData.t")), "x");
    assert_string_equal(json_string_value(at(m, "botMeta.tree")), "T1");
    assert_string_equal(json_string_value(at(m, "botMeta.nodeCompositeId")), "N2");
    assert_string_equal(json_string_value(json_array_get(json_object_get(m, "tags"), 0)),
                        "shipped");
    assert_int_equal(json_integer_value(json_object_get(m, "updatedAt")), 5000);
    /* the rest of the record is kept */
    assert_string_equal(json_string_value(json_object_get(m, "_id")), "M1");
    assert_true(json_is_true(at(m, "botMeta.subscribed")));
    json_decref(m);
}

static void test_delta_tolerant_record(void **state)
{
    json_t *m = load("{\"_id\":\"M1\",\"tags\":\"oops\"}");

    (void)state;
    apply_ok(m,
             "[{\"op\":\"addTags\",\"tags\":[\"t\"]},"
             "{\"op\":\"set\",\"path\":\"member.botMeta.tempData.a\",\"value\":1},"
             "{\"op\":\"set\",\"path\":\"member.botMeta.subscribed\",\"value\":false},"
             "{\"op\":\"position\",\"tree\":\"T\",\"node\":\"N\"}]",
             7);
    assert_string_equal(json_string_value(json_array_get(json_object_get(m, "tags"), 0)), "t");
    assert_int_equal(json_integer_value(at(m, "botMeta.tempData.a")), 1);
    assert_true(json_is_false(at(m, "botMeta.subscribed")));
    assert_string_equal(json_string_value(at(m, "botMeta.tree")), "T");
    assert_true(json_is_object(json_object_get(m, "meta")));
    json_decref(m);

    m = load("{\"_id\":\"M1\"}");
    apply_ok(m, "[]", 8);
    assert_true(json_is_array(json_object_get(m, "tags")));
    assert_true(json_is_object(json_object_get(m, "meta")));
    assert_true(json_is_object(at(m, "botMeta.tempData")));
    assert_int_equal(json_integer_value(json_object_get(m, "updatedAt")), 8);
    json_decref(m);
}

static void test_delta_all_or_nothing(void **state)
{
    json_t *m = base_member(), *before = json_deep_copy(m), *d;
    bg_error_t err;
    static const char *const bad[] = {
        "[{\"op\":\"set\",\"path\":\"member.meta.a\",\"value\":1},"
        "{\"op\":\"set\",\"path\":\"member._id\",\"value\":\"X\"}]",
        "[{\"op\":\"addTags\",\"tags\":[\"a\"]},{\"op\":\"addTags\",\"tags\":[1]}]",
        "[{\"op\":\"addTags\",\"tags\":[\"a\"]},{\"op\":\"removeTags\",\"tags\":\"a\"}]",
        "[{\"op\":\"addTags\",\"tags\":[\"a\"]},{\"op\":\"position\",\"tree\":\"T\"}]",
        "[{\"op\":\"addTags\",\"tags\":[\"a\"]},{\"op\":\"explode\"}]",
        "[{\"op\":\"addTags\",\"tags\":[\"a\"]},{}]",
        "[{\"op\":\"addTags\",\"tags\":[\"a\"]},7]",
        "[{\"op\":\"set\",\"value\":1}]",
        "{\"op\":\"set\"}",
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        d = load(bad[i]);
        bg_error_clear(&err);
        assert_int_equal(member_apply_delta(m, d, 99, &err), -1);
        assert_int_equal(err.code, BG_ERR_MISSING_PARAM);
        assert_true(json_equal(m, before));
        json_decref(d);
    }
    d = load("[]");
    assert_int_equal(member_mutate(m, d, 99), 0);
    assert_int_equal(json_integer_value(json_object_get(m, "updatedAt")), 99);
    json_decref(d);
    /* member_mutate (in place, for the compare-and-set) writes what member_apply_delta does */
    {
        json_t *x = json_deep_copy(m), *y = json_deep_copy(m);
        d = load("[{\"op\":\"set\",\"path\":\"member.meta.k\",\"value\":\"v\"},"
                 "{\"op\":\"addTags\",\"tags\":[\"t2\",\"t1\"]},"
                 "{\"op\":\"position\",\"tree\":\"T1\",\"node\":\"N2\"}]");
        assert_int_equal(member_apply_delta(x, d, 123, &err), 0);
        assert_int_equal(member_mutate(y, d, 123), 0);
        assert_true(json_equal(x, y));
        assert_string_equal(json_string_value(json_object_get(json_object_get(y, "meta"), "k")),
                            "v");
        json_decref(d);
        d = load(bad[0]);
        assert_int_equal(member_mutate(y, d, 124), -1);
        json_decref(d);
        d = load("{}");
        assert_int_equal(member_mutate(y, d, 124), -1);
        json_decref(d);
        json_decref(x);
        json_decref(y);
    }
    json_decref(m);
    json_decref(before);
}

static void test_concurrent_deltas_both_survive(void **state)
{
    /* Two runs read the same record and each made a delta; whichever is written back first,
     * the second is applied to the record the first produced. */
    const char *a = "[{\"op\":\"set\",\"path\":\"member.meta.fromA\",\"value\":\"a\"},"
                    "{\"op\":\"set\",\"path\":\"member.meta.shared.a\",\"value\":1},"
                    "{\"op\":\"addTags\",\"tags\":[\"tagA\",\"common\"]},"
                    "{\"op\":\"removeTags\",\"tags\":[\"old\"]},"
                    "{\"op\":\"position\",\"tree\":\"TA\",\"node\":\"NA\"}]";
    const char *b = "[{\"op\":\"set\",\"path\":\"member.botMeta.tempData.fromB\",\"value\":\"b\"},"
                    "{\"op\":\"set\",\"path\":\"member.meta.shared.b\",\"value\":2},"
                    "{\"op\":\"addTags\",\"tags\":[\"tagB\",\"common\"]},"
                    "{\"op\":\"position\",\"tree\":\"TB\",\"node\":\"NB\"}]";
    int order;

    (void)state;
    for (order = 0; order < 2; order++) {
        json_t *m = base_member(), *tags;
        json_array_append_new(json_object_get(m, "tags"), json_string("old"));
        json_array_append_new(json_object_get(m, "tags"), json_string("keep"));
        apply_ok(m, order == 0 ? a : b, 10);
        apply_ok(m, order == 0 ? b : a, 11);
        assert_string_equal(json_string_value(at(m, "meta.fromA")), "a");
        assert_string_equal(json_string_value(at(m, "botMeta.tempData.fromB")), "b");
        assert_int_equal(json_integer_value(at(m, "meta.shared.a")), 1);
        assert_int_equal(json_integer_value(at(m, "meta.shared.b")), 2);
        tags = json_object_get(m, "tags");
        assert_int_equal(json_array_size(tags), 4); /* keep, tagA/tagB, common once */
        {
            json_t *want = order == 0 ? load("[\"keep\",\"tagA\",\"common\",\"tagB\"]")
                                      : load("[\"old\",\"keep\",\"tagB\",\"common\",\"tagA\"]");
            if (order == 1) { /* b first keeps old, then a removes it */
                json_array_remove(want, 0);
            }
            assert_true(json_equal(tags, want));
            json_decref(want);
        }
        /* the position is the last writer's */
        assert_string_equal(json_string_value(at(m, "botMeta.tree")), order == 0 ? "TB" : "TA");
        json_decref(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_member_new_shape),
        cmocka_unit_test(test_set_allowed),
        cmocka_unit_test(test_set_copies_value),
        cmocka_unit_test(test_set_refused),
        cmocka_unit_test(test_path_checks),
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_delta_all_ops),
        cmocka_unit_test(test_delta_tolerant_record),
        cmocka_unit_test(test_delta_all_or_nothing),
        cmocka_unit_test(test_concurrent_deltas_both_survive),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
