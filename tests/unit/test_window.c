/* The conversation windows (core/window.c): per platform, at the edge, the exempt responses,
 * the lastInboundAt forms a record may hold, and the channel's windowTemplate. */
#include "../../core/request.h"
#include "../../core/window.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h> /* after what it needs */

#include "test_util.h"

#define H   3600000LL
#define NOW 1764400000000LL /* 2025-11-29T07:06:40Z */

static int check(const char *type, int64_t last, const char *response, bg_error_t *err)
{
    json_t *r = load(response);
    int rc = window_check(type, last, NOW, r, err);

    json_decref(r);
    return rc;
}

static void test_hours_per_platform(void **state)
{
    (void)state;
    assert_int_equal(window_hours("whatsapp"), 24);
    assert_int_equal(window_hours("whatsapp-cloud"), 24);
    assert_int_equal(window_hours("facebook"), 24);
    assert_int_equal(window_hours("wechat"), 48);
    assert_int_equal(window_hours("slack"), 0);
    assert_int_equal(window_hours("teamwork"), 0);
    assert_int_equal(window_hours(NULL), 0);
}

static void test_edges(void **state)
{
    (void)state;
    /* open up to the last millisecond of the window, closed from its end on */
    assert_int_equal(window_closed_hours("whatsapp-cloud", NOW - 24 * H + 1, NOW), -1);
    assert_int_equal(window_closed_hours("whatsapp-cloud", NOW - 24 * H, NOW), 24);
    assert_int_equal(window_closed_hours("whatsapp", NOW - 30 * H - 59 * 60000, NOW), 30);
    assert_int_equal(window_closed_hours("facebook", NOW - 25 * H, NOW), 25);
    assert_int_equal(window_closed_hours("wechat", NOW - 47 * H, NOW), -1);
    assert_int_equal(window_closed_hours("wechat", NOW - 48 * H, NOW), 48);
    /* no window, never seen, a date in the future (another clock): open */
    assert_int_equal(window_closed_hours("slack", NOW - 1000 * H, NOW), -1);
    assert_int_equal(window_closed_hours("teamwork", 0, NOW), -1);
    assert_int_equal(window_closed_hours("whatsapp", WINDOW_NEVER, NOW), -1);
    assert_int_equal(window_closed_hours("whatsapp", NOW + H, NOW), -1);
}

static void test_rule(void **state)
{
    bg_error_t err;

    (void)state;
    assert_int_equal(check("whatsapp-cloud", NOW - H, "{\"type\":\"TEXT\",\"text\":\"a\"}", &err),
                     0);
    bg_error_clear(&err);
    assert_int_equal(
        check("whatsapp-cloud", NOW - 30 * H, "{\"type\":\"TEXT\",\"text\":\"a\"}", &err), -1);
    assert_int_equal(err.code, BG_ERR_WINDOW);
    assert_string_equal(err.msg, "outside the conversation window: the member last wrote 30 h "
                                 "ago; send a TEMPLATE");
    /* a TEMPLATE always goes on the whatsapp kinds, a NATIVE template too */
    assert_int_equal(check("whatsapp", NOW - 30 * H,
                           "{\"type\":\"TEMPLATE\",\"elementName\":\"t\",\"languageCode\":\"en\"}",
                           &err),
                     0);
    assert_int_equal(check("whatsapp", NOW - 30 * H,
                           "{\"type\":\"NATIVE\",\"message\":{\"type\":\"template\"}}", &err),
                     0);
    /* facebook: a messageTag, or a NATIVE MESSAGE_TAG; a TEMPLATE is no way out there */
    assert_int_equal(check("facebook", NOW - 30 * H,
                           "{\"type\":\"TEXT\",\"text\":\"a\",\"messageTag\":\"HUMAN_AGENT\"}",
                           &err),
                     0);
    assert_int_equal(check("facebook", NOW - 30 * H,
                           "{\"type\":\"NATIVE\",\"message\":{\"messaging_type\":\"MESSAGE_TAG\","
                           "\"tag\":\"HUMAN_AGENT\"}}",
                           &err),
                     0);
    assert_int_equal(check("facebook", NOW - 30 * H,
                           "{\"type\":\"TEMPLATE\",\"elementName\":\"t\",\"languageCode\":\"en\"}",
                           &err),
                     -1);
    assert_non_null(strstr(err.msg, "last wrote 30 h ago; send it with a messageTag"));
    /* wechat: nothing goes outside its 48 h */
    assert_int_equal(check("wechat", NOW - 47 * H, "{\"type\":\"TEXT\",\"text\":\"a\"}", &err), 0);
    assert_int_equal(check("wechat", NOW - 49 * H,
                           "{\"type\":\"TEXT\",\"text\":\"a\",\"messageTag\":\"HUMAN_AGENT\"}",
                           &err),
                     -1);
    assert_non_null(strstr(err.msg, "last wrote 49 h ago"));
    /* a member never seen writing is sent to: the platform decides */
    assert_int_equal(check("wechat", WINDOW_NEVER, "{\"type\":\"TEXT\",\"text\":\"a\"}", &err), 0);
    assert_int_equal(check("slack", 0, "{\"type\":\"TEXT\",\"text\":\"a\"}", &err), 0);
}

static int64_t last_of(const char *member)
{
    json_t *m = load(member);
    int64_t v = window_last_inbound(m);

    json_decref(m);
    return v;
}

