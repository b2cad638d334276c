/* The message shapes and limits of platforms.md (contract.md section 11), as each platform
 * refuses them: a body the simulator takes is one the real platform would have taken. Where the
 * documentation is unsure, unknown members are let through. */
#include "sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers: each returns 0, or -1 with msg set ---- */

typedef struct shape {
    char *msg;
    size_t size;
} shape_t;

static int bad(shape_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(shape_t *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(s->msg, s->size, fmt, ap);
    va_end(ap);
    return -1;
}

static size_t chars(const char *p)
{
    size_t n = 0;

    for (; p && *p; p++)
        n += ((unsigned char)*p & 0xc0) != 0x80;
    return n;
}

/* A string member: required non-empty unless optional; at most max characters (0: any). */
static int str(shape_t *s, const json_t *o, const char *key, int required, size_t max,
               const char *where)
{
    const json_t *v = json_object_get(o, key);

    if (v == NULL && !required)
        return 0;
    if (!json_is_string(v) || (required && json_string_length(v) == 0))
        return bad(s, "%s.%s: a non-empty string is required", where, key);
    if (max > 0 && chars(json_string_value(v)) > max)
        return bad(s, "%s.%s: longer than %zu characters", where, key, max);
    return 0;
}

static int arr(shape_t *s, const json_t *o, const char *key, size_t min, size_t max,
               const char *where, const json_t **out)
{
    const json_t *v = json_object_get(o, key);

    *out = v;
    if (!json_is_array(v))
        return bad(s, "%s.%s: an array is required", where, key);
    if (json_array_size(v) < min || json_array_size(v) > max)
        return bad(s, "%s.%s: %zu to %zu items", where, key, min, max);
    return 0;
}

static int obj(shape_t *s, const json_t *o, const char *key, const char *where, const json_t **out)
{
    *out = json_object_get(o, key);
    if (!json_is_object(*out))
        return bad(s, "%s.%s: an object is required", where, key);
    return 0;
}

/* Members outside allowed (NULL-terminated) are refused. */
static int only(shape_t *s, const json_t *o, const char *const *allowed, const char *where)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)o, key, v) {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], key) != 0)
            i++;
        if (allowed[i] == NULL)
            return bad(s, "%s: unknown parameter %s", where, key);
    }
    return 0;
}

static int is(const json_t *o, const char *key, const char *want)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v != NULL && strcmp(v, want) == 0;
}

/* ---- facebook: Messenger Send API ---- */

static int fb_buttons(shape_t *s, const json_t *o, size_t min, const char *where)
{
    const json_t *list, *b;
    size_t i;

    if (json_object_get(o, "buttons") == NULL && min == 0)
        return 0;
    if (arr(s, o, "buttons", min ? min : 1, 3, where, &list) < 0)
        return -1;
    json_array_foreach(list, i, b) {
        if (str(s, b, "title", 1, 20, "button") < 0)
            return -1;
        if (is(b, "type", "postback")) {
            if (str(s, b, "payload", 1, 1000, "button") < 0)
                return -1;
        } else if (is(b, "type", "web_url")) {
            if (str(s, b, "url", 1, 0, "button") < 0)
                return -1;
        } else if (is(b, "type", "phone_number")) {
            if (str(s, b, "payload", 1, 0, "button") < 0)
                return -1;
            if (json_string_value(json_object_get(b, "payload"))[0] != '+')
                return bad(s, "button.payload: a phone number starts with +");
        } else {
            return bad(s, "%s.buttons[%zu].type: not a button type", where, i);
        }
    }
    return 0;
}

