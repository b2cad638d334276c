/* whatsapp.c - the on-premises WhatsApp Business API client: admin login, contact check and
 * /v1/messages; also the message body the cloud variant shares. */
#include "adapter.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOGIN_MARGIN_MS     60000            /* log in again when the token expires this soon */
#define DEFAULT_LIFETIME_MS (7 * 86400000LL) /* when the login answer gives no expiry */

static const char *const secrets[] = {"adminAuthToken", "adminPassword", NULL};

static const adapter_code_t codes[] = {
    {1013, ADAPTER_RECIPIENT_INVALID},
    {1026, ADAPTER_RECIPIENT_INVALID},
    {1015, ADAPTER_RATE_LIMITED},
    {1014, ADAPTER_SERVER_ERROR},
    {1016, ADAPTER_SERVER_ERROR},
    {470, ADAPTER_WINDOW_CLOSED},
    {0, ADAPTER_OK},
};

#define WA_REPLY_BUTTONS 3   /* reply buttons of one interactive message */
#define WA_REPLY_ID_MAX  256 /* characters of a reply button's id */
#define WA_ROW_TITLE_MAX 24  /* characters of a list row's title */
#define WA_ROW_DESC_MAX  72  /* characters of a list row's description */

/* Shared by both kinds (whatsapp_cloud.c uses it too). */
int adapter_whatsapp_check(unsigned kind, const json_t *r, char *msg, size_t size)
{
    const json_t *list = json_object_get(r, "quickReplies"), *item, *rows, *row;
    const char *ids = "quickReplies";
    size_t i, j;

    if (kind == ADAPTER_STICKER && json_object_get(r, "sticker") != NULL)
        return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                  "sticker names are not supported on whatsapp channels: "
                                  "send a WebP url");
    if (kind == ADAPTER_BUTTON) {
        list = json_object_get(r, "buttons");
        ids = "buttons";
        /* reply buttons, or one link button; nothing else exists */
        if (!adapter_buttons_all(list, "postback") &&
            !(json_array_size(list) == 1 && adapter_buttons_all(list, "url")))
            return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                      "buttons must all be postback, or one url, on whatsapp "
                                      "channels");
    }
    if (kind == ADAPTER_TEXT || kind == ADAPTER_BUTTON) {
        if (json_array_size(list) > WA_REPLY_BUTTONS)
            return adapter_check_fail(BG_ERR_LIMIT, msg, size,
                                      "%s has more than %d items on whatsapp channels", ids,
                                      WA_REPLY_BUTTONS);
        json_array_foreach(list, i, item) {
            if (adapter_chars(adapter_str(item, "payload")) > WA_REPLY_ID_MAX)
                return adapter_check_fail(BG_ERR_LIMIT, msg, size,
                                          "%s[%zu].payload is longer than %d characters on "
                                          "whatsapp channels",
                                          ids, i, WA_REPLY_ID_MAX);
        }
    }
    if (kind == ADAPTER_LIST) {
        json_array_foreach(json_object_get(r, "sections"), i, item) {
            rows = json_object_get(item, "rows");
            json_array_foreach(rows, j, row) {
                if (adapter_chars(adapter_str(row, "title")) > WA_ROW_TITLE_MAX ||
                    adapter_chars(adapter_str(row, "description")) > WA_ROW_DESC_MAX)
                    return adapter_check_fail(
                        BG_ERR_LIMIT, msg, size,
                        "sections[%zu].rows[%zu].%s is longer than %d characters on whatsapp "
                        "channels",
                        i, j,
                        adapter_chars(adapter_str(row, "title")) > WA_ROW_TITLE_MAX ? "title"
                                                                                    : "description",
                        adapter_chars(adapter_str(row, "title")) > WA_ROW_TITLE_MAX
                            ? WA_ROW_TITLE_MAX
                            : WA_ROW_DESC_MAX);
            }
        }
    }
    return 0;
}

