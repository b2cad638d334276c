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
    /* What jparse read is at most 64 levels deep, and no string or key of a body of at most
     * REQUEST_MAX_STRING bytes can be longer (an escape never decodes longer than it is
     * written): the walk of check_limits could not refuse it. */
    if (root != NULL && len <= REQUEST_MAX_STRING) {
        *out = root;
        return 0;
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
static int get_id(const json_t *obj, const char *key, const char *name, int required, int null_ok,
                  size_t max, int limit_code, const char **out, bg_error_t *err)
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
    if (get_id(root, "channelId", "channelId", 1, 0, REQUEST_MAX_ID, BG_ERR_LIMIT, &t->channel_id,
               err) < 0 ||
        get_id(root, "memberId", "memberId", 0, 1, REQUEST_MAX_ID, BG_ERR_LIMIT, &t->member_id,
               err) < 0 ||
        get_id(root, "recipientId", "recipientId", 0, 1, REQUEST_MAX_RECIPIENT,
               BG_ERR_MISSING_PARAM, &t->recipient_id, err) < 0)
        return -1;
    if (t->member_id == NULL && t->recipient_id == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "missing parameter: memberId or recipientId");
    return 0;
}

/* ---- response objects (contract.md section 11) ---- */

/* Characters (not bytes) of a UTF-8 string: the limits of the platforms count characters. */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static int is_http_url(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

/* A templated string (a tree's "{{...}}") is checked once rendered, when it is sent. */
static int templated(unsigned flags, const char *s)
{
    return (flags & REQUEST_CHECK_TEMPLATED) && strstr(s, "{{") != NULL;
}

/* Whether a and b are the same name: most names differ in their first letter, seen without a
 * call (these comparisons run for every member of every response). */
static int same(const char *a, const char *b)
{
    return a[0] == b[0] && strcmp(a, b) == 0;
}

const char *request_fields(const json_t *obj, const char *const *names, const json_t **vals)
{
    const char *key, *unknown = NULL;
    size_t i;

    for (i = 0; names[i]; i++)
        vals[i] = NULL;
    /* the iterator itself, not json_object_foreach: two library calls fewer per member */
    for (void *it = json_object_iter((json_t *)obj); it != NULL;
         it = json_object_iter_next((json_t *)obj, it)) {
        key = json_object_iter_key(it);
        for (i = 0; names[i] && !same(names[i], key); i++)
            ;
        if (names[i] != NULL)
            vals[i] = json_object_iter_value(it);
        else if (unknown == NULL)
            unknown = key;
    }
    return unknown;
}
/* Refuses the first member of obj not in allowed (NULL-terminated): nothing a caller wrote is
 * dropped in silence. vals as request_fields() fills it (NULL: not kept). */
static int only_fields(const json_t *obj, const char *const *allowed, const char *where,
                       const json_t **vals, bg_error_t *err)
{
    const json_t *none[8];
    const char *unknown = request_fields(obj, allowed, vals != NULL ? vals : none);

    if (unknown != NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "unknown field %s.%.60s", where, unknown);
    return 0;
}

/* A string member (v, NULL when absent; key names it): absent (NULL in *out) unless required,
 * else a non-empty string of at most max_chars characters (0: no limit of its own). Over it:
 * 118. */
static int str_field(const json_t *v, const char *key, const char *where, int required,
                     size_t max_chars, unsigned flags, const char **out, bg_error_t *err)
{
    const char *s;

    if (out != NULL)
        *out = NULL;
    if (v == NULL && !required)
        return 0;
    if (v == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: %s.%s", where, key);
    if (!json_is_string(v))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s.%s must be a string", where,
                            key);
    s = json_string_value(v);
    if (*s == '\0')
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            required ? "missing parameter: %s.%s"
                                     : "parameter %s.%s must not be empty",
                            where, key);
    if (max_chars > 0 && !templated(flags, s) && utf8_chars(s) > max_chars)
        return bg_error_set(err, BG_ERR_LIMIT, "parameter %s.%s is longer than %zu characters",
                            where, key, max_chars);
    if (out != NULL)
        *out = s;
    return 0;
}