static int fb_attachment(shape_t *s, const json_t *a)
{
    static const char *const media[] = {"image", "video", "audio", "file", NULL};
    const json_t *payload, *list, *e;
    size_t i;

    if (obj(s, a, "payload", "message.attachment", &payload) < 0)
        return -1;
    for (i = 0; media[i]; i++)
        if (is(a, "type", media[i]))
            return json_object_get(payload, "attachment_id") != NULL
                       ? 0
                       : str(s, payload, "url", 1, 0, "message.attachment.payload");
    if (!is(a, "type", "template"))
        return bad(s, "message.attachment.type: unknown type");
    if (is(payload, "template_type", "button"))
        return str(s, payload, "text", 1, 640, "payload") < 0 ||
                       fb_buttons(s, payload, 1, "payload") < 0
                   ? -1
                   : 0;
    if (is(payload, "template_type", "generic")) {
        if (arr(s, payload, "elements", 1, 10, "payload", &list) < 0)
            return -1;
        json_array_foreach(list, i, e) {
            if (str(s, e, "title", 1, 80, "element") < 0 ||
                str(s, e, "subtitle", 0, 80, "element") < 0 ||
                str(s, e, "image_url", 0, 0, "element") < 0 || fb_buttons(s, e, 0, "element") < 0)
                return -1;
        }
        return 0;
    }
    return 0; /* media, receipt, ...: not what botgate sends, taken as they are */
}

static int fb_shape(shape_t *s, const json_t *body)
{
    static const char *const tags[] = {"ACCOUNT_UPDATE", "CONFIRMED_EVENT_UPDATE",
                                       "POST_PURCHASE_UPDATE", "HUMAN_AGENT", NULL};
    static const char *const message_keys[] = {"text", "attachment", "quick_replies", "metadata",
                                               NULL};
    const json_t *m, *list, *q, *a;
    size_t i;

    if (is(body, "messaging_type", "MESSAGE_TAG")) {
        for (i = 0; tags[i] && !is(body, "tag", tags[i]); i++)
            ;
        if (tags[i] == NULL)
            return bad(s, "tag: not a message tag");
    } else if (json_object_get(body, "messaging_type") != NULL && /* absent: taken (unsure) */
               !is(body, "messaging_type", "RESPONSE") && !is(body, "messaging_type", "UPDATE")) {
        return bad(s, "messaging_type: RESPONSE, UPDATE or MESSAGE_TAG");
    }
    if (json_object_get(body, "sender_action") != NULL)
        return 0;
    if (obj(s, body, "message", "body", &m) < 0 || only(s, m, message_keys, "message") < 0)
        return -1;
    a = json_object_get(m, "attachment");
    if ((json_object_get(m, "text") != NULL) == (a != NULL))
        return bad(s, "message: one of text and attachment is required");
    if (a != NULL && fb_attachment(s, a) < 0)
        return -1;
    if (a == NULL && str(s, m, "text", 1, 2000, "message") < 0)
        return -1;
    if (json_object_get(m, "quick_replies") == NULL)
        return 0;
    if (arr(s, m, "quick_replies", 1, 13, "message", &list) < 0)
        return -1;
    json_array_foreach(list, i, q) {
        if (!is(q, "content_type", "text"))
            continue; /* user_phone_number, user_email */
        if (str(s, q, "title", 1, 20, "quick_reply") < 0 ||
            str(s, q, "payload", 1, 1000, "quick_reply") < 0)
            return -1;
    }
    return 0;
}

/* ---- whatsapp kinds ---- */

