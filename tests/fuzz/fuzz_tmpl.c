/* fuzz_tmpl.c - libFuzzer target for {{path}} templates (core/tmpl.c): tmpl_render,
 * tmpl_render_url and tmpl_render_json on any template and any scope.
 *
 * Input: the template runs to the first NUL; the text after it is a JSON document. When that
 * document is an object it is the scope (roots agendaMeta, member, channel) and also the value
 * given to tmpl_render_json; otherwise a fixed scope is used and the document (if it parses) is
 * the value. channel.info must never show: everything is rendered twice, against two copies of
 * the scope that differ only in a marker put into channel.info, and must come out the same. */
#include "fuzz_util.h"

#include "core/member.h"
#include "core/tmpl.h"

/* Two markers of one length, unreserved characters only (the same in URLs). */
#define MARKER_A "Zq9ChannelInfoSecretMarkerAAAA"
#define MARKER_B "Zq9ChannelInfoSecretMarkerBBBB"

static json_t *default_a, *default_b;

/* Every scalar below v becomes the marker. */
static void mark_leaves(json_t *v, const char *marker)
{
    const char *key;
    json_t *item;
    size_t i;

    if (json_is_object(v)) {
        json_object_foreach(v, key, item) {
            if (json_is_object(item) || json_is_array(item))
                mark_leaves(item, marker);
            else
                json_object_set_new(v, key, json_string(marker));
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, item) {
            if (json_is_object(item) || json_is_array(item))
                mark_leaves(item, marker);
            else
                json_array_set_new(v, i, json_string(marker));
        }
    }
}

/* A copy of scope with marker as every value of channel.info, whatever shape info has. */
static json_t *with_marker(const json_t *scope, const char *marker)
{
    json_t *copy = json_deep_copy(scope);
    json_t *channel = json_object_get(copy, "channel"), *info;

    if (!json_is_object(channel))
        return copy;
    info = json_object_get(channel, "info");
    mark_leaves(info, marker);
    if (json_is_object(info)) {
        json_object_set_new(info, "accessToken", json_string(marker));
        json_object_set_new(info, "nested", json_pack("{s:[s]}", "deep", marker));
    } else if (json_is_array(info)) {
        json_array_append_new(info, json_string(marker));
    } else if (info == NULL) {
        json_object_set_new(channel, "info", json_pack("{s:s}", "accessToken", marker));
    } else {
        json_object_set_new(channel, "info", json_string(marker));
    }
    return copy;
}

static void check_text(const char *out, const char *tmpl, int tmpl_utf8, const char *what)
{
    FUZZ_CHECK(out != NULL, "%s: NULL output", what);
    FUZZ_CHECK(!tmpl_utf8 || fuzz_str_valid(out), "%s: invalid UTF-8 from %.200s", what, tmpl);
}

/* The same output whichever marker channel.info holds. */
static void check_same(const char *a, const char *b, const char *tmpl, const char *what)
{
    FUZZ_CHECK(a != NULL && b != NULL && strcmp(a, b) == 0,
               "%s: channel.info shows through %.200s: %.200s", what, tmpl, a ? a : "(null)");
}

/* Inserted values are percent-encoded: no character that shapes a URL may appear in the output
 * more often than in the template itself. */
static void check_url(const char *out, const char *tmpl)
{
    for (const char *c = ":/?#[]@!$&'()*+,;= \"<>\\^`{|}"; *c; c++) {
        size_t in = 0, got = 0;
        for (const char *q = tmpl; *q; q++)
            in += *q == *c;
        for (const char *q = out; *q; q++)
            got += *q == *c;
        FUZZ_CHECK(got <= in, "url: '%c' added (%zu > %zu) by %.200s -> %.200s", *c, got, in, tmpl,
                   out);
    }
    for (const unsigned char *q = (const unsigned char *)out; *q; q++)
        FUZZ_CHECK(*q < 0x80 || strchr(tmpl, (char)*q) != NULL, "url: raw byte 0x%02x added", *q);
}

/* out is in with every string rendered: the same shape, the same scalars. */
static void check_shape(const json_t *in, const json_t *out, const json_t *scope)
{
    const char *key;
    json_t *item;
    size_t i;

    FUZZ_CHECK(out != NULL && json_typeof(in) == json_typeof(out), "render_json changed a type");
    switch (json_typeof(in)) {
    case JSON_OBJECT:
        FUZZ_CHECK(json_object_size(in) == json_object_size(out), "render_json: object size");
        json_object_foreach((json_t *)in, key, item) {
            check_shape(item, json_object_get(out, key), scope);
        }
        break;
    case JSON_ARRAY:
        FUZZ_CHECK(json_array_size(in) == json_array_size(out), "render_json: array size");
        json_array_foreach(in, i, item) {
            check_shape(item, json_array_get(out, i), scope);
        }
        break;
    case JSON_STRING: {
        char *r = tmpl_render(json_string_value(in), scope);
        FUZZ_CHECK(r != NULL && strcmp(r, json_string_value(out)) == 0 &&
                       strlen(r) == json_string_length(out),
                   "render_json and render differ on %.200s", json_string_value(in));
        free(r);
        break;
    }
    default:
        FUZZ_CHECK(json_equal(in, out), "render_json changed a scalar");
    }
}