static int url_field(const json_t *v, const char *key, const char *where, int required,
                     unsigned flags, bg_error_t *err)
{
    const char *url;

    if (str_field(v, key, where, required, 0, flags, &url, err) < 0)
        return -1;
    if (url != NULL && !templated(flags, url) && !is_http_url(url))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter %s.%s must be an http or https URL", where, key);
    return 0;
}

/* An array member (v) of min..max elements (fewer: 108, more: 118); absent is NULL when
 * !required. */
static int array_field(const json_t *v, const char *key, const char *where, int required,
                       size_t min, size_t max, const json_t **out, bg_error_t *err)
{
    *out = NULL;
    if (v == NULL && !required)
        return 0;
    if (v == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: %s.%s", where, key);
    if (!json_is_array(v))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s.%s must be an array", where,
                            key);
    if (json_array_size(v) < min)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s.%s needs at least %zu items",
                            where, key, min);
    if (json_array_size(v) > max)
        return bg_error_set(err, BG_ERR_LIMIT, "parameter %s.%s has more than %zu items", where,
                            key, max);
    *out = v;
    return 0;
}

/* The name of element i of array key: "response[0].buttons[2]", cut to size; written without
 * snprintf, as request_parse_send does: it is made for every item of every response. */
static const char *item_where(char *buf, size_t size, const char *where, const char *key, size_t i)
{
    char num[NUMFMT_DEC_SIZE];
    const char *digits = numfmt_dec(num, (long long)i);
    size_t n = strnlen(where, size - 48), k = strlen(key), d = strlen(digits);

    if (n + 1 + k + 1 + d + 2 > size) /* not reached with the names botgate makes */
        k = 0;
    memcpy(buf, where, n);
    buf[n] = '.';
    memcpy(buf + n + 1, key, k);
    buf[n + 1 + k] = '[';
    memcpy(buf + n + 2 + k, digits, d);
    memcpy(buf + n + 2 + k + d, "]", 2);
    return buf;
}

/* Element i must be an object with only the allowed members (their values in vals). */
static int item_object(const json_t *item, const char *where, const char *const *allowed,
                       const json_t **vals, bg_error_t *err)
{
    if (!json_is_object(item))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s must be an object", where);
    return only_fields(item, allowed, where, vals, err);
}

/* An item's name ("response[0].buttons[2]") is made only for a message: an item is checked
 * under its array's name, and one that fails is checked again under its own (the same check
 * fails the same way), so that nothing is written for the items that pass. */
typedef int item_check_fn(const json_t *item, const char *at, unsigned flags, bg_error_t *err);

static int check_item(item_check_fn *check, const json_t *item, const char *where, const char *key,
                      size_t i, unsigned flags, bg_error_t *err)
{
    char at[REQUEST_WHERE_MAX];

    if (check(item, where, flags, err) == 0)
        return 0;
    return check(item, item_where(at, sizeof(at), where, key, i), flags, err) < 0 ? -1 : 0;
}

static int check_quick_reply(const json_t *qr, const char *at, unsigned flags, bg_error_t *err)
{
    static const char *const names[] = {"title", "payload", NULL};
    const json_t *v[2];

    return item_object(qr, at, names, v, err) < 0 ||
                   str_field(v[0], "title", at, 1, REQUEST_MAX_TITLE, flags, NULL, err) < 0 ||
                   str_field(v[1], "payload", at, 1, REQUEST_MAX_PAYLOAD, flags, NULL, err) < 0
               ? -1
               : 0;
}

