/* result.c - building result elements and answers. */
#include "result.h"

#include <stdlib.h>
#include <string.h>

json_t *result_address(const char *addr)
{
    size_t n;

    if (addr == NULL)
        return json_null();
    n = strlen(addr);
    if (n == 0 || n > 15 || strspn(addr, "0123456789") != n || (addr[0] == '0' && n > 1))
        return json_string(addr);
    return json_integer((json_int_t)strtoll(addr, NULL, 10));
}

json_t *result_message_event(const char *from, const char *to, const json_t *response,
                             int64_t timestamp_ms, const char *message_id)
{
    json_t *ev = json_object(), *data = json_deep_copy(response);

    json_object_del(data, "type");
    json_object_set_new(ev, "from", result_address(from));
    json_object_set_new(ev, "to", result_address(to));
    json_object_set_new(ev, "data", data);
    json_object_set(ev, "type", json_object_get(response, "type"));
    json_object_set_new(ev, "timestamp", json_integer(timestamp_ms));
    if (message_id != NULL)
        json_object_set_new(ev, "messageId", json_string(message_id));
    return ev;
}

json_t *result_send_element(const char *message_id, const char *chat_id, const json_t *meta,
                            const char *api_version, json_t *event)
{
    json_t *el = json_object(), *result = json_object(), *messages = json_array();
    json_t *msg = json_object();

    json_object_set_new(msg, "id", json_string(message_id));
    json_array_append_new(messages, msg);
    json_object_set_new(result, "messages", messages);
    if (json_is_object(meta)) {
        json_object_set_new(result, "meta", json_deep_copy(meta));
    } else {
        json_t *m = json_object();
        json_object_set_new(m, "api_status", json_string("stable"));
        json_object_set_new(m, "version", json_string(api_version));
        json_object_set_new(result, "meta", m);
    }
    json_object_set_new(el, "result", result);
    json_object_set_new(el, "messageEvent", event);
    json_object_set_new(el, "chatId", json_string(chat_id));
    return el;
}

json_t *result_send_failed(const char *chat_id, json_t *event, const bg_error_t *err)
{
    json_t *el = json_object();

    json_object_set_new(el, "messageEvent", event);
    json_object_set_new(el, "chatId", json_string(chat_id));
    json_object_set_new(el, "error", bg_error_element_json(err));
    return el;
}

json_t *result_node_element(json_t *event, const bg_error_t *err)
{
    json_t *el = json_object();

    json_object_set_new(el, "ok", json_integer(err == NULL));
    if (event != NULL)
        json_object_set_new(el, "messageEvent", event);
    if (err != NULL)
        json_object_set_new(el, "error", bg_error_element_json(err));
    return el;
}

json_t *result_answer(const char *member_id, int send_ok, json_t *results)
{
    json_t *answer = json_object(), *send = json_object();

    json_object_set_new(send, "ok", json_integer(send_ok ? 1 : 0));
    json_object_set_new(send, "member", json_string(member_id));
    json_object_set_new(send, "result", results);
    json_object_set_new(answer, "ok", json_integer(1));
    json_object_set_new(answer, "member", json_string(member_id));
    json_object_set_new(answer, "sendResult", send);
    return answer;
}
