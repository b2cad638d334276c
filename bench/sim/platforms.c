/* The platform APIs of docs platforms.md: routes, credentials, answers and error shapes. */
#include "sim.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define SIM_EP_PLATFORM (SIM_EP_RECORD | SIM_EP_LATENCY | SIM_EP_INFLIGHT)
#define SIM_WA_VERSION  "2.45.1"

static int sim_shape_refused(sim_call_t *c, sim_reply_t *r, sim_platform_t p);
static int sim_window_refused(sim_call_t *c, sim_reply_t *r, sim_platform_t p);

/* ---- small helpers ---- */

static const char *sim_jstr(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static const char *sim_jstr2(json_t *o, const char *k1, const char *k2)
{
    return json_string_value(json_object_get(json_object_get(o, k1), k2));
}

static int sim_is(const char *s, const char *want)
{
    return s != NULL && strcmp(s, want) == 0;
}

static const char *sim_header(const sim_call_t *c, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(c->req), name);
}

/* ---- Graph API: facebook and whatsapp-cloud ---- */

static void sim_graph_error(sim_reply_t *r, int status, int code, int subcode, const char *msg,
                            int transient)
{
    json_t *e = json_pack("{s:s,s:s,s:i}", "message", msg, "type", "OAuthException", "code", code);
    if (subcode != 0)
        json_object_set_new(e, "error_subcode", json_integer(subcode));
    if (transient)
        json_object_set_new(e, "is_transient", json_true());
    json_object_set_new(e, "fbtrace_id", json_string("A1"));
    sim_reply_json(r, status, json_pack("{s:o}", "error", e));
}

static void sim_graph_bad_token(sim_reply_t *r)
{
    sim_graph_error(r, 401, 190, 0, "Error validating access token", 0);
}

static void sim_fb_fault(const sim_fault_t *f, sim_reply_t *r)
{
    switch (f->kind) {
    case SIM_FAULT_INVALID:
        sim_graph_error(r, 400, 100, 2018001, "(#100) No matching user found", 0);
        break;
    case SIM_FAULT_BADTOKEN:
        sim_graph_bad_token(r);
        break;
    case SIM_FAULT_FAIL5XX:
        sim_graph_error(r, 500, 2, 0, "Service temporarily unavailable", 1);
        break;
    case SIM_FAULT_RATELIMIT:
        if (f->ratelimit_613)
            sim_graph_error(r, 400, 613, 0,
                            "(#613) Calls to this api have exceeded the rate limit.", 0);
        else
            sim_graph_error(r, 400, 4, 0, "(#4) Application request limit reached", 0);
        break;
    default:
        break;
    }
}

static void sim_cloud_fault(const sim_fault_t *f, sim_reply_t *r)
{
    switch (f->kind) {
    case SIM_FAULT_INVALID:
        sim_graph_error(r, 400, 131026, 0, "Message undeliverable", 0);
        break;
    case SIM_FAULT_BADTOKEN:
        sim_graph_bad_token(r);
        break;
    case SIM_FAULT_FAIL5XX:
        sim_graph_error(r, 500, 131000, 0, "Something went wrong", 1);
        break;
    case SIM_FAULT_RATELIMIT:
        sim_graph_error(r, 400, 130429, 0, "Rate limit hit", 0);
        break;
    default:
        break;
    }
}

static void sim_fb_messages(sim_call_t *c, sim_reply_t *r)
{
    const char *token = sim_call_param(c, "access_token");
    if (token == NULL)
        token = sim_call_bearer(c);
    c->recipient = sim_jstr2(c->body, "recipient", "id");
    const char *texts[] = {c->recipient, sim_jstr2(c->body, "message", "text")};
    sim_fault_find(&c->fault, texts, 2);

    if (token == NULL || sim_is(token, "bad")) {
        sim_graph_bad_token(r);
        return;
    }
    if (sim_fault_is_error(&c->fault)) {
        sim_fb_fault(&c->fault, r);
        return;
    }
    if (c->recipient == NULL) {
        sim_graph_error(r, 400, 100, 0, "(#100) The parameter recipient is required", 0);
        return;
    }
    if (sim_shape_refused(c, r, SIM_PLATFORM_FACEBOOK))
        return;
    char id[32];
    snprintf(id, sizeof(id), "m_%llu", (unsigned long long)sim_next_id());
    sim_reply_json(r, 200, json_pack("{s:s,s:s}", "recipient_id", c->recipient, "message_id", id));
}

