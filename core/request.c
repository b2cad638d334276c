/* request.c - body parsing and validation for both operations (contract.md section 5). */
#include "request.h"

#include "../json/jparse.h"
#include "../json/numfmt.h"

#include <stdio.h>
#include <string.h>

/* Walks the parsed body once: depth and string lengths. Recursion is bounded by jansson's own
 * parser depth limit (2048), and stops at REQUEST_MAX_DEPTH + 1 anyway. */
static int check_limits(const json_t *v, int depth, bg_error_t *err)
{
    const char *key;
    json_t *item;
    size_t i;

    /* Only containers make a level: a scalar inside the 64th container is not a 65th. */
    if (depth > REQUEST_MAX_DEPTH && (json_is_object(v) || json_is_array(v)))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "body nested deeper than %d levels",
                            REQUEST_MAX_DEPTH);
    switch (json_typeof(v)) {
    case JSON_STRING:
        if (json_string_length(v) > REQUEST_MAX_STRING)
            return bg_error_set(err, BG_ERR_LIMIT, "a string is longer than %d bytes",
                                REQUEST_MAX_STRING);
        return 0;
    case JSON_OBJECT:
        json_object_foreach((json_t *)v, key, item) {
            if (strlen(key) > REQUEST_MAX_STRING)
                return bg_error_set(err, BG_ERR_LIMIT, "a key is longer than %d bytes",
                                    REQUEST_MAX_STRING);
            if (check_limits(item, depth + 1, err) < 0)
                return -1;
        }
        return 0;
    case JSON_ARRAY:
        json_array_foreach(v, i, item) {
            if (check_limits(item, depth + 1, err) < 0)
                return -1;
        }
        return 0;
    default:
        return 0;
    }
}

int request_parse_json(const char *body, size_t len, json_t **out, bg_error_t *err)
{
    json_error_t jerr;
    json_t *root;

    *out = NULL;
    if (len > REQUEST_MAX_BODY) {
        bg_error_set(err, BG_ERR_LIMIT, "body larger than %d bytes", REQUEST_MAX_BODY);
        err->http_status = 413;
        return -1;
    }
    if (body == NULL || len == 0)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "body must be a JSON object");
    /* jparse reads a buffer in about a third of json_loadb's instructions, and accepts exactly
     * what json_loadb with JSON_REJECT_DUPLICATES does, but for the depth (it stops at 64
     * levels), the top level (it reads any value) and a NUL byte (json_loadb ends the text
     * there). Anything but an object it reads is read again by json_loadb, so that every
     * refusal and its message stay jansson's. Both refuse invalid UTF-8 and \u0000. */
    root = jparse_value_unique(body, len);
    if (root != NULL && !json_is_object(root)) {
        json_decref(root);
        root = NULL;
    }
    if (root == NULL)
        root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "body is not valid JSON: %s", jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "body must be a JSON object");
    }
    if (check_limits(root, 1, err) < 0) {
        json_decref(root);
        return -1;
    }
    *out = root;
    return 0;
}

/* Whether the character at p may not appear in an id: C0 controls and DEL,
 * the C1 controls U+0080-U+009F (U+0085 is a line break to many readers), U+2028 and U+2029
 * (line and paragraph separators), and the braces that would end a key's hash tag. The text
 * is valid UTF-8 already (jansson checked it). */
static int refused_char(const unsigned char *p)
{
    return *p < 0x20 || *p == 0x7f || *p == '{' || *p == '}' ||
           (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) ||
           (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9));
}

int request_id_chars_ok(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (refused_char(p))
            return 0;
    return 1;
}

/* An id used inside Redis keys: a non-empty string of at most max bytes without braces or
 * control characters, so that two different (channel, member) pairs can never build the same
 * key. Over max: limit_code (118, or 108 where the id could not be carried whole). */
static int get_id(const json_t *obj, const char *key, const char *name, int required,
                  int null_ok, size_t max, int limit_code, const char **out, bg_error_t *err)
{
    json_t *v = json_object_get(obj, key);
    const char *s;

    *out = NULL;
    if (v == NULL || (json_is_null(v) && null_ok)) {
        if (required)
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: %s", name);
        return 0;
    }
    if (!json_is_string(v))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s must be a string", name);
    s = json_string_value(v);
    if (*s == '\0') {
        if (required)
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: %s", name);
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s must not be empty", name);
    }
    if (json_string_length(v) > max)
        return bg_error_set(err, limit_code, "parameter %s is longer than %zu bytes", name, max);
    if (!request_id_chars_ok(s))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter %s contains a character that is not allowed", name);
    *out = s;
    return 0;
}

