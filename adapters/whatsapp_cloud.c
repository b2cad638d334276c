/* whatsapp_cloud.c - WhatsApp Cloud API: /{phoneNumberId}/messages with Graph errors. */
#include "adapter.h"

#include <stdlib.h>
#include <string.h>

static const char *const secrets[] = {"accessToken", NULL};

/* Code 100 is decided by the field it names, below. */
static const adapter_code_t codes[] = {
    {131026, ADAPTER_RECIPIENT_INVALID},
    {190, ADAPTER_AUTH_INVALID},
    {130429, ADAPTER_RATE_LIMITED},
    {131056, ADAPTER_RATE_LIMITED},
    {80007, ADAPTER_RATE_LIMITED},
    {4, ADAPTER_RATE_LIMITED},
    {131000, ADAPTER_SERVER_ERROR},
    {131016, ADAPTER_SERVER_ERROR},
    {131057, ADAPTER_SERVER_ERROR},
    {1, ADAPTER_SERVER_ERROR},
    {2, ADAPTER_SERVER_ERROR},
    {131047, ADAPTER_WINDOW_CLOSED},
    {0, ADAPTER_OK},
};

static int word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int param_word(const char *w)
{
    return strcmp(w, "param") == 0 || strcmp(w, "parameter") == 0 || strcmp(w, "field") == 0;
}

/* Whether a Graph text names the `to` parameter: "Param to ...", "Invalid parameter: to",
 * "'to' is ...", "the to field". The plain word "to" ("unable to send") does not count. */
static int names_to(const char *s)
{
    char prev[16] = "", word[16];

    while (*s) {
        size_t n = 0;
        if (!word_char(*s)) {
            if ((*s == '\'' || *s == '"' || *s == '`') && (s[1] == 't' || s[1] == 'T') &&
                (s[2] == 'o' || s[2] == 'O') && s[3] == *s)
                return 1;
            s++;
            continue;
        }
        for (; word_char(*s); s++)
            if (n + 1 < sizeof(word))
                word[n++] = (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
        word[n] = '\0';
        if ((strcmp(word, "to") == 0 && param_word(prev)) ||
            (strcmp(prev, "to") == 0 && param_word(word)))
            return 1;
        memcpy(prev, word, n + 1);
    }
    return 0;
}

static int wc_build_send(const adapter_target_t *t, const json_t *response, const char *media_id,
                         adapter_call_t *out, adapter_result_t *res)
{
    const char *number = adapter_info_str(t->info, "phoneNumberId");
    const char *token = adapter_info_str(t->info, "accessToken");
    unsigned kind;
    json_t *body;
    char *enc;

    (void)media_id;
    memset(out, 0, sizeof(*out));
    if (number == NULL || token == NULL)
        return adapter_fail(res, ADAPTER_AUTH_INVALID, "channel has no %s",
                            number == NULL ? "phoneNumberId" : "accessToken");
    if ((kind = adapter_response_kind(&adapter_whatsapp_cloud, response, res)) == 0)
        return -1;
    if (t->to == NULL || *t->to == '\0')
        return adapter_fail(res, ADAPTER_REJECTED, "whatsapp-cloud: no recipient");
    body = adapter_whatsapp_body(&adapter_whatsapp_cloud, kind, response, t->to, NULL, 1, res);
    if (body == NULL)
        return -1;
    enc = adapter_urlencode(number);
    if (adapter_json_post(out, enc ? adapter_url(t->base_url, "/%s/messages", enc) : NULL, body) <
            0 ||
        adapter_add_header(out, "Authorization: Bearer %s", token) < 0) {
        free(enc);
        adapter_call_free(out);
        return adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp-cloud: cannot build the request");
    }
    free(enc);
    return 0;
}

static void wc_error(const adapter_target_t *t, const adapter_answer_t *a,
                     const adapter_graph_error_t *ge, adapter_result_t *res)
{
    adapter_status_t st = a->status == 429   ? ADAPTER_RATE_LIMITED
                          : a->status >= 500 ? ADAPTER_SERVER_ERROR
                                             : ADAPTER_REJECTED;
    char text[ADAPTER_ERROR_MAX], details[ADAPTER_ERROR_MAX], both[ADAPTER_ERROR_MAX - 32];

    if (ge->code == 100)
        st = names_to(ge->message) || names_to(ge->details) ? ADAPTER_RECIPIENT_INVALID
                                                            : ADAPTER_REJECTED;
    else
        st = adapter_code_status(codes, ge->code, st);
    adapter_copy_masked(text, sizeof(text), ge->message, t->info, secrets);
    adapter_copy_masked(details, sizeof(details), ge->details, t->info, secrets);
    /* message and details cut together, the code kept: a window's refusal (131047) takes
     * about 130 bytes to say why */
    adapter_join(both, sizeof(both), text, details);
    adapter_fail(res, st, "whatsapp-cloud: %s (code %ld)", both, ge->code);
    res->platform_code = ge->code;
    /* too many messages to one user: the pair's limit, not the number's */
    res->rate_recipient = st == ADAPTER_RATE_LIMITED && ge->code == 131056;
}

static void wc_parse_send(const adapter_target_t *t, const adapter_answer_t *a,
                          adapter_result_t *res)
{
    json_t *j = a->status != 0 ? adapter_answer_json(a) : NULL;
    const char *id =
        json_string_value(json_object_get(json_array_get(json_object_get(j, "messages"), 0), "id"));
    const char *wa_id = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "contacts"), 0), "wa_id"));
    adapter_graph_error_t ge;

    if (a->status == 0)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp-cloud: no answer");
    else if (!json_is_object(j))
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp-cloud: unreadable answer (HTTP %ld)",
                     a->status);
    else if (adapter_graph_error(j, &ge) == 0)
        wc_error(t, a, &ge, res);
    else if (a->status >= 200 && a->status < 300 && id != NULL && *id != '\0') {
        res->status = ADAPTER_OK;
        adapter_copy(res->message_id, sizeof(res->message_id), id);
        adapter_copy(res->chat_id, sizeof(res->chat_id), wa_id && *wa_id ? wa_id : t->to);
    } else if (a->status == 429)
        adapter_fail(res, ADAPTER_RATE_LIMITED, "whatsapp-cloud: rate limited (HTTP 429)");
    else if (a->status >= 300 && a->status < 500)
        adapter_fail(res, ADAPTER_REJECTED, "whatsapp-cloud: HTTP %ld", a->status);
    else if (a->status < 300)
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp-cloud: answer without message id");
    else
        adapter_fail(res, ADAPTER_SERVER_ERROR, "whatsapp-cloud: HTTP %ld", a->status);
    json_decref(j);
}

const adapter_ops_t adapter_whatsapp_cloud = {
    .type = "whatsapp-cloud",
    .api_version = "v19.0",
    .from_field = "phoneNumberId",
    .response_types = ADAPTER_WHATSAPP_TYPES,
    .check = adapter_whatsapp_check,
    .recipient_invalid_code = 100,
    .server_error_aborts = 1,
    .phone_recipients = 1,
    .build_send = wc_build_send,
    .parse_send = wc_parse_send,
    .parse_hook = adapter_whatsapp_parse_hook,
};
