/* adapter.c - the platform table and the helpers every adapter file shares. */
#include "adapter.h"

#include "../core/error.h"
#include "../json/jsonw.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const adapter_ops_t *const adapters[] = {
    &adapter_facebook, &adapter_whatsapp, &adapter_whatsapp_cloud,
    &adapter_slack,    &adapter_wechat,   &adapter_teamwork,
};

const adapter_ops_t *adapter_find(const char *type)
{
    if (type == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(adapters) / sizeof(adapters[0]); i++)
        if (strcmp(adapters[i]->type, type) == 0)
            return adapters[i];
    return NULL;
}

static const struct {
    const char *name;
    unsigned kind;
} kinds[] = {
    {"TEXT", ADAPTER_TEXT},         {"IMAGE", ADAPTER_IMAGE},       {"TEMPLATE", ADAPTER_TEMPLATE},
    {"VIDEO", ADAPTER_VIDEO},       {"AUDIO", ADAPTER_AUDIO},       {"FILE", ADAPTER_FILE},
    {"STICKER", ADAPTER_STICKER},   {"LOCATION", ADAPTER_LOCATION}, {"BUTTON", ADAPTER_BUTTON},
    {"CAROUSEL", ADAPTER_CAROUSEL}, {"LIST", ADAPTER_LIST},         {"NATIVE", ADAPTER_NATIVE},
};

unsigned adapter_response_type(const char *type)
{
    if (type == NULL)
        return 0;
    /* the first letter first: read for every response at its check and at its call */
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (type[0] == kinds[i].name[0] && strcmp(type, kinds[i].name) == 0)
            return kinds[i].kind;
    return 0;
}

int adapter_check_response(const adapter_ops_t *ops, const json_t *response, char *msg, size_t size)
{
    const char *type = adapter_str(response, "type");
    unsigned kind = adapter_response_type(type);

    if ((kind & ops->response_types) == 0)
        return adapter_check_fail(BG_ERR_UNSUPPORTED, msg, size,
                                  "type %.40s is not supported on %s channels",
                                  type ? type : "(none)", ops->type);
    /* a field the platform has no use for is refused, never dropped (contract.md section 11) */
    if (!ops->message_tags && json_object_size(response) > 1 &&
        json_object_get(response, "messageTag") != NULL)
        return adapter_check_fail(BG_ERR_MISSING_PARAM, msg, size,
                                  "messageTag is only for facebook channels, not %s", ops->type);
    return ops->check != NULL ? ops->check(kind, response, msg, size) : 0;
}

int adapter_check_fail(int code, char *msg, size_t size, const char *fmt, ...)
{
    va_list ap;

    if (size == 0) /* only the code was asked */
        return code;
    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    bg_utf8_sanitize(msg);
    return code;
}

const char *adapter_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

int adapter_buttons_all(const json_t *buttons, const char *type)
{
    const json_t *b;
    size_t i;

    json_array_foreach(buttons, i, b) {
        const char *t = adapter_str(b, "type");
        if (t == NULL || strcmp(t, type) != 0)
            return 0;
    }
    return 1;
}

