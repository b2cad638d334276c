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
    json_object_del(data, "fallback");
    json_object_set_new(ev, "from", result_address(from));
    json_object_set_new(ev, "to", result_address(to));
    json_object_set_new(ev, "data", data);
    json_object_set(ev, "type", json_object_get(response, "type"));
    json_object_set_new(ev, "timestamp", json_integer(timestamp_ms));
    if (message_id != NULL)
        json_object_set_new(ev, "messageId", json_string(message_id));
    return ev;
}

void result_write_data(jsonw_t *w, const json_t *response)
{
    const char *key;
    json_t *value;
    int first = 1;

    jw_lit(w, "{");
    json_object_foreach((json_t *)response, key, value) {
        /* what was asked: a fallback is the element's fallbackUsed */
        if (strcmp(key, "type") == 0 || strcmp(key, "fallback") == 0)
            continue;
        if (!first)
            jw_lit(w, ",");
        first = 0;
        jw_str(w, key);
        jw_lit(w, ":");
        jw_json(w, value);
    }
    jw_lit(w, "}");
}

static void write_event(jsonw_t *w, const result_event_t *ev)
{
    jw_lit(w, "{\"from\":");
    jw_addr(w, ev->from);
    jw_lit(w, ",\"to\":");
    jw_addr(w, ev->to);
    jw_lit(w, ",\"data\":");
    if (ev->response != NULL) {
        result_write_data(w, ev->response);
        jw_lit(w, ",\"type\":");
        jw_str(w, json_string_value(json_object_get(ev->response, "type")));
    } else {
        const char *data = ev->data ? ev->data : "{}";
        jw_raw(w, data, strlen(data));
        jw_lit(w, ",\"type\":");
        jw_str(w, ev->type);
    }
    jw_lit(w, ",\"timestamp\":");
    jw_int(w, ev->timestamp_ms);
    if (ev->message_id != NULL) {
        jw_lit(w, ",\"messageId\":");
        jw_str(w, ev->message_id);
    }
    jw_lit(w, "}");
}

void result_write_sent(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                       const json_t *meta, const char *api_version)
{
    jw_lit(w, "{\"result\":{\"messages\":[{\"id\":");
    jw_str(w, ev->message_id);
    jw_lit(w, "}],\"meta\":");
    if (json_is_object(meta)) {
        jw_json(w, meta);
    } else {
        jw_lit(w, "{\"api_status\":\"stable\",\"version\":");
        jw_str(w, api_version);
        jw_lit(w, "}");
    }
    jw_lit(w, "},\"messageEvent\":");
    write_event(w, ev);
    jw_lit(w, ",\"chatId\":");
    jw_str(w, chat_id);
    jw_lit(w, "}");
}

void result_write_failed(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                         const bg_error_t *err)
{
    result_write_failed_after(w, ev, chat_id, err, 0);
}

void result_write_failed_after(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                               const bg_error_t *err, int64_t retry_after_ms)
{
    jw_lit(w, "{\"messageEvent\":");
    write_event(w, ev);
    jw_lit(w, ",\"chatId\":");
    jw_str(w, chat_id);
    jw_lit(w, ",\"error\":{\"err_code\":");
    jw_int(w, err->code > 0 ? err->code : BG_ERR_PLATFORM);
    jw_lit(w, ",\"err\":");
    jw_str(w, err->msg);
    if (retry_after_ms > 0) {
        jw_lit(w, ",\"retryAfterMs\":");
        jw_int(w, retry_after_ms);
    }
    jw_lit(w, "}}");
}

/* {"ok":1 or the failure's fields, "member":.., "sendResult":{..}}: the one shape of both. */
static void write_answer(jsonw_t *w, const bg_error_t *err, const char *member_id, int send_ok,
                         const char *elements, size_t len)
{
    if (err == NULL) {
        jw_lit(w, "{\"ok\":1,\"member\":");
    } else {
        jw_lit(w, "{\"ok\":0,\"err_code\":");
        jw_int(w, err->code);
        jw_lit(w, ",\"err\":");
        jw_str(w, err->msg);
        jw_lit(w, ",\"error\":");
        jw_str(w, err->msg);
        jw_lit(w, ",\"member\":");
    }
    jw_str(w, member_id);
    jw_lit(w, send_ok ? ",\"sendResult\":{\"ok\":1,\"member\":"
                      : ",\"sendResult\":{\"ok\":0,\"member\":");
    jw_str(w, member_id);
    jw_lit(w, ",\"result\":[");
    jw_raw(w, elements, len);
    jw_lit(w, "]}}");
}

void result_write_answer(jsonw_t *w, const char *member_id, int send_ok, const char *elements,
                         size_t len)
{
    write_answer(w, NULL, member_id, send_ok, elements, len);
}

void result_write_cut_answer(jsonw_t *w, const bg_error_t *err, const char *member_id,
                             const char *elements, size_t len)
{
    write_answer(w, err, member_id, 0, elements, len);
}

json_t *result_node_element(json_t *event, const bg_error_t *err)
{
    return result_node_element_after(event, err, 0);
}

json_t *result_node_element_after(json_t *event, const bg_error_t *err, int64_t retry_after_ms)
{
    json_t *el = json_object();

    json_object_set_new(el, "ok", json_integer(err == NULL));
    if (event != NULL)
        json_object_set_new(el, "messageEvent", event);
    if (err != NULL) {
        json_t *e = bg_error_element_json(err);
        if (retry_after_ms > 0)
            json_object_set_new(e, "retryAfterMs", json_integer(retry_after_ms));
        json_object_set_new(el, "error", e);
    }
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
