/* member.c - set paths, member deltas and new member records. */
#include "member.h"

#include "window.h"

#include <stdio.h>
#include <string.h>

typedef enum {
    PATH_REFUSED,
    PATH_META,
    PATH_TEMP_DATA,
    PATH_SUBSCRIBED,
    PATH_CUSTOM_LOCALE,
    PATH_FIRST_NAME,
    PATH_LAST_NAME,
} path_kind_t;

#define PREFIX_META      "member.meta."
#define PREFIX_TEMP_DATA "member.botMeta.tempData."

static const struct {
    const char *path;
    path_kind_t kind;
} exact_paths[] = {
    {"member.botMeta.subscribed", PATH_SUBSCRIBED},
    {"member.customLocale", PATH_CUSTOM_LOCALE},
    {"member.firstName", PATH_FIRST_NAME},
    {"member.lastName", PATH_LAST_NAME},
};

/* Which kind of path this is, ignoring what follows a meta / tempData prefix; *rest points
 * after the prefix. */
static path_kind_t path_prefix_kind(const char *path, const char **rest)
{
    size_t i;

    *rest = NULL;
    if (path == NULL)
        return PATH_REFUSED;
    if (strncmp(path, PREFIX_META, strlen(PREFIX_META)) == 0) {
        *rest = path + strlen(PREFIX_META);
        return PATH_META;
    }
    if (strncmp(path, PREFIX_TEMP_DATA, strlen(PREFIX_TEMP_DATA)) == 0) {
        *rest = path + strlen(PREFIX_TEMP_DATA);
        return PATH_TEMP_DATA;
    }
    for (i = 0; i < sizeof(exact_paths) / sizeof(exact_paths[0]); i++) {
        if (strcmp(path, exact_paths[i].path) == 0)
            return exact_paths[i].kind;
    }
    return PATH_REFUSED;
}

/* The kind of a complete path, with the segments below a prefix checked. */
static path_kind_t path_kind(const char *path, const char **rest)
{
    path_kind_t kind = path_prefix_kind(path, rest);
    const char *p;
    int segments = 1;

    if (kind != PATH_META && kind != PATH_TEMP_DATA)
        return kind;
    if (*rest == NULL || strlen(path) > MEMBER_PATH_MAX || (*rest)[0] == '\0' || (*rest)[0] == '.')
        return PATH_REFUSED;
    for (p = *rest; *p != '\0'; p++) {
        if (*p != '.')
            continue;
        if (p[1] == '.' || p[1] == '\0' || ++segments > MEMBER_PATH_DEPTH)
            return PATH_REFUSED;
    }
    return kind;
}

int member_path_allowed(const char *path)
{
    const char *rest;

    return path_kind(path, &rest) != PATH_REFUSED;
}

int member_path_prefix_allowed(const char *path)
{
    const char *rest;
    path_kind_t kind = path_prefix_kind(path, &rest);

    if (kind == PATH_META || kind == PATH_TEMP_DATA)
        return rest[0] != '\0';
    return kind != PATH_REFUSED;
}

/* parent[key] as an object, replacing whatever else was there. Borrowed. */
static json_t *child_object(json_t *parent, const char *key)
{
    json_t *v = json_object_get(parent, key);

    if (json_is_object(v))
        return v;
    v = json_object();
    if (json_object_set_new(parent, key, v) < 0)
        return NULL;
    return v;
}

/* Sets base.<rest> (dot-separated, already checked) to a deep copy of value. */
static int set_below(json_t *base, const char *rest, const json_t *value, bg_error_t *err)
{
    char buf[MEMBER_PATH_MAX + 1];
    char *seg = buf, *dot;
    json_t *copy;

    snprintf(buf, sizeof(buf), "%s", rest);
    while ((dot = strchr(seg, '.')) != NULL) {
        *dot = '\0';
        base = child_object(base, seg);
        if (base == NULL)
            return bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
        seg = dot + 1;
    }
    copy = json_deep_copy(value);
    if (copy == NULL || json_object_set_new(base, seg, copy) < 0)
        return bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
    return 0;
}