static void sim_cloud_messages(sim_call_t *c, sim_reply_t *r)
{
    const char *token = sim_call_bearer(c);
    if (token == NULL)
        token = sim_call_param(c, "access_token");
    c->recipient = sim_jstr(c->body, "to");
    const char *texts[] = {c->recipient, sim_jstr2(c->body, "text", "body")};
    sim_fault_find(&c->fault, texts, 2);

    if (token == NULL || sim_is(token, "bad")) {
        sim_graph_bad_token(r);
        return;
    }
    if (sim_fault_is_error(&c->fault)) {
        sim_cloud_fault(&c->fault, r);
        return;
    }
    if (c->recipient == NULL) {
        sim_graph_error(r, 400, 100, 0, "(#100) Invalid parameter", 0);
        return;
    }
    if (sim_shape_refused(c, r, SIM_PLATFORM_WHATSAPP_CLOUD))
        return;
    char id[32];
    snprintf(id, sizeof(id), "wamid.%llu", (unsigned long long)sim_next_id());
    sim_reply_json(r, 200,
                   json_pack("{s:s,s:[{s:s,s:s}],s:[{s:s}]}", "messaging_product", "whatsapp",
                             "contacts", "input", c->recipient, "wa_id", c->recipient, "messages",
                             "id", id));
}

/* One Graph route serves both: only the body tells a Messenger send from a Cloud send. */
static void sim_graph_messages(sim_call_t *c, sim_reply_t *r)
{
    if (sim_is(sim_jstr(c->body, "messaging_product"), "whatsapp")) {
        c->platform = SIM_PLATFORM_WHATSAPP_CLOUD;
        sim_cloud_messages(c, r);
    } else {
        sim_fb_messages(c, r);
    }
}

/* ---- whatsapp on-premises ---- */

static json_t *sim_wa_meta(void)
{
    return json_pack("{s:s,s:s}", "api_status", "stable", "version", SIM_WA_VERSION);
}

static void sim_wa_error(sim_reply_t *r, int status, int code, const char *title,
                         const char *details, int meta)
{
    json_t *e = json_pack("{s:i,s:s}", "code", code, "title", title);
    if (details != NULL)
        json_object_set_new(e, "details", json_string(details));
    json_t *o = json_pack("{s:[o]}", "errors", e);
    if (meta)
        json_object_set_new(o, "meta", sim_wa_meta());
    sim_reply_json(r, status, o);
}

static void sim_wa_denied(sim_reply_t *r, int meta)
{
    sim_wa_error(r, 401, 1005, "Access denied", "Invalid credentials.", meta);
}

static void sim_wa_fault(const sim_fault_t *f, sim_reply_t *r)
{
    switch (f->kind) {
    case SIM_FAULT_INVALID:
        sim_wa_error(r, 400, 1013, "User is not valid", "Recipient is not a valid WhatsApp user",
                     1);
        break;
    case SIM_FAULT_BADTOKEN:
        sim_wa_denied(r, 1);
        break;
    case SIM_FAULT_FAIL5XX:
        sim_wa_error(r, 500, 1014, "Internal error", NULL, 1);
        break;
    case SIM_FAULT_RATELIMIT:
        sim_wa_error(r, 429, 1015, "Too many requests", NULL, 1);
        break;
    default:
        break;
    }
}

/* Test words in the name a login or token call is made for (a whatsapp admin, a wechat app
 * id): slow<N> answers N ms late (a slow login that many requests wait for); longtoken<N>
 * issues a token of N bytes (N up to SIM_TOKEN_MAX: real platforms reserve 512 and more). */
#define SIM_TOKEN_MAX (16 * 1024)

static void sim_cred_faults(sim_call_t *c, const char *who)
{
    const char *texts[] = {who};

    sim_fault_find(&c->fault, texts, 1);
    if (c->fault.kind != SIM_FAULT_SLOW)
        memset(&c->fault, 0, sizeof(c->fault));
}

/* A new valid token, issued; NULL when out of memory. Freed by the caller. */
static char *sim_cred_token(const char *kind, const char *who)
{
    const char *p = who ? strstr(who, "longtoken") : NULL;
    long size = p ? strtol(p + 9, NULL, 10) : 0;
    char head[48];
    int n = snprintf(head, sizeof(head), "%s-%llu", kind, (unsigned long long)sim_next_id());
    char *token;

    if (size < n)
        size = n;
    if (size > SIM_TOKEN_MAX)
        size = SIM_TOKEN_MAX;
    if ((token = malloc((size_t)size + 1)) == NULL)
        return NULL;
    memset(token, 'x', (size_t)size);
    memcpy(token, head, (size_t)n);
    token[size] = '\0';
    sim_tokens_issue(token);
    return token;
}

static int sim_b64_value(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+' || ch == '-')
        return 62;
    if (ch == '/' || ch == '_')
        return 63;
    return -1;
}