static int parse_target(const json_t *root, request_target_t *t, bg_error_t *err)
{
    if (get_id(root, "channelId", "channelId", 1, 0, REQUEST_MAX_ID, BG_ERR_LIMIT,
               &t->channel_id, err) < 0 ||
        get_id(root, "memberId", "memberId", 0, 1, REQUEST_MAX_ID, BG_ERR_LIMIT, &t->member_id,
               err) < 0 ||
        get_id(root, "recipientId", "recipientId", 0, 1, REQUEST_MAX_RECIPIENT,
               BG_ERR_MISSING_PARAM, &t->recipient_id, err) < 0)
        return -1;
    if (t->member_id == NULL && t->recipient_id == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: memberId or recipientId");
    return 0;
}

static int need_string(const json_t *obj, const char *field, const char *where, bg_error_t *err)
{
    const json_t *v = json_object_get(obj, field);

    if (!json_is_string(v) || json_string_length(v) == 0)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: %s.%s", where, field);
    return 0;
}

int request_check_response(const json_t *resp, const char *where, bg_error_t *err)
{
    const char *type;
    const json_t *components;

    if (!json_is_object(resp))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s must be an object", where);
    if (need_string(resp, "type", where, err) < 0)
        return -1;
    type = json_string_value(json_object_get(resp, "type"));
    if (strcmp(type, "TEXT") == 0)
        return need_string(resp, "text", where, err);
    if (strcmp(type, "IMAGE") == 0) {
        const char *url;
        if (need_string(resp, "url", where, err) < 0)
            return -1;
        url = json_string_value(json_object_get(resp, "url"));
        if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter %s.url must be an http or https URL", where);
        return 0;
    }
    if (strcmp(type, "TEMPLATE") == 0) {
        if (need_string(resp, "elementName", where, err) < 0 ||
            need_string(resp, "languageCode", where, err) < 0)
            return -1;
        components = json_object_get(resp, "components");
        if (components != NULL && !json_is_array(components))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter %s.components must be an array", where);
        return 0;
    }
    return bg_error_set(err, BG_ERR_UNSUPPORTED, "response type %.40s is not supported", type);
}

int request_parse_send(const char *body, size_t len, send_request_t *out, bg_error_t *err)
{
    const json_t *responses;
    const char *name = "response";
    char where[32], num[NUMFMT_DEC_SIZE];
    size_t i;

    memset(out, 0, sizeof(*out));
    if (request_parse_json(body, len, &out->root, err) < 0)
        return -1;
    if (parse_target(out->root, &out->target, err) < 0)
        goto fail;
    responses = json_object_get(out->root, "response");
    if (responses == NULL) {
        responses = json_object_get(out->root, "responses");
        name = "responses";
    }
    if (!json_is_array(responses)) {
        bg_error_set(err, BG_ERR_MISSING_PARAM,
                     responses ? "parameter %s must be an array" : "missing parameter: %s",
                     responses ? name : "response");
        goto fail;
    }
    if (json_array_size(responses) == 0) {
        bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s must not be empty", name);
        goto fail;
    }
    if (json_array_size(responses) > REQUEST_MAX_RESPONSES) {
        bg_error_set(err, BG_ERR_LIMIT, "more than %d responses in one request",
                     REQUEST_MAX_RESPONSES);
        goto fail;
    }
    for (i = 0; i < json_array_size(responses); i++) {
        /* "response[3]", without snprintf: it ran for every response of every request */
        const char *digits = numfmt_dec(num, (long long)i);
        size_t n = strlen(name), d = strlen(digits);
        memcpy(where, name, n);
        where[n] = '[';
        memcpy(where + n + 1, digits, d);
        memcpy(where + n + 1 + d, "]", 2);
        if (request_check_response(json_array_get(responses, i), where, err) < 0)
            goto fail;
    }
    out->responses = responses;
    return 0;
fail:
    request_send_free(out);
    return -1;
}

void request_send_free(send_request_t *req)
{
    json_decref(req->root);
    memset(req, 0, sizeof(*req));
}

static int get_flag(const json_t *redirect, const char *name, int *out, bg_error_t *err)
{
    const json_t *v = json_object_get(redirect, name);

    *out = 1;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter redirect.%s must be a boolean",
                            name);
    *out = json_is_true(v);
    return 0;
}

int request_parse_redirect(const char *body, size_t len, redirect_request_t *out,
                           bg_error_t *err)
{
    const json_t *redirect, *meta;

    memset(out, 0, sizeof(*out));
    if (request_parse_json(body, len, &out->root, err) < 0)
        return -1;
    if (parse_target(out->root, &out->target, err) < 0)
        goto fail;
    redirect = json_object_get(out->root, "redirect");
    if (redirect == NULL) {
        bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: redirect");
        goto fail;
    }
    if (!json_is_object(redirect)) {
        bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter redirect must be an object");
        goto fail;
    }
    if (get_id(redirect, "tree", "redirect.tree", 1, 0, REQUEST_MAX_ID, BG_ERR_LIMIT, &out->tree,
               err) < 0 ||
        get_id(redirect, "nodeCompositeId", "redirect.nodeCompositeId", 1, 0, REQUEST_MAX_ID,
               BG_ERR_LIMIT, &out->node_id, err) < 0)
        goto fail;
    if (get_flag(redirect, "runPreAction", &out->run_pre, err) < 0 ||
        get_flag(redirect, "sendResponse", &out->send_response, err) < 0 ||
        get_flag(redirect, "runPostAction", &out->run_post, err) < 0)
        goto fail;
    meta = json_object_get(out->root, "meta");
    if (meta == NULL || json_is_null(meta)) {
        json_object_set_new(out->root, "meta", json_object());
        meta = json_object_get(out->root, "meta");
    } else if (!json_is_object(meta)) {
        bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter meta must be an object");
        goto fail;
    }
    out->meta = meta;
    return 0;
fail:
    request_redirect_free(out);
    return -1;
}

void request_redirect_free(redirect_request_t *req)
{
    json_decref(req->root);
    memset(req, 0, sizeof(*req));
}

void request_normalize_phone(const char *in, char *out, size_t size)
{
    size_t n = 0;

    for (; *in && n + 1 < size; in++)
        if (!strchr("+-() ", *in))
            out[n++] = *in;
    out[n] = '\0';
}