static int wa_interactive(shape_t *s, const json_t *in)
{
    const json_t *body, *action, *list, *item, *rows, *row, *params;
    size_t i, j, total = 0;

    if (obj(s, in, "body", "interactive", &body) < 0 ||
        str(s, body, "text", 1, 1024, "interactive.body") < 0 ||
        obj(s, in, "action", "interactive", &action) < 0)
        return -1;
    if (is(in, "type", "button")) {
        if (arr(s, action, "buttons", 1, 3, "action", &list) < 0)
            return -1;
        json_array_foreach(list, i, item) {
            const json_t *reply;
            if (!is(item, "type", "reply") || obj(s, item, "reply", "button", &reply) < 0)
                return bad(s, "action.buttons[%zu]: a reply button is required", i);
            if (str(s, reply, "id", 1, 256, "reply") < 0 || str(s, reply, "title", 1, 20, "reply"))
                return -1;
        }
        return 0;
    }
    if (is(in, "type", "list")) {
        if (str(s, action, "button", 1, 20, "action") < 0 ||
            arr(s, action, "sections", 1, 10, "action", &list) < 0)
            return -1;
        json_array_foreach(list, i, item) {
            if (str(s, item, "title", json_array_size(list) > 1, 24, "section") < 0 ||
                arr(s, item, "rows", 1, 10, "section", &rows) < 0)
                return -1;
            json_array_foreach(rows, j, row) {
                if (++total > 10)
                    return bad(s, "action.sections: more than 10 rows");
                if (str(s, row, "id", 1, 200, "row") < 0 ||
                    str(s, row, "title", 1, 24, "row") < 0 ||
                    str(s, row, "description", 0, 72, "row") < 0)
                    return -1;
            }
        }
        return 0;
    }
    if (is(in, "type", "cta_url")) {
        if (!is(action, "name", "cta_url") || obj(s, action, "parameters", "action", &params) < 0)
            return bad(s, "action: cta_url parameters are required");
        return str(s, params, "display_text", 1, 20, "parameters") < 0 ||
                       str(s, params, "url", 1, 0, "parameters") < 0
                   ? -1
                   : 0;
    }
    return bad(s, "interactive.type: button, list or cta_url");
}

static int wa_media(shape_t *s, const char *type, const json_t *m)
{
    static const char *const with_caption[] = {"link", "id", "caption", NULL};
    static const char *const document[] = {"link", "id", "caption", "filename", NULL};
    static const char *const bare[] = {"link", "id", NULL};

    if (json_object_get(m, "link") == NULL && json_object_get(m, "id") == NULL)
        return bad(s, "%s: link or id is required", type);
    if (strcmp(type, "document") == 0)
        return only(s, m, document, type);
    if (strcmp(type, "image") == 0 || strcmp(type, "video") == 0)
        return only(s, m, with_caption, type);
    return only(s, m, bare, type); /* audio, sticker: no caption */
}

static int wa_shape(shape_t *s, const json_t *body, int cloud)
{
    static const char *const media[] = {"image", "video", "audio", "document", "sticker", NULL};
    const char *type = json_string_value(json_object_get(body, "type"));
    const json_t *m, *lat, *lon;

    if (cloud && !is(body, "messaging_product", "whatsapp"))
        return bad(s, "messaging_product: whatsapp is required");
    if (!cloud && json_object_get(body, "messaging_product") != NULL)
        return bad(s, "unknown parameter messaging_product");
    if (json_object_get(body, "recipient_type") != NULL &&
        !is(body, "recipient_type", "individual"))
        return bad(s, "recipient_type: individual");
    if (type == NULL)
        type = "text";
    if (obj(s, body, type, "body", &m) < 0)
        return -1;
    if (strcmp(type, "text") == 0)
        return str(s, m, "body", 1, 4096, "text");
    for (size_t i = 0; media[i]; i++)
        if (strcmp(type, media[i]) == 0)
            return wa_media(s, type, m);
    if (strcmp(type, "location") == 0) {
        lat = json_object_get(m, "latitude");
        lon = json_object_get(m, "longitude");
        if (!json_is_number(lat) || !json_is_number(lon) || json_number_value(lat) < -90 ||
            json_number_value(lat) > 90 || json_number_value(lon) < -180 ||
            json_number_value(lon) > 180)
            return bad(s, "location: latitude and longitude are required");
        return str(s, m, "name", 0, 0, "location") < 0 || str(s, m, "address", 0, 0, "location") < 0
                   ? -1
                   : 0;
    }
    if (strcmp(type, "interactive") == 0)
        return wa_interactive(s, m);
    if (strcmp(type, "template") == 0) {
        const json_t *lang;
        return str(s, m, "name", 1, 0, "template") < 0 ||
                       obj(s, m, "language", "template", &lang) < 0 ||
                       str(s, lang, "code", 1, 0, "template.language") < 0
                   ? -1
                   : 0;
    }
    if (strcmp(type, "contacts") == 0 || strcmp(type, "reaction") == 0)
        return 0;
    return bad(s, "type: unknown message type");
}