size_t adapter_chars(const char *s)
{
    size_t n = 0;

    for (; s && *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

void adapter_copy_str(json_t *obj, const char *key, const json_t *response, const char *rkey)
{
    const char *s = adapter_str(response, rkey);

    if (s != NULL)
        json_object_set_new(obj, key, json_string(s));
}

json_t *adapter_native_message(const adapter_ops_t *ops, const json_t *response,
                               adapter_result_t *res)
{
    const json_t *message = json_object_get(response, "message");
    json_t *copy = json_is_object(message) ? json_deep_copy(message) : NULL;

    if (copy == NULL)
        adapter_fail(res, ADAPTER_REJECTED, "%s: NATIVE response has no message object", ops->type);
    return copy;
}

int adapter_err_code(const adapter_ops_t *ops, adapter_status_t status)
{
    switch (status) {
    case ADAPTER_OK:
        return BG_OK;
    case ADAPTER_RECIPIENT_INVALID:
        return ops->recipient_invalid_code;
    case ADAPTER_AUTH_INVALID:
    case ADAPTER_AUTH_EXPIRED:
        return BG_ERR_RECIPIENT_INVALID;
    case ADAPTER_RATE_LIMITED:
        return BG_ERR_RATE_LIMITED;
    case ADAPTER_UNSUPPORTED:
        return BG_ERR_UNSUPPORTED;
    case ADAPTER_WINDOW_CLOSED:
        return BG_ERR_WINDOW;
    case ADAPTER_SERVER_ERROR:
    case ADAPTER_REJECTED:
        break;
    }
    return BG_ERR_PLATFORM;
}

void adapter_result_init(adapter_result_t *res)
{
    memset(res, 0, sizeof(*res));
    res->status = ADAPTER_OK;
    res->retry_after_s = -1;
}

void adapter_result_clear(adapter_result_t *res)
{
    json_decref(res->meta);
    adapter_result_init(res);
}

void adapter_call_free(adapter_call_t *call)
{
    free(call->url);
    for (int i = 0; i < ADAPTER_MAX_HEADERS && call->headers[i]; i++)
        free(call->headers[i]);
    free(call->body);
    memset(call, 0, sizeof(*call));
}

int adapter_fail(adapter_result_t *res, adapter_status_t status, const char *fmt, ...)
{
    va_list ap;

    res->status = status;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof(res->error), fmt, ap);
    va_end(ap);
    bg_utf8_sanitize(res->error);
    return -1;
}

int adapter_add_header(adapter_call_t *call, const char *fmt, ...)
{
    va_list ap;
    int i = 0;
    char *line;

    while (i < ADAPTER_MAX_HEADERS && call->headers[i])
        i++;
    if (i == ADAPTER_MAX_HEADERS)
        return -1;
    va_start(ap, fmt);
    if (vasprintf(&line, fmt, ap) < 0)
        line = NULL;
    va_end(ap);
    if (line == NULL)
        return -1;
    if (strpbrk(line, "\r\n") != NULL) { /* a value from info must not add header lines */
        free(line);
        return -1;
    }
    call->headers[i] = line;
    return 0;
}

static int set_json_text(adapter_call_t *call, char *text, size_t len)
{
    char *ctype;

    if (text == NULL)
        return -1;
    free(call->body);
    call->body = text;
    call->body_len = len;
    for (int i = 0; i < ADAPTER_MAX_HEADERS; i++) {
        if (call->headers[i] != NULL)
            continue;
        if ((ctype = strdup(ADAPTER_JSON_HEADER)) == NULL)
            return -1;
        call->headers[i] = ctype;
        return 0;
    }
    return -1;
}

int adapter_set_json_body(adapter_call_t *call, json_t *body)
{
    size_t len = 0;
    char *text = jw_dump(body, &len);

    json_decref(body);
    return set_json_text(call, text, len);
}

char *adapter_urlencode(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 1), *p = out;

    if (out == NULL)
        return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            *p++ = (char)c;
        } else {
            *p++ = '%';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        }
    }
    *p = '\0';
    return out;
}

const char *adapter_info_str(const json_t *info, const char *key)
{
    const char *s = json_string_value(json_object_get(info, key));

    return s != NULL && *s != '\0' ? s : NULL;
}

int adapter_cred_expiring(const json_t *info, const char *field, const char *expiry_field,
                          int64_t now_ms, int64_t margin_ms)
{
    const json_t *expiry = json_object_get(info, expiry_field);

    /* Compared as doubles: a huge stored number must not overflow a conversion. */
    return adapter_info_str(info, field) == NULL || !json_is_number(expiry) ||
           json_number_value(expiry) <= (double)now_ms + (double)margin_ms;
}

json_t *adapter_answer_json(const adapter_answer_t *a)
{
    if (a->body == NULL || a->body_len == 0)
        return NULL;
    return json_loadb(a->body, a->body_len, JSON_DECODE_ANY, NULL);
}

void adapter_copy(char *dst, size_t size, const char *s)
{
    size_t n = s != NULL && size > 0 ? strnlen(s, size - 1) : 0;

    if (size == 0)
        return;
    memcpy(dst, s ? s : "", n);
    dst[n] = '\0';
    bg_utf8_trim(dst);
}

void adapter_join(char *dst, size_t size, const char *a, const char *b)
{
    if (size == 0)
        return;
    snprintf(dst, size, "%s%s%s", a ? a : "", b && *b ? ": " : "", b ? b : "");
    bg_utf8_trim(dst);
}