static int check_quick_replies(const json_t *qrs, const char *where, unsigned flags,
                               bg_error_t *err)
{
    const json_t *list, *qr;
    size_t i;

    if (array_field(qrs, "quickReplies", where, 0, 1, REQUEST_MAX_QUICK_REPLIES, &list, err) < 0)
        return -1;
    json_array_foreach(list, i, qr) {
        if (check_item(check_quick_reply, qr, where, "quickReplies", i, flags, err) < 0)
            return -1;
    }
    return 0;
}

static int check_button(const json_t *b, const char *at, unsigned flags, bg_error_t *err)
{
    static const char *const any[] = {"type", "title", "payload", "url", "phone", NULL};
    static const char *const postback[] = {"type", "title", "payload", NULL};
    static const char *const url[] = {"type", "title", "url", NULL};
    static const char *const phone[] = {"type", "title", "phone", NULL};
    const char *type, *number, *unknown;
    const json_t *v[5];

    if (!json_is_object(b))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s must be an object", at);
    /* the members of the other types are refused by the button's type, below: the walk that
     * names the first one in order runs only when there is one */
    unknown = request_fields(b, any, v);
    if (str_field(v[0], "type", at, 1, 0, 0, &type, err) < 0 ||
        str_field(v[1], "title", at, 1, REQUEST_MAX_TITLE, flags, NULL, err) < 0)
        return -1;
    if (strcmp(type, "postback") == 0)
        return ((unknown || v[3] || v[4]) && only_fields(b, postback, at, NULL, err) < 0) ||
                       str_field(v[2], "payload", at, 1, REQUEST_MAX_PAYLOAD, flags, NULL, err) < 0
                   ? -1
                   : 0;
    if (strcmp(type, "url") == 0)
        return ((unknown || v[2] || v[4]) && only_fields(b, url, at, NULL, err) < 0) ||
                       url_field(v[3], "url", at, 1, flags, err) < 0
                   ? -1
                   : 0;
    if (strcmp(type, "phone") == 0) {
        if (((unknown || v[2] || v[3]) && only_fields(b, phone, at, NULL, err) < 0) ||
            str_field(v[4], "phone", at, 1, REQUEST_MAX_PHONE, flags, &number, err) < 0)
            return -1;
        if (!templated(flags, number) &&
            (number[0] != '+' || strspn(number + 1, "0123456789 -()") != strlen(number + 1) ||
             strpbrk(number, "0123456789") == NULL))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter %s.phone must be a number in international form "
                                "(+852...)",
                                at);
        return 0;
    }
    return bg_error_set(err, BG_ERR_MISSING_PARAM,
                        "parameter %s.type must be postback, url or phone", at);
}

static int check_buttons(const json_t *buttons, const char *where, int required, unsigned flags,
                         bg_error_t *err)
{
    const json_t *list, *b;
    size_t i;

    if (array_field(buttons, "buttons", where, required, 1, REQUEST_MAX_BUTTONS, &list, err) < 0)
        return -1;
    json_array_foreach(list, i, b) {
        if (check_item(check_button, b, where, "buttons", i, flags, err) < 0)
            return -1;
    }
    return 0;
}

static int check_card(const json_t *card, const char *at, unsigned flags, bg_error_t *err)
{
    static const char *const names[] = {"title", "subtitle", "imageUrl", "buttons", NULL};
    const json_t *v[4];

    return item_object(card, at, names, v, err) < 0 ||
                   str_field(v[0], "title", at, 1, REQUEST_MAX_CARD_TITLE, flags, NULL, err) < 0 ||
                   str_field(v[1], "subtitle", at, 0, REQUEST_MAX_CARD_TITLE, flags, NULL, err) <
                       0 ||
                   url_field(v[2], "imageUrl", at, 0, flags, err) < 0 ||
                   check_buttons(v[3], at, 0, flags, err) < 0
               ? -1
               : 0;
}

static int check_cards(const json_t *cards, const char *where, unsigned flags, bg_error_t *err)
{
    const json_t *list, *card;
    size_t i;

    if (array_field(cards, "cards", where, 1, 1, REQUEST_MAX_CARDS, &list, err) < 0)
        return -1;
    json_array_foreach(list, i, card) {
        if (check_item(check_card, card, where, "cards", i, flags, err) < 0)
            return -1;
    }
    return 0;
}

