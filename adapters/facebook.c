/* facebook.c - Messenger Send API: build /me/messages calls and read Graph answers. */
#include "adapter.h"

#include "../core/request.h"
#include "../json/jscan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const secrets[] = {"accessToken", NULL};

/* Decided by error.code, not by the HTTP status (platforms.md). Code 100 is decided by its
 * subcode, below. */
static const adapter_code_t codes[] = {
    {551, ADAPTER_RECIPIENT_INVALID}, {10, ADAPTER_RECIPIENT_INVALID},
    {190, ADAPTER_AUTH_INVALID},      {4, ADAPTER_RATE_LIMITED},
    {613, ADAPTER_RATE_LIMITED},      {1200, ADAPTER_SERVER_ERROR},
    {2, ADAPTER_SERVER_ERROR},        {0, ADAPTER_OK},
};

/* The start of every body: {"messaging_type":"RESPONSE", or with a messageTag (checked:
 * request_message_tag_ok) {"messaging_type":"MESSAGE_TAG","tag":"<tag>", which Messenger takes
 * outside the 24 h window (contract.md section 14). */
static void fb_type(jsonw_t *w, const char *tag)
{
    if (tag == NULL) {
        jw_lit(w, "{\"messaging_type\":\"RESPONSE\",");
        return;
    }
    jw_lit(w, "{\"messaging_type\":\"MESSAGE_TAG\",\"tag\":");
    jw_str(w, tag);
    jw_lit(w, ",");
}

/* The Send API body, written as text: json_pack and a dump of it cost more than the rest of
 * the adapter's work on a message. The strings come from parsed JSON, so they are UTF-8. */
static void fb_body(jsonw_t *w, unsigned kind, const char *to, const char *s, const char *tag)
{
    /* the framing below (69 or 129 bytes; a tag adds 12 and its quoted name), two pairs of
     * quotes and the NUL: the body is kept while the platform is waited for, so no slack but
     * for escapes */
    jw_init_size(w, strlen(to) + strlen(s) + (kind == ADAPTER_TEXT ? 74 : 134) +
                        (tag ? strlen(tag) + 12 : 0));
    fb_type(w, tag);
    jw_lit(w, "\"recipient\":{\"id\":");
    jw_str(w, to);
    if (kind == ADAPTER_TEXT) {
        jw_lit(w, "},\"message\":{\"text\":");
        jw_str(w, s);
        jw_lit(w, "}}");
    } else {
        jw_lit(w, "},\"message\":{\"attachment\":{\"type\":\"image\",\"payload\":{\"url\":");
        jw_str(w, s);
        jw_lit(w, ",\"is_reusable\":true}}}}");
    }
}

#define FB_BUTTON_TEXT_MAX 640 /* characters of a button template's text */

static int fb_check(unsigned kind, const json_t *r, char *msg, size_t size)
{
    /* an attachment has no caption nor file name: refused, not dropped (type and url alone
     * are neither) */
    if ((kind & (ADAPTER_IMAGE | ADAPTER_VIDEO | ADAPTER_FILE)) && json_object_size(r) > 2 &&
        (json_object_get(r, "caption") || json_object_get(r, "filename")))
        return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                  "%s is not supported on facebook channels",
                                  json_object_get(r, "caption") ? "caption" : "filename");
    /* a NATIVE message that types itself and a messageTag would say it twice */
    if (kind == ADAPTER_NATIVE && json_object_get(r, "messageTag") != NULL) {
        const json_t *m = json_object_get(r, "message");
        const char *own = json_object_get(m, "messaging_type") ? "messaging_type"
                          : json_object_get(m, "tag")          ? "tag"
                                                               : NULL;
        if (own != NULL)
            return adapter_check_fail(BG_ERR_MISSING_PARAM, msg, size,
                                      "messageTag and message.%s: give one of them", own);
    }
    if (kind == ADAPTER_BUTTON && adapter_chars(adapter_str(r, "text")) > FB_BUTTON_TEXT_MAX)
        return adapter_check_fail(BG_ERR_LIMIT, msg, size,
                                  "text is longer than %d characters on facebook",
                                  FB_BUTTON_TEXT_MAX);
    return 0;
}

/* The rich message objects are written as text, as fb_body does: built as jansson values and
 * dumped, they cost several times the rest of a send. The response was checked
 * (request_check_response): every member read here is there and of its type. */

