/* slack.c - Slack chat.postMessage: answers are HTTP 200 with "ok" and an error name. */
#include "adapter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

#define SLACK_SECTION_MAX 3000 /* characters of a section's text */
#define SLACK_OPTION_MAX  75   /* characters of a select option's text and description */

static int slack_check(unsigned kind, const json_t *r, char *msg, size_t size)
{
    const json_t *cards = json_object_get(r, "cards"), *item, *row;
    const char *text = adapter_str(r, "text");
    size_t i, j;

    if (kind == ADAPTER_BUTTON) {
        json_array_foreach(json_object_get(r, "buttons"), i, item)
            if (strcmp(adapter_str(item, "type"), "phone") == 0)
                return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                          "buttons[%zu]: phone buttons are not supported on slack "
                                          "channels",
                                          i);
    }
    json_array_foreach(cards, i, item) {
        const json_t *b;
        json_array_foreach(json_object_get(item, "buttons"), j, b)
            if (strcmp(adapter_str(b, "type"), "phone") == 0)
                return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                          "cards[%zu].buttons[%zu]: phone buttons are not "
                                          "supported on slack channels",
                                          i, j);
    }
    if ((kind == ADAPTER_BUTTON || kind == ADAPTER_LIST ||
         (kind == ADAPTER_TEXT && json_object_get(r, "quickReplies"))) &&
        adapter_chars(text) > SLACK_SECTION_MAX)
        return adapter_check_fail(BG_ERR_LIMIT, msg, size,
                                  "text is longer than %d characters on slack channels",
                                  SLACK_SECTION_MAX);
    if (kind == ADAPTER_LIST) {
        json_array_foreach(json_object_get(r, "sections"), i, item) {
            json_array_foreach(json_object_get(item, "rows"), j, row) {
                const char *what =
                    adapter_chars(adapter_str(row, "title")) > SLACK_OPTION_MAX ? "title"
                    : adapter_chars(adapter_str(row, "description")) > SLACK_OPTION_MAX
                        ? "description"
                        : NULL;
                if (what != NULL)
                    return adapter_check_fail(BG_ERR_LIMIT, msg, size,
                                              "sections[%zu].rows[%zu].%s is longer than %d "
                                              "characters on slack channels",
                                              i, j, what, SLACK_OPTION_MAX);
            }
        }
    }
    return 0;
}

static json_t *plain(const char *s)
{
    return json_pack("{s:s,s:s}", "type", "plain_text", "text", s);
}

static json_t *section(const char *mrkdwn)
{
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "section", "text", "type", "mrkdwn", "text",
                     mrkdwn);
}

/* An actions block of buttons: postback (and quick replies) carry their payload as the value,
 * url buttons open it. action_id is unique within the message. */
static json_t *actions(const json_t *buttons, const char *prefix)
{
    json_t *elements = json_array();
    const json_t *b;
    char id[64];
    size_t i;

    json_array_foreach(buttons, i, b) {
        const char *url = adapter_str(b, "url");
        json_t *e;
        snprintf(id, sizeof(id), "%s%zu", prefix, i);
        e = json_pack("{s:s,s:o,s:s}", "type", "button", "text", plain(adapter_str(b, "title")),
                      "action_id", id);
        if (url != NULL)
            json_object_set_new(e, "url", json_string(url));
        else
            json_object_set_new(e, "value", json_string(adapter_str(b, "payload")));
        json_array_append_new(elements, e);
    }
    return json_pack("{s:s,s:o}", "type", "actions", "elements", elements);
}

/* s with Slack's three control characters escaped, for a <url|label> link. */
static void mrkdwn_escaped(jsonw_t *w, const char *s)
{
    for (; *s; s++) {
        if (*s == '&')
            jw_lit(w, "&amp;");
        else if (*s == '<')
            jw_lit(w, "&lt;");
        else if (*s == '>')
            jw_lit(w, "&gt;");
        else
            jw_raw(w, s, 1);
    }
}

/* A media link as mrkdwn: "caption\n<url|filename>", the label falling back to the url. The
 * writer is used as a plain byte buffer here. */
