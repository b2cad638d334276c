/* teamwork.c - the team-collaboration app-store chat API: decided by HTTP status alone, since
 * the answer bodies are barely documented. */
#include "adapter.h"

#include <stdio.h>
#include <string.h>

static const char *const secrets[] = {"apiKey", "apiToken", "moduleKey", NULL};

/* Text and image only: quick replies and captions have no place in its messages. */
static int tw_check(unsigned kind, const json_t *r, char *msg, size_t size)
{
    const char *what = json_object_get(r, "quickReplies") ? "quickReplies"
                       : json_object_get(r, "caption")    ? "caption"
                                                          : NULL;

    (void)kind;
    if (what != NULL)
        return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                  "%s is not supported on teamwork channels", what);
    return 0;
}

static int tw_build_send(const adapter_target_t *t, const json_t *response, const char *media_id,
                         adapter_call_t *out, adapter_result_t *res)
{
    const char *key = adapter_info_str(t->info, "apiKey");
    const char *s;
    unsigned kind;
    json_t *body;

    (void)media_id;
    memset(out, 0, sizeof(*out));
    if (key == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no apiKey");
    if ((kind = adapter_response_kind(&adapter_teamwork, response, res)) == 0)
        return -1;
    if (t->to == NULL || *t->to == '\0')
        return adapter_fail(res, ADAPTER_REJECTED, "teamwork: no recipient");
    if (kind == ADAPTER_NATIVE) {
        if ((body = adapter_native_message(&adapter_teamwork, response, res)) == NULL)
            return -1;
        json_object_set_new(body, "users", json_pack("[s]", t->to));
    } else if ((s = adapter_response_str(&adapter_teamwork, response,
                                         kind == ADAPTER_TEXT ? "text" : "url", res)) == NULL)
        return -1;
    else if (kind == ADAPTER_TEXT)
        body = json_pack("{s:[s],s:s,s:s}", "users", t->to, "messageType", "text", "text", s);
    else
        body = json_pack("{s:[s],s:s,s:{s:s}}", "users", t->to, "messageType", "image", "image",
                         "url", s);
    if (adapter_json_post(out, adapter_url(t->base_url, "/developer/chats/message"), body) < 0 ||
        adapter_add_header(out, "x-api-key: %s", key) < 0) {
        adapter_call_free(out);
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "teamwork: cannot build the request");
    }
    return 0;
}

/* An id the answer may carry as a string or a number, at result.<key> or <key>. */
static void tw_id(const json_t *j, const char *key, char *dst, size_t size)
{
    const json_t *v = json_object_get(json_object_get(j, "result"), key);

    if (v == NULL)
        v = json_object_get(j, key);
    if (json_is_string(v))
        adapter_copy(dst, size, json_string_value(v));
    else if (json_is_integer(v))
        snprintf(dst, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
}

static void tw_parse_send(const adapter_target_t *t, const adapter_answer_t *a,
                          adapter_result_t *res)
{
    json_t *j = a->status != 0 ? adapter_answer_json(a) : NULL;
    const char *message = json_string_value(json_object_get(j, "message"));
    adapter_status_t st;
    char text[128];

    if (a->status >= 200 && a->status < 300) {
        res->status = ADAPTER_OK;
        tw_id(j, "messageId", res->message_id, sizeof(res->message_id));
        tw_id(j, "chatId", res->chat_id, sizeof(res->chat_id));
        if (res->chat_id[0] == '\0')
            adapter_copy(res->chat_id, sizeof(res->chat_id), t->to);
        json_decref(j);
        return;
    }
    if (a->status == 0)
        st = ADAPTER_SERVER_ERROR;
    else if (a->status == 401 || a->status == 403)
        st = ADAPTER_AUTH_INVALID;
    else if (a->status == 404)
        st = ADAPTER_RECIPIENT_INVALID;
    else if (a->status == 429)
        st = ADAPTER_RATE_LIMITED;
    else if (a->status >= 500)
        st = ADAPTER_SERVER_ERROR;
    else
        st = ADAPTER_REJECTED;
    if (a->status == 0)
        adapter_copy(text, sizeof(text), "no answer");
    else if (message != NULL && *message != '\0')
        adapter_copy_masked(text, sizeof(text), message, t->info, secrets);
    else
        snprintf(text, sizeof(text), "HTTP %ld", a->status);
    adapter_fail(res, st, "teamwork: %s", text);
    json_decref(j);
}

const adapter_ops_t adapter_teamwork = {
    .type = "teamwork",
    .api_version = "appstore-v1",
    .from_field = "tbId",
    .response_types = ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_NATIVE,
    .recipient_invalid_code = 104,
    .check = tw_check,
    .build_send = tw_build_send,
    .parse_send = tw_parse_send,
};
