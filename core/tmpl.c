/* tmpl.c - rendering {{path}} placeholders against a scope of agendaMeta, member, channel. */
#include "tmpl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing output buffer; oom sticks once an allocation failed. */
typedef struct tmpl_buf {
    char *p;
    size_t len, cap;
    int oom;
} tmpl_buf_t;

static void buf_add(tmpl_buf_t *b, const char *s, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        char *p;
        while (cap < b->len + n + 1)
            cap *= 2;
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Adds text, percent-encoded when url is set. */
static void buf_add_text(tmpl_buf_t *b, const char *s, size_t n, int url)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i;

    if (!url) {
        buf_add(b, s, n);
        return;
    }
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~') {
            buf_add(b, s + i, 1);
        } else {
            char esc[3] = {'%', hex[c >> 4], hex[c & 15]};
            buf_add(b, esc, 3);
        }
    }
}

static int segment_is(const char *seg, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(seg, name, n) == 0;
}

/* The value at a dot-separated path, or NULL when missing or hidden. */
static const json_t *scope_path_value(const json_t *scope, const char *path, size_t n)
{
    const json_t *cur = scope;
    const char *seg = path, *end = path + n;
    int depth = 0, in_channel = 0;

    if (n == 0)
        return NULL;
    while (cur != NULL) {
        const char *dot = memchr(seg, '.', (size_t)(end - seg));
        size_t len = dot ? (size_t)(dot - seg) : (size_t)(end - seg);

        if (len == 0)
            return NULL;
        if (depth == 0)
            in_channel = segment_is(seg, len, "channel");
        else if (depth == 1 && in_channel && segment_is(seg, len, "info"))
            return NULL; /* secrets of the channel */
        if (json_is_object(cur)) {
            cur = json_object_getn(cur, seg, len);
        } else if (json_is_array(cur) && len <= 9 && strspn(seg, "0123456789") >= len) {
            size_t idx = 0, i;
            for (i = 0; i < len; i++)
                idx = idx * 10 + (size_t)(seg[i] - '0');
            cur = json_array_get(cur, idx);
        } else {
            return NULL;
        }
        depth++;
        if (dot == NULL)
            break;
        seg = dot + 1;
    }
    return cur;
}

/* A real in the shortest form that reads back as the same double, with jansson's ".0" for
 * whole numbers so that it stays recognisably a real. */
static void format_real(double d, char *out, size_t size)
{
    int p;

    for (p = 1; p <= 17; p++) {
        snprintf(out, size, "%.*g", p, d);
        if (strtod(out, NULL) == d)
            break;
    }
    if (strpbrk(out, ".eE") == NULL && strlen(out) + 3 <= size)
        strcat(out, ".0");
}

