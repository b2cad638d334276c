/* test_adapter_hooks.c - the webhook parsers of the adapters (contract.md section 14): each
 * platform's bodies into events (type, sender, id, time, normalised data), what is skipped,
 * and what is refused. Cases as data: a body and the events it must give. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adapters/adapter.h"
#include "core/member.h"

#include <string.h>

typedef struct hook_case {
    const char *name;
    const adapter_ops_t *ops;
    const char *content_type;
    const char *body;
    /* the events, each {"eventType","from","id","timestamp","data"} (platform not compared),
     * or NULL when the body is refused; then refused names a word of the reason */
    const char *events;
    const char *refused;
    const char *challenge;
} hook_case_t;

#define FORM "application/x-www-form-urlencoded"

static const hook_case_t cases[] = {
    {"facebook text", &adapter_facebook, NULL,
     "{\"object\":\"page\",\"entry\":[{\"id\":\"1\",\"time\":1,\"messaging\":[{\"sender\":{\"id\":"
     "\"P1\"},\"recipient\":{\"id\":\"1\"},\"timestamp\":1700000000123,\"message\":{\"mid\":\"m_"
     "1\","
     "\"text\":\"hi\"}}]}]}",
     "[{\"eventType\":\"INBOUND\",\"from\":\"P1\",\"id\":\"m_1\",\"timestamp\":1700000000123,"
     "\"data\":{\"type\":\"TEXT\",\"text\":\"hi\"}}]",
     NULL, NULL},
    {"facebook quick reply, postback, echo, delivery, read", &adapter_facebook, NULL,
     "{\"object\":\"page\",\"entry\":[{\"id\":\"1\",\"messaging\":["
     "{\"sender\":{\"id\":\"P1\"},\"timestamp\":5,\"message\":{\"mid\":\"m_2\",\"text\":\"Red\","
     "\"quick_reply\":{\"payload\":\"RED\"}}},"
     "{\"sender\":{\"id\":\"P1\"},\"timestamp\":6,\"postback\":{\"title\":\"Buy\",\"payload\":"
     "\"BUY\",\"mid\":\"m_3\"}},"
     "{\"sender\":{\"id\":\"1\"},\"timestamp\":7,\"message\":{\"mid\":\"m_4\",\"text\":\"x\","
     "\"is_echo\":true}},"
     "{\"sender\":{\"id\":\"P1\"},\"timestamp\":8,\"delivery\":{\"mids\":[\"m_0\"],\"watermark\":"
     "7}},"
     "{\"sender\":{\"id\":\"P1\"},\"timestamp\":9,\"read\":{\"watermark\":8}}]}]}",
     "[{\"eventType\":\"POSTBACK\",\"from\":\"P1\",\"id\":\"m_2\",\"timestamp\":5,\"data\":{"
     "\"payload\":\"RED\",\"title\":\"Red\"}},"
     "{\"eventType\":\"POSTBACK\",\"from\":\"P1\",\"id\":\"m_3\",\"timestamp\":6,\"data\":{"
     "\"payload\":\"BUY\",\"title\":\"Buy\"}},"
     "{\"eventType\":\"DELIVERED\",\"from\":\"P1\",\"id\":\"delivery:7\",\"timestamp\":8,\"data\":"
     "{\"watermark\":7,\"messageIds\":[\"m_0\"]}},"
     "{\"eventType\":\"READ\",\"from\":\"P1\",\"id\":\"read:8\",\"timestamp\":9,\"data\":{"
     "\"watermark\":8}}]",
     NULL, NULL},
    {"facebook: not a page", &adapter_facebook, NULL, "{\"object\":\"user\",\"entry\":[]}", NULL,
     "page", NULL},
    {"facebook: duplicate key", &adapter_facebook, NULL,
     "{\"object\":\"page\",\"object\":\"page\",\"entry\":[]}", NULL, "JSON", NULL},
    {"facebook: a message without a sender", &adapter_facebook, NULL,
     "{\"object\":\"page\",\"entry\":[{\"messaging\":[{\"timestamp\":1,\"message\":{\"mid\":"
     "\"m\",\"text\":\"t\"}}]}]}",
     NULL, "sender", NULL},
    {"whatsapp cloud: text, list tap, image, statuses", &adapter_whatsapp_cloud, NULL,
     "{\"object\":\"whatsapp_business_account\",\"entry\":[{\"id\":\"2\",\"changes\":[{\"field\":"
     "\"messages\",\"value\":{\"messaging_product\":\"whatsapp\",\"messages\":["
     "{\"from\":\"852\",\"id\":\"w1\",\"timestamp\":\"1700000000\",\"type\":\"text\",\"text\":{"
     "\"body\":\"hi\"}},"
     "{\"from\":\"852\",\"id\":\"w2\",\"timestamp\":\"1700000001\",\"type\":\"interactive\","
     "\"interactive\":{\"type\":\"list_reply\",\"list_reply\":{\"id\":\"r1\",\"title\":\"Row\"}}},"
     "{\"from\":\"852\",\"id\":\"w3\",\"timestamp\":\"1700000002\",\"type\":\"document\","
     "\"document\":{\"id\":\"med1\"}}],"
     "\"statuses\":[{\"id\":\"w0\",\"status\":\"sent\",\"timestamp\":\"1\",\"recipient_id\":"
     "\"852\"},{\"id\":\"w0\",\"status\":\"read\",\"timestamp\":\"2\",\"recipient_id\":\"852\"},"
     "{\"id\":\"w9\",\"status\":\"failed\",\"timestamp\":\"3\",\"recipient_id\":\"852\","
     "\"errors\":[{\"code\":131047}]}]}}]}]}",
     "[{\"eventType\":\"INBOUND\",\"from\":\"852\",\"id\":\"w1\",\"timestamp\":1700000000000,"
     "\"data\":{\"type\":\"TEXT\",\"text\":\"hi\"}},"
     "{\"eventType\":\"POSTBACK\",\"from\":\"852\",\"id\":\"w2\",\"timestamp\":1700000001000,"
     "\"data\":{\"payload\":\"r1\",\"title\":\"Row\"}},"
     "{\"eventType\":\"INBOUND\",\"from\":\"852\",\"id\":\"w3\",\"timestamp\":1700000002000,"
     "\"data\":{\"type\":\"FILE\",\"mediaId\":\"med1\"}},"
     "{\"eventType\":\"READ\",\"from\":\"852\",\"id\":\"read:w0\",\"timestamp\":2000,\"data\":{"
     "\"messageId\":\"w0\"}},"
     "{\"eventType\":\"FAILED\",\"from\":\"852\",\"id\":\"failed:w9\",\"timestamp\":3000,"
     "\"data\":{\"messageId\":\"w9\",\"errors\":[{\"code\":131047}]}}]",
     NULL, NULL},
    {"whatsapp on-premises: the value object alone, a template's button", &adapter_whatsapp, NULL,
     "{\"messages\":[{\"from\":\"852\",\"id\":\"g1\",\"timestamp\":\"1\",\"type\":\"button\","
     "\"button\":{\"payload\":\"YES\",\"text\":\"Yes\"}}]}",
     "[{\"eventType\":\"POSTBACK\",\"from\":\"852\",\"id\":\"g1\",\"timestamp\":1000,\"data\":{"
     "\"payload\":\"YES\",\"title\":\"Yes\"}}]",
     NULL, NULL},
    {"whatsapp: a message without a type", &adapter_whatsapp, NULL,
     "{\"messages\":[{\"from\":\"852\",\"id\":\"g1\"}]}", NULL, "type", NULL},
    {"slack url_verification", &adapter_slack, "application/json",
     "{\"type\":\"url_verification\",\"challenge\":\"3eZbrw1aB\",\"token\":\"t\"}", "[]", NULL,
     "3eZbrw1aB"},
    {"slack message; the bot's own and an edit skipped", &adapter_slack, NULL,
     "{\"type\":\"event_callback\",\"event_id\":\"Ev1\",\"event\":{\"type\":\"message\","
     "\"channel\":\"D1\",\"user\":\"U1\",\"text\":\"hi\",\"ts\":\"1503435956.000247\"}}",
     "[{\"eventType\":\"INBOUND\",\"from\":\"D1\",\"id\":\"Ev1\",\"timestamp\":1503435956000,"
     "\"data\":{\"type\":\"TEXT\",\"text\":\"hi\",\"user\":\"U1\"}}]",
     NULL, NULL},
    {"slack bot message", &adapter_slack, NULL,
     "{\"type\":\"event_callback\",\"event_id\":\"Ev2\",\"event\":{\"type\":\"message\","
     "\"channel\":\"D1\",\"bot_id\":\"B1\",\"text\":\"me\",\"ts\":\"1.0\"}}",
     "[]", NULL, NULL},
    {"slack block_actions, form-encoded", &adapter_slack, FORM,
     "payload=%7B%22type%22%3A%22block_actions%22%2C%22user%22%3A%7B%22id%22%3A%22U1%22%7D%2C%22"
     "channel%22%3A%7B%22id%22%3A%22D1%22%7D%2C%22actions%22%3A%5B%7B%22action_id%22%3A%22a%22%2C"
     "%22value%22%3A%22RED%22%2C%22text%22%3A%7B%22text%22%3A%22Red+one%22%7D%2C%22action_ts%22%3A"
     "%221503435956.5%22%7D%5D%7D",
     "[{\"eventType\":\"POSTBACK\",\"from\":\"D1\",\"id\":\"action:1503435956.5:a\",\"timestamp\":"
     "1503435956500,\"data\":{\"payload\":\"RED\",\"title\":\"Red one\",\"actionId\":\"a\"}}]",
     NULL, NULL},
    {"slack form without payload", &adapter_slack, FORM, "a=b", NULL, "payload", NULL},
    {"wechat text", &adapter_wechat, "text/xml",
     "<xml><ToUserName><![CDATA[gh]]></ToUserName><FromUserName><![CDATA[o1]]></FromUserName>"
     "<CreateTime>1700000000</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA["
     "a <b> & c]]></Content><MsgId>42</MsgId></xml>",
     "[{\"eventType\":\"INBOUND\",\"from\":\"o1\",\"id\":\"42\",\"timestamp\":1700000000000,"
     "\"data\":{\"type\":\"TEXT\",\"text\":\"a <b> & c\"}}]",
     NULL, NULL},
    {"wechat menu tap", &adapter_wechat, NULL,
     "<xml><FromUserName>o1</FromUserName><CreateTime>1</CreateTime><MsgType>text</MsgType>"
     "<Content>Yes</Content><bizmsgmenuid>101</bizmsgmenuid><MsgId>43</MsgId></xml>",
     "[{\"eventType\":\"POSTBACK\",\"from\":\"o1\",\"id\":\"43\",\"timestamp\":1000,\"data\":{"
     "\"payload\":\"101\",\"title\":\"Yes\"}}]",
     NULL, NULL},
    {"wechat subscribe: not reported", &adapter_wechat, NULL,
     "<xml><FromUserName>o1</FromUserName><CreateTime>1</CreateTime><MsgType>event</MsgType>"
     "<Event>subscribe</Event></xml>",
     "[]", NULL, NULL},
    {"wechat DOCTYPE", &adapter_wechat, NULL,
     "<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"aa\">]><xml><FromUserName>&a;"
     "</FromUserName></xml>",
     NULL, "DOCTYPE", NULL},
    {"wechat element twice", &adapter_wechat, NULL,
     "<xml><FromUserName>o1</FromUserName><FromUserName>o2</FromUserName></xml>", NULL, "twice",
     NULL},
    {"wechat not XML", &adapter_wechat, NULL, "{\"a\":1}", NULL, "not XML", NULL},
    {"wechat another root", &adapter_wechat, NULL, "<html></html>", NULL, "root", NULL},
};