/* Decodes "Basic base64(user:pass)"; -1 when absent or garbled. */
static int sim_basic_auth(const char *auth, char *user, size_t ulen, char *pass, size_t plen)
{
    char plain[512];
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    if (auth == NULL || strncasecmp(auth, "Basic ", 6) != 0)
        return -1;
    for (const char *p = auth + 6; *p != '\0' && *p != '='; p++) {
        if (*p == ' ' && n == 0 && bits == 0)
            continue;
        int v = sim_b64_value((unsigned char)*p);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n + 1 >= sizeof(plain))
                return -1;
            plain[n++] = (char)((acc >> bits) & 0xff);
        }
    }
    plain[n] = '\0';
    char *colon = memchr(plain, ':', n);
    if (colon == NULL || strlen(plain) != n)
        return -1;
    *colon = '\0';
    snprintf(user, ulen, "%s", plain);
    snprintf(pass, plen, "%s", colon + 1);
    return 0;
}

static void sim_wa_login(sim_call_t *c, sim_reply_t *r)
{
    char user[256], pass[256];
    int ok = sim_basic_auth(c->auth, user, sizeof(user), pass, sizeof(pass)) == 0;
    if (ok) {
        sim_record_login_call(user);
        sim_cred_faults(c, user);
    }
    if (!ok || sim_is(pass, "wrong")) {
        sim_wa_denied(r, 0);
        return;
    }

    char expires[48], *token = sim_cred_token("watok", user);
    if (token == NULL) {
        sim_wa_error(r, 500, 1014, "Internal error", NULL, 0);
        return;
    }
    time_t at = time(NULL) + 7 * 24 * 3600;
    struct tm tm;
    gmtime_r(&at, &tm);
    strftime(expires, sizeof(expires), "%Y-%m-%d %H:%M:%S+00:00", &tm);
    sim_reply_json(r, 200,
                   json_pack("{s:[{s:s,s:s}],s:o}", "users", "token", token, "expires_after",
                             expires, "meta", sim_wa_meta()));
    free(token);
}

static void sim_wa_contacts(sim_call_t *c, sim_reply_t *r)
{
    json_t *list = json_object_get(c->body, "contacts");
    const char *texts[32];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(list) && n < 32; i++)
        if (json_is_string(json_array_get(list, i)))
            texts[n++] = json_string_value(json_array_get(list, i));
    c->recipient = n > 0 ? texts[0] : NULL;
    sim_fault_find(&c->fault, texts, n);

    if (!sim_tokens_valid(sim_call_bearer(c))) {
        sim_wa_denied(r, 1);
        return;
    }
    /* invalid is an answer about one number (status "invalid"), not an error of the call. */
    if (sim_fault_is_error(&c->fault) && c->fault.kind != SIM_FAULT_INVALID) {
        sim_wa_fault(&c->fault, r);
        return;
    }
    if (!json_is_array(list)) {
        sim_wa_error(r, 400, 1008, "Required parameter is missing",
                     "Parameter 'contacts' is required", 1);
        return;
    }

    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *in = json_string_value(json_array_get(list, i));
        if (in == NULL)
            continue;
        if (strstr(in, "invalid") != NULL) {
            json_array_append_new(out, json_pack("{s:s,s:s}", "input", in, "status", "invalid"));
            continue;
        }
        char digits[64];
        size_t d = 0;
        for (const char *p = in; *p != '\0' && d + 1 < sizeof(digits); p++)
            if (isdigit((unsigned char)*p))
                digits[d++] = *p;
        digits[d] = '\0';
        json_array_append_new(
            out, json_pack("{s:s,s:s,s:s}", "input", in, "status", "valid", "wa_id", digits));
    }
    sim_reply_json(r, 200, json_pack("{s:o,s:o}", "contacts", out, "meta", sim_wa_meta()));
}

static void sim_wa_messages(sim_call_t *c, sim_reply_t *r)
{
    c->recipient = sim_jstr(c->body, "to");
    const char *texts[] = {c->recipient, sim_jstr2(c->body, "text", "body")};
    sim_fault_find(&c->fault, texts, 2);

    if (!sim_tokens_valid(sim_call_bearer(c))) {
        sim_wa_denied(r, 1);
        return;
    }
    if (sim_fault_is_error(&c->fault)) {
        sim_wa_fault(&c->fault, r);
        return;
    }
    if (c->recipient == NULL) {
        sim_wa_error(r, 400, 1008, "Required parameter is missing", "Parameter 'to' is required",
                     1);
        return;
    }
    if (sim_shape_refused(c, r, SIM_PLATFORM_WHATSAPP))
        return;
    char id[32];
    snprintf(id, sizeof(id), "gBEG%llu", (unsigned long long)sim_next_id());
    sim_reply_json(r, 200,
                   json_pack("{s:[{s:s}],s:o}", "messages", "id", id, "meta", sim_wa_meta()));
}

/* ---- slack ---- */

static void sim_slack_error(sim_reply_t *r, int status, const char *error)
{
    sim_reply_json(r, status, json_pack("{s:b,s:s}", "ok", 0, "error", error));
}