static void add_value(tmpl_buf_t *b, const json_t *v, int is_channel_root, int url)
{
    char num[64];
    char *dump;
    json_t *copy = NULL;

    switch (json_typeof(v)) {
    case JSON_STRING:
        buf_add_text(b, json_string_value(v), json_string_length(v), url);
        return;
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        buf_add_text(b, num, strlen(num), url);
        return;
    case JSON_REAL:
        format_real(json_real_value(v), num, sizeof(num));
        buf_add_text(b, num, strlen(num), url);
        return;
    case JSON_TRUE:
        buf_add_text(b, "true", 4, url);
        return;
    case JSON_FALSE:
        buf_add_text(b, "false", 5, url);
        return;
    case JSON_NULL:
        return;
    case JSON_OBJECT:
    case JSON_ARRAY:
        if (is_channel_root && json_object_get(v, "info") != NULL) {
            copy = json_copy((json_t *)v);
            if (copy == NULL) {
                b->oom = 1;
                return;
            }
            json_object_del(copy, "info");
            v = copy;
        }
        dump = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(copy);
        if (dump == NULL) {
            b->oom = 1;
            return;
        }
        buf_add_text(b, dump, strlen(dump), url);
        free(dump);
        return;
    }
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Renders s[0..n) into b. */
static void render(tmpl_buf_t *b, const char *s, size_t n, const json_t *scope, int url)
{
    const char *p = s, *end = s + n;

    while (p < end) {
        const char *open = NULL, *close = NULL, *q, *a, *z;

        for (q = p; q + 1 < end; q++) {
            if (q[0] == '{' && q[1] == '{') {
                open = q;
                break;
            }
        }
        if (open != NULL) {
            for (q = open + 2; q + 1 < end; q++) {
                if (q[0] == '}' && q[1] == '}') {
                    close = q;
                    break;
                }
            }
        }
        if (close == NULL) { /* no placeholder left, or an unclosed one: the rest as it is */
            buf_add(b, p, (size_t)(end - p));
            return;
        }
        buf_add(b, p, (size_t)(open - p));
        a = open + 2;
        z = close;
        while (a < z && is_blank(*a))
            a++;
        while (z > a && is_blank(z[-1]))
            z--;
        {
            const json_t *v = scope_path_value(scope, a, (size_t)(z - a));
            if (v != NULL)
                add_value(b, v, segment_is(a, (size_t)(z - a), "channel"), url);
        }
        p = close + 2;
    }
}

static char *render_str(const char *s, const json_t *scope, int url)
{
    tmpl_buf_t b = {0};

    if (s != NULL)
        render(&b, s, strlen(s), scope, url);
    if (!b.oom && b.p == NULL)
        return strdup("");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

char *tmpl_render(const char *s, const json_t *scope)
{
    return render_str(s, scope, 0);
}

char *tmpl_render_url(const char *s, const json_t *scope)
{
    return render_str(s, scope, 1);
}

/* Recursion depth is bounded by how the value was built: jansson's parser stops at 2048. */
json_t *tmpl_render_json(const json_t *v, const json_t *scope)
{
    json_t *out, *item;
    const char *key;
    size_t i;

    if (v == NULL)
        return NULL;
    switch (json_typeof(v)) {
    case JSON_STRING: {
        tmpl_buf_t b = {0};
        render(&b, json_string_value(v), json_string_length(v), scope, 0);
        if (b.oom) {
            free(b.p);
            return NULL;
        }
        out = json_stringn(b.p ? b.p : "", b.len);
        free(b.p);
        return out;
    }
    case JSON_OBJECT:
        out = json_object();
        if (out == NULL)
            return NULL;
        json_object_foreach((json_t *)v, key, item) {
            json_t *r = tmpl_render_json(item, scope);
            if (r == NULL || json_object_set_new(out, key, r) < 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    case JSON_ARRAY:
        out = json_array();
        if (out == NULL)
            return NULL;
        json_array_foreach(v, i, item) {
            json_t *r = tmpl_render_json(item, scope);
            if (r == NULL || json_array_append_new(out, r) < 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    default:
        return json_deep_copy(v);
    }
}

static json_t *object_copy(const json_t *v)
{
    return json_is_object(v) ? json_deep_copy(v) : json_object();
}

json_t *tmpl_scope(const json_t *agenda_meta, const json_t *member, const json_t *channel)
{
    json_t *scope = json_object(), *ch;

    if (scope == NULL)
        return NULL;
    ch = json_object();
    if (json_is_object(channel)) {
        const char *key;
        json_t *item;
        json_object_foreach((json_t *)channel, key, item) {
            if (strcmp(key, "info") != 0)
                json_object_set_new(ch, key, json_deep_copy(item));
        }
    }
    if (json_object_set_new(scope, "agendaMeta", object_copy(agenda_meta)) < 0 ||
        json_object_set_new(scope, "member", object_copy(member)) < 0 ||
        json_object_set_new(scope, "channel", ch) < 0) {
        json_decref(scope);
        return NULL;
    }
    return scope;
}