void adapter_copy_masked(char *dst, size_t size, const char *s, const json_t *info,
                         const char *const *keys)
{
    /* Each secret as stored and as it travels in a query string. */
    const char *forms[2 * ADAPTER_MAX_SECRETS];
    char *encoded[ADAPTER_MAX_SECRETS] = {0};
    size_t nforms = 0, n = 0;

    if (size == 0)
        return;
    for (size_t i = 0; keys && keys[i] && i < ADAPTER_MAX_SECRETS; i++) {
        const char *v = adapter_info_str(info, keys[i]);
        if (v == NULL)
            continue;
        forms[nforms++] = v;
        if ((encoded[i] = adapter_urlencode(v)) != NULL && strcmp(encoded[i], v) != 0)
            forms[nforms++] = encoded[i];
    }
    for (s = s ? s : ""; *s && n + 1 < size;) {
        size_t skip = 0; /* the longest secret starting here, so that none leaks a tail */
        for (size_t i = 0; i < nforms; i++) {
            size_t len = strlen(forms[i]);
            if (len > skip && strncmp(s, forms[i], len) == 0)
                skip = len;
        }
        if (skip == 0) {
            dst[n++] = *s++;
            continue;
        }
        for (const char *m = "***"; *m && n + 1 < size; m++)
            dst[n++] = *m;
        s += skip;
    }
    dst[n] = '\0';
    bg_utf8_trim(dst);
    for (size_t i = 0; i < ADAPTER_MAX_SECRETS; i++)
        free(encoded[i]);
}

char *adapter_url(const char *base, const char *fmt, ...)
{
    size_t n = base ? strlen(base) : 0, plen;
    char *path, *url;
    va_list ap;
    int rc;

    if (n == 0)
        return NULL;
    if (base[n - 1] == '/')
        n--;
    va_start(ap, fmt);
    rc = vasprintf(&path, fmt, ap);
    va_end(ap);
    if (rc < 0)
        return NULL;
    plen = (size_t)rc;
    if ((url = malloc(n + plen + 1)) != NULL) {
        memcpy(url, base, n);
        memcpy(url + n, path, plen + 1);
    }
    free(path);
    return url;
}

int adapter_json_post(adapter_call_t *out, char *url, json_t *body)
{
    out->method = "POST";
    free(out->url);
    out->url = url;
    if (url == NULL || body == NULL) {
        json_decref(body);
        adapter_call_free(out);
        return -1;
    }
    if (adapter_set_json_body(out, body) < 0) {
        adapter_call_free(out);
        return -1;
    }
    return 0;
}

int adapter_json_post_text(adapter_call_t *out, char *url, jsonw_t *body)
{
    size_t len = 0;
    char *text = jw_steal(body, &len);

    out->method = "POST";
    free(out->url);
    out->url = url;
    if (url == NULL || set_json_text(out, text, len) < 0) {
        if (out->body != text)
            free(text);
        adapter_call_free(out);
        return -1;
    }
    return 0;
}

unsigned adapter_response_kind(const adapter_ops_t *ops, const json_t *response,
                               adapter_result_t *res)
{
    const char *type = json_string_value(json_object_get(response, "type"));
    unsigned kind = adapter_response_type(type);
    char shown[32];

    if (type == NULL) {
        adapter_fail(res, ADAPTER_REJECTED, "%s: response has no type", ops->type);
        return 0;
    }
    if ((kind & ops->response_types) == 0) {
        adapter_copy(shown, sizeof(shown), type);
        adapter_fail(res, ADAPTER_UNSUPPORTED, "%s: response type %s is not supported", ops->type,
                     shown);
        return 0;
    }
    return kind;
}

const char *adapter_response_str(const adapter_ops_t *ops, const json_t *response, const char *key,
                                 adapter_result_t *res)
{
    const char *s = json_string_value(json_object_get(response, key));

    if (s == NULL || *s == '\0')
        adapter_fail(res, ADAPTER_REJECTED, "%s: response has no %s", ops->type, key);
    return s != NULL && *s != '\0' ? s : NULL;
}

/* Days from 1970-01-01 to the proleptic Gregorian date y-m-d (m 1..12). */
int64_t adapter_days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

static int month_number(const char *name)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";

    for (int i = 0; i < 12; i++)
        if (strlen(name) == 3 && memcmp(name, months + 3 * i, 3) == 0)
            return i + 1;
    return 0;
}

static int only_space_from(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return *p == '\0';
}

/* The year of an RFC 850 date's two digits: one more than 50 years ahead of now is the latest
 * past year with those digits (RFC 9110 5.6.7). */
static int full_year(int yy, int64_t now_ms)
{
    int now_year = 1970 + (int)((double)now_ms / (86400000.0 * 365.2425));
    int y = now_year - now_year % 100 + yy;

    return y > now_year + 50 ? y - 100 : y;
}