/* interactive "button": reply buttons from quick replies or postback buttons (title, payload). */
static json_t *wa_reply_buttons(const char *text, const json_t *list)
{
    json_t *buttons = json_array();
    const json_t *item;
    size_t i;

    json_array_foreach(list, i, item)
        json_array_append_new(buttons, json_pack("{s:s,s:{s:s,s:s}}", "type", "reply", "reply",
                                                 "id", adapter_str(item, "payload"), "title",
                                                 adapter_str(item, "title")));
    return json_pack("{s:s,s:{s:s},s:{s:o}}", "type", "button", "body", "text", text, "action",
                     "buttons", buttons);
}

static json_t *wa_list(const json_t *r)
{
    json_t *sections = json_array();
    const json_t *section, *row;
    size_t i, j;

    json_array_foreach(json_object_get(r, "sections"), i, section) {
        json_t *rows = json_array(), *s;
        json_array_foreach(json_object_get(section, "rows"), j, row) {
            json_t *w = json_pack("{s:s,s:s}", "id", adapter_str(row, "id"), "title",
                                  adapter_str(row, "title"));
            adapter_copy_str(w, "description", row, "description");
            json_array_append_new(rows, w);
        }
        s = json_pack("{s:o}", "rows", rows);
        adapter_copy_str(s, "title", section, "title");
        json_array_append_new(sections, s);
    }
    return json_pack("{s:s,s:{s:s},s:{s:s,s:o}}", "type", "list", "body", "text",
                     adapter_str(r, "text"), "action", "button", adapter_str(r, "button"),
                     "sections", sections);
}

/* The "type" and its object of the message, for the types beyond text, image and template. */
static json_t *wa_rich(unsigned kind, const json_t *r, const char **type)
{
    const json_t *buttons = json_object_get(r, "buttons");
    json_t *o;

    switch (kind) {
    case ADAPTER_TEXT:
        *type = "interactive";
        return wa_reply_buttons(adapter_str(r, "text"), json_object_get(r, "quickReplies"));
    case ADAPTER_IMAGE:
    case ADAPTER_VIDEO:
    case ADAPTER_AUDIO:
    case ADAPTER_FILE:
    case ADAPTER_STICKER:
        *type = kind == ADAPTER_IMAGE   ? "image"
                : kind == ADAPTER_VIDEO ? "video"
                : kind == ADAPTER_AUDIO ? "audio"
                : kind == ADAPTER_FILE  ? "document"
                                        : "sticker";
        o = json_pack("{s:s}", "link", adapter_str(r, "url"));
        adapter_copy_str(o, "caption", r, "caption");
        adapter_copy_str(o, "filename", r, "filename");
        return o;
    case ADAPTER_LOCATION:
        *type = "location";
        o = json_pack("{s:O,s:O}", "latitude", json_object_get(r, "latitude"), "longitude",
                      json_object_get(r, "longitude"));
        adapter_copy_str(o, "name", r, "name");
        adapter_copy_str(o, "address", r, "address");
        return o;
    case ADAPTER_BUTTON:
        *type = "interactive";
        if (adapter_buttons_all(buttons, "postback"))
            return wa_reply_buttons(adapter_str(r, "text"), buttons);
        return json_pack("{s:s,s:{s:s},s:{s:s,s:{s:s,s:s}}}", "type", "cta_url", "body", "text",
                         adapter_str(r, "text"), "action", "name", "cta_url", "parameters",
                         "display_text", adapter_str(json_array_get(buttons, 0), "title"), "url",
                         adapter_str(json_array_get(buttons, 0), "url"));
    case ADAPTER_LIST:
        *type = "interactive";
        return wa_list(r);
    default:
        return NULL;
    }
}