static char *media_link(const json_t *r)
{
    const char *url = adapter_str(r, "url"), *caption = adapter_str(r, "caption");
    const char *name = adapter_str(r, "filename");
    jsonw_t w;
    size_t len;

    jw_init(&w);
    if (caption != NULL && name != NULL) {
        jw_raw(&w, caption, strlen(caption));
        jw_lit(&w, "\n");
    }
    jw_lit(&w, "<");
    mrkdwn_escaped(&w, url);
    jw_lit(&w, "|");
    mrkdwn_escaped(&w, name ? name : caption ? caption : url);
    jw_lit(&w, ">");
    return jw_steal(&w, &len);
}

/* The blocks of the types beyond plain text and image, and the plain text that notifications
 * show (*text points into r or is "image"). */
static json_t *slack_blocks(unsigned kind, const json_t *r, const char **text, char **owned)
{
    const json_t *item;
    json_t *blocks = json_array(), *b;
    size_t i;
    char prefix[32];

    *text = adapter_str(r, "text");
    *owned = NULL;
    switch (kind) {
    case ADAPTER_TEXT:
        json_array_append_new(blocks, section(*text));
        json_array_append_new(blocks, actions(json_object_get(r, "quickReplies"), "qr"));
        break;
    case ADAPTER_IMAGE:
        *text = adapter_str(r, "caption");
        json_array_append_new(blocks, json_pack("{s:s,s:s,s:s,s:o}", "type", "image", "image_url",
                                                adapter_str(r, "url"), "alt_text", *text, "title",
                                                plain(*text)));
        break;
    case ADAPTER_VIDEO:
    case ADAPTER_AUDIO:
    case ADAPTER_FILE:
        if ((*owned = media_link(r)) == NULL)
            break;
        *text = adapter_str(r, "caption");
        if (*text == NULL)
            *text = adapter_str(r, "filename");
        if (*text == NULL)
            *text = adapter_str(r, "url");
        json_array_append_new(blocks, section(*owned));
        break;
    case ADAPTER_BUTTON:
        json_array_append_new(blocks, section(*text));
        json_array_append_new(blocks, actions(json_object_get(r, "buttons"), "b"));
        break;
    case ADAPTER_CAROUSEL:
        json_array_foreach(json_object_get(r, "cards"), i, item) {
            const char *title = adapter_str(item, "title"), *sub = adapter_str(item, "subtitle");
            const char *image = adapter_str(item, "imageUrl");
            char *md = NULL;
            if (i == 0)
                *text = title;
            if (asprintf(&md, "*%s*%s%s", title, sub ? "\n" : "", sub ? sub : "") < 0)
                md = NULL;
            b = section(md ? md : title);
            free(md);
            if (image != NULL)
                json_object_set_new(b, "accessory",
                                    json_pack("{s:s,s:s,s:s}", "type", "image", "image_url", image,
                                              "alt_text", title));
            json_array_append_new(blocks, b);
            if (json_object_get(item, "buttons") != NULL) {
                snprintf(prefix, sizeof(prefix), "c%zu_", i);
                json_array_append_new(blocks, actions(json_object_get(item, "buttons"), prefix));
            }
        }
        break;
    case ADAPTER_LIST: {
        const json_t *sections = json_object_get(r, "sections"), *row;
        json_t *groups = json_array(), *select;
        size_t j;
        json_array_foreach(sections, i, item) {
            json_t *options = json_array();
            json_array_foreach(json_object_get(item, "rows"), j, row) {
                json_t *o = json_pack("{s:o,s:s}", "text", plain(adapter_str(row, "title")),
                                      "value", adapter_str(row, "id"));
                if (adapter_str(row, "description") != NULL)
                    json_object_set_new(o, "description", plain(adapter_str(row, "description")));
                json_array_append_new(options, o);
            }
            /* one section without a title is a plain list of options */
            if (json_array_size(sections) == 1 && adapter_str(item, "title") == NULL) {
                json_decref(groups);
                groups = options;
                break;
            }
            json_array_append_new(groups,
                                  json_pack("{s:o,s:o}", "label", plain(adapter_str(item, "title")),
                                            "options", options));
        }
        select = json_pack("{s:s,s:o,s:s}", "type", "static_select", "placeholder",
                           plain(adapter_str(r, "button")), "action_id", "list");
        json_object_set_new(select,
                            json_array_size(sections) == 1 &&
                                    adapter_str(json_array_get(sections, 0), "title") == NULL
                                ? "options"
                                : "option_groups",
                            groups);
        b = section(*text);
        json_object_set_new(b, "accessory", select);
        json_array_append_new(blocks, b);
        break;
    }
    default:
        break;
    }
    return blocks;
}