static void test_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const hook_case_t *c = &cases[i];
        adapter_hook_t h;
        int rc;

        adapter_hook_init(&h);
        rc = c->ops->parse_hook(c->body, strlen(c->body), c->content_type, &h);
        if (c->events == NULL) {
            if (rc != -1 || strstr(h.error, c->refused) == NULL)
                fail_msg("%s: rc %d, error \"%s\", want a refusal naming %s", c->name, rc, h.error,
                         c->refused);
        } else {
            json_t *want = json_loads(c->events, 0, NULL), *got = json_array();
            size_t k;
            json_t *ev;
            char *text;
            assert_non_null(want);
            if (rc != 0)
                fail_msg("%s: refused: %s", c->name, h.error);
            json_array_foreach(h.events, k, ev) {
                json_t *copy = json_copy(ev);
                assert_true(json_is_object(json_object_get(copy, "platform")) ||
                            json_is_array(json_object_get(copy, "platform")));
                json_object_del(copy, "platform");
                json_array_append_new(got, copy);
            }
            if (!json_equal(want, got)) {
                text = json_dumps(got, JSON_COMPACT);
                fail_msg("%s: events %s", c->name, text);
            }
            if ((c->challenge == NULL) != (h.challenge == NULL) ||
                (c->challenge != NULL && strcmp(c->challenge, h.challenge) != 0))
                fail_msg("%s: challenge %s", c->name, h.challenge ? h.challenge : "(none)");
            json_decref(want);
            json_decref(got);
        }
        adapter_hook_clear(&h);
    }
}

