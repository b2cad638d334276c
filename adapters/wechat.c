/* wechat.c - WeChat Official Account customer-service messages: access token, media upload
 * (images go by media_id only) and /cgi-bin/message/custom/send. */
#include "adapter.h"

#include <expat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REFRESH_MARGIN_MS  (5 * 60000) /* a new token is fetched this long before expiry */
#define DEFAULT_LIFETIME_S 7200
#define BOUNDARY           "botgate-7d9f3a61c2e84b05"
#define BOUNDARY_TRIES     64 /* bounded: the data is someone else's download */

static const char *const secrets[] = {"accessToken", "appsecret", "JSAPITicket", NULL};

static const adapter_code_t codes[] = {
    {40001, ADAPTER_AUTH_EXPIRED},
    {40014, ADAPTER_AUTH_EXPIRED},
    {42001, ADAPTER_AUTH_EXPIRED},
    {40003, ADAPTER_RECIPIENT_INVALID},
    {45015, ADAPTER_WINDOW_CLOSED}, /* past 48 h since the user last wrote (section 14) */
    {45047, ADAPTER_RATE_LIMITED},
    {-1, ADAPTER_SERVER_ERROR},
    {0, ADAPTER_OK},
};

static int wx_needs_refresh(const json_t *info, int64_t now_ms)
{
    return adapter_cred_expiring(info, "accessToken", "accessTokenExpiry", now_ms,
                                 REFRESH_MARGIN_MS);
}

static int wx_build_cred(const adapter_target_t *t, adapter_call_t *out, adapter_result_t *res)
{
    const char *appid = adapter_info_str(t->info, "appId");
    const char *secret = adapter_info_str(t->info, "appsecret");
    char *eid, *esecret;

    memset(out, 0, sizeof(*out));
    if (appid == NULL || secret == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no %s",
                            appid == NULL ? "appId" : "appsecret");
    eid = adapter_urlencode(appid);
    esecret = adapter_urlencode(secret);
    out->method = "GET";
    if (eid != NULL && esecret != NULL)
        out->url = adapter_url(t->base_url,
                               "/cgi-bin/token?grant_type=client_credential&appid=%s&secret=%s",
                               eid, esecret);
    free(eid);
    free(esecret);
    if (out->url == NULL)
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat: cannot build the token request");
    return 0;
}

static json_t *wx_parse_cred(const adapter_target_t *t, const adapter_answer_t *a,
                             adapter_result_t *res)
{
    json_t *j = a->status != 0 ? adapter_answer_json(a) : NULL, *cred = NULL;
    long code = (long)json_integer_value(json_object_get(j, "errcode"));
    const char *token = json_string_value(json_object_get(j, "access_token"));
    json_int_t lifetime = json_integer_value(json_object_get(j, "expires_in"));

    if (a->status == 0) {
        adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat token: no answer");
    } else if (code == -1) { /* "system busy": not a verdict on the credentials */
        adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat token: platform busy (errcode -1)");
        res->platform_code = code;
    } else if (code != 0) {
        adapter_fail(res, ADAPTER_AUTH_INVALID, "wechat token refused (errcode %ld)", code);
        res->platform_code = code;
    } else if (a->status >= 200 && a->status < 300 && token != NULL && *token != '\0') {
        if (lifetime <= 0 || lifetime > 30 * 86400)
            lifetime = DEFAULT_LIFETIME_S;
        cred = json_pack("{s:s,s:I}", "accessToken", token, "accessTokenExpiry",
                         (json_int_t)(t->now_ms + lifetime * 1000));
        if (cred == NULL)
            adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat token: out of memory");
        else
            res->status = ADAPTER_OK;
    } else {
        adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat token: unusable answer (HTTP %ld)",
                     a->status);
    }
    json_decref(j);
    return cred;
}

/* The access token every call but the token fetch carries in its URL. */
static int wx_token(const adapter_target_t *t, adapter_result_t *res, char **enc)
{
    const char *token = adapter_info_str(t->info, "accessToken");

    *enc = NULL;
    /* Missing is what an expired token would be: the gateway refreshes and retries. */
    if (token == NULL)
        return adapter_fail(res, ADAPTER_AUTH_EXPIRED, "channel has no accessToken");
    if ((*enc = adapter_urlencode(token)) == NULL)
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat: out of memory");
    return 0;
}

/* Buttons wechat can show: all postback (a menu) or one link (an article). */
static int wx_buttons_ok(const json_t *buttons)
{
    return adapter_buttons_all(buttons, "postback") ||
           (json_array_size(buttons) == 1 && adapter_buttons_all(buttons, "url"));
}