/* Messenger's buttons for ours: postback, web_url, phone_number. Each object's members are read
 * in one walk (request_fields), not looked up one by one. */
static void fb_buttons(jsonw_t *w, const json_t *buttons)
{
    static const char *const names[] = {"type", "title", "payload", "url", "phone", NULL};
    const json_t *b, *v[5];
    size_t i;

    jw_lit(w, "[");
    json_array_foreach(buttons, i, b) {
        const char *type;
        request_fields(b, names, v);
        type = json_string_value(v[0]);
        jw_lit(w, i ? ",{\"type\":" : "{\"type\":");
        if (strcmp(type, "url") == 0) {
            jw_lit(w, "\"web_url\",\"url\":");
            jw_str(w, json_string_value(v[3]));
        } else {
            jw_lit(w, strcmp(type, "phone") == 0 ? "\"phone_number\",\"payload\":"
                                                 : "\"postback\",\"payload\":");
            jw_str(w, json_string_value(strcmp(type, "phone") == 0 ? v[4] : v[2]));
        }
        jw_lit(w, ",\"title\":");
        jw_str(w, json_string_value(v[1]));
        jw_lit(w, "}");
    }
    jw_lit(w, "]");
}

/* ,"key":"value" when v is a string. */
static void fb_opt(jsonw_t *w, const char *key, const json_t *v)
{
    const char *s = json_string_value(v);

    if (s == NULL)
        return;
    jw_lit(w, key);
    jw_str(w, s);
}

/* The message object of the types beyond plain text and image (contract.md section 11). */
static void fb_message(jsonw_t *w, unsigned kind, const json_t *r)
{
    static const char *const top[] = {"text", "quickReplies", "buttons", "cards", "url", NULL};
    static const char *const qr_names[] = {"title", "payload", NULL};
    static const char *const card_names[] = {"title", "subtitle", "imageUrl", "buttons", NULL};
    const json_t *item, *m[5], *v[4];
    size_t i;

    request_fields(r, top, m);
    switch (kind) {
    case ADAPTER_TEXT:
        jw_lit(w, "{\"text\":");
        jw_str(w, json_string_value(m[0]));
        jw_lit(w, ",\"quick_replies\":[");
        json_array_foreach(m[1], i, item) {
            request_fields(item, qr_names, v);
            jw_lit(w, i ? ",{\"content_type\":\"text\",\"title\":"
                        : "{\"content_type\":\"text\",\"title\":");
            jw_str(w, json_string_value(v[0]));
            jw_lit(w, ",\"payload\":");
            jw_str(w, json_string_value(v[1]));
            jw_lit(w, "}");
        }
        jw_lit(w, "]}");
        return;
    case ADAPTER_BUTTON:
        jw_lit(w, "{\"attachment\":{\"type\":\"template\",\"payload\":{\"template_type\":"
                  "\"button\",\"text\":");
        jw_str(w, json_string_value(m[0]));
        jw_lit(w, ",\"buttons\":");
        fb_buttons(w, m[2]);
        jw_lit(w, "}}}");
        return;
    case ADAPTER_CAROUSEL:
        jw_lit(w, "{\"attachment\":{\"type\":\"template\",\"payload\":{\"template_type\":"
                  "\"generic\",\"elements\":[");
        json_array_foreach(m[3], i, item) {
            request_fields(item, card_names, v);
            jw_lit(w, i ? ",{\"title\":" : "{\"title\":");
            jw_str(w, json_string_value(v[0]));
            fb_opt(w, ",\"subtitle\":", v[1]);
            fb_opt(w, ",\"image_url\":", v[2]);
            if (v[3] != NULL) {
                jw_lit(w, ",\"buttons\":");
                fb_buttons(w, v[3]);
            }
            jw_lit(w, "}");
        }
        jw_lit(w, "]}}}");
        return;
    default: /* IMAGE (with a caption refused by fb_check), VIDEO, AUDIO, FILE */
        jw_lit(w, kind == ADAPTER_VIDEO   ? "{\"attachment\":{\"type\":\"video\""
                  : kind == ADAPTER_AUDIO ? "{\"attachment\":{\"type\":\"audio\""
                  : kind == ADAPTER_FILE  ? "{\"attachment\":{\"type\":\"file\""
                                          : "{\"attachment\":{\"type\":\"image\"");
        jw_lit(w, ",\"payload\":{\"url\":");
        jw_str(w, json_string_value(m[4]));
        jw_lit(w, ",\"is_reusable\":true}}}");
        return;
    }
}