static void check_render_json(const json_t *value, const json_t *scope_a, const json_t *scope_b)
{
    json_t *out = tmpl_render_json(value, scope_a), *out_b = tmpl_render_json(value, scope_b);
    char *dump, *dump_b;

    FUZZ_CHECK(out != NULL && out_b != NULL, "render_json: NULL for a value");
    check_shape(value, out, scope_a);
    dump = json_dumps(out, JSON_COMPACT | JSON_ENCODE_ANY);
    dump_b = json_dumps(out_b, JSON_COMPACT | JSON_ENCODE_ANY);
    FUZZ_CHECK(dump != NULL, "render_json: result does not dump");
    check_same(dump, dump_b, "(a JSON value)", "render_json");
    free(dump);
    free(dump_b);
    fuzz_json_roundtrip(out, "render_json");
    json_decref(out);
    json_decref(out_b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    json_t *member, *base;

    (void)argc;
    (void)argv;
    json_object_seed(1);
    member = member_new("M1", "C1", "A1", "85291234567", "whatsapp", FUZZ_NOW);
    json_object_set_new(member, "firstName", json_string("Ann \xe9\x99\xb3"));
    json_object_set_new(member, "tags", json_pack("[ss]", "vip", "new"));
    json_object_set_new(member, "meta", json_pack("{s:{s:[i,f,b,n]}}", "a", "b", 1, 2.5, 1));
    base =
        json_pack("{s:{s:s,s:i,s:f,s:[i,s,{s:i}],s:{s:{s:s}}},s:o,s:{s:s,s:s,s:s,s:b,s:{s:s}}}",
                  "agendaMeta", "orderId", "A-1/2?x=y#z", "n", 12, "r", 0.1, "list", 1, "two",
                  "three", 3, "nested", "a", "b", "deep", "member", member, "channel", "_id", "C1",
                  "type", "whatsapp", "app", "A1", "on", 1, "info", "adminAuthToken", "secret");
    default_a = with_marker(base, MARKER_A);
    default_b = with_marker(base, MARKER_B);
    if (default_a == NULL || default_b == NULL)
        abort();
    json_decref(base);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *tmpl = fuzz_strndup(data, tlen);
    int tmpl_utf8 = fuzz_utf8_valid(tmpl, strlen(tmpl));
    json_t *doc = NULL, *scope_a, *scope_b, *scope2, *str;
    char *out, *out_b;

    if (nul != NULL)
        doc = json_loadb((const char *)nul + 1, size - tlen - 1, JSON_DECODE_ANY, NULL);
    if (json_is_object(doc)) {
        scope_a = with_marker(doc, MARKER_A);
        scope_b = with_marker(doc, MARKER_B);
    } else {
        scope_a = json_incref(default_a);
        scope_b = json_incref(default_b);
    }

    out = tmpl_render(tmpl, scope_a);
    out_b = tmpl_render(tmpl, scope_b);
    check_text(out, tmpl, tmpl_utf8, "render");
    check_same(out, out_b, tmpl, "render");
    free(out);
    free(out_b);
    out = tmpl_render_url(tmpl, scope_a);
    out_b = tmpl_render_url(tmpl, scope_b);
    check_text(out, tmpl, tmpl_utf8, "render_url");
    check_same(out, out_b, tmpl, "render_url");
    check_url(out, tmpl);
    free(out);
    free(out_b);

    /* The scope the node engine builds: copies, channel without info. */
    scope2 = tmpl_scope(json_object_get(scope_a, "agendaMeta"), json_object_get(scope_a, "member"),
                        json_object_get(scope_a, "channel"));
    FUZZ_CHECK(json_is_object(scope2), "tmpl_scope: not an object");
    FUZZ_CHECK(json_object_get(json_object_get(scope2, "channel"), "info") == NULL,
               "tmpl_scope kept channel.info");
    out = tmpl_render(tmpl, scope2);
    check_text(out, tmpl, tmpl_utf8, "render in tmpl_scope");
    free(out);

    if (tmpl_utf8 && (str = json_string(tmpl)) != NULL) {
        check_render_json(str, scope_a, scope_b);
        json_decref(str);
    }
    if (doc != NULL)
        check_render_json(doc, scope_a, scope_b);
    json_decref(scope2);
    json_decref(scope_a);
    json_decref(scope_b);
    json_decref(doc);
    free(tmpl);
    return 0;
}