static int wx_check(unsigned kind, const json_t *r, char *msg, size_t size)
{
    const json_t *cards = json_object_get(r, "cards"), *buttons;

    if (kind == ADAPTER_IMAGE && json_object_get(r, "caption") != NULL)
        return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                  "caption is not supported on wechat channels");
    if (kind == ADAPTER_BUTTON && !wx_buttons_ok(json_object_get(r, "buttons")))
        return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                  "buttons must all be postback, or one url, on wechat channels");
    if (kind == ADAPTER_CAROUSEL) {
        /* a customer-service message carries one article */
        if (json_array_size(cards) > 1)
            return adapter_check_fail(BG_ERR_LIMIT, msg, size,
                                      "cards has more than 1 item on wechat channels");
        buttons = json_object_get(json_array_get(cards, 0), "buttons");
        if (buttons != NULL &&
            !(json_array_size(buttons) == 1 && adapter_buttons_all(buttons, "url")))
            return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                      "cards[0].buttons must be one url on wechat channels");
    }
    return 0;
}

/* A msgmenu: items of (id, content), under the text. */
static json_t *wx_menu(const char *head, json_t *list)
{
    return json_pack("{s:s,s:o,s:s}", "head_content", head, "list", list, "tail_content", "");
}

static json_t *wx_menu_items(const json_t *items)
{
    json_t *list = json_array();
    const json_t *item;
    size_t i;

    json_array_foreach(items, i, item)
        json_array_append_new(list, json_pack("{s:s,s:s}", "id", adapter_str(item, "payload"),
                                              "content", adapter_str(item, "title")));
    return list;
}

/* A LIST's rows as menu items; a row's description follows its title, the menu has no room
 * of its own for it. */
static json_t *wx_list_items(const json_t *r)
{
    json_t *list = json_array();
    const json_t *section, *row;
    size_t i, j;

    json_array_foreach(json_object_get(r, "sections"), i, section) {
        json_array_foreach(json_object_get(section, "rows"), j, row) {
            const char *title = adapter_str(row, "title"), *desc = adapter_str(row, "description");
            char *content = NULL;
            if (desc != NULL && asprintf(&content, "%s - %s", title, desc) < 0)
                content = NULL;
            json_array_append_new(list, json_pack("{s:s,s:s}", "id", adapter_str(row, "id"),
                                                  "content", content ? content : title));
            free(content);
        }
    }
    return list;
}

/* The message type and its object. media_id is the uploaded media of IMAGE, VIDEO, AUDIO. */
static json_t *wx_message(unsigned kind, const json_t *r, const char *media_id, const char **type)
{
    const json_t *buttons = json_object_get(r, "buttons"), *card;
    json_t *o;

    switch (kind) {
    case ADAPTER_TEXT:
        if (json_object_get(r, "quickReplies") == NULL) {
            *type = "text";
            return json_pack("{s:s}", "content", adapter_str(r, "text"));
        }
        *type = "msgmenu";
        return wx_menu(adapter_str(r, "text"), wx_menu_items(json_object_get(r, "quickReplies")));
    case ADAPTER_IMAGE:
        *type = "image";
        return json_pack("{s:s}", "media_id", media_id);
    case ADAPTER_AUDIO:
        *type = "voice";
        return json_pack("{s:s}", "media_id", media_id);
    case ADAPTER_VIDEO:
        *type = "video";
        o = json_pack("{s:s}", "media_id", media_id);
        adapter_copy_str(o, "description", r, "caption");
        return o;
    case ADAPTER_BUTTON:
        if (adapter_buttons_all(buttons, "postback")) {
            *type = "msgmenu";
            return wx_menu(adapter_str(r, "text"), wx_menu_items(buttons));
        }
        *type = "news";
        return json_pack("{s:[{s:s,s:s,s:s}]}", "articles", "title",
                         adapter_str(json_array_get(buttons, 0), "title"), "description",
                         adapter_str(r, "text"), "url",
                         adapter_str(json_array_get(buttons, 0), "url"));
    case ADAPTER_CAROUSEL:
        *type = "news";
        card = json_array_get(json_object_get(r, "cards"), 0);
        o = json_pack("{s:s}", "title", adapter_str(card, "title"));
        adapter_copy_str(o, "description", card, "subtitle");
        adapter_copy_str(o, "url", json_array_get(json_object_get(card, "buttons"), 0), "url");
        adapter_copy_str(o, "picurl", card, "imageUrl");
        return json_pack("{s:[o]}", "articles", o);
    case ADAPTER_LIST:
        *type = "msgmenu";
        return wx_menu(adapter_str(r, "text"), wx_list_items(r));
    default:
        return NULL;
    }
}