static void sim_slack_fault(const sim_fault_t *f, sim_reply_t *r)
{
    switch (f->kind) {
    case SIM_FAULT_INVALID:
        sim_slack_error(r, 200, "channel_not_found");
        break;
    case SIM_FAULT_BADTOKEN:
        sim_slack_error(r, 200, "invalid_auth");
        break;
    case SIM_FAULT_FAIL5XX:
        sim_slack_error(r, 500, "internal_error");
        break;
    case SIM_FAULT_RATELIMIT:
        sim_slack_error(r, 429, "ratelimited");
        snprintf(r->retry_after, sizeof(r->retry_after), "1");
        break;
    default:
        break;
    }
}

static void sim_slack_post(sim_call_t *c, sim_reply_t *r)
{
    const char *token = sim_call_bearer(c);
    const char *text = sim_jstr(c->body, "text");
    c->recipient = sim_jstr(c->body, "channel");
    const char *texts[] = {c->recipient, text};
    sim_fault_find(&c->fault, texts, 2);

    if (token == NULL || *token == '\0') {
        sim_slack_error(r, 200, "not_authed");
        return;
    }
    if (sim_is(token, "bad")) {
        sim_slack_error(r, 200, "invalid_auth");
        return;
    }
    if (sim_fault_is_error(&c->fault)) {
        sim_slack_fault(&c->fault, r);
        return;
    }
    if (c->recipient == NULL) {
        sim_slack_error(r, 200, "channel_not_found");
        return;
    }
    if (sim_shape_refused(c, r, SIM_PLATFORM_SLACK))
        return;
    char ts[48];
    snprintf(ts, sizeof(ts), "%lld.%06llu", (long long)time(NULL),
             (unsigned long long)(sim_next_id() % 1000000));
    sim_reply_json(r, 200,
                   json_pack("{s:b,s:s,s:s,s:{s:s,s:s,s:s}}", "ok", 1, "channel", c->recipient,
                             "ts", ts, "message", "type", "message", "text", text ? text : "", "ts",
                             ts));
}

/* ---- wechat ---- */

static void sim_wx_error(sim_reply_t *r, int errcode, const char *errmsg)
{
    sim_reply_json(r, 200, json_pack("{s:i,s:s}", "errcode", errcode, "errmsg", errmsg));
}

static void sim_wx_bad_token(sim_reply_t *r)
{
    sim_wx_error(r, 40001, "invalid credential, access_token is invalid or not latest");
}

static void sim_wx_fault(const sim_fault_t *f, sim_reply_t *r)
{
    switch (f->kind) {
    case SIM_FAULT_INVALID:
        sim_wx_error(r, 40003, "invalid openid");
        break;
    case SIM_FAULT_BADTOKEN:
        sim_wx_bad_token(r);
        break;
    case SIM_FAULT_FAIL5XX:
        sim_wx_error(r, -1, "system error");
        break;
    case SIM_FAULT_RATELIMIT:
        sim_wx_error(r, 45047, "out of response count limit");
        break;
    default:
        break;
    }
}

static void sim_wx_token(sim_call_t *c, sim_reply_t *r)
{
    const char *appid = sim_call_param(c, "appid");
    const char *secret = sim_call_param(c, "secret");
    if (appid != NULL) {
        sim_record_token_call(appid);
        sim_cred_faults(c, appid);
    }
    if (appid == NULL || *appid == '\0') {
        sim_wx_error(r, 41002, "appid missing");
        return;
    }
    if (secret == NULL || *secret == '\0') {
        sim_wx_error(r, 41004, "appsecret missing");
        return;
    }
    if (sim_is(secret, "wrong")) {
        sim_wx_error(r, 40125, "invalid appsecret");
        return;
    }
    if (!sim_is(sim_call_param(c, "grant_type"), "client_credential")) {
        sim_wx_error(r, 40002, "invalid grant_type");
        return;
    }
    char *token = sim_cred_token("wxtok", appid);
    if (token == NULL) {
        sim_wx_error(r, -1, "system error");
        return;
    }
    sim_reply_json(r, 200, json_pack("{s:s,s:i}", "access_token", token, "expires_in", 7200));
    free(token);
}

static void sim_wx_send(sim_call_t *c, sim_reply_t *r)
{
    c->recipient = sim_jstr(c->body, "touser");
    const char *texts[] = {c->recipient, sim_jstr2(c->body, "text", "content")};
    sim_fault_find(&c->fault, texts, 2);

    if (!sim_tokens_valid(sim_call_param(c, "access_token"))) {
        sim_wx_bad_token(r);
        return;
    }
    if (sim_fault_is_error(&c->fault)) {
        sim_wx_fault(&c->fault, r);
        return;
    }
    if (c->recipient == NULL) {
        sim_wx_error(r, 40003, "invalid openid");
        return;
    }
    if (sim_shape_refused(c, r, SIM_PLATFORM_WECHAT))
        return;
    sim_wx_error(r, 0, "ok");
}