static int check_sections(const json_t *list, const char *where, unsigned flags, bg_error_t *err)
{
    static const char *const section_names[] = {"title", "rows", NULL};
    static const char *const row_names[] = {"id", "title", "description", NULL};
    const json_t *sections, *section, *rows, *row, *sv[2], *rv[3];
    char at[REQUEST_WHERE_MAX], rat[REQUEST_WHERE_MAX];
    size_t i, j, total = 0;

    if (array_field(list, "sections", where, 1, 1, REQUEST_MAX_SECTIONS, &sections, err) < 0)
        return -1;
    json_array_foreach(sections, i, section) {
        item_where(at, sizeof(at), where, "sections", i);
        /* several sections are told apart by their titles */
        if (item_object(section, at, section_names, sv, err) < 0 ||
            str_field(sv[0], "title", at, json_array_size(sections) > 1, REQUEST_MAX_ROW_TITLE,
                      flags, NULL, err) < 0 ||
            array_field(sv[1], "rows", at, 1, 1, REQUEST_MAX_ROWS, &rows, err) < 0)
            return -1;
        json_array_foreach(rows, j, row) {
            item_where(rat, sizeof(rat), at, "rows", j);
            if (++total > REQUEST_MAX_ROWS)
                return bg_error_set(err, BG_ERR_LIMIT,
                                    "parameter %s.sections has more than %d rows in all", where,
                                    REQUEST_MAX_ROWS);
            if (item_object(row, rat, row_names, rv, err) < 0 ||
                str_field(rv[0], "id", rat, 1, REQUEST_MAX_ROW_ID, flags, NULL, err) < 0 ||
                str_field(rv[1], "title", rat, 1, 0, flags, NULL, err) < 0 ||
                str_field(rv[2], "description", rat, 0, 0, flags, NULL, err) < 0)
                return -1;
        }
    }
    return 0;
}

/* A number (v) in [-limit, limit]; a tree may hold a templated string instead. */
static int coordinate(const json_t *v, const char *key, const char *where, double limit,
                      unsigned flags, bg_error_t *err)
{
    if (v == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: %s.%s", where, key);
    if (json_is_string(v) && templated(flags, json_string_value(v)))
        return 0;
    if (!json_is_number(v) || json_number_value(v) < -limit || json_number_value(v) > limit)
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter %s.%s must be a number from %g to %g", where, key, -limit,
                            limit);
    return 0;
}

/* The members of a platform's message object that say who receives it: botgate alone
 * decides that. */
static const char *const recipient_fields[] = {
    "recipient", "to", "touser", "channel", "users", "messaging_product", "recipient_type", NULL};

static int check_native(const json_t *message, const char *where, bg_error_t *err)
{
    const json_t *v[8];
    size_t i;

    if (message == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "missing parameter: %s.message", where);
    if (!json_is_object(message) || json_object_size(message) == 0)
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter %s.message must be a non-empty object", where);
    request_fields(message, recipient_fields, v);
    for (i = 0; recipient_fields[i] && v[i] == NULL; i++)
        ;
    if (recipient_fields[i] != NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter %s.message.%s is not allowed: botgate addresses the "
                            "message",
                            where, recipient_fields[i]);
    return 0;
}

int request_message_tag_ok(const char *tag)
{
    static const char *const tags[] = {"ACCOUNT_UPDATE", "CONFIRMED_EVENT_UPDATE",
                                       "POST_PURCHASE_UPDATE", "HUMAN_AGENT", NULL};

    for (size_t i = 0; tag != NULL && tags[i] != NULL; i++)
        if (strcmp(tag, tags[i]) == 0)
            return 1;
    return 0;
}