static int wx_build_send(const adapter_target_t *t, const json_t *response, const char *media_id,
                         adapter_call_t *out, adapter_result_t *res)
{
    const char *type = NULL;
    unsigned kind;
    json_t *body, *message;
    char *enc;

    memset(out, 0, sizeof(*out));
    if ((kind = adapter_response_kind(&adapter_wechat, response, res)) == 0)
        return -1;
    if (t->to == NULL || *t->to == '\0')
        return adapter_fail(res, ADAPTER_REJECTED, "wechat: no recipient");
    if (kind == ADAPTER_TEXT &&
        adapter_response_str(&adapter_wechat, response, "text", res) == NULL)
        return -1;
    if ((kind & ADAPTER_UPLOADED) && (media_id == NULL || *media_id == '\0'))
        return adapter_fail(res, ADAPTER_REJECTED, "wechat: media without media_id");
    if (kind == ADAPTER_NATIVE) {
        if ((body = adapter_native_message(&adapter_wechat, response, res)) == NULL)
            return -1;
        json_object_set_new(body, "touser", json_string(t->to));
    } else {
        message = wx_message(kind, response, media_id, &type);
        body = message != NULL
                   ? json_pack("{s:s,s:s,s:o}", "touser", t->to, "msgtype", type, type, message)
                   : NULL;
    }
    if (wx_token(t, res, &enc) < 0) {
        json_decref(body);
        return -1;
    }
    if (adapter_json_post(
            out, adapter_url(t->base_url, "/cgi-bin/message/custom/send?access_token=%s", enc),
            body) < 0) {
        free(enc);
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat: cannot build the request");
    }
    free(enc);
    return 0;
}

/* The verdict every WeChat answer carries: 0 when it is a success (*jp holds the parsed
 * answer, which the caller frees in every case). */
static int wx_answer(const adapter_target_t *t, const adapter_answer_t *a, json_t **jp,
                     adapter_result_t *res)
{
    json_t *j = *jp = a->status != 0 ? adapter_answer_json(a) : NULL;
    long code = (long)json_integer_value(json_object_get(j, "errcode"));
    char text[128];

    if (a->status == 0)
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat: no answer");
    if (!json_is_object(j))
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat: unreadable answer (HTTP %ld)",
                            a->status);
    if (code != 0) {
        adapter_copy_masked(text, sizeof(text), json_string_value(json_object_get(j, "errmsg")),
                            t->info, secrets);
        adapter_fail(res, adapter_code_status(codes, code, ADAPTER_REJECTED),
                     "wechat: %s (errcode %ld)", text, code);
        res->platform_code = code;
        return -1;
    }
    if (a->status < 200 || a->status >= 300)
        return adapter_fail(res, a->status >= 500 ? ADAPTER_SERVER_ERROR : ADAPTER_REJECTED,
                            "wechat: HTTP %ld", a->status);
    res->status = ADAPTER_OK;
    return 0;
}

static void wx_parse_send(const adapter_target_t *t, const adapter_answer_t *a,
                          adapter_result_t *res)
{
    json_t *j;

    /* No message id on success: the gateway makes one. */
    if (wx_answer(t, a, &j, res) == 0)
        adapter_copy(res->chat_id, sizeof(res->chat_id), t->to);
    json_decref(j);
}

/* The file name extension WeChat expects for an image type, "" when unknown. */
static const char *wx_extension(const char *type)
{
    static const struct {
        const char *type, *ext;
    } map[] = {
        {"image/jpeg", ".jpg"},  {"image/jpg", ".jpg"}, {"image/pjpeg", ".jpg"},
        {"image/png", ".png"},   {"image/gif", ".gif"}, {"image/bmp", ".bmp"},
        {"image/webp", ".webp"}, {"video/mp4", ".mp4"}, {"audio/mpeg", ".mp3"},
        {"audio/mp3", ".mp3"},   {"audio/amr", ".amr"},
    };
    size_t n = strcspn(type, "; ");

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strlen(map[i].type) == n && strncasecmp(type, map[i].type, n) == 0)
            return map[i].ext;
    return "";
}

