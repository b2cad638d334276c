/* tree.c - shape checks of a tree file and its nodes, naming the place of the first fault. */
#include "tree.h"

#include "member.h"
#include "nodecode.h"
#include "request.h"

#include <stdio.h>
#include <string.h>

#define WHERE_MAX 640 /* an id of TREE_ID_MAX bytes and the names around it */
/* A webhook's answer is saved with a set of member.botMeta.tempData.<saveAs>, a path of at most
 * MEMBER_PATH_MAX bytes: a longer saveAs would pass here and fail on every run. */
#define SAVE_AS_MAX (MEMBER_PATH_MAX - (int)(sizeof("member.botMeta.tempData.") - 1))

int tree_id_ok(const char *s)
{
    size_t n;

    if (s == NULL)
        return 0;
    n = strlen(s);
    return n > 0 && n <= TREE_ID_MAX && request_id_chars_ok(s);
}

static int is_http_url(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

/* obj.key as a string; required says whether it may be absent. Sets *out when present. */
static int get_str(const json_t *obj, const char *key, const char *where, int required,
                   const char **out, bg_error_t *err)
{
    const json_t *v = json_object_get(obj, key);

    if (out != NULL)
        *out = NULL;
    if (v == NULL) {
        if (required)
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.%s is missing", where, key);
        return 0;
    }
    if (!json_is_string(v))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.%s must be a string", where, key);
    if (out != NULL)
        *out = json_string_value(v);
    return 0;
}

static int get_id(const json_t *obj, const char *key, const char *where, bg_error_t *err)
{
    const char *s;

    if (get_str(obj, key, where, 1, &s, err) < 0)
        return -1;
    if (!tree_id_ok(s))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "%s.%s must be a non-empty id of at most %d bytes without control "
                            "characters or braces",
                            where, key, TREE_ID_MAX);
    return 0;
}

static int check_tags(const json_t *action, const char *where, bg_error_t *err)
{
    const json_t *tags = json_object_get(action, "tags"), *t;
    size_t i;

    if (!json_is_array(tags))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.tags must be an array of strings",
                            where);
    json_array_foreach(tags, i, t) {
        if (!json_is_string(t))
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.tags[%zu] must be a string", where,
                                i);
    }
    return 0;
}

static int check_webhook(const json_t *action, const char *where, bg_error_t *err)
{
    const char *url, *method, *save_as;
    const json_t *timeout;

    if (get_str(action, "url", where, 1, &url, err) < 0)
        return -1;
    if (!is_http_url(url))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.url must start with http:// or https://",
                            where);
    if (get_str(action, "method", where, 0, &method, err) < 0)
        return -1;
    if (method != NULL && strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.method must be GET or POST", where);
    if (get_str(action, "saveAs", where, 0, &save_as, err) < 0)
        return -1;
    if (save_as != NULL &&
        (save_as[0] == '\0' || strlen(save_as) > SAVE_AS_MAX ||
         strspn(save_as, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
             strlen(save_as)))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "%s.saveAs must match [A-Za-z0-9_]+ (at most %d characters)", where,
                            SAVE_AS_MAX);
    timeout = json_object_get(action, "timeoutMs");
    if (timeout != NULL && (!json_is_integer(timeout) || json_integer_value(timeout) < 1 ||
                            json_integer_value(timeout) > TREE_WEBHOOK_TIMEOUT_MAX))
        return bg_error_set(err, BG_ERR_MISSING_PARAM,
                            "%s.timeoutMs must be an integer from 1 to %d", where,
                            TREE_WEBHOOK_TIMEOUT_MAX);
    return 0;
}

/* obj.key must be Lua code that compiles (with runner; a string without):
 * "nodes.N1.transform:3: <what is wrong>". */
static int check_code(const json_t *obj, const char *key, const char *where,
                      const nodecode_t *runner, bg_error_t *err)
{
    const json_t *v = json_object_get(obj, key);
    bg_error_t e;

    if (!json_is_string(v))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.%s must be a string of Lua code", where,
                            key);
    /* compiled as a chunk called key: its messages start "key:<line>:" */
    if (runner != NULL &&
        runner->compiles(json_string_value(v), json_string_length(v), key, &e) < 0)
        return bg_error_set(err, BG_ERR_SCRIPT, "%s.%s", where, e.msg);
    return 0;
}

int tree_check_action(const json_t *action, const char *where, const nodecode_t *runner,
                      bg_error_t *err)
{
    const char *type, *path;

    if (!json_is_object(action))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s must be an object", where);
    if (get_str(action, "type", where, 1, &type, err) < 0)
        return -1;
    if (strcmp(type, "set") == 0) {
        if (get_str(action, "path", where, 1, &path, err) < 0)
            return -1;
        if (!member_path_prefix_allowed(path))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "%s.path must be under member.meta. or member.botMeta.tempData., "
                                "or one of member.botMeta.subscribed, member.customLocale, "
                                "member.firstName, member.lastName",
                                where);
        if (json_object_get(action, "value") == NULL)
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.value is missing", where);
        return 0;
    }
    if (strcmp(type, "addTags") == 0 || strcmp(type, "removeTags") == 0)
        return check_tags(action, where, err);
    if (strcmp(type, "webhook") == 0)
        return check_webhook(action, where, err);
    if (strcmp(type, "script") == 0)
        return check_code(action, "code", where, runner, err);
    return bg_error_set(err, BG_ERR_UNSUPPORTED, "%s.type %.40s is not a known action", where,
                        type);
}