json_t *adapter_whatsapp_body(const adapter_ops_t *ops, unsigned kind, const json_t *response,
                              const char *to, const char *ns, int cloud, adapter_result_t *res)
{
    const json_t *components = json_object_get(response, "components");
    const char *s, *lang, *type = NULL;
    json_t *body = NULL, *tmpl, *rich;

    if (kind == ADAPTER_NATIVE) {
        if ((body = adapter_native_message(ops, response, res)) == NULL)
            return NULL;
        json_object_set_new(body, "recipient_type", json_string("individual"));
        json_object_set_new(body, "to", json_string(to));
    } else if (kind == ADAPTER_TEXT && json_object_get(response, "quickReplies") == NULL) {
        if ((s = adapter_response_str(ops, response, "text", res)) == NULL)
            return NULL;
        body = json_pack("{s:s,s:s,s:s,s:{s:s}}", "recipient_type", "individual", "to", to, "type",
                         "text", "text", "body", s);
    } else if (kind == ADAPTER_IMAGE && json_object_get(response, "caption") == NULL) {
        if ((s = adapter_response_str(ops, response, "url", res)) == NULL)
            return NULL;
        body = json_pack("{s:s,s:s,s:s,s:{s:s}}", "recipient_type", "individual", "to", to, "type",
                         "image", "image", "link", s);
    } else if (kind != ADAPTER_TEMPLATE) {
        if ((rich = wa_rich(kind, response, &type)) != NULL)
            body = json_pack("{s:s,s:s,s:s,s:o}", "recipient_type", "individual", "to", to, "type",
                             type, type, rich);
    } else {
        if ((s = adapter_response_str(ops, response, "elementName", res)) == NULL ||
            (lang = adapter_response_str(ops, response, "languageCode", res)) == NULL)
            return NULL;
        tmpl = cloud ? json_pack("{s:s,s:{s:s}}", "name", s, "language", "code", lang)
                     : json_pack("{s:s,s:{s:s,s:s}}", "name", s, "language", "policy",
                                 "deterministic", "code", lang);
        if (tmpl != NULL && ns != NULL)
            json_object_set_new(tmpl, "namespace", json_string(ns));
        if (tmpl != NULL && components != NULL &&
            json_object_set_new(tmpl, "components", json_deep_copy(components)) < 0) {
            json_decref(tmpl);
            tmpl = NULL;
        }
        if (tmpl != NULL)
            body = json_pack("{s:s,s:s,s:o}", "to", to, "type", "template", "template", tmpl);
    }
    if (body != NULL && cloud &&
        json_object_set_new(body, "messaging_product", json_string("whatsapp")) < 0) {
        json_decref(body);
        body = NULL;
    }
    if (body == NULL)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "%s: cannot build the request", ops->type);
    return body;
}