/* The content type to put in the part header: as given, unless it could break the framing. */
static const char *wx_part_type(const char *type)
{
    if (type == NULL || *type == '\0' || strlen(type) > 128)
        return "application/octet-stream";
    for (const char *p = type; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            return "application/octet-stream";
    return type;
}

/* WeChat's media type for a download's content type: image, video or voice. */
static const char *wx_upload_type(const char *ctype)
{
    if (strncasecmp(ctype, "video/", 6) == 0)
        return "video";
    if (strncasecmp(ctype, "audio/", 6) == 0)
        return "voice";
    return "image";
}

static int wx_build_upload(const adapter_target_t *t, const char *data, size_t len,
                           const char *content_type, adapter_call_t *out, adapter_result_t *res)
{
    const char *type = wx_part_type(content_type);
    char boundary[64], *head = NULL, *tail = NULL, *enc = NULL, *body;
    int hlen, tlen, i;

    memset(out, 0, sizeof(*out));
    if (data == NULL || len == 0)
        return adapter_fail(res, ADAPTER_REJECTED, "wechat: empty media");
    for (i = 0; i < BOUNDARY_TRIES; i++) {
        if (i == 0)
            snprintf(boundary, sizeof(boundary), "%s", BOUNDARY);
        else
            snprintf(boundary, sizeof(boundary), "%s-%d", BOUNDARY, i);
        if (memmem(data, len, boundary, strlen(boundary)) == NULL && !strstr(type, boundary))
            break;
    }
    if (i == BOUNDARY_TRIES)
        return adapter_fail(res, ADAPTER_REJECTED, "wechat: no multipart boundary fits the media");
    if (wx_token(t, res, &enc) < 0)
        return -1;
    hlen = asprintf(&head,
                    "--%s\r\nContent-Disposition: form-data; name=\"media\"; "
                    "filename=\"%s%s\"\r\nContent-Type: %s\r\n\r\n",
                    boundary, wx_upload_type(type), wx_extension(type), type);
    tlen = asprintf(&tail, "\r\n--%s--\r\n", boundary);
    body = hlen < 0 || tlen < 0 ? NULL : malloc((size_t)hlen + len + (size_t)tlen + 1);
    if (body != NULL) {
        memcpy(body, head, (size_t)hlen);
        memcpy(body + hlen, data, len);
        memcpy(body + hlen + len, tail, (size_t)tlen + 1);
        out->body = body;
        out->body_len = (size_t)hlen + len + (size_t)tlen;
    }
    out->method = "POST";
    out->url = adapter_url(t->base_url, "/cgi-bin/media/upload?access_token=%s&type=%s", enc,
                           wx_upload_type(type));
    free(enc);
    free(hlen < 0 ? NULL : head);
    free(tlen < 0 ? NULL : tail);
    if (body == NULL || out->url == NULL ||
        adapter_add_header(out, "Content-Type: multipart/form-data; boundary=%s", boundary) < 0) {
        adapter_call_free(out);
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat: cannot build the upload");
    }
    return 0;
}

static void wx_parse_upload(const adapter_target_t *t, const adapter_answer_t *a,
                            adapter_result_t *res)
{
    json_t *j;
    const char *media_id;

    if (wx_answer(t, a, &j, res) == 0) {
        media_id = json_string_value(json_object_get(j, "media_id"));
        if (media_id == NULL || *media_id == '\0' || strlen(media_id) >= sizeof(res->ref))
            adapter_fail(res, ADAPTER_SERVER_ERROR, "wechat: upload answer without media_id");
        else
            adapter_copy(res->ref, sizeof(res->ref), media_id);
    }
    json_decref(j);
}

/* ---- webhooks in (platforms.md: "wechat", Webhook): XML read with expat ---- */

#define WX_XML_FIELDS_MAX 64
#define WX_XML_DEPTH_MAX  4

/* The XML's fields as they are read: <xml><Name>text</Name>...</xml> into {"Name":"text"}.
 * Nested elements (a few events carry them) are kept as objects of their fields. */
typedef struct wx_xml {
    XML_Parser p;
    json_t *stack[WX_XML_DEPTH_MAX + 1]; /* borrowed: the objects open at each depth */
    int depth;
    char *text; /* the open element's text so far (malloc'd) */
    size_t text_len;
    size_t fields;
    const char *error; /* the first refusal, or NULL */
} wx_xml_t;

static void wx_xml_stop(wx_xml_t *x, const char *why)
{
    if (x->error == NULL)
        x->error = why;
    XML_StopParser(x->p, XML_FALSE);
}

static void XMLCALL wx_xml_start(void *arg, const XML_Char *name, const XML_Char **attrs)
{
    wx_xml_t *x = arg;

    (void)attrs;
    if (x->error != NULL)
        return;
    if (x->depth == 0 && strcmp(name, "xml") != 0) {
        wx_xml_stop(x, "the root element is not <xml>");
        return;
    }
    if (x->depth >= WX_XML_DEPTH_MAX) {
        wx_xml_stop(x, "elements nested too deep");
        return;
    }
    if (++x->fields > WX_XML_FIELDS_MAX) {
        wx_xml_stop(x, "too many elements");
        return;
    }
    if (x->depth > 0 && json_object_get(x->stack[x->depth], name) != NULL) {
        wx_xml_stop(x, "an element appears twice");
        return;
    }
    if (x->depth > 0) {
        /* an object for the children it may have; a leaf's text replaces it at its end */
        json_t *o = json_object();
        if (o == NULL || json_object_set_new(x->stack[x->depth], name, o) < 0) {
            wx_xml_stop(x, "out of memory");
            return;
        }
    }
    if (x->depth > 0)
        x->stack[x->depth + 1] = json_object_get(x->stack[x->depth], name);
    x->depth++;
    x->text_len = 0;
}

static void XMLCALL wx_xml_end(void *arg, const XML_Char *name)
{
    wx_xml_t *x = arg;
    json_t *o;

    if (x->error != NULL)
        return;
    o = x->stack[x->depth];
    x->depth--;
    /* an element without children: its text replaces the empty object made at its start */
    if (x->depth > 0 && json_object_size(o) == 0) {
        json_t *s = json_stringn(x->text ? x->text : "", x->text_len);
        if (s == NULL || json_object_set_new(x->stack[x->depth], name, s) < 0) {
            wx_xml_stop(x, "a field is not valid UTF-8");
            return;
        }
    }
    x->text_len = 0;
}

static void XMLCALL wx_xml_chars(void *arg, const XML_Char *s, int len)
{
    wx_xml_t *x = arg;
    char *t;

    if (x->error != NULL || len <= 0)
        return;
    t = realloc(x->text, x->text_len + (size_t)len + 1);
    if (t == NULL) {
        wx_xml_stop(x, "out of memory");
        return;
    }
    memcpy(t + x->text_len, s, (size_t)len);
    x->text = t;
    x->text_len += (size_t)len;
}

/* A DOCTYPE may declare entities (amplification, external files): refused outright. */
static void XMLCALL wx_xml_doctype(void *arg, const XML_Char *name, const XML_Char *sysid,
                                   const XML_Char *pubid, int has_internal_subset)
{
    (void)name;
    (void)sysid;
    (void)pubid;
    (void)has_internal_subset;
    wx_xml_stop(arg, "a DOCTYPE is not accepted");
}

static void XMLCALL wx_xml_entity(void *arg, const XML_Char *name, int pe, const XML_Char *value,
                                  int len, const XML_Char *base, const XML_Char *sysid,
                                  const XML_Char *pubid, const XML_Char *notation)
{
    (void)name, (void)pe, (void)value, (void)len, (void)base, (void)sysid, (void)pubid;
    (void)notation;
    wx_xml_stop(arg, "an entity declaration is not accepted");
}

/* The fields of the <xml> document in body, NULL with h->error set. New reference. */
static json_t *wx_xml_read(const char *body, size_t len, adapter_hook_t *h)
{
    wx_xml_t x;
    json_t *root = json_object();
    int ok;

    memset(&x, 0, sizeof(x));
    if (len > INT32_MAX || root == NULL || (x.p = XML_ParserCreate("UTF-8")) == NULL) {
        json_decref(root);
        adapter_hook_fail(h, "wechat: out of memory");
        return NULL;
    }
    x.stack[1] = root;
    XML_SetUserData(x.p, &x);
    XML_SetElementHandler(x.p, wx_xml_start, wx_xml_end);
    XML_SetCharacterDataHandler(x.p, wx_xml_chars);
    XML_SetStartDoctypeDeclHandler(x.p, wx_xml_doctype);
    XML_SetEntityDeclHandler(x.p, wx_xml_entity);
    XML_SetParamEntityParsing(x.p, XML_PARAM_ENTITY_PARSING_NEVER);
    ok = XML_Parse(x.p, body, (int)len, XML_TRUE) == XML_STATUS_OK && x.error == NULL;
    if (!ok) {
        if (x.error != NULL)
            adapter_hook_fail(h, "wechat: body refused: %s", x.error);
        else
            adapter_hook_fail(h, "wechat: body is not XML: %s (line %lu)",
                              XML_ErrorString(XML_GetErrorCode(x.p)),
                              (unsigned long)XML_GetCurrentLineNumber(x.p));
        json_decref(root);
        root = NULL;
    }
    XML_ParserFree(x.p);
    free(x.text);
    return root;
}

static const char *wx_field(const json_t *x, const char *name)
{
    return json_string_value(json_object_get(x, name));
}

static int wx_parse_hook(const char *body, size_t len, const char *content_type, adapter_hook_t *h)
{
    json_t *x = wx_xml_read(body, len, h), *data = NULL;
    const char *type, *from, *mid, *menu, *event;
    const char *ev_type = "INBOUND";
    char id[ADAPTER_ID_MAX];
    int64_t ts;
    int rc;

    (void)content_type;
    if (x == NULL)
        return -1;
    type = wx_field(x, "MsgType");
    from = wx_field(x, "FromUserName");
    mid = wx_field(x, "MsgId") ? wx_field(x, "MsgId") : wx_field(x, "MsgID");
    menu = wx_field(x, "bizmsgmenuid");
    event = wx_field(x, "Event");
    ts = adapter_hook_time(json_object_get(x, "CreateTime"), 0);
    if (type == NULL || from == NULL) {
        json_decref(x);
        return adapter_hook_fail(h, "wechat: a message without MsgType or FromUserName");
    }
    if (strcmp(type, "text") == 0 && menu != NULL) { /* a tap on a msgmenu */
        ev_type = "POSTBACK";
        data = json_pack("{s:s,s:s?}", "payload", menu, "title", wx_field(x, "Content"));
    } else if (strcmp(type, "text") == 0) {
        data = json_pack("{s:s,s:s?}", "type", "TEXT", "text", wx_field(x, "Content"));
    } else if (strcmp(type, "location") == 0) {
        data = json_pack("{s:s,s:s?,s:s?}", "type", "LOCATION", "latitude",
                         wx_field(x, "Location_X"), "longitude", wx_field(x, "Location_Y"));
    } else if (strcmp(type, "event") == 0) {
        if (event != NULL && strcasecmp(event, "CLICK") == 0) {
            ev_type = "POSTBACK";
            data = json_pack("{s:s?}", "payload", wx_field(x, "EventKey"));
        } else if (event != NULL && strcmp(event, "TEMPLATESENDJOBFINISH") == 0) {
            const char *status = wx_field(x, "Status");
            ev_type = status != NULL && strcmp(status, "success") == 0 ? "DELIVERED" : "FAILED";
            data = json_pack("{s:s?,s:s?}", "messageId", mid, "status", status);
        } else { /* subscribe, scans, menu views: not reported */
            json_decref(x);
            return 0;
        }
    } else {
        data = adapter_hook_media(strcmp(type, "shortvideo") == 0 ? "video" : type,
                                  wx_field(x, "PicUrl"));
        if (data != NULL && wx_field(x, "MediaId") != NULL)
            json_object_set_new(data, "mediaId", json_string(wx_field(x, "MediaId")));
    }
    if (mid == NULL) { /* events carry no MsgId: the sender, the time and the event name it */
        snprintf(id, sizeof(id), "%.100s:%lld:%.40s", from, (long long)ts, event ? event : type);
        mid = id;
    }
    rc = adapter_hook_add(h, ev_type, from, mid, ts, data, x);
    json_decref(x);
    return rc;
}

const adapter_ops_t adapter_wechat = {
    .type = "wechat",
    .api_version = "cgi-bin",
    .from_field = "botOpenId",
    .response_types = ADAPTER_TEXT | ADAPTER_IMAGE | ADAPTER_VIDEO | ADAPTER_AUDIO |
                      ADAPTER_BUTTON | ADAPTER_CAROUSEL | ADAPTER_LIST | ADAPTER_NATIVE,
    .recipient_invalid_code = 104,
    .image_by_upload = 1,
    .check = wx_check,
    .build_send = wx_build_send,
    .parse_send = wx_parse_send,
    .cred_field = "accessToken",
    .cred_needs_refresh = wx_needs_refresh,
    .build_cred = wx_build_cred,
    .parse_cred = wx_parse_cred,
    .build_upload = wx_build_upload,
    .parse_upload = wx_parse_upload,
    .parse_hook = wx_parse_hook,
};