/* ---- slack: Block Kit ---- */

static int slack_text_obj(shape_t *s, const json_t *o, const char *key, int plain_only, size_t max,
                          const char *where)
{
    const json_t *t;

    if (obj(s, o, key, where, &t) < 0)
        return -1;
    if (!is(t, "type", "plain_text") && (plain_only || !is(t, "type", "mrkdwn")))
        return bad(s, "%s.%s.type: %s", where, key, plain_only ? "plain_text" : "mrkdwn");
    return str(s, t, "text", 1, max, where);
}

static int slack_options(shape_t *s, const json_t *list, const char *where)
{
    const json_t *o;
    size_t i;

    json_array_foreach(list, i, o) {
        if (slack_text_obj(s, o, "text", 1, 75, where) < 0 || str(s, o, "value", 1, 150, where) < 0)
            return -1;
        if (json_object_get(o, "description") &&
            slack_text_obj(s, o, "description", 1, 75, where) < 0)
            return -1;
    }
    return 0;
}

/* An interactive element; action_id must be unique in the message (ids holds the seen ones). */
static int slack_element(shape_t *s, const json_t *e, json_t *ids)
{
    const char *id = json_string_value(json_object_get(e, "action_id"));
    const json_t *list, *g;
    size_t i;

    if (id != NULL) {
        if (json_object_get(ids, id) != NULL)
            return bad(s, "action_id %s is not unique", id);
        json_object_set_new(ids, id, json_true());
    }
    if (is(e, "type", "button")) {
        if (slack_text_obj(s, e, "text", 1, 75, "button") < 0 ||
            str(s, e, "value", 0, 2000, "button") < 0 || str(s, e, "url", 0, 3000, "button") < 0)
            return -1;
        return 0;
    }
    if (is(e, "type", "static_select")) {
        if (slack_text_obj(s, e, "placeholder", 1, 150, "static_select") < 0)
            return -1;
        if (json_object_get(e, "options") != NULL)
            return arr(s, e, "options", 1, 100, "static_select", &list) < 0
                       ? -1
                       : slack_options(s, list, "option");
        if (arr(s, e, "option_groups", 1, 100, "static_select", &list) < 0)
            return -1;
        json_array_foreach(list, i, g) {
            const json_t *opts;
            if (slack_text_obj(s, g, "label", 1, 75, "option_group") < 0 ||
                arr(s, g, "options", 1, 100, "option_group", &opts) < 0 ||
                slack_options(s, opts, "option") < 0)
                return -1;
        }
        return 0;
    }
    if (is(e, "type", "image"))
        return str(s, e, "image_url", 1, 3000, "image") < 0 ||
                       str(s, e, "alt_text", 1, 2000, "image") < 0
                   ? -1
                   : 0;
    return bad(s, "unknown element type");
}

static int slack_shape(shape_t *s, const json_t *body)
{
    const json_t *blocks = json_object_get(body, "blocks"), *b, *list, *e, *el;
    json_t *ids = json_object();
    size_t i, j;
    int rc = 0;

    if (blocks != NULL && !json_is_string(json_object_get(body, "text"))) {
        json_decref(ids);
        return bad(s, "no_text"); /* notifications need the plain text */
    }
    if (blocks == NULL) {
        json_decref(ids);
        return str(s, body, "text", 1, 40000, "body");
    }
    if (arr(s, body, "blocks", 1, 50, "body", &list) < 0) {
        json_decref(ids);
        return -1;
    }
    json_array_foreach(list, i, b) {
        if (is(b, "type", "section")) {
            rc = slack_text_obj(s, b, "text", 0, 3000, "section");
            if (rc == 0 && json_object_get(b, "accessory") != NULL)
                rc = slack_element(s, json_object_get(b, "accessory"), ids);
        } else if (is(b, "type", "actions")) {
            rc = arr(s, b, "elements", 1, 25, "actions", &e);
            json_array_foreach(e, j, el) {
                if (rc == 0)
                    rc = slack_element(s, el, ids);
            }
        } else if (is(b, "type", "image")) {
            rc = slack_element(s, b, ids);
            if (rc == 0 && json_object_get(b, "title") != NULL)
                rc = slack_text_obj(s, b, "title", 1, 2000, "image");
        } else if (!is(b, "type", "divider") && !is(b, "type", "context") &&
                   !is(b, "type", "header")) {
            rc = bad(s, "blocks[%zu]: unknown block type", i);
        }
        if (rc < 0)
            break;
    }
    json_decref(ids);
    return rc;
}

