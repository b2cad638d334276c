/* slack.c - Slack chat.postMessage: answers are HTTP 200 with "ok" and an error name. */
#include "adapter.h"

#include <string.h>

/* The longest Retry-After that chat.postMessage's limit of about one message a second per
 * conversation asks for: Slack answers that limit and the app's per-workspace limits (counted
 * per minute) alike, HTTP 429 "ratelimited", and tells them apart only by the wait. */
#define CONVERSATION_WAIT_MAX_S 1

static const char *const secrets[] = {
    "botAccessToken", "accessToken", "appAccessToken", "signingSecret", "webhookToken",
    "token",          NULL};

static const struct {
    const char *name;
    adapter_status_t status;
} errors[] = {
    {"channel_not_found", ADAPTER_RECIPIENT_INVALID}, {"not_in_channel", ADAPTER_RECIPIENT_INVALID},
    {"user_not_found", ADAPTER_RECIPIENT_INVALID},    {"is_archived", ADAPTER_RECIPIENT_INVALID},
    {"invalid_auth", ADAPTER_AUTH_INVALID},           {"not_authed", ADAPTER_AUTH_INVALID},
    {"token_revoked", ADAPTER_AUTH_INVALID},          {"account_inactive", ADAPTER_AUTH_INVALID},
    {"token_expired", ADAPTER_AUTH_INVALID},          {"ratelimited", ADAPTER_RATE_LIMITED},
    {"internal_error", ADAPTER_SERVER_ERROR},         {"fatal_error", ADAPTER_SERVER_ERROR},
    {"service_unavailable", ADAPTER_SERVER_ERROR},    {"request_timeout", ADAPTER_SERVER_ERROR},
};

static int slack_build_send(const adapter_target_t *t, const json_t *response, const char *media_id,
                            adapter_call_t *out, adapter_result_t *res)
{
    const char *token = adapter_info_str(t->info, "botAccessToken");
    const char *s;
    unsigned kind;
    json_t *body;

    (void)media_id;
    memset(out, 0, sizeof(*out));
    if (token == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no botAccessToken");
    if ((kind = adapter_response_kind(&adapter_slack, response, res)) == 0)
        return -1;
    if (t->to == NULL || *t->to == '\0')
        return adapter_fail(res, ADAPTER_REJECTED, "slack: no recipient");
    if ((s = adapter_response_str(&adapter_slack, response, kind == ADAPTER_TEXT ? "text" : "url",
                                  res)) == NULL)
        return -1;
    if (kind == ADAPTER_TEXT)
        body = json_pack("{s:s,s:s}", "channel", t->to, "text", s);
    else
        body = json_pack("{s:s,s:s,s:[{s:s,s:s,s:s}]}", "channel", t->to, "text", "image", "blocks",
                         "type", "image", "image_url", s, "alt_text", "image");
    if (adapter_json_post(out, adapter_url(t->base_url, "/chat.postMessage"), body) < 0 ||
        adapter_add_header(out, "Authorization: Bearer %s", token) < 0) {
        adapter_call_free(out);
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "slack: cannot build the request");
    }
    return 0;
}

/* A rate-limit answer: the wait it asks for, and whose limit it was. A short wait is the
 * conversation's (only it is paused: the bot's other conversations go on); a longer one, or none
 * (the workspace's message limit says none), is the bot's. */
static void slack_rate_limited(const adapter_target_t *t, const adapter_answer_t *a,
                               adapter_result_t *res)
{
    res->retry_after_s = adapter_retry_after(a->retry_after, t->now_ms);
    res->rate_recipient = res->retry_after_s >= 0 && res->retry_after_s <= CONVERSATION_WAIT_MAX_S;
}

static void slack_error(const adapter_target_t *t, const adapter_answer_t *a, const char *name,
                        adapter_result_t *res)
{
    adapter_status_t st = ADAPTER_REJECTED;
    char text[96];

    for (size_t i = 0; name != NULL && i < sizeof(errors) / sizeof(errors[0]); i++)
        if (strcmp(errors[i].name, name) == 0)
            st = errors[i].status;
    adapter_copy_masked(text, sizeof(text), name ? name : "unknown error", t->info, secrets);
    adapter_fail(res, st, "slack: %s", text);
    if (st == ADAPTER_RATE_LIMITED)
        slack_rate_limited(t, a, res);
}

static void slack_parse_send(const adapter_target_t *t, const adapter_answer_t *a,
                             adapter_result_t *res)
{
    json_t *j = a->status != 0 ? adapter_answer_json(a) : NULL;
    const json_t *ok = json_object_get(j, "ok");
    const char *channel = json_string_value(json_object_get(j, "channel"));

    if (a->status == 0) {
        adapter_fail(res, ADAPTER_SERVER_ERROR, "slack: no answer");
    } else if (a->status == 429) {
        adapter_fail(res, ADAPTER_RATE_LIMITED, "slack: rate limited (HTTP 429)");
        slack_rate_limited(t, a, res);
    } else if (json_is_true(ok) && a->status >= 200 && a->status < 300) {
        res->status = ADAPTER_OK;
        adapter_copy(res->message_id, sizeof(res->message_id),
                     json_string_value(json_object_get(j, "ts")));
        adapter_copy(res->chat_id, sizeof(res->chat_id), channel && *channel ? channel : t->to);
    } else if (json_is_false(ok)) {
        slack_error(t, a, json_string_value(json_object_get(j, "error")), res);
    } else if (!json_is_object(j) || a->status < 300 || a->status >= 500) {
        adapter_fail(res, ADAPTER_SERVER_ERROR, "slack: unusable answer (HTTP %ld)", a->status);
    } else {
        adapter_fail(res, ADAPTER_REJECTED, "slack: HTTP %ld", a->status);
    }
    json_decref(j);
}

const adapter_ops_t adapter_slack = {
    .type = "slack",
    .api_version = "web-api",
    .from_field = "botId",
    .response_types = ADAPTER_TEXT | ADAPTER_IMAGE,
    .recipient_invalid_code = 104,
    .build_send = slack_build_send,
    .parse_send = slack_parse_send,
};