/* apiPath and the admin token every call but the login needs. */
static int wa_prepare(const adapter_target_t *t, adapter_call_t *out, adapter_result_t *res,
                      const char **api, const char **token)
{
    memset(out, 0, sizeof(*out));
    *api = *token = NULL;
    if ((*api = adapter_info_str(t->info, "apiPath")) == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no apiPath");
    /* Missing is what an expired token would be: the gateway logs in and retries. */
    if ((*token = adapter_info_str(t->info, "adminAuthToken")) == NULL)
        return adapter_fail(res, ADAPTER_AUTH_EXPIRED, "channel has no adminAuthToken");
    if (t->to == NULL || *t->to == '\0')
        return adapter_fail(res, ADAPTER_REJECTED, "whatsapp: no recipient");
    return 0;
}

static int wa_post(adapter_call_t *out, adapter_result_t *res, const char *api, const char *path,
                   const char *token, json_t *body)
{
    if (adapter_json_post(out, adapter_url(api, "%s", path), body) < 0 ||
        adapter_add_header(out, "Authorization: Bearer %s", token) < 0) {
        adapter_call_free(out);
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp: cannot build the request");
    }
    return 0;
}

static int wa_build_send(const adapter_target_t *t, const json_t *response, const char *media_id,
                         adapter_call_t *out, adapter_result_t *res)
{
    const char *api, *token;
    unsigned kind;
    json_t *body;

    (void)media_id;
    if (wa_prepare(t, out, res, &api, &token) < 0 ||
        (kind = adapter_response_kind(&adapter_whatsapp, response, res)) == 0)
        return -1;
    body = adapter_whatsapp_body(&adapter_whatsapp, kind, response, t->to,
                                 adapter_info_str(t->info, "namespace"), 0, res);
    if (body == NULL)
        return -1;
    return wa_post(out, res, api, "/v1/messages", token, body);
}

static void wa_error(const adapter_target_t *t, const adapter_answer_t *a, const json_t *err,
                     adapter_result_t *res)
{
    long code = (long)json_integer_value(json_object_get(err, "code"));
    const char *details = json_string_value(json_object_get(err, "details"));
    adapter_status_t st = a->status == 429   ? ADAPTER_RATE_LIMITED
                          : a->status >= 500 ? ADAPTER_SERVER_ERROR
                                             : ADAPTER_REJECTED;
    char title[ADAPTER_ERROR_MAX], more[ADAPTER_ERROR_MAX], both[ADAPTER_ERROR_MAX - 32];

    adapter_copy_masked(title, sizeof(title), json_string_value(json_object_get(err, "title")),
                        t->info, secrets);
    adapter_copy_masked(more, sizeof(more), details, t->info, secrets);
    /* title and details cut together, the code kept: a window's refusal (470) takes about
     * 150 bytes to say why */
    adapter_join(both, sizeof(both), title, more);
    adapter_fail(res, adapter_code_status(codes, code, st), "whatsapp: %s (code %ld)", both, code);
    res->platform_code = code;
}

static void wa_parse_send(const adapter_target_t *t, const adapter_answer_t *a,
                          adapter_result_t *res)
{
    json_t *j = a->status != 0 ? adapter_answer_json(a) : NULL;
    const json_t *err = json_array_get(json_object_get(j, "errors"), 0);
    const json_t *meta = json_object_get(j, "meta");
    const char *id =
        json_string_value(json_object_get(json_array_get(json_object_get(j, "messages"), 0), "id"));

    if (a->status == 0)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp: no answer");
    else if (a->status == 401)
        adapter_fail(res, ADAPTER_AUTH_EXPIRED, "whatsapp: admin token refused (HTTP 401)");
    else if (a->status >= 200 && a->status < 300 && id != NULL && *id != '\0') {
        res->status = ADAPTER_OK;
        adapter_copy(res->message_id, sizeof(res->message_id), id);
        adapter_copy(res->chat_id, sizeof(res->chat_id), t->to);
        if (json_is_object(meta))
            res->meta = json_incref((json_t *)meta);
    } else if (json_is_object(err))
        wa_error(t, a, err, res);
    else if (a->status == 429)
        adapter_fail(res, ADAPTER_RATE_LIMITED, "whatsapp: rate limited (HTTP 429)");
    else if (!json_is_object(j) || a->status < 300 || a->status >= 500)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp: unusable answer (HTTP %ld)", a->status);
    else
        adapter_fail(res, ADAPTER_REJECTED, "whatsapp: HTTP %ld", a->status);
    json_decref(j);
}

static int wa_needs_refresh(const json_t *info, int64_t now_ms)
{
    return adapter_cred_expiring(info, "adminAuthToken", "adminAuthTokenExpiry", now_ms,
                                 LOGIN_MARGIN_MS);
}

static int wa_build_cred(const adapter_target_t *t, adapter_call_t *out, adapter_result_t *res)
{
    const char *api = adapter_info_str(t->info, "apiPath");
    const char *user = adapter_info_str(t->info, "adminUsername");
    const char *pass = adapter_info_str(t->info, "adminPassword");
    unsigned char *b64 = NULL;
    char *pair = NULL;
    int n, rc = -1;

    memset(out, 0, sizeof(*out));
    if (api == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no apiPath");
    if (user == NULL || pass == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no %s",
                            user == NULL ? "adminUsername" : "adminPassword");
    if ((n = asprintf(&pair, "%s:%s", user, pass)) < 0)
        pair = NULL;
    else if ((b64 = malloc(4 * (((size_t)n + 2) / 3) + 1)) != NULL)
        EVP_EncodeBlock(b64, (const unsigned char *)pair, n);
    if (b64 != NULL &&
        adapter_json_post(out, adapter_url(api, "/v1/users/login"), json_object()) == 0 &&
        adapter_add_header(out, "Authorization: Basic %s", (char *)b64) == 0)
        rc = 0;
    if (pair != NULL)
        explicit_bzero(pair, (size_t)n);
    if (b64 != NULL)
        explicit_bzero(b64, strlen((char *)b64));
    free(pair);
    free(b64);
    if (rc < 0) {
        adapter_call_free(out);
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp: cannot build the login");
    }
    return 0;
}

/* Exactly n digits at *p. */
static int digits(const char **p, int n, int *out)
{
    *out = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9')
            return -1;
        *out = *out * 10 + (**p - '0');
    }
    return 0;
}

static int expect(const char **p, const char *set)
{
    if (**p == '\0' || strchr(set, **p) == NULL)
        return -1;
    (*p)++;
    return 0;
}

/* "2026-11-29 15:29:26+00:00" (also 'T', fractions, "Z", "+0800", no offset = UTC) to ms since
 * the epoch, without the C library's locale and time zone state. */
static int wa_parse_time(const char *s, int64_t *ms)
{
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, mo, d, h, mi, sec, oh = 0, om = 0, sign = 0;
    const char *p = s;
    int leap;

    if (digits(&p, 4, &y) || expect(&p, "-") || digits(&p, 2, &mo) || expect(&p, "-") ||
        digits(&p, 2, &d) || expect(&p, " T") || digits(&p, 2, &h) || expect(&p, ":") ||
        digits(&p, 2, &mi) || expect(&p, ":") || digits(&p, 2, &sec))
        return -1;
    if (*p == '.' && p[1] >= '0' && p[1] <= '9')
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
    if (*p == 'Z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p++ == '-' ? -1 : 1;
        if (digits(&p, 2, &oh))
            return -1;
        if (*p == ':')
            p++;
        if (digits(&p, 2, &om))
            return -1;
    }
    leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
        (mo == 2 && d == 29 && !leap) || h > 23 || mi > 59 || sec > 60 || oh > 23 || om > 59)
        return -1;
    *ms = ((adapter_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec) -
           sign * (oh * 3600 + om * 60)) *
          1000;
    return 0;
}