/* ---- wechat: customer-service messages ---- */

static int wx_shape(shape_t *s, const json_t *body, int *errcode)
{
    const char *type = json_string_value(json_object_get(body, "msgtype"));
    const json_t *m, *list, *item;
    size_t i;

    *errcode = 40008; /* invalid message type */
    if (type == NULL || obj(s, body, type, "body", &m) < 0)
        return bad(s, "invalid message type");
    *errcode = 47001; /* data format error */
    if (strcmp(type, "text") == 0)
        return str(s, m, "content", 1, 0, "text");
    if (strcmp(type, "image") == 0 || strcmp(type, "voice") == 0 || strcmp(type, "video") == 0) {
        const char *id = json_string_value(json_object_get(m, "media_id"));
        if (id == NULL || strncmp(id, "media-", 6) != 0) {
            *errcode = 40007;
            return bad(s, "invalid media_id");
        }
        return 0;
    }
    if (strcmp(type, "news") == 0) {
        if (arr(s, m, "articles", 1, 1, "news", &list) < 0)
            return -1;
        return str(s, json_array_get(list, 0), "title", 1, 0, "article");
    }
    if (strcmp(type, "msgmenu") == 0) {
        if (str(s, m, "head_content", 1, 0, "msgmenu") < 0 ||
            arr(s, m, "list", 1, 100, "msgmenu", &list) < 0)
            return -1;
        json_array_foreach(list, i, item) {
            if (str(s, item, "id", 1, 0, "msgmenu.list") < 0 ||
                str(s, item, "content", 1, 0, "msgmenu.list") < 0)
                return -1;
        }
        return 0;
    }
    if (strcmp(type, "music") == 0 || strcmp(type, "mpnews") == 0 || strcmp(type, "wxcard") == 0 ||
        strcmp(type, "miniprogrampage") == 0 || strcmp(type, "mpnewsarticle") == 0)
        return 0;
    *errcode = 40008;
    return bad(s, "invalid message type");
}

/* ---- teamwork: text and image ---- */

static int tw_shape(shape_t *s, const json_t *body)
{
    const json_t *image;

    if (is(body, "messageType", "text"))
        return str(s, body, "text", 1, 0, "body");
    if (is(body, "messageType", "image"))
        return obj(s, body, "image", "body", &image) < 0 ? -1 : str(s, image, "url", 1, 0, "image");
    return bad(s, "messageType: text or image");
}

int sim_shape_check(sim_platform_t platform, const json_t *body, char *msg, size_t size, int *code)
{
    shape_t s = {msg, size};

    *code = 0;
    msg[0] = '\0';
    if (!json_is_object(body))
        return bad(&s, "the body is not a JSON object");
    switch (platform) {
    case SIM_PLATFORM_FACEBOOK:
        return fb_shape(&s, body);
    case SIM_PLATFORM_WHATSAPP:
        return wa_shape(&s, body, 0);
    case SIM_PLATFORM_WHATSAPP_CLOUD:
        return wa_shape(&s, body, 1);
    case SIM_PLATFORM_SLACK:
        return slack_shape(&s, body);
    case SIM_PLATFORM_WECHAT:
        return wx_shape(&s, body, code);
    case SIM_PLATFORM_TEAMWORK:
        return tw_shape(&s, body);
    default:
        return 0;
    }
}
