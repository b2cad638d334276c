/* facebook.c - Messenger Send API: build /me/messages calls and read Graph answers. */
#include "adapter.h"

#include "../json/jscan.h"

#include <stdlib.h>
#include <string.h>

static const char *const secrets[] = {"accessToken", NULL};

/* Decided by error.code, not by the HTTP status (platforms.md). Code 100 is decided by its
 * subcode, below. */
static const adapter_code_t codes[] = {
    {551, ADAPTER_RECIPIENT_INVALID}, {10, ADAPTER_RECIPIENT_INVALID},
    {190, ADAPTER_AUTH_INVALID},      {4, ADAPTER_RATE_LIMITED},
    {613, ADAPTER_RATE_LIMITED},      {1200, ADAPTER_SERVER_ERROR},
    {2, ADAPTER_SERVER_ERROR},        {0, ADAPTER_OK},
};

/* The Send API body, written as text: json_pack and a dump of it cost more than the rest of
 * the adapter's work on a message. The strings come from parsed JSON, so they are UTF-8. */
static void fb_body(jsonw_t *w, unsigned kind, const char *to, const char *s)
{
    /* the framing below (69 or 129 bytes), two pairs of quotes and the NUL: the body is
     * kept while the platform is waited for, so no slack but for escapes */
    jw_init_size(w, strlen(to) + strlen(s) + (kind == ADAPTER_TEXT ? 74 : 134));
    jw_lit(w, "{\"messaging_type\":\"RESPONSE\",\"recipient\":{\"id\":");
    jw_str(w, to);
    if (kind == ADAPTER_TEXT) {
        jw_lit(w, "},\"message\":{\"text\":");
        jw_str(w, s);
        jw_lit(w, "}}");
    } else {
        jw_lit(w, "},\"message\":{\"attachment\":{\"type\":\"image\",\"payload\":{\"url\":");
        jw_str(w, s);
        jw_lit(w, ",\"is_reusable\":true}}}}");
    }
}

static int fb_build_send(const adapter_target_t *t, const json_t *response, const char *media_id,
                         adapter_call_t *out, adapter_result_t *res)
{
    const char *token = adapter_info_str(t->info, "accessToken"), *s;
    unsigned kind;
    char *enc, *url;
    jsonw_t body;

    (void)media_id;
    memset(out, 0, sizeof(*out));
    if (token == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no accessToken");
    if ((kind = adapter_response_kind(&adapter_facebook, response, res)) == 0)
        return -1;
    if (t->to == NULL || *t->to == '\0')
        return adapter_fail(res, ADAPTER_REJECTED, "facebook: no recipient");
    if ((s = adapter_response_str(&adapter_facebook, response,
                                  kind == ADAPTER_TEXT ? "text" : "url", res)) == NULL)
        return -1;
    fb_body(&body, kind, t->to, s);
    enc = adapter_urlencode(token);
    url = enc ? adapter_url(t->base_url, "/me/messages?access_token=%s", enc) : NULL;
    free(enc);
    if (adapter_json_post_text(out, url, &body) < 0)
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: cannot build the request");
    return 0;
}

static void fb_error(const adapter_target_t *t, const adapter_answer_t *a,
                     const adapter_graph_error_t *ge, adapter_result_t *res)
{
    adapter_status_t st = a->status == 429   ? ADAPTER_RATE_LIMITED
                          : a->status >= 500 ? ADAPTER_SERVER_ERROR
                                             : ADAPTER_REJECTED;
    char text[128];

    if (ge->code == 100)
        st = ge->subcode == 2018001 ? ADAPTER_RECIPIENT_INVALID : ADAPTER_REJECTED;
    else
        st = adapter_code_status(codes, ge->code, st);
    adapter_copy_masked(text, sizeof(text), ge->message, t->info, secrets);
    adapter_fail(res, st, "facebook: %s (code %ld)", text, ge->code);
    res->platform_code = ge->code;
}

/* Whether the text holds a backslash or the bytes "error" in quotes. */
static int fb_plain_no_error(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\')
            return 0;
        if (s[i] == '"' && n - i >= 7 && memcmp(s + i, "\"error\"", 7) == 0)
            return 0;
    }
    return 1;
}

/* The usual answer, {"recipient_id":...,"message_id":...}, read without building it: with no
 * backslash every key is written as it is meant, so the scan sees exactly the keys that
 * jansson would, and with no "error" there is no error object. Anything else is read in
 * full by fb_parse_send. Returns 1 when the answer was read here. */
static int fb_parse_plain(const adapter_answer_t *a, adapter_result_t *res)
{
    static const char *const keys[] = {"message_id", "recipient_id"};
    char *v[2];
    int done = 0;

    if (a->status < 200 || a->status >= 300 || a->body == NULL ||
        !fb_plain_no_error(a->body, a->body_len) ||
        jscan_strings(a->body, a->body_len, keys, 2, v) < 0)
        return 0;
    if (v[0] != NULL && v[0][0] != '\0') {
        res->status = ADAPTER_OK;
        adapter_copy(res->message_id, sizeof(res->message_id), v[0]);
        adapter_copy(res->chat_id, sizeof(res->chat_id), v[1]);
        done = 1;
    }
    free(v[0]);
    free(v[1]);
    return done;
}

static void fb_parse_send(const adapter_target_t *t, const adapter_answer_t *a,
                          adapter_result_t *res)
{
    json_t *j;
    const char *mid;
    adapter_graph_error_t ge;

    if (fb_parse_plain(a, res))
        return;
    j = a->status != 0 ? adapter_answer_json(a) : NULL;
    mid = json_string_value(json_object_get(j, "message_id"));
    if (a->status == 0)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: no answer");
    else if (!json_is_object(j))
        adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: unreadable answer (HTTP %ld)",
                     a->status);
    else if (adapter_graph_error(j, &ge) == 0)
        fb_error(t, a, &ge, res);
    else if (a->status >= 200 && a->status < 300 && mid != NULL && *mid != '\0') {
        res->status = ADAPTER_OK;
        adapter_copy(res->message_id, sizeof(res->message_id), mid);
        adapter_copy(res->chat_id, sizeof(res->chat_id),
                     json_string_value(json_object_get(j, "recipient_id")));
    } else if (a->status >= 300 && a->status < 500)
        adapter_fail(res, ADAPTER_REJECTED, "facebook: HTTP %ld", a->status);
    else if (a->status < 300)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: answer without message_id");
    else
        adapter_fail(res, ADAPTER_SERVER_ERROR, "facebook: HTTP %ld", a->status);
    json_decref(j);
}

const adapter_ops_t adapter_facebook = {
    .type = "facebook",
    .api_version = "v19.0",
    .from_field = "pageId",
    .response_types = ADAPTER_TEXT | ADAPTER_IMAGE,
    .recipient_invalid_code = 104,
    .build_send = fb_build_send,
    .parse_send = fb_parse_send,
};