int member_apply_set(json_t *member, const char *path, json_t *value, bg_error_t *err)
{
    const char *rest;
    path_kind_t kind = path_kind(path, &rest);
    json_t *base;

    if (!json_is_object(member))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "member is not an object");
    if (value == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "path %.200s: missing value",
                            path ? path : "(null)");
    switch (kind) {
    case PATH_REFUSED:
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "path %.200s cannot be set",
                            path ? path : "(null)");
    case PATH_META:
        base = child_object(member, "meta");
        return base ? set_below(base, rest, value, err)
                    : bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
    case PATH_TEMP_DATA:
        base = child_object(member, "botMeta");
        base = base ? child_object(base, "tempData") : NULL;
        return base ? set_below(base, rest, value, err)
                    : bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
    case PATH_SUBSCRIBED: {
        int b;
        const char *s = json_string_value(value);
        if (json_is_boolean(value))
            b = json_is_true(value);
        else if (s != NULL && (strcmp(s, "true") == 0 || strcmp(s, "false") == 0))
            b = s[0] == 't';
        else
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "path %s takes a boolean", path);
        base = child_object(member, "botMeta");
        if (base == NULL || json_object_set_new(base, "subscribed", json_boolean(b)) < 0)
            return bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
        return 0;
    }
    case PATH_CUSTOM_LOCALE:
        if (!json_is_string(value) && !json_is_null(value))
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "path %s takes a string or null", path);
        json_object_set_new(member, "customLocale", json_deep_copy(value));
        return 0;
    case PATH_FIRST_NAME:
    case PATH_LAST_NAME:
        if (!json_is_string(value))
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "path %s takes a string", path);
        json_object_set_new(member, kind == PATH_FIRST_NAME ? "firstName" : "lastName",
                            json_deep_copy(value));
        return 0;
    }
    return bg_error_set(err, BG_ERR_MISSING_PARAM, "path %.200s cannot be set", path);
}

static json_t *tags_of(json_t *member)
{
    json_t *tags = json_object_get(member, "tags");

    if (json_is_array(tags))
        return tags;
    tags = json_array();
    json_object_set_new(member, "tags", tags);
    return tags;
}

static int has_tag(const json_t *tags, const json_t *tag)
{
    size_t i;
    json_t *t;

    json_array_foreach(tags, i, t) {
        if (json_equal(t, tag))
            return 1;
    }
    return 0;
}

static int apply_tags(json_t *member, const json_t *list, int add, size_t at, bg_error_t *err)
{
    json_t *tags, *tag;
    size_t i, j;

    if (!json_is_array(list))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "delta[%zu].tags must be an array", at);
    json_array_foreach(list, i, tag) {
        if (!json_is_string(tag))
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "delta[%zu].tags[%zu] must be a string",
                                at, i);
    }
    tags = tags_of(member);
    json_array_foreach(list, i, tag) {
        if (add) {
            if (json_string_length(tag) > 0 && !has_tag(tags, tag))
                json_array_append_new(tags, json_deep_copy(tag));
            continue;
        }
        for (j = json_array_size(tags); j-- > 0;) {
            if (json_equal(json_array_get(tags, j), tag))
                json_array_remove(tags, j);
        }
    }
    return 0;
}

static int apply_op(json_t *member, const json_t *op, size_t at, bg_error_t *err)
{
    const char *name = json_string_value(json_object_get(op, "op"));

    if (!json_is_object(op))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "delta[%zu] must be an object", at);

    if (name == NULL)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "delta[%zu].op must be a string", at);
    if (strcmp(name, "set") == 0) {
        const char *path = json_string_value(json_object_get(op, "path"));
        if (path == NULL)
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "delta[%zu].path must be a string", at);
        return member_apply_set(member, path, json_object_get(op, "value"), err);
    }
    if (strcmp(name, "addTags") == 0 || strcmp(name, "removeTags") == 0)
        return apply_tags(member, json_object_get(op, "tags"), name[0] == 'a', at, err);
    if (strcmp(name, "position") == 0) {
        json_t *tree = json_object_get(op, "tree"), *node = json_object_get(op, "node");
        json_t *bot;
        if (!json_is_string(tree) || !json_is_string(node))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "delta[%zu] position needs tree and node strings", at);
        bot = child_object(member, "botMeta");
        if (bot == NULL)
            return bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
        json_object_set_new(bot, "tree", json_deep_copy(tree));
        json_object_set_new(bot, "nodeCompositeId", json_deep_copy(node));
        return 0;
    }
    return bg_error_set(err, BG_ERR_MISSING_PARAM, "delta[%zu].op %.40s is unknown", at, name);
}