/* Finds form field `name` in a multipart/form-data body: its size and Content-Type. */
static int sim_multipart_find(const char *ctype, const unsigned char *body, size_t len,
                              const char *name, size_t *size, char *pct, size_t pct_len)
{
    const char *b = ctype ? strcasestr(ctype, "boundary=") : NULL;
    if (b == NULL)
        return -1;
    b += 9;
    char delim[128] = "\r\n--";
    size_t dl = 4;
    int quoted = *b == '"';
    for (b += quoted; *b && dl + 1 < sizeof(delim); b++) {
        if (quoted ? *b == '"' : (*b == ';' || *b == ' '))
            break;
        delim[dl++] = *b;
    }
    delim[dl] = '\0';
    if (dl == 4)
        return -1;

    const unsigned char *end = body + len;
    /* The first delimiter may open the body without the leading CRLF. */
    const unsigned char *p = memmem(body, len, delim + 2, dl - 2);
    while (p != NULL) {
        p += (p[0] == '\r') ? dl : dl - 2;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return -1; /* closing delimiter */
        const unsigned char *hdr = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (hdr == NULL)
            return -1;
        hdr += 2;
        const unsigned char *hend = memmem(hdr, (size_t)(end - hdr), "\r\n\r\n", 4);
        if (hend == NULL)
            return -1;
        const unsigned char *data = hend + 4;
        const unsigned char *next = memmem(data, (size_t)(end - data), delim, dl);
        if (next == NULL)
            return -1;

        int match = 0;
        pct[0] = '\0';
        for (const unsigned char *line = hdr; line < hend + 2;) {
            const unsigned char *eol = memmem(line, (size_t)(hend + 2 - line), "\r\n", 2);
            size_t ll = (size_t)(eol - line);
            char h[1024];
            snprintf(h, sizeof(h), "%.*s", (int)(ll < sizeof(h) ? ll : sizeof(h) - 1),
                     (const char *)line);
            if (strncasecmp(h, "Content-Disposition:", 20) == 0) {
                /* Parameters split on ';' so that filename="media" is not taken for the name. */
                char *save = NULL;
                for (char *tok = strtok_r(h + 20, ";", &save); tok;
                     tok = strtok_r(NULL, ";", &save)) {
                    while (*tok == ' ')
                        tok++;
                    if (strncasecmp(tok, "name=", 5) != 0)
                        continue;
                    char *v = tok + 5;
                    size_t vl = strlen(v);
                    if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') {
                        v[vl - 1] = '\0';
                        v++;
                    }
                    match = strcmp(v, name) == 0;
                }
            } else if (strncasecmp(h, "Content-Type:", 13) == 0) {
                const char *v = h + 13;
                while (*v == ' ')
                    v++;
                size_t vl = strlen(v) < pct_len ? strlen(v) : pct_len - 1;
                memcpy(pct, v, vl);
                pct[vl] = '\0';
            }
            line = eol + 2;
        }
        if (match) {
            *size = (size_t)(next - data);
            return 0;
        }
        p = next;
    }
    return -1;
}

static void sim_wx_upload(sim_call_t *c, sim_reply_t *r)
{
    const char *type = sim_call_param(c, "type");
    char pct[256];
    size_t size = 0;
    int found = sim_multipart_find(sim_header(c, "Content-Type"), c->raw, c->raw_len, "media",
                                   &size, pct, sizeof(pct)) == 0;
    if (found)
        c->record_body =
            json_pack("{s:I,s:s?}", "size", (json_int_t)size, "content_type", pct[0] ? pct : NULL);
    else
        c->record_body = json_null(); /* never the raw upload: it may be megabytes */

    if (!sim_tokens_valid(sim_call_param(c, "access_token"))) {
        sim_wx_bad_token(r);
        return;
    }
    if (!found) {
        sim_wx_error(r, 41005, "media data missing");
        return;
    }
    /* the media types and sizes WeChat takes: image and video 10 MB, voice 2 MB, thumb 64 KB */
    static const struct {
        const char *type, *ctype;
        size_t max;
    } kinds[] = {{"image", "image/", 10 * 1024 * 1024},
                 {"video", "video/", 10 * 1024 * 1024},
                 {"voice", "audio/", 2 * 1024 * 1024},
                 {"thumb", "image/", 64 * 1024}};
    size_t k = 0;
    while (k < sizeof(kinds) / sizeof(kinds[0]) && !sim_is(type, kinds[k].type))
        k++;
    if (k == sizeof(kinds) / sizeof(kinds[0])) {
        sim_wx_error(r, 40004, "invalid media type");
        return;
    }
    if (pct[0] != '\0' && strncasecmp(pct, kinds[k].ctype, strlen(kinds[k].ctype)) != 0) {
        sim_wx_error(r, 40005, "invalid file type");
        return;
    }
    if (size > kinds[k].max) {
        sim_wx_error(r, 40006, "invalid meida size");
        return;
    }
    char id[40];
    snprintf(id, sizeof(id), "media-%llu", (unsigned long long)sim_next_id());
    sim_reply_json(r, 200,
                   json_pack("{s:s,s:s,s:I}", "type", type ? type : "image", "media_id", id,
                             "created_at", (json_int_t)time(NULL)));
}