static json_t *wa_parse_cred(const adapter_target_t *t, const adapter_answer_t *a,
                             adapter_result_t *res)
{
    json_t *j = a->status != 0 ? adapter_answer_json(a) : NULL, *cred = NULL;
    const json_t *user = json_array_get(json_object_get(j, "users"), 0);
    const char *token = json_string_value(json_object_get(user, "token"));
    const char *expires = json_string_value(json_object_get(user, "expires_after"));
    int64_t expiry;

    if (a->status == 401) {
        adapter_fail(res, ADAPTER_AUTH_INVALID, "whatsapp admin login refused");
    } else if (a->status >= 200 && a->status < 300 && token != NULL && *token != '\0') {
        /* An expiry we cannot read counts as absent: a 401 later brings a new login anyway. */
        if (expires == NULL || wa_parse_time(expires, &expiry) < 0)
            expiry = t->now_ms + DEFAULT_LIFETIME_MS;
        cred = json_pack("{s:s,s:I}", "adminAuthToken", token, "adminAuthTokenExpiry",
                         (json_int_t)expiry);
        if (cred == NULL)
            adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp admin login: out of memory");
        else
            res->status = ADAPTER_OK;
    } else if (a->status == 0) {
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp admin login: no answer");
    } else {
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp admin login failed (HTTP %ld)",
                     a->status);
    }
    json_decref(j);
    return cred;
}

static int wa_build_check(const adapter_target_t *t, adapter_call_t *out, adapter_result_t *res)
{
    const char *api, *token;
    json_t *body;

    if (wa_prepare(t, out, res, &api, &token) < 0)
        return -1;
    body =
        json_pack("{s:s,s:[s+]}", "blocking", "wait", "contacts", *t->to == '+' ? "" : "+", t->to);
    return wa_post(out, res, api, "/v1/contacts", token, body);
}