static void test_last_inbound_forms(void **state)
{
    (void)state;
    assert_true(last_of("{\"lastInboundAt\":1764400000000}") == NOW);
    assert_true(last_of("{\"lastInboundAt\":1764400000000.0}") == NOW);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29T07:06:40Z\"}") == NOW);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29T07:06:40.250Z\"}") == NOW + 250);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29T07:06:40.2509Z\"}") == NOW + 250);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29T15:06:40+08:00\"}") == NOW);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29T02:06:40-0500\"}") == NOW);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29 07:06:40\"}") == NOW);
    /* absent, null, or not a date: never seen */
    assert_true(last_of("{}") == WINDOW_NEVER);
    assert_true(last_of("{\"lastInboundAt\":null}") == WINDOW_NEVER);
    assert_true(last_of("{\"lastInboundAt\":-5}") == WINDOW_NEVER);
    assert_true(last_of("{\"lastInboundAt\":true}") == WINDOW_NEVER);
    assert_true(last_of("{\"lastInboundAt\":\"yesterday\"}") == WINDOW_NEVER);
    assert_true(last_of("{\"lastInboundAt\":\"2025-13-29T07:06:40Z\"}") == WINDOW_NEVER);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29T07:06:40Zjunk\"}") == WINDOW_NEVER);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29T07:06:40.Z\"}") == WINDOW_NEVER);
    assert_true(last_of("{\"lastInboundAt\":\"2025-11-29T07:06\"}") == WINDOW_NEVER);
    assert_true(window_last_inbound(NULL) == WINDOW_NEVER);
}

static const json_t *tmpl_of(json_t *info, bg_error_t *err)
{
    bg_error_clear(err);
    return window_channel_template(info, err);
}

static void test_channel_template(void **state)
{
    json_t *ok = load("{\"windowTemplate\":{\"type\":\"TEMPLATE\",\"elementName\":\"reopen\","
                      "\"languageCode\":\"en\"}}");
    json_t *none = load("{\"accessToken\":\"x\"}");
    json_t *text = load("{\"windowTemplate\":{\"type\":\"TEXT\",\"text\":\"a\"}}");
    json_t *no_name = load("{\"windowTemplate\":{\"type\":\"TEMPLATE\",\"languageCode\":\"en\"}}");
    json_t *with_fallback =
        load("{\"windowTemplate\":{\"type\":\"TEMPLATE\",\"elementName\":\"r\",\"languageCode\":"
             "\"en\",\"fallback\":{\"type\":\"TEXT\",\"text\":\"a\"}}}");
    bg_error_t err;

    (void)state;
    assert_ptr_equal(tmpl_of(ok, &err), json_object_get(ok, "windowTemplate"));
    assert_null(tmpl_of(none, &err));
    assert_int_equal(err.code, BG_OK);
    assert_null(tmpl_of(text, &err));
    assert_int_equal(err.code, BG_ERR_MISSING_PARAM);
    assert_non_null(strstr(err.msg, "info.windowTemplate"));
    assert_null(tmpl_of(no_name, &err));
    assert_non_null(strstr(err.msg, "info.windowTemplate.elementName"));
    assert_null(tmpl_of(with_fallback, &err));
    assert_non_null(strstr(err.msg, "fallback"));
    json_decref(ok);
    json_decref(none);
    json_decref(text);
    json_decref(no_name);
    json_decref(with_fallback);
}

/* The 127 names what is wrong with the channel's windowTemplate, where the operator sees it. */
static void test_refusal_names_the_template(void **state)
{
    json_t *bad = load("{\"windowTemplate\":{\"type\":\"TEXT\",\"text\":\"a\"}}");
    json_t *good = load("{\"windowTemplate\":{\"type\":\"TEMPLATE\",\"elementName\":\"r\","
                        "\"languageCode\":\"en\"}}");
    bg_error_t err;

    (void)state;
    assert_int_equal(window_refusal(&err, "whatsapp", 26, bad), -1);
    assert_int_equal(err.code, BG_ERR_WINDOW);
    assert_string_equal(err.msg, "outside the conversation window: the member last wrote 26 h "
                                 "ago; send a TEMPLATE (the channel's info.windowTemplate must "
                                 "be an object of type TEMPLATE)");
    window_refusal(&err, "whatsapp", 26, good);
    assert_string_equal(err.msg, "outside the conversation window: the member last wrote 26 h "
                                 "ago; send a TEMPLATE");
    window_refusal(&err, "wechat", 50, NULL);
    assert_string_equal(err.msg, "outside the conversation window: the member last wrote 50 h "
                                 "ago; it opens again when the member writes");
    json_decref(bad);
    json_decref(good);
}

static void test_message_tags(void **state)
{
    (void)state;
    assert_true(request_message_tag_ok("ACCOUNT_UPDATE"));
    assert_true(request_message_tag_ok("CONFIRMED_EVENT_UPDATE"));
    assert_true(request_message_tag_ok("POST_PURCHASE_UPDATE"));
    assert_true(request_message_tag_ok("HUMAN_AGENT"));
    assert_false(request_message_tag_ok("account_update"));
    assert_false(request_message_tag_ok("ISSUE_RESOLUTION")); /* retired by Meta */
    assert_false(request_message_tag_ok(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hours_per_platform),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_last_inbound_forms),
        cmocka_unit_test(test_channel_template),
        cmocka_unit_test(test_message_tags),
        cmocka_unit_test(test_refusal_names_the_template),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