/* An HTTP-date (RFC 9110 5.6.7: IMF-fixdate, and the obsolete RFC 850 and asctime forms that a
 * recipient must accept too) in epoch ms; -1 when it is none of them. */
static int64_t http_date_ms(const char *s, int64_t now_ms)
{
    char wday[10], mon[4];
    int d, y, h, m, sec, n = 0, month;

    /* Sun, 06 Nov 1994 08:49:37 GMT */
    if (sscanf(s, " %3[A-Za-z], %2d %3[A-Za-z] %4d %2d:%2d:%2d GMT%n", wday, &d, mon, &y, &h, &m,
               &sec, &n) != 7 ||
        n == 0) {
        n = 0;
        /* Sunday, 06-Nov-94 08:49:37 GMT, else Sun Nov  6 08:49:37 1994 */
        if (sscanf(s, " %9[A-Za-z], %2d-%3[A-Za-z]-%2d %2d:%2d:%2d GMT%n", wday, &d, mon, &y, &h,
                   &m, &sec, &n) == 7 &&
            n > 0)
            y = full_year(y, now_ms);
        else if (n = 0, sscanf(s, " %3[A-Za-z] %3[A-Za-z] %2d %2d:%2d:%2d %4d%n", wday, mon, &d, &h,
                               &m, &sec, &y, &n) != 7 ||
                            n == 0)
            return -1;
    }
    month = month_number(mon);
    if (!only_space_from(s + n) || month == 0 || d < 1 || d > 31 || h < 0 || h > 23 || m < 0 ||
        m > 59 || sec < 0 || sec > 60 || y < 1970)
        return -1;
    return ((adapter_days_from_civil(y, month, d) * 24 + h) * 60 + m) * 60000 + (int64_t)sec * 1000;
}

int adapter_retry_after(const char *value, int64_t now_ms)
{
    int64_t v = 0, at;
    const char *p = value;

    if (p == NULL)
        return -1;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p >= '0' && *p <= '9') {
        /* delta-seconds; past the cap only the cap counts, so no number is too long */
        for (; *p >= '0' && *p <= '9'; p++)
            if ((v = v * 10 + (*p - '0')) > ADAPTER_RETRY_AFTER_MAX_S)
                v = ADAPTER_RETRY_AFTER_MAX_S + 1;
        if (!only_space_from(p))
            return -1;
        return v > ADAPTER_RETRY_AFTER_MAX_S ? ADAPTER_RETRY_AFTER_MAX_S : (int)v;
    }
    if (now_ms <= 0 || (at = http_date_ms(p, now_ms)) < 0)
        return -1;
    if (at <= now_ms)
        return 0;
    /* whole seconds, rounded up: never earlier than the platform said */
    if (at - now_ms > (int64_t)ADAPTER_RETRY_AFTER_MAX_S * 1000)
        return ADAPTER_RETRY_AFTER_MAX_S;
    return (int)((at - now_ms + 999) / 1000);
}

void adapter_rate_wait(const adapter_target_t *t, const adapter_answer_t *a, adapter_result_t *res)
{
    if (res->status == ADAPTER_RATE_LIMITED && res->retry_after_s < 0)
        res->retry_after_s = adapter_retry_after(a->retry_after, t->now_ms);
}

void adapter_parse_send(const adapter_ops_t *ops, const adapter_target_t *t,
                        const adapter_answer_t *a, adapter_result_t *res)
{
    ops->parse_send(t, a, res);
    adapter_rate_wait(t, a, res);
}

adapter_status_t adapter_code_status(const adapter_code_t *table, long code, adapter_status_t dflt)
{
    for (; table->code != 0; table++)
        if (table->code == code)
            return table->status;
    return dflt;
}

int adapter_graph_error(const json_t *answer, adapter_graph_error_t *err)
{
    const json_t *e = json_object_get(answer, "error"), *data;
    const char *s;

    memset(err, 0, sizeof(*err));
    err->message = "";
    err->details = "";
    if (!json_is_object(e))
        return -1;
    err->code = (long)json_integer_value(json_object_get(e, "code"));
    err->subcode = (long)json_integer_value(json_object_get(e, "error_subcode"));
    if ((s = json_string_value(json_object_get(e, "message"))) != NULL)
        err->message = s;
    data = json_object_get(e, "error_data");
    s = json_is_string(data) ? json_string_value(data)
                             : json_string_value(json_object_get(data, "details"));
    if (s != NULL)
        err->details = s;
    return 0;
}