/* What each type may hold besides type and fallback. */
#define SHAPE_FIELDS 6
static const struct response_shape {
    const char *type;
    const char *fields[SHAPE_FIELDS + 1]; /* NULL-terminated */
} shapes[] = {
    {"TEXT", {"text", "quickReplies"}},
    {"IMAGE", {"url", "caption"}},
    {"VIDEO", {"url", "caption"}},
    {"AUDIO", {"url"}},
    {"FILE", {"url", "caption", "filename"}},
    {"STICKER", {"url", "sticker"}},
    {"LOCATION", {"latitude", "longitude", "name", "address"}},
    {"BUTTON", {"text", "buttons"}},
    {"CAROUSEL", {"cards"}},
    {"LIST", {"text", "button", "sections"}},
    {"TEMPLATE", {"elementName", "languageCode", "components"}},
    {"NATIVE", {"message"}},
};

/* Refuses a member the type does not have. vals gets the value of each shape->fields[i]
 * present (NULL when absent), *fallback the fallback and *tag the messageTag, which any type
 * may carry (contract.md section 14; the channel's adapter says whether it takes one): nothing
 * is looked up again. */
static int check_fields(const json_t *resp, const struct response_shape *shape, int nested,
                        const char *where, const json_t **vals, const json_t **fallback,
                        const json_t **tag, bg_error_t *err)
{
    for (size_t i = 0; i < SHAPE_FIELDS; i++)
        vals[i] = NULL;
    *fallback = *tag = NULL;
    for (void *it = json_object_iter((json_t *)resp); it != NULL;
         it = json_object_iter_next((json_t *)resp, it)) {
        const char *key = json_object_iter_key(it);
        json_t *v = json_object_iter_value(it);
        size_t i = 0;
        if (same(key, "type"))
            continue;
        if (same(key, "fallback") && !nested) {
            *fallback = v;
            continue;
        }
        if (same(key, "messageTag")) {
            *tag = v;
            continue;
        }
        while (shape->fields[i] && !same(shape->fields[i], key))
            i++;
        if (shape->fields[i] == NULL)
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "unknown field %s.%.60s%s", where, key,
                                strcmp(key, "fallback") == 0 ? " (a fallback has no fallback)"
                                                             : "");
        vals[i] = v;
    }
    return 0;
}

/* The member key of a response of this shape, from the values check_fields kept. */
static const json_t *member(const struct response_shape *shape, const json_t *const *vals,
                            const char *key)
{
    for (size_t i = 0; shape->fields[i]; i++)
        if (same(shape->fields[i], key))
            return vals[i];
    return NULL;
}