/* A NATIVE body: the page's own Send API fields, then the messaging type unless the message
 * says (a MESSAGE_TAG outside the window) and the recipient, which botgate sets. Written as
 * text in the order a copy of the message with both set would be dumped in: a member it has
 * keeps its place. With a messageTag (fb_check: then the message has no type of its own), the
 * tag goes first, as in every other body. */
static int fb_native_body(jsonw_t *w, const json_t *r, const char *to, const char *tag,
                          adapter_result_t *res)
{
    const json_t *message = json_object_get(r, "message");
    const char *key;
    json_t *v;
    int first = 1, typed = 0, addressed = 0;

    if (!json_is_object(message))
        return adapter_fail(res, ADAPTER_REJECTED,
                            "facebook: NATIVE response has no message object");
    jw_init(w);
    if (tag != NULL) {
        fb_type(w, tag);
        w->len--; /* its comma: the first member below writes one */
        first = 0;
        typed = 1;
    }
    json_object_foreach((json_t *)message, key, v) {
        jw_lit(w, first ? "{" : ",");
        first = 0;
        jw_str(w, key);
        jw_lit(w, ":");
        if (strcmp(key, "recipient") == 0) {
            addressed = 1;
            jw_lit(w, "{\"id\":");
            jw_str(w, to);
            jw_lit(w, "}");
            continue;
        }
        typed |= strcmp(key, "messaging_type") == 0;
        jw_json(w, v);
    }
    jw_lit(w, first ? "{" : ",");
    if (!typed)
        jw_lit(w, addressed ? "\"messaging_type\":\"RESPONSE\"}"
                            : "\"messaging_type\":\"RESPONSE\",\"recipient\":{\"id\":");
    else if (!addressed)
        jw_lit(w, "\"recipient\":{\"id\":");
    if (!addressed) {
        jw_str(w, to);
        jw_lit(w, "}}");
    } else if (typed) {
        w->len--; /* the comma: every member was there */
        jw_lit(w, "}");
    }
    return 0;
}

/* The body of a rich type, in w as text. */
static int fb_rich_body(unsigned kind, const json_t *r, const char *to, const char *tag, jsonw_t *w,
                        adapter_result_t *res)
{
    if (kind == ADAPTER_NATIVE)
        return fb_native_body(w, r, to, tag, res);
    jw_init(w);
    fb_type(w, tag);
    jw_lit(w, "\"recipient\":{\"id\":");
    jw_str(w, to);
    jw_lit(w, "},\"message\":");
    fb_message(w, kind, r);
    jw_lit(w, "}");
    return 0;
}

static int fb_build_send(const adapter_target_t *t, const json_t *response, const char *media_id,
                         adapter_call_t *out, adapter_result_t *res)
{
    const char *token = adapter_info_str(t->info, "accessToken"), *s;
    const char *tag = adapter_str(response, "messageTag");
    unsigned kind;
    char *enc, *url;
    jsonw_t body;

    (void)media_id;
    memset(out, 0, sizeof(*out));
    if (token == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no accessToken");
    if ((kind = adapter_response_kind(&adapter_facebook, response, res)) == 0)
        return -1;
    if (t->to == NULL || *t->to == '\0')
        return adapter_fail(res, ADAPTER_REJECTED, "facebook: no recipient");
    /* a TEXT or an IMAGE with more than its type and one field has quick replies, a caption
     * (or a fallback): written by the rich path */
    if ((kind != ADAPTER_TEXT && kind != ADAPTER_IMAGE) ||
        (json_object_size(response) > 2 && (json_object_get(response, "quickReplies") != NULL ||
                                            json_object_get(response, "caption") != NULL))) {
        if (fb_rich_body(kind, response, t->to, tag, &body, res) < 0)
            return -1;
    } else {
        if ((s = adapter_response_str(&adapter_facebook, response,
                                      kind == ADAPTER_TEXT ? "text" : "url", res)) == NULL)
            return -1;
        fb_body(&body, kind, t->to, s, tag);
    }
    enc = adapter_urlencode(token);
    url = enc ? adapter_url(t->base_url, "/me/messages?access_token=%s", enc) : NULL;
    free(enc);
    if (adapter_json_post_text(out, url, &body) < 0)
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: cannot build the request");
    return 0;
}

static void fb_error(const adapter_target_t *t, const adapter_answer_t *a,
                     const adapter_graph_error_t *ge, adapter_result_t *res)
{
    adapter_status_t st = a->status == 429   ? ADAPTER_RATE_LIMITED
                          : a->status >= 500 ? ADAPTER_SERVER_ERROR
                                             : ADAPTER_REJECTED;
    /* room for a window refusal's whole message (about 150 bytes), and for the code after it */
    char text[ADAPTER_ERROR_MAX - 32];

    if (ge->code == 100)
        st = ge->subcode == 2018001 ? ADAPTER_RECIPIENT_INVALID : ADAPTER_REJECTED;
    else if (ge->code == 10 && ge->subcode == 2018278)
        st = ADAPTER_WINDOW_CLOSED; /* sent outside the 24 h window without a tag */
    else
        st = adapter_code_status(codes, ge->code, st);
    adapter_copy_masked(text, sizeof(text), ge->message, t->info, secrets);
    adapter_fail(res, st, "facebook: %s (code %ld)", text, ge->code);
    res->platform_code = ge->code;
}

/* Whether the text holds a backslash or the bytes "error" in quotes. */
static int fb_plain_no_error(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\')
            return 0;
        if (s[i] == '"' && n - i >= 7 && memcmp(s + i, "\"error\"", 7) == 0)
            return 0;
    }
    return 1;
}