/* More than ADAPTER_HOOK_EVENTS_MAX events: refused, not cut. */
static void test_event_bound(void **state)
{
    size_t n = ADAPTER_HOOK_EVENTS_MAX + 1, len = 0;
    char *body = malloc(200 * n + 100);
    adapter_hook_t h;

    (void)state;
    len += (size_t)sprintf(body, "{\"messages\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(body + len,
                               "%s{\"from\":\"852\",\"id\":\"g%zu\",\"timestamp\":\"1\",\"type\":"
                               "\"text\",\"text\":{\"body\":\"x\"}}",
                               i ? "," : "", i);
    strcpy(body + len, "]}");
    adapter_hook_init(&h);
    assert_int_equal(adapter_whatsapp.parse_hook(body, strlen(body), NULL, &h), -1);
    assert_non_null(strstr(h.error, "events"));
    adapter_hook_clear(&h);
    free(body);
}

/* No parser for teamwork: it has no webhooks. */
static void test_teamwork(void **state)
{
    (void)state;
    assert_null(adapter_teamwork.parse_hook);
}

/* A platform's time as ms; -1 for what is none, and for what does not fit in an int64 of ms
 * (a fuzzed wechat CreateTime of 16 digits and a fraction overflowed while it was read). */
static void test_hook_time(void **state)
{
    static const struct {
        const char *json;
        int ms;
        int64_t want;
    } cases[] = {
        {"1700000000", 0, 1700000000000},
        {"1700000000123", 1, 1700000000123},
        {"\"1503435956.000247\"", 0, 1503435956000},
        {"\"1503435956.5\"", 0, 1503435956500},
        {"\"1503435956\"", 0, 1503435956000},
        {"-1", 0, -1},
        {"\"\"", 0, -1},
        {"\"12a\"", 0, -1},
        {"\"1.\"", 0, 1000},
        {"\".5\"", 0, -1},
        {"1.5", 0, -1}, /* a JSON real: none of the platforms' forms */
        /* the largest seconds whose ms, fraction included, fit; one more does not */
        {"\"9223372036854774.999\"", 0, INT64_C(9223372036854774999)},
        {"\"9223372036854775.0\"", 0, -1},
        {"\"9999999999999999.99999\"", 0, -1},
        {"\"9999999999999999\"", 0, -1},
        {"\"9999999999999999\"", 1, INT64_C(9999999999999999)},
        {"\"99999999999999999\"", 1, -1}, /* 17 digits */
        {"9223372036854775807", 1, INT64_MAX},
        {"9223372036854775807", 0, -1},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *v = json_loads(cases[i].json, JSON_DECODE_ANY, NULL);
        int64_t got;
        assert_non_null(v);
        got = adapter_hook_time(v, cases[i].ms);
        if (got != cases[i].want)
            fail_msg("%s (ms %d): %lld, want %lld", cases[i].json, cases[i].ms, (long long)got,
                     (long long)cases[i].want);
        json_decref(v);
    }
}