int tree_check_response(const json_t *resp, const char *where, bg_error_t *err)
{
    /* the check of a sent response (core/request.c); a template is checked once rendered */
    return request_check_response_flags(resp, where, REQUEST_CHECK_TEMPLATED, err);
}

static int check_actions(const json_t *node, const char *key, const char *where,
                         const nodecode_t *runner, bg_error_t *err)
{
    const json_t *list = json_object_get(node, key), *a;
    char place[WHERE_MAX];
    size_t i;

    if (list == NULL)
        return 0;
    if (!json_is_array(list))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.%s must be an array", where, key);
    json_array_foreach(list, i, a) {
        snprintf(place, sizeof(place), "%.300s.%s[%zu]", where, key, i);
        if (tree_check_action(a, place, runner, err) < 0)
            return -1;
    }
    return 0;
}

/* where is the list's own place ("nodes.N1.response"). */
static int check_response_list(const json_t *list, const char *where, bg_error_t *err)
{
    const json_t *r;
    char place[WHERE_MAX];
    size_t i;

    if (!json_is_array(list))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s must be an array", where);
    if (json_array_size(list) > TREE_MAX_RESPONSES)
        return bg_error_set(err, BG_ERR_LIMIT, "%s has more than %d responses", where,
                            TREE_MAX_RESPONSES);
    json_array_foreach(list, i, r) {
        snprintf(place, sizeof(place), "%.590s[%zu]", where, i);
        if (tree_check_response(r, place, err) < 0)
            return -1;
    }
    return 0;
}

static int check_redirect(const json_t *redirect, const char *where, bg_error_t *err)
{
    static const char *const flags[] = {"runPreAction", "sendResponse", "runPostAction"};
    size_t i;

    if (json_is_null(redirect))
        return 0;
    if (!json_is_object(redirect))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s must be an object", where);
    if (get_id(redirect, "tree", where, err) < 0 ||
        get_id(redirect, "nodeCompositeId", where, err) < 0)
        return -1;
    for (i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        const json_t *f = json_object_get(redirect, flags[i]);
        if (f != NULL && !json_is_boolean(f) && !json_is_null(f))
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.%s must be a boolean", where,
                                flags[i]);
    }
    return 0;
}

static int check_node(const json_t *node, const char *where, const nodecode_t *runner,
                      bg_error_t *err)
{
    const json_t *v;
    char place[WHERE_MAX];

    if (!json_is_object(node))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s must be an object", where);
    if (get_str(node, "name", where, 0, NULL, err) < 0)
        return -1;
    if (check_actions(node, "preAction", where, runner, err) < 0)
        return -1;
    if ((v = json_object_get(node, "response")) != NULL) {
        snprintf(place, sizeof(place), "%.300s.response", where);
        if (check_response_list(v, place, err) < 0)
            return -1;
    }
    if ((v = json_object_get(node, "responseByLocale")) != NULL) {
        const char *locale;
        const json_t *list;
        if (!json_is_object(v))
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s.responseByLocale must be an object",
                                where);
        json_object_foreach((json_t *)v, locale, list) {
            if (!tree_id_ok(locale))
                return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                    "%s.responseByLocale has a key that is not a valid locale id",
                                    where);
            snprintf(place, sizeof(place), "%.300s.responseByLocale.%.256s", where, locale);
            if (check_response_list(list, place, err) < 0)
                return -1;
        }
    }
    if (check_actions(node, "postAction", where, runner, err) < 0)
        return -1;
    v = json_object_get(node, "transform");
    if (v != NULL && !json_is_null(v) && check_code(node, "transform", where, runner, err) < 0)
        return -1;
    if ((v = json_object_get(node, "redirect")) != NULL) {
        snprintf(place, sizeof(place), "%.300s.redirect", where);
        if (check_redirect(v, place, err) < 0)
            return -1;
    }
    return 0;
}

int tree_validate(const json_t *tree, const nodecode_t *runner, bg_error_t *err)
{
    const json_t *nodes, *node;
    const char *id;
    char where[WHERE_MAX];
    size_t i = 0;

    if (!json_is_object(tree))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "the tree must be a JSON object");
    if (get_id(tree, "_id", "tree", err) < 0 || get_id(tree, "app", "tree", err) < 0 ||
        get_str(tree, "name", "tree", 1, NULL, err) < 0)
        return -1;
    nodes = json_object_get(tree, "nodes");
    if (!json_is_object(nodes) || json_object_size(nodes) == 0)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "nodes must be a non-empty object");
    json_object_foreach((json_t *)nodes, id, node) {
        if (!tree_id_ok(id))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "nodes: key #%zu is not a valid node id (non-empty, at most %d "
                                "bytes, no control characters or braces)",
                                i, TREE_ID_MAX);
        if (strcmp(id, "_tree") == 0)
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "nodes._tree: _tree is reserved and cannot be a node id");
        snprintf(where, sizeof(where), "nodes.%.256s", id);
        if (check_node(node, where, runner, err) < 0)
            return -1;
        i++;
    }
    return 0;
}

static json_t *string_or_empty(const json_t *v)
{
    return json_string(json_is_string(v) ? json_string_value(v) : "");
}

json_t *tree_meta_json(const json_t *tree)
{
    json_t *meta;

    if (!json_is_object(tree))
        return NULL;
    meta = json_object();
    json_object_set_new(meta, "app", string_or_empty(json_object_get(tree, "app")));
    json_object_set_new(meta, "name", string_or_empty(json_object_get(tree, "name")));
    return meta;
}