/* The usual answer, {"recipient_id":...,"message_id":...}, read without building it: with no
 * backslash every key is written as it is meant, so the scan sees exactly the keys that
 * jansson would, and with no "error" there is no error object. Anything else is read in
 * full by fb_parse_send. Returns 1 when the answer was read here. */
static int fb_parse_plain(const adapter_answer_t *a, adapter_result_t *res)
{
    static const char *const keys[] = {"message_id", "recipient_id"};
    char *v[2];
    int done = 0;

    if (a->status < 200 || a->status >= 300 || a->body == NULL ||
        !fb_plain_no_error(a->body, a->body_len) ||
        jscan_strings(a->body, a->body_len, keys, 2, v) < 0)
        return 0;
    if (v[0] != NULL && v[0][0] != '\0') {
        res->status = ADAPTER_OK;
        adapter_copy(res->message_id, sizeof(res->message_id), v[0]);
        adapter_copy(res->chat_id, sizeof(res->chat_id), v[1]);
        done = 1;
    }
    free(v[0]);
    free(v[1]);
    return done;
}

static void fb_parse_send(const adapter_target_t *t, const adapter_answer_t *a,
                          adapter_result_t *res)
{
    json_t *j;
    const char *mid;
    adapter_graph_error_t ge;

    if (fb_parse_plain(a, res))
        return;
    j = a->status != 0 ? adapter_answer_json(a) : NULL;
    mid = json_string_value(json_object_get(j, "message_id"));
    if (a->status == 0)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: no answer");
    else if (!json_is_object(j))
        adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: unreadable answer (HTTP %ld)",
                     a->status);
    else if (adapter_graph_error(j, &ge) == 0)
        fb_error(t, a, &ge, res);
    else if (a->status >= 200 && a->status < 300 && mid != NULL && *mid != '\0') {
        res->status = ADAPTER_OK;
        adapter_copy(res->message_id, sizeof(res->message_id), mid);
        adapter_copy(res->chat_id, sizeof(res->chat_id),
                     json_string_value(json_object_get(j, "recipient_id")));
    } else if (a->status >= 300 && a->status < 500)
        adapter_fail(res, ADAPTER_REJECTED, "facebook: HTTP %ld", a->status);
    else if (a->status < 300)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: answer without message_id");
    else
        adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: HTTP %ld", a->status);
    json_decref(j);
}

/* ---- webhooks in (platforms.md: "facebook", Webhook) ---- */

/* One messaging item of an entry: a message (a quick-reply tap is a postback), a postback, a
 * delivery or a read. Echoes of the page's own messages and kinds botgate does not report are
 * skipped. */