/* ---- teamwork ---- */

static void sim_tw_error(sim_reply_t *r, int status, const char *msg)
{
    sim_reply_json(r, status, json_pack("{s:s}", "message", msg));
}

static void sim_tw_fault(const sim_fault_t *f, sim_reply_t *r)
{
    switch (f->kind) {
    case SIM_FAULT_INVALID:
        sim_tw_error(r, 404, "user not found");
        break;
    case SIM_FAULT_BADTOKEN:
        sim_tw_error(r, 401, "invalid api key");
        break;
    case SIM_FAULT_FAIL5XX:
        sim_tw_error(r, 500, "internal error");
        break;
    case SIM_FAULT_RATELIMIT:
        sim_tw_error(r, 429, "rate limited");
        break;
    default:
        break;
    }
}

static void sim_tw_message(sim_call_t *c, sim_reply_t *r)
{
    const char *key = sim_header(c, "x-api-key");
    c->recipient = json_string_value(json_array_get(json_object_get(c->body, "users"), 0));
    const char *texts[] = {c->recipient, sim_jstr(c->body, "text")};
    sim_fault_find(&c->fault, texts, 2);

    if (key == NULL || *key == '\0' || sim_is(key, "bad")) {
        sim_tw_error(r, 401, "invalid api key");
        return;
    }
    if (sim_fault_is_error(&c->fault)) {
        sim_tw_fault(&c->fault, r);
        return;
    }
    if (c->recipient == NULL) {
        sim_tw_error(r, 400, "users required");
        return;
    }
    if (sim_shape_refused(c, r, SIM_PLATFORM_TEAMWORK))
        return;
    char id[32];
    snprintf(id, sizeof(id), "tw-%llu", (unsigned long long)sim_next_id());
    sim_reply_json(r, 200, json_pack("{s:{s:s}}", "result", "messageId", id));
}

/* ---- message shapes (shapes.c) ---- */

/* Answers a body the platform would refuse in that platform's error shape: 1 when it did. */
static int sim_shape_refused(sim_call_t *c, sim_reply_t *r, sim_platform_t p)
{
    char why[200], msg[256];
    int code;

    if (sim_shape_check(p, c->body, why, sizeof(why), &code) == 0)
        return sim_window_refused(c, r, p); /* a valid message may still be refused */
    switch (p) {
    case SIM_PLATFORM_FACEBOOK:
    case SIM_PLATFORM_WHATSAPP_CLOUD:
        snprintf(msg, sizeof(msg), "(#100) Invalid parameter: %s", why);
        sim_graph_error(r, 400, 100, 0, msg, 0);
        break;
    case SIM_PLATFORM_WHATSAPP:
        sim_wa_error(r, 400, 1009, "Parameter value is not valid", why, 1);
        break;
    case SIM_PLATFORM_SLACK:
        sim_slack_error(r, 200, strcmp(why, "no_text") == 0 ? "no_text" : "invalid_blocks");
        break;
    case SIM_PLATFORM_WECHAT:
        sim_wx_error(r, code, why);
        break;
    default:
        sim_tw_error(r, 400, why);
        break;
    }
    return 1;
}

/* ---- conversation windows (windows.c) ---- */

#define SIM_WINDOW_WHY                                                                             \
    "Message failed to send because more than 24 hours have passed since the customer last "       \
    "replied to this number."

/* A send to a user whose window is closed (POST /_sim/windows), answered as the platform
 * answers it (platforms.md): facebook takes a MESSAGE_TAG (its tag was checked with the
 * shape), the whatsapp kinds a template, wechat nothing. 1 when it refused. */
