/* fuzz_hook_json.c - libFuzzer target for the JSON webhook parsers (contract.md section 14):
 * facebook, whatsapp (cloud and on-premises share one), slack's Events API and slack's
 * form-encoded interactivity, on any body.
 *
 * Input: byte 0 picks the parser (b0 % 4: facebook, whatsapp, slack JSON, slack form), the
 * rest is the body. Whatever the body, the parser returns 0 or -1; on 0 every event has a
 * known eventType, a non-empty sender and id, a timestamp >= 0, data and platform, at most
 * ADAPTER_HOOK_EVENTS_MAX of them; on -1 the error is set and valid UTF-8. */
#include "fuzz_util.h"

#include "adapters/adapter.h"

static const char *const types[] = {"INBOUND", "POSTBACK", "DELIVERED", "READ", "FAILED"};

static void check_hook(const adapter_hook_t *h, int rc)
{
    size_t i;
    json_t *ev;

    if (rc < 0) {
        FUZZ_CHECK(h->error[0] != '\0', "a refusal without a reason");
        FUZZ_CHECK(fuzz_utf8_valid(h->error, strlen(h->error)), "error not UTF-8: %s", h->error);
        return;
    }
    FUZZ_CHECK(rc == 0, "rc %d", rc);
    FUZZ_CHECK(json_is_array(h->events), "no events array");
    FUZZ_CHECK(json_array_size(h->events) <= ADAPTER_HOOK_EVENTS_MAX, "%zu events",
               json_array_size(h->events));
    json_array_foreach(h->events, i, ev) {
        const char *type = json_string_value(json_object_get(ev, "eventType"));
        const char *from = json_string_value(json_object_get(ev, "from"));
        const char *id = json_string_value(json_object_get(ev, "id"));
        int known = 0;
        for (size_t k = 0; type != NULL && k < sizeof(types) / sizeof(types[0]); k++)
            known |= strcmp(type, types[k]) == 0;
        FUZZ_CHECK(known, "event %zu: eventType %s", i, type ? type : "(none)");
        FUZZ_CHECK(from != NULL && *from != '\0' && strlen(from) < ADAPTER_ID_MAX,
                   "event %zu: sender", i);
        FUZZ_CHECK(id != NULL && *id != '\0' && strlen(id) < ADAPTER_ID_MAX, "event %zu: id", i);
        FUZZ_CHECK(json_integer_value(json_object_get(ev, "timestamp")) >= 0, "event %zu: time", i);
        FUZZ_CHECK(json_is_object(json_object_get(ev, "data")), "event %zu: data", i);
        FUZZ_CHECK(json_object_get(ev, "platform") != NULL, "event %zu: platform", i);
    }
    if (h->challenge != NULL)
        FUZZ_CHECK(*h->challenge != '\0' && strlen(h->challenge) <= 512, "challenge");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const adapter_ops_t *const ops[] = {&adapter_facebook, &adapter_whatsapp_cloud,
                                               &adapter_slack, &adapter_slack};
    adapter_hook_t h;
    int pick, rc;

    if (size < 1)
        return 0;
    pick = data[0] % 4;
    adapter_hook_init(&h);
    rc = ops[pick]->parse_hook((const char *)data + 1, size - 1,
                               pick == 3 ? "application/x-www-form-urlencoded" : "application/json",
                               &h);
    check_hook(&h, rc);
    adapter_hook_clear(&h);
    return 0;
}