static int fb_hook_item(adapter_hook_t *h, json_t *m)
{
    const char *from = json_string_value(json_object_get(json_object_get(m, "sender"), "id"));
    int64_t ts = adapter_hook_time(json_object_get(m, "timestamp"), 1);
    json_t *msg = json_object_get(m, "message"), *pb = json_object_get(m, "postback");
    json_t *dl = json_object_get(m, "delivery"), *rd = json_object_get(m, "read");
    char id[ADAPTER_ID_MAX];

    if (!json_is_object(m))
        return adapter_hook_fail(h, "facebook: a messaging item is not an object");
    if (json_is_object(msg)) {
        const char *mid = json_string_value(json_object_get(msg, "mid"));
        json_t *qr = json_object_get(msg, "quick_reply"),
               *att = json_object_get(msg, "attachments");
        const char *text = json_string_value(json_object_get(msg, "text"));
        if (json_is_true(json_object_get(msg, "is_echo")))
            return 0;
        if (json_is_object(qr))
            return adapter_hook_tap(h, from, mid, ts,
                                    json_string_value(json_object_get(qr, "payload")), text, m);
        if (text != NULL)
            return adapter_hook_add(h, "INBOUND", from, mid, ts,
                                    json_pack("{s:s,s:s}", "type", "TEXT", "text", text), m);
        if (json_array_size(att) > 0) {
            json_t *a = json_array_get(att, 0);
            const char *type = json_string_value(json_object_get(a, "type"));
            const char *url =
                json_string_value(json_object_get(json_object_get(a, "payload"), "url"));
            return adapter_hook_add(h, "INBOUND", from, mid, ts,
                                    adapter_hook_media(type ? type : "unknown", url), m);
        }
        return adapter_hook_add(h, "INBOUND", from, mid, ts, json_pack("{s:s}", "type", "UNKNOWN"),
                                m);
    }
    if (json_is_object(pb)) {
        const char *mid = json_string_value(json_object_get(pb, "mid"));
        if (mid == NULL) { /* older postbacks carry no id: the sender and time name it */
            snprintf(id, sizeof(id), "postback:%.100s:%lld", from ? from : "", (long long)ts);
            mid = id;
        }
        return adapter_hook_tap(h, from, mid, ts, json_string_value(json_object_get(pb, "payload")),
                                json_string_value(json_object_get(pb, "title")), m);
    }
    if (json_is_object(dl) || json_is_object(rd)) {
        json_t *o = json_is_object(dl) ? dl : rd;
        int64_t wm = adapter_hook_time(json_object_get(o, "watermark"), 1);
        json_t *mids = json_object_get(o, "mids"), *data;
        snprintf(id, sizeof(id), "%s:%lld", o == dl ? "delivery" : "read", (long long)wm);
        data = json_pack("{s:I}", "watermark", (json_int_t)wm);
        if (json_is_array(mids))
            json_object_set(data, "messageIds", mids);
        return adapter_hook_add(h, o == dl ? "DELIVERED" : "READ", from, id, ts, data, m);
    }
    return 0;
}

static int fb_parse_hook(const char *body, size_t len, const char *content_type, adapter_hook_t *h)
{
    json_t *j = adapter_hook_json(body, len, h), *entry;
    size_t i, k;
    int rc = 0;

    (void)content_type;
    if (j == NULL)
        return -1;
    entry = json_object_get(j, "entry");
    if (!json_is_string(json_object_get(j, "object")) ||
        strcmp(json_string_value(json_object_get(j, "object")), "page") != 0)
        rc = adapter_hook_fail(h, "facebook: object is not \"page\"");
    else if (!json_is_array(entry))
        rc = adapter_hook_fail(h, "facebook: entry is not an array");
    for (i = 0; rc == 0 && i < json_array_size(entry); i++) {
        json_t *msgs = json_object_get(json_array_get(entry, i), "messaging");
        if (msgs != NULL && !json_is_array(msgs))
            rc = adapter_hook_fail(h, "facebook: entry[%zu].messaging is not an array", i);
        for (k = 0; rc == 0 && k < json_array_size(msgs); k++)
            rc = fb_hook_item(h, json_array_get(msgs, k));
    }
    json_decref(j);
    return rc;
}

const adapter_ops_t adapter_facebook = {
    .type = "facebook",
    .api_version = "v19.0",
    .from_field = "pageId",
    .response_types = ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_VIDEO | ADAPTER_AUDIO | ADAPTER_FILE |
                      ADAPTER_BUTTON | ADAPTER_CAROUSEL | ADAPTER_NATIVE,
    .recipient_invalid_code = 104,
    .message_tags = 1,
    .check = fb_check,
    .build_send = fb_build_send,
    .parse_send = fb_parse_send,
    .parse_hook = fb_parse_hook,
};
