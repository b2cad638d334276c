/* script_member.c - what a run changed in self.member, as member.h "set" operations checked
 * against the member it started with. */
#include "script_member.h"

#include "../core/member.h"

#include <stdio.h>
#include <string.h>

/* Equal, counting an object member whose value is null as absent (what the script sees). */
static int same_value(const json_t *a, const json_t *b)
{
    const char *key;
    const json_t *v;
    size_t i;

    if (a == NULL)
        a = json_null();
    if (b == NULL)
        b = json_null();
    if (json_is_object(a) && json_is_object(b)) {
        json_object_foreach((json_t *)a, key, v) {
            if (!same_value(v, json_object_get(b, key)))
                return 0;
        }
        json_object_foreach((json_t *)b, key, v) {
            if (json_object_get(a, key) == NULL && !json_is_null(v))
                return 0;
        }
        return 1;
    }
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        json_array_foreach(a, i, v) {
            if (!same_value(v, json_array_get(b, i)))
                return 0;
        }
        return 1;
    }
    return json_equal(a, b);
}

/* Appends a set op of path to value (borrowed) after checking it on scratch. */
static int add_set(json_t *ops, json_t *scratch, const char *path, const json_t *value,
                   bg_error_t *err)
{
    json_t *op = json_object();
    bg_error_t e;

    json_object_set_new(op, "op", json_string("set"));
    json_object_set_new(op, "path", json_string(path));
    json_object_set(op, "value", value ? (json_t *)value : json_null());
    if (member_apply_op(scratch, op, &e) < 0) {
        json_decref(op);
        return bg_error_set(err, BG_ERR_SCRIPT, "self.%s: %s", path + strlen("member."), e.msg);
    }
    return json_array_append_new(ops, op);
}

#define DIFF_WHOLE 1 /* diff_keys: a changed key cannot be named, set the object whole */

/* Writes path.key into full; 0 when a set cannot name it: an empty key, a dot in it, past
 * MEMBER_PATH_DEPTH segments below meta / tempData (depth: those of path) or MEMBER_PATH_MAX
 * bytes. */
static int key_path(char *full, size_t size, const char *path, const char *key, int depth)
{
    return key[0] != '\0' && strchr(key, '.') == NULL && depth < MEMBER_PATH_DEPTH &&
           snprintf(full, size, "%s.%s", path, key) < (int)size;
}

/* Set ops for each key of now (an object) that differs from old; a key gone becomes null. It
 * descends into an object changed on both sides, so that a set names the deepest key that
 * changed and a concurrent run that changed another key of that object keeps its change (the
 * write-back applies the ops to the latest record). Below the top (depth > 0) a changed key
 * that cannot be named gives DIFF_WHOLE: the caller sets the whole object; at the top it is
 * an error, and a key gone that cannot be named is kept. */
static int diff_keys(json_t *ops, json_t *scratch, const char *path, const json_t *old,
                     const json_t *now, int depth, bg_error_t *err)
{
    char full[MEMBER_PATH_MAX + 1];
    const json_t *v, *was;
    const char *key;
    int rc;

    json_object_foreach((json_t *)now, key, v) {
        was = json_object_get(old, key);
        if (same_value(was, v))
            continue;
        if (!key_path(full, sizeof(full), path, key, depth)) {
            if (depth > 0)
                return DIFF_WHOLE;
            return bg_error_set(err, BG_ERR_SCRIPT,
                                "self.%s: the key \"%.40s\" is empty, has a dot or is too long",
                                path + strlen("member."), key);
        }
        rc = DIFF_WHOLE;
        if (json_is_object(was) && json_is_object(v))
            rc = diff_keys(ops, scratch, full, was, v, depth + 1, err);
        if (rc == DIFF_WHOLE)
            rc = add_set(ops, scratch, full, v, err);
        if (rc < 0)
            return rc;
    }
    json_object_foreach((json_t *)old, key, v) {
        if (json_object_get(now, key) != NULL || json_is_null(v))
            continue;
        if (!key_path(full, sizeof(full), path, key, depth)) {
            if (depth > 0)
                return DIFF_WHOLE;
            continue; /* stored by someone else under a name a set cannot reach: kept */
        }
        if ((rc = add_set(ops, scratch, full, json_null(), err)) < 0)
            return rc;
    }
    return 0;
}