static int sim_window_refused(sim_call_t *c, sim_reply_t *r, sim_platform_t p)
{
    json_t *e;

    if (!sim_window_closed(p, c->recipient))
        return 0;
    switch (p) {
    case SIM_PLATFORM_FACEBOOK:
        if (sim_is(sim_jstr(c->body, "messaging_type"), "MESSAGE_TAG"))
            return 0;
        sim_graph_error(r, 400, 10, 2018278,
                        "(#10) This message is sent outside of allowed window. Learn more about "
                        "the new policy here: https://developers.facebook.com/docs/messenger-"
                        "platform/policy-overview",
                        0);
        return 1;
    case SIM_PLATFORM_WHATSAPP_CLOUD:
        if (sim_is(sim_jstr(c->body, "type"), "template"))
            return 0;
        e = json_pack("{s:s,s:s,s:i,s:{s:s,s:s},s:s}", "message", "(#131047) Re-engagement message",
                      "type", "OAuthException", "code", 131047, "error_data", "messaging_product",
                      "whatsapp", "details", SIM_WINDOW_WHY, "fbtrace_id", "A1");
        sim_reply_json(r, 400, json_pack("{s:o}", "error", e));
        return 1;
    case SIM_PLATFORM_WHATSAPP:
        if (sim_is(sim_jstr(c->body, "type"), "template"))
            return 0;
        sim_wa_error(r, 400, 470, "Re-engagement message", SIM_WINDOW_WHY, 1);
        return 1;
    case SIM_PLATFORM_WECHAT:
        sim_wx_error(r, 45015, "response out of time limit or subscription is canceled");
        return 1;
    default:
        return 0;
    }
}

/* ---- routes ---- */

static const sim_endpoint_t sim_ep_graph = {SIM_PLATFORM_FACEBOOK, SIM_KIND_MESSAGES,
                                            EVHTTP_REQ_POST, SIM_EP_PLATFORM | SIM_EP_JSON,
                                            sim_graph_messages};
static const sim_endpoint_t sim_ep_wa_login = {SIM_PLATFORM_WHATSAPP, SIM_KIND_LOGIN,
                                               EVHTTP_REQ_POST, SIM_EP_PLATFORM | SIM_EP_JSON,
                                               sim_wa_login};
static const sim_endpoint_t sim_ep_wa_contacts = {SIM_PLATFORM_WHATSAPP, SIM_KIND_CONTACTS,
                                                  EVHTTP_REQ_POST, SIM_EP_PLATFORM | SIM_EP_JSON,
                                                  sim_wa_contacts};
static const sim_endpoint_t sim_ep_wa_messages = {SIM_PLATFORM_WHATSAPP, SIM_KIND_MESSAGES,
                                                  EVHTTP_REQ_POST, SIM_EP_PLATFORM | SIM_EP_JSON,
                                                  sim_wa_messages};
static const sim_endpoint_t sim_ep_slack = {SIM_PLATFORM_SLACK, SIM_KIND_MESSAGES, EVHTTP_REQ_POST,
                                            SIM_EP_PLATFORM | SIM_EP_JSON, sim_slack_post};
static const sim_endpoint_t sim_ep_wx_token = {SIM_PLATFORM_WECHAT, SIM_KIND_TOKEN, EVHTTP_REQ_GET,
                                               SIM_EP_PLATFORM, sim_wx_token};
static const sim_endpoint_t sim_ep_wx_send = {SIM_PLATFORM_WECHAT, SIM_KIND_SEND, EVHTTP_REQ_POST,
                                              SIM_EP_PLATFORM | SIM_EP_JSON, sim_wx_send};
static const sim_endpoint_t sim_ep_wx_upload = {SIM_PLATFORM_WECHAT, SIM_KIND_UPLOAD,
                                                EVHTTP_REQ_POST, SIM_EP_PLATFORM, sim_wx_upload};
static const sim_endpoint_t sim_ep_teamwork = {SIM_PLATFORM_TEAMWORK, SIM_KIND_MESSAGES,
                                               EVHTTP_REQ_POST, SIM_EP_PLATFORM | SIM_EP_JSON,
                                               sim_tw_message};

/* /graph/<version>/<me|pageId|phoneNumberId>/messages */
static int sim_route_graph(const char *path)
{
    const char *ver = path + 7;
    const char *id = strchr(ver, '/');
    if (id == NULL || id == ver)
        return 0;
    const char *rest = strchr(id + 1, '/');
    return rest != NULL && rest > id + 1 && strcmp(rest, "/messages") == 0;
}

const sim_endpoint_t *sim_platform_route(const char *path)
{
    if (strncmp(path, "/graph/", 7) == 0)
        return sim_route_graph(path) ? &sim_ep_graph : NULL;
    if (strcmp(path, "/slack/api/chat.postMessage") == 0)
        return &sim_ep_slack;
    if (strncmp(path, "/wechat/cgi-bin/", 16) == 0) {
        const char *rest = path + 16;
        if (strcmp(rest, "token") == 0)
            return &sim_ep_wx_token;
        if (strcmp(rest, "message/custom/send") == 0)
            return &sim_ep_wx_send;
        if (strcmp(rest, "media/upload") == 0)
            return &sim_ep_wx_upload;
        return NULL;
    }
    if (strcmp(path, "/teamwork/appstore/api/developer/chats/message") == 0)
        return &sim_ep_teamwork;
    /* WhatsApp on-premises: any first segment starting with "wa", so that tests can give each
     * channel its own apiPath (/wa, /wa2, /wa-east). */
    if (strncmp(path, "/wa", 3) == 0) {
        const char *rest = strchr(path + 1, '/');
        if (rest == NULL)
            return NULL;
        if (strcmp(rest, "/v1/users/login") == 0)
            return &sim_ep_wa_login;
        if (strcmp(rest, "/v1/contacts") == 0)
            return &sim_ep_wa_contacts;
        if (strcmp(rest, "/v1/messages") == 0)
            return &sim_ep_wa_messages;
    }
    return NULL;
}