static void wa_parse_check(const adapter_target_t *t, const adapter_answer_t *a,
                           adapter_result_t *res)
{
    json_t *j = a->status != 0 ? adapter_answer_json(a) : NULL;
    const json_t *contact = json_array_get(json_object_get(j, "contacts"), 0);
    const char *status = json_string_value(json_object_get(contact, "status"));
    const char *wa_id = json_string_value(json_object_get(contact, "wa_id"));

    if (wa_id == NULL || *wa_id == '\0')
        wa_id = t->to;
    if (a->status == 401) {
        adapter_fail(res, ADAPTER_AUTH_EXPIRED, "whatsapp: admin token refused (HTTP 401)");
    } else if (a->status >= 200 && a->status < 300 && status != NULL &&
               strcmp(status, "valid") == 0) {
        if (wa_id == NULL || strlen(wa_id) >= sizeof(res->ref)) {
            adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp: contacts answer without wa_id");
        } else {
            res->status = ADAPTER_OK;
            adapter_copy(res->ref, sizeof(res->ref), wa_id);
        }
    } else if (status != NULL && strcmp(status, "invalid") == 0) {
        adapter_fail(res, ADAPTER_RECIPIENT_INVALID, "whatsapp: the number is not on WhatsApp");
    } else if (a->status == 0) {
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp: no answer to the contacts check");
    } else {
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp: contacts check failed (HTTP %ld)",
                     a->status);
    }
    json_decref(j);
}

/* ---- webhooks in (platforms.md: "whatsapp-cloud", Webhook; on-premises posts the value
 * object alone) ---- */

/* A message of the user: text, a tap (interactive button_reply / list_reply, or a template's
 * quick-reply button) or media. */
static int wa_hook_message(adapter_hook_t *h, json_t *m)
{
    const char *from = json_string_value(json_object_get(m, "from"));
    const char *id = json_string_value(json_object_get(m, "id"));
    const char *type = json_string_value(json_object_get(m, "type"));
    int64_t ts = adapter_hook_time(json_object_get(m, "timestamp"), 0);
    json_t *o = type ? json_object_get(m, type) : NULL;

    if (!json_is_object(m) || type == NULL)
        return adapter_hook_fail(h, "whatsapp: a message without a type");
    if (strcmp(type, "text") == 0)
        return adapter_hook_add(h, "INBOUND", from, id, ts,
                                json_pack("{s:s,s:s?}", "type", "TEXT", "text",
                                          json_string_value(json_object_get(o, "body"))),
                                m);
    if (strcmp(type, "interactive") == 0) {
        const char *kind = json_string_value(json_object_get(o, "type"));
        json_t *reply = kind ? json_object_get(o, kind) : NULL;
        if (!json_is_object(reply))
            return adapter_hook_fail(h, "whatsapp: an interactive message without its reply");
        return adapter_hook_tap(h, from, id, ts, json_string_value(json_object_get(reply, "id")),
                                json_string_value(json_object_get(reply, "title")), m);
    }
    if (strcmp(type, "button") == 0)
        return adapter_hook_tap(h, from, id, ts, json_string_value(json_object_get(o, "payload")),
                                json_string_value(json_object_get(o, "text")), m);
    if (strcmp(type, "location") == 0)
        return adapter_hook_add(h, "INBOUND", from, id, ts,
                                json_pack("{s:s,s:O?,s:O?}", "type", "LOCATION", "latitude",
                                          json_object_get(o, "latitude"), "longitude",
                                          json_object_get(o, "longitude")),
                                m);
    {
        json_t *data = adapter_hook_media(type, NULL);
        const char *media = json_string_value(json_object_get(o, "id"));
        if (data != NULL && media != NULL)
            json_object_set_new(data, "mediaId", json_string(media));
        return adapter_hook_add(h, "INBOUND", from, id, ts, data, m);
    }
}