/* lastInboundAt: the later of the stored and the new, never moved back. */
static void test_mark_inbound(void **state)
{
    json_t *m = member_new("M1", "C1", "A1", "P1", "facebook", 1000);
    json_t *at5 = json_pack("{s:I}", "lastInboundAt", (json_int_t)5000);
    json_t *at3 = json_pack("{s:I}", "lastInboundAt", (json_int_t)3000);
    json_t *bad = json_pack("{s:s}", "lastInboundAt", "soon");

    (void)state;
    assert_null(json_object_get(m, "lastInboundAt"));
    assert_int_equal(member_mark_inbound(m, at5, 6000), 0);
    assert_int_equal(json_integer_value(json_object_get(m, "lastInboundAt")), 5000);
    assert_int_equal(json_integer_value(json_object_get(m, "updatedAt")), 6000);
    assert_int_equal(member_mark_inbound(m, at3, 7000), 0);
    assert_int_equal(json_integer_value(json_object_get(m, "lastInboundAt")), 5000);
    assert_int_equal(member_mark_inbound(m, bad, 8000), -1);
    /* an ISO date another writer stored counts as the windows read it */
    json_object_set_new(m, "lastInboundAt", json_string("2023-11-14T22:13:20Z")); /* 1.7e12 */
    assert_int_equal(member_mark_inbound(m, at5, 9000), 0);
    assert_string_equal(json_string_value(json_object_get(m, "lastInboundAt")),
                        "2023-11-14T22:13:20Z");
    json_object_set_new(m, "lastInboundAt", json_string("not a date"));
    assert_int_equal(member_mark_inbound(m, at3, 9000), 0);
    assert_int_equal(json_integer_value(json_object_get(m, "lastInboundAt")), 3000);
    json_decref(m);
    json_decref(at5);
    json_decref(at3);
    json_decref(bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),        cmocka_unit_test(test_event_bound),
        cmocka_unit_test(test_teamwork),     cmocka_unit_test(test_hook_time),
        cmocka_unit_test(test_mark_inbound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