static json_t *slack_body(unsigned kind, const json_t *r, const char *to, adapter_result_t *res)
{
    const char *text;
    char *owned;
    json_t *blocks, *body;

    if (kind == ADAPTER_NATIVE) {
        if ((body = adapter_native_message(&adapter_slack, r, res)) != NULL)
            json_object_set_new(body, "channel", json_string(to));
        return body;
    }
    if (kind == ADAPTER_TEXT && json_object_get(r, "quickReplies") == NULL)
        return json_pack("{s:s,s:s}", "channel", to, "text", adapter_str(r, "text"));
    if (kind == ADAPTER_IMAGE && json_object_get(r, "caption") == NULL)
        return json_pack("{s:s,s:s,s:[{s:s,s:s,s:s}]}", "channel", to, "text", "image", "blocks",
                         "type", "image", "image_url", adapter_str(r, "url"), "alt_text", "image");
    blocks = slack_blocks(kind, r, &text, &owned);
    /* the plain text is what notifications and old clients show */
    body = json_pack("{s:s,s:s?,s:o}", "channel", to, "text", text, "blocks", blocks);
    free(owned);
    return body;
}

static int slack_build_send(const adapter_target_t *t, const json_t *response, const char *media_id,
                            adapter_call_t *out, adapter_result_t *res)
{
    const char *token = adapter_info_str(t->info, "botAccessToken");
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
    if (kind == ADAPTER_TEXT && adapter_response_str(&adapter_slack, response, "text", res) == NULL)
        return -1;
    if ((kind & ADAPTER_UPLOADED) &&
        adapter_response_str(&adapter_slack, response, "url", res) == NULL)
        return -1;
    if ((body = slack_body(kind, response, t->to, res)) == NULL && res->status != ADAPTER_OK)
        return -1;
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

/* ---- webhooks in (platforms.md: "slack", Events API and interactivity) ---- */

/* The member's address on slack is the conversation botgate posts to (chat.postMessage's
 * channel): a direct message's D..., else the user. */
static const char *slack_hook_from(json_t *channel, json_t *user)
{
    const char *c = json_is_string(channel) ? json_string_value(channel)
                                            : json_string_value(json_object_get(channel, "id"));
    return c                      ? c
           : json_is_string(user) ? json_string_value(user)
                                  : json_string_value(json_object_get(user, "id"));
}

/* Interactivity: a block_actions payload, one POSTBACK per action (a button's value, a
 * select's chosen option). Other payload types are not reported. */
static int slack_hook_actions(adapter_hook_t *h, json_t *p)
{
    const char *type = json_string_value(json_object_get(p, "type"));
    json_t *actions = json_object_get(p, "actions");
    const char *from = slack_hook_from(json_object_get(p, "channel"), json_object_get(p, "user"));
    int rc = 0;

    if (type == NULL)
        return adapter_hook_fail(h, "slack: interactivity payload without a type");
    if (strcmp(type, "block_actions") != 0)
        return 0;
    if (!json_is_array(actions))
        return adapter_hook_fail(h, "slack: block_actions without an actions array");
    for (size_t i = 0; rc == 0 && i < json_array_size(actions); i++) {
        json_t *a = json_array_get(actions, i);
        const char *ts = json_string_value(json_object_get(a, "action_ts"));
        const char *aid = json_string_value(json_object_get(a, "action_id"));
        const char *value = json_string_value(json_object_get(a, "value"));
        json_t *sel = json_object_get(a, "selected_option");
        const char *title = json_string_value(json_object_get(json_object_get(a, "text"), "text"));
        char id[ADAPTER_ID_MAX];
        if (value == NULL && json_is_object(sel)) {
            value = json_string_value(json_object_get(sel, "value"));
            title = json_string_value(json_object_get(json_object_get(sel, "text"), "text"));
        }
        snprintf(id, sizeof(id), "action:%.40s:%.100s", ts ? ts : "", aid ? aid : "");
        rc = adapter_hook_add(
            h, "POSTBACK", from, ts ? id : NULL,
            adapter_hook_time(json_object_get(a, "action_ts"), 0),
            json_pack("{s:s?,s:s?,s:s?}", "payload", value, "title", title, "actionId", aid), p);
    }
    return rc;
}

/* The Events API: url_verification (a challenge) or an event_callback whose event is a user's
 * message (the bot's own messages and edits carry bot_id or a subtype: not reported). */
static int slack_hook_event(adapter_hook_t *h, json_t *j)
{
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *ev = json_object_get(j, "event");
    const char *etype = json_string_value(json_object_get(ev, "type"));
    const char *id = json_string_value(json_object_get(j, "event_id"));

    if (type == NULL)
        return adapter_hook_fail(h, "slack: body without a type");
    if (strcmp(type, "url_verification") == 0) {
        const char *c = json_string_value(json_object_get(j, "challenge"));
        if (c == NULL || *c == '\0' || strlen(c) > 512)
            return adapter_hook_fail(h, "slack: url_verification without a usable challenge");
        h->challenge = strdup(c);
        return h->challenge ? 0 : adapter_hook_fail(h, "out of memory");
    }
    if (strcmp(type, "event_callback") != 0)
        return 0;
    if (!json_is_object(ev) || etype == NULL)
        return adapter_hook_fail(h, "slack: event_callback without an event");
    if (strcmp(etype, "message") != 0 || json_object_get(ev, "bot_id") != NULL ||
        json_object_get(ev, "subtype") != NULL)
        return 0;
    if (id == NULL)
        id = json_string_value(json_object_get(ev, "ts"));
    return adapter_hook_add(
        h, "INBOUND", slack_hook_from(json_object_get(ev, "channel"), json_object_get(ev, "user")),
        id, adapter_hook_time(json_object_get(ev, "ts"), 0),
        json_pack("{s:s,s:s?,s:s?}", "type", "TEXT", "text",
                  json_string_value(json_object_get(ev, "text")), "user",
                  json_string_value(json_object_get(ev, "user"))),
        ev);
}

static int slack_parse_hook(const char *body, size_t len, const char *content_type,
                            adapter_hook_t *h)
{
    json_t *j;
    int rc;

    if (content_type != NULL &&
        strncasecmp(content_type, "application/x-www-form-urlencoded", 33) == 0) {
        char *payload = adapter_form_value(body, len, "payload");
        if (payload == NULL)
            return adapter_hook_fail(h, "slack: form body without a payload field");
        j = adapter_hook_json(payload, strlen(payload), h);
        free(payload);
        if (j == NULL)
            return -1;
        rc = slack_hook_actions(h, j);
    } else {
        if ((j = adapter_hook_json(body, len, h)) == NULL)
            return -1;
        rc = slack_hook_event(h, j);
    }
    json_decref(j);
    return rc;
}

const adapter_ops_t adapter_slack = {
    .type = "slack",
    .api_version = "web-api",
    .from_field = "botId",
    .response_types = ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_VIDEO | ADAPTER_AUDIO | ADAPTER_FILE |
                      ADAPTER_BUTTON | ADAPTER_CAROUSEL | ADAPTER_LIST | ADAPTER_NATIVE,
    .recipient_invalid_code = 104,
    .check = slack_check,
    .build_send = slack_build_send,
    .parse_send = slack_parse_send,
    .parse_hook = slack_parse_hook,
};