/* A receipt of a message botgate sent: delivered, read or failed ("sent" is not reported). */
static int wa_hook_status(adapter_hook_t *h, json_t *s)
{
    const char *status = json_string_value(json_object_get(s, "status"));
    const char *mid = json_string_value(json_object_get(s, "id"));
    const char *type;
    char id[ADAPTER_ID_MAX];
    json_t *data, *errors = json_object_get(s, "errors");

    if (status == NULL)
        return adapter_hook_fail(h, "whatsapp: a status without its status");
    if (strcmp(status, "delivered") == 0)
        type = "DELIVERED";
    else if (strcmp(status, "read") == 0)
        type = "READ";
    else if (strcmp(status, "failed") == 0)
        type = "FAILED";
    else
        return 0;
    snprintf(id, sizeof(id), "%s:%.150s", status, mid ? mid : "");
    data = json_pack("{s:s?}", "messageId", mid);
    if (json_is_array(errors) && data != NULL)
        json_object_set(data, "errors", errors);
    return adapter_hook_add(h, type, json_string_value(json_object_get(s, "recipient_id")),
                            mid ? id : NULL, adapter_hook_time(json_object_get(s, "timestamp"), 0),
                            data, s);
}

static int wa_hook_value(adapter_hook_t *h, json_t *v)
{
    json_t *msgs = json_object_get(v, "messages"), *sts = json_object_get(v, "statuses");
    int rc = 0;

    if ((msgs != NULL && !json_is_array(msgs)) || (sts != NULL && !json_is_array(sts)))
        return adapter_hook_fail(h, "whatsapp: messages or statuses is not an array");
    for (size_t i = 0; rc == 0 && i < json_array_size(msgs); i++)
        rc = wa_hook_message(h, json_array_get(msgs, i));
    for (size_t i = 0; rc == 0 && i < json_array_size(sts); i++)
        rc = wa_hook_status(h, json_array_get(sts, i));
    return rc;
}

int adapter_whatsapp_parse_hook(const char *body, size_t len, const char *content_type,
                                adapter_hook_t *h)
{
    json_t *j = adapter_hook_json(body, len, h), *entry;
    const char *object;
    int rc = 0;

    (void)content_type;
    if (j == NULL)
        return -1;
    object = json_string_value(json_object_get(j, "object"));
    entry = json_object_get(j, "entry");
    if (object == NULL) {
        rc = wa_hook_value(h, j); /* on-premises: the value object alone */
    } else if (strcmp(object, "whatsapp_business_account") != 0 || !json_is_array(entry)) {
        rc = adapter_hook_fail(h, "whatsapp: object is not \"whatsapp_business_account\" "
                                  "with an entry array");
    } else {
        for (size_t i = 0; rc == 0 && i < json_array_size(entry); i++) {
            json_t *changes = json_object_get(json_array_get(entry, i), "changes");
            if (!json_is_array(changes))
                rc = adapter_hook_fail(h, "whatsapp: entry[%zu].changes is not an array", i);
            for (size_t k = 0; rc == 0 && k < json_array_size(changes); k++) {
                json_t *c = json_array_get(changes, k), *v = json_object_get(c, "value");
                const char *field = json_string_value(json_object_get(c, "field"));
                if (field == NULL || strcmp(field, "messages") != 0)
                    continue;
                if (!json_is_object(v))
                    rc = adapter_hook_fail(h, "whatsapp: a change without its value");
                else
                    rc = wa_hook_value(h, v);
            }
        }
    }
    json_decref(j);
    return rc;
}

const adapter_ops_t adapter_whatsapp = {
    .type = "whatsapp",
    .api_version = "",
    .from_field = "waId",
    .response_types = ADAPTER_WHATSAPP_TYPES,
    .recipient_invalid_code = 100,
    .server_error_aborts = 1,
    .phone_recipients = 1,
    .check = adapter_whatsapp_check,
    .build_send = wa_build_send,
    .parse_send = wa_parse_send,
    .cred_field = "adminAuthToken",
    .cred_needs_refresh = wa_needs_refresh,
    .build_cred = wa_build_cred,
    .parse_cred = wa_parse_cred,
    .build_check = wa_build_check,
    .parse_check = wa_parse_check,
    .parse_hook = adapter_whatsapp_parse_hook,
};