static int check_body(const struct response_shape *shape, const json_t *const *vals,
                      const char *where, unsigned flags, bg_error_t *err)
{
    const char *type = shape->type, *sticker;
    const json_t *components;

    switch (type[0]) {
    case 'T':
        if (strcmp(type, "TEXT") == 0)
            return str_field(vals[0], "text", where, 1, 0, flags, NULL, err) < 0 ||
                           (vals[1] && check_quick_replies(vals[1], where, flags, err) < 0)
                       ? -1
                       : 0;
        components = vals[2];
        if (str_field(vals[0], "elementName", where, 1, 0, flags, NULL, err) < 0 ||
            str_field(vals[1], "languageCode", where, 1, 0, flags, NULL, err) < 0)
            return -1;
        if (components != NULL && !json_is_array(components))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter %s.components must be an array", where);
        return 0;
    case 'I':
    case 'V':
    case 'A':
    case 'F':
        return url_field(vals[0], "url", where, 1, flags, err) < 0 ||
                       str_field(member(shape, vals, "caption"), "caption", where, 0, 0, flags,
                                 NULL, err) < 0 ||
                       str_field(member(shape, vals, "filename"), "filename", where, 0,
                                 REQUEST_MAX_FILENAME, flags, NULL, err) < 0
                   ? -1
                   : 0;
    case 'S':
        if (url_field(vals[0], "url", where, 0, flags, err) < 0 ||
            str_field(vals[1], "sticker", where, 0, REQUEST_MAX_STICKER, flags, &sticker, err) < 0)
            return -1;
        if ((json_string_value(vals[0]) == NULL) == (sticker == NULL))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "parameter %s needs one of url and sticker", where);
        return 0;
    case 'L':
        if (strcmp(type, "LOCATION") == 0)
            return coordinate(vals[0], "latitude", where, 90, flags, err) < 0 ||
                           coordinate(vals[1], "longitude", where, 180, flags, err) < 0 ||
                           str_field(vals[2], "name", where, 0, 0, flags, NULL, err) < 0 ||
                           str_field(vals[3], "address", where, 0, 0, flags, NULL, err) < 0
                       ? -1
                       : 0;
        return str_field(vals[0], "text", where, 1, 0, flags, NULL, err) < 0 ||
                       str_field(vals[1], "button", where, 1, REQUEST_MAX_TITLE, flags, NULL, err) <
                           0 ||
                       check_sections(vals[2], where, flags, err) < 0
                   ? -1
                   : 0;
    case 'B':
        return str_field(vals[0], "text", where, 1, 0, flags, NULL, err) < 0 ||
                       check_buttons(vals[1], where, 1, flags, err) < 0
                   ? -1
                   : 0;
    case 'C':
        return check_cards(vals[0], where, flags, err);
    default: /* NATIVE */
        return check_native(vals[0], where, err);
    }
}

static int check_one(const json_t *resp, const char *where, unsigned flags, int nested,
                     bg_error_t *err)
{
    const char *type;
    const json_t *fallback, *tag, *vals[SHAPE_FIELDS];
    const char *tag_name;
    size_t i = 0;

    if (!json_is_object(resp))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter %s must be an object", where);
    if (str_field(json_object_get(resp, "type"), "type", where, 1, 0, 0, &type, err) < 0)
        return -1;
    while (i < sizeof(shapes) / sizeof(shapes[0]) && !same(shapes[i].type, type))
        i++;
    if (i == sizeof(shapes) / sizeof(shapes[0]))
        return bg_error_set(err, BG_ERR_UNSUPPORTED,
                            "%s.type: response type %.40s is not supported", where, type);
    if (check_fields(resp, &shapes[i], nested, where, vals, &fallback, &tag, err) < 0 ||
        check_body(&shapes[i], vals, where, flags, err) < 0 ||
        str_field(tag, "messageTag", where, 0, 0, flags, &tag_name, err) < 0)
        return -1;
    if (tag_name != NULL && !templated(flags, tag_name) && !request_message_tag_ok(tag_name))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "parameter %s.messageTag must be ACCOUNT_UPDATE, "
                            "CONFIRMED_EVENT_UPDATE, POST_PURCHASE_UPDATE or HUMAN_AGENT",
                            where);
    if (fallback != NULL) {
        /* "<where>.fallback" (where cut to 140 bytes), without snprintf */
        char at[REQUEST_WHERE_MAX];
        size_t n = strnlen(where, 140);
        memcpy(at, where, n);
        memcpy(at + n, ".fallback", sizeof(".fallback"));
        return check_one(fallback, at, flags, 1, err);
    }
    return 0;
}

int request_check_response_flags(const json_t *resp, const char *where, unsigned flags,
                                 bg_error_t *err)
{
    return check_one(resp, where, flags, 0, err);
}

int request_check_response(const json_t *resp, const char *where, bg_error_t *err)
{
    return check_one(resp, where, 0, 0, err);
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

static int get_flag(const json_t *redirect, const char *name, unsigned char *out, bg_error_t *err)
{
    const json_t *v = json_object_get(redirect, name);

    *out = 1;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "parameter redirect.%s must be a boolean",
                            name);
    *out = json_is_true(v) ? 1 : 0;
    return 0;
}

int request_parse_redirect(const char *body, size_t len, redirect_request_t *out, bg_error_t *err)
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
