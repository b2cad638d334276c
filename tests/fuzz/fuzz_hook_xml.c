/* fuzz_hook_xml.c - libFuzzer target for WeChat's XML webhook parser (adapters/wechat.c, expat):
 * any body, DOCTYPEs and entity declarations included (refused), deep or wide trees, bad
 * encodings. On 0 every event has a known type, a sender, an id and an object of the XML's
 * fields as its platform object; on -1 a UTF-8 reason. */
#include "fuzz_util.h"

#include "adapters/adapter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    adapter_hook_t h;
    size_t i;
    json_t *ev;
    int rc;

    adapter_hook_init(&h);
    rc = adapter_wechat.parse_hook((const char *)data, size, "text/xml", &h);
    if (rc < 0) {
        FUZZ_CHECK(h.error[0] != '\0', "a refusal without a reason");
        FUZZ_CHECK(fuzz_utf8_valid(h.error, strlen(h.error)), "error not UTF-8: %s", h.error);
    } else {
        FUZZ_CHECK(rc == 0 && json_array_size(h.events) <= 1, "rc %d, %zu events", rc,
                   json_array_size(h.events));
        json_array_foreach(h.events, i, ev) {
            const char *from = json_string_value(json_object_get(ev, "from"));
            FUZZ_CHECK(from != NULL && *from != '\0', "a sender");
            FUZZ_CHECK(json_string_value(json_object_get(ev, "id")) != NULL, "an id");
            FUZZ_CHECK(json_is_object(json_object_get(ev, "platform")), "the XML's fields");
        }
        FUZZ_CHECK(h.challenge == NULL, "wechat has no challenge in a body");
    }
    adapter_hook_clear(&h);
    return 0;
}