/* The set ops of the object at path (member.meta, member.botMeta.tempData). */
static int diff_object(json_t *ops, json_t *scratch, const char *path, const json_t *old,
                       const json_t *now, bg_error_t *err)
{
    if (now == NULL || json_is_null(now))
        return 0; /* gone (self.member replaced by a table without it): left as it is */
    if (!json_is_object(now))
        return bg_error_set(err, BG_ERR_SCRIPT, "self.%s must be a table with string keys",
                            path + strlen("member."));
    return diff_keys(ops, scratch, path, json_is_object(old) ? old : NULL, now, 0, err);
}

static const char *const MEMBER_FIELDS[] = {"customLocale", "firstName", "lastName"};

/* 1 when no path a set may write differs between old and now: nothing to check or copy. */
static int member_unchanged(const json_t *old, const json_t *now)
{
    const json_t *old_bot = json_object_get(old, "botMeta");
    const json_t *now_bot = json_object_get(now, "botMeta");
    size_t i;

    if (!same_value(json_object_get(old, "meta"), json_object_get(now, "meta")) ||
        !same_value(json_object_get(old_bot, "tempData"), json_object_get(now_bot, "tempData")) ||
        !same_value(json_object_get(old_bot, "subscribed"), json_object_get(now_bot, "subscribed")))
        return 0;
    for (i = 0; i < sizeof(MEMBER_FIELDS) / sizeof(MEMBER_FIELDS[0]); i++)
        if (!same_value(json_object_get(old, MEMBER_FIELDS[i]),
                        json_object_get(now, MEMBER_FIELDS[i])))
            return 0;
    return 1;
}

json_t *script_member_ops(const json_t *old, const json_t *now, json_t **after, bg_error_t *err)
{
    const char *const *fields = MEMBER_FIELDS;
    const json_t *old_bot = json_object_get(old, "botMeta"), *now_bot;
    json_t *ops, *scratch;
    char path[64];
    size_t i;
    int rc = 0;

    if (member_unchanged(old, now))
        return json_array();
    ops = json_array();
    scratch = json_deep_copy(old);
    if (ops == NULL || scratch == NULL) {
        rc = bg_error_set(err, BG_ERR_SCRIPT, "out of memory");
        goto out;
    }
    now_bot = json_object_get(now, "botMeta");
    if (!json_is_object(now_bot))
        now_bot = NULL;
    rc = diff_object(ops, scratch, "member.meta", json_object_get(old, "meta"),
                     json_object_get(now, "meta"), err);
    if (rc == 0)
        rc = diff_object(ops, scratch, "member.botMeta.tempData",
                         json_object_get(old_bot, "tempData"), json_object_get(now_bot, "tempData"),
                         err);
    if (rc == 0 && json_object_get(now_bot, "subscribed") != NULL &&
        !same_value(json_object_get(old_bot, "subscribed"), json_object_get(now_bot, "subscribed")))
        rc = add_set(ops, scratch, "member.botMeta.subscribed",
                     json_object_get(now_bot, "subscribed"), err);
    for (i = 0; rc == 0 && i < sizeof(MEMBER_FIELDS) / sizeof(MEMBER_FIELDS[0]); i++) {
        /* a name set to nil is left as it is (it cannot be null); customLocale is cleared */
        if (same_value(json_object_get(old, fields[i]), json_object_get(now, fields[i])) ||
            (json_object_get(now, fields[i]) == NULL && strcmp(fields[i], "customLocale") != 0))
            continue;
        snprintf(path, sizeof(path), "member.%s", fields[i]);
        rc = add_set(ops, scratch, path, json_object_get(now, fields[i]), err);
    }
out:
    if (rc < 0 || json_array_size(ops) == 0) {
        json_decref(scratch);
    } else {
        *after = scratch;
    }
    if (rc < 0) {
        json_decref(ops);
        return NULL;
    }
    return ops;
}