int member_apply_op(json_t *member, const json_t *op, bg_error_t *err)
{
    if (!json_is_object(member))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "member is not an object");
    return apply_op(member, op, 0, err);
}

/* The delta applied to member itself: a failing op leaves it half changed. */
static int apply_in_place(json_t *member, const json_t *delta, int64_t now_ms, bg_error_t *err)
{
    json_t *op;
    size_t i;

    json_array_foreach(delta, i, op) {
        if (apply_op(member, op, i, err) < 0)
            return -1;
    }
    tags_of(member);
    child_object(member, "meta");
    child_object(child_object(member, "botMeta"), "tempData");
    json_object_set_new(member, "updatedAt", json_integer(now_ms));
    return 0;
}

int member_apply_delta(json_t *member, const json_t *delta, int64_t now_ms, bg_error_t *err)
{
    json_t *work;

    if (!json_is_object(member))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "member is not an object");
    if (!json_is_array(delta))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "delta must be an array");
    /* Work on a copy so that a bad op leaves the record as it was. */
    work = json_deep_copy(member);
    if (work == NULL)
        return bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
    if (apply_in_place(work, delta, now_ms, err) < 0) {
        json_decref(work);
        return -1;
    }
    if (json_object_clear(member) < 0 || json_object_update(member, work) < 0) {
        json_decref(work);
        return bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
    }
    json_decref(work);
    return 0;
}

/* The compare-and-set throws record away when this fails, so no copy is needed to keep it
 * whole (a deep copy of the member was a tenth of a redirect's own work). */
int member_mutate(json_t *record, const json_t *change, int64_t now_ms)
{
    bg_error_t err;

    if (!json_is_object(record) || !json_is_array(change))
        return -1;
    return apply_in_place(record, change, now_ms, &err);
}

int member_mark_inbound(json_t *record, const json_t *change, int64_t now_ms)
{
    json_t *at = json_object_get(change, "lastInboundAt");

    if (!json_is_object(record) || !json_is_integer(at))
        return -1;
    /* what another writer stored (an ISO date included) counts as the windows read it; the
     * field is then written as botgate writes it, in ms */
    if (window_last_inbound(record) < json_integer_value(at))
        json_object_set(record, "lastInboundAt", at);
    json_object_set_new(record, "updatedAt", json_integer(now_ms));
    return 0;
}

static json_t *str_or_empty(const char *s)
{
    return json_string(s ? s : "");
}

json_t *member_new(const char *id, const char *channel_id, const char *app, const char *external_id,
                   const char *platform, int64_t now_ms)
{
    json_t *m = json_object(), *bot = json_object();

    json_object_set_new(m, "_id", str_or_empty(id));
    json_object_set_new(m, "channel", str_or_empty(channel_id));
    json_object_set_new(m, "app", str_or_empty(app));
    json_object_set_new(m, "externalId", str_or_empty(external_id));
    json_object_set_new(m, "platform", str_or_empty(platform));
    json_object_set_new(m, "firstName", json_string(""));
    json_object_set_new(m, "lastName", json_string(""));
    json_object_set_new(m, "locale", json_string("en"));
    json_object_set_new(m, "customLocale", json_null());
    json_object_set_new(m, "tags", json_array());
    json_object_set_new(m, "meta", json_object());
    json_object_set_new(bot, "tree", json_null());
    json_object_set_new(bot, "nodeCompositeId", json_null());
    json_object_set_new(bot, "liveChat", json_false());
    json_object_set_new(bot, "subscribed", json_true());
    json_object_set_new(bot, "tempData", json_object());
    json_object_set_new(m, "botMeta", bot);
    json_object_set_new(m, "createdAt", json_integer(now_ms));
    json_object_set_new(m, "updatedAt", json_integer(now_ms));
    return m;
}