/* ---- rate limits (limits.c): who sends, and each platform's refusal ---- */

#define SIM_RETRY_AFTER_MAX 3600

/* A wait in ms as Retry-After's whole seconds, 1 .. 3600. */
static void sim_retry_after(sim_reply_t *r, int64_t ms)
{
    int64_t s = (ms + 999) / 1000;
    snprintf(r->retry_after, sizeof(r->retry_after), "%lld",
             (long long)(s < 1                     ? 1
                         : s > SIM_RETRY_AFTER_MAX ? SIM_RETRY_AFTER_MAX
                                                   : s));
}

/* Segment n (from 0) of path ("/graph/v19.0/<id>/messages": <id> is 2), into buf. */
static const char *sim_path_segment(const char *path, int n, char *buf, size_t len)
{
    const char *p = path + (path[0] == '/');
    for (int i = 0; i < n; i++) {
        p = strchr(p, '/');
        if (p == NULL)
            return NULL;
        p++;
    }
    size_t l = strcspn(p, "/");
    snprintf(buf, len, "%.*s", (int)(l < len ? l : len - 1), p);
    return buf;
}

/* What a platform limits a send by: the page (or its token for /me), the phone number id, the
 * on-premises client (its apiPath), the bot token, the access token, the API key. */
static const char *sim_platform_sender(sim_call_t *c, char *buf, size_t len)
{
    switch (c->platform) {
    case SIM_PLATFORM_FACEBOOK:
        if (sim_path_segment(c->path, 2, buf, len) != NULL && strcmp(buf, "me") != 0)
            return buf;
        return sim_call_param(c, "access_token") ? sim_call_param(c, "access_token")
                                                 : sim_call_bearer(c);
    case SIM_PLATFORM_WHATSAPP_CLOUD:
        return sim_path_segment(c->path, 2, buf, len);
    case SIM_PLATFORM_WHATSAPP:
        return sim_path_segment(c->path, 0, buf, len);
    case SIM_PLATFORM_SLACK:
        return sim_call_bearer(c);
    case SIM_PLATFORM_WECHAT:
        return sim_call_param(c, "access_token");
    case SIM_PLATFORM_TEAMWORK:
        return sim_header(c, "x-api-key");
    default:
        return NULL;
    }
}

static void sim_platform_ratelimited(sim_call_t *c, sim_reply_t *r, int64_t retry_ms)
{
    int pair = c->limit == SIM_LIMIT_PAIR;
    sim_reply_clear(r);
    memset(r, 0, sizeof(*r));
    switch (c->platform) {
    case SIM_PLATFORM_FACEBOOK:
        sim_graph_error(r, 400, 613, 0, "(#613) Calls to this api have exceeded the rate limit.",
                        0);
        break;
    case SIM_PLATFORM_WHATSAPP_CLOUD:
        if (pair)
            sim_graph_error(r, 400, 131056, 0,
                            "(#131056) (Business Account, Consumer Account) pair rate limit hit",
                            0);
        else
            sim_graph_error(r, 429, 130429, 0, "(#130429) Rate limit hit", 0);
        break;
    case SIM_PLATFORM_WHATSAPP:
        sim_wa_error(r, 429, 1015, "Too many requests", NULL, 1);
        break;
    case SIM_PLATFORM_SLACK:
        sim_slack_error(r, 429, "ratelimited");
        sim_retry_after(r, retry_ms);
        break;
    case SIM_PLATFORM_WECHAT:
        if (pair)
            sim_wx_error(r, 45047, "out of response count limit");
        else
            sim_wx_error(r, 45009, "reach max api daily quota limit");
        break;
    default:
        sim_tw_error(r, 429, "rate limited");
        break;
    }
}

void sim_platform_limit(sim_call_t *c, sim_reply_t *r)
{
    char buf[128];
    int64_t retry_ms = 0;

    if ((c->kind != SIM_KIND_MESSAGES && c->kind != SIM_KIND_SEND) || r->status < 200 ||
        r->status > 299 || r->action != SIM_ACT_ANSWER ||
        (c->fault.kind != SIM_FAULT_NONE && c->fault.kind != SIM_FAULT_SLOW))
        return;
    c->limit = sim_limits_check(c->platform, sim_platform_sender(c, buf, sizeof(buf)), c->recipient,
                                c->ts_us, &retry_ms);
    if (c->limit != SIM_LIMIT_NONE)
        sim_platform_ratelimited(c, r, retry_ms);
}
