/* hook.c - what the platforms' webhook parsers share: the event list they fill, strict JSON,
 * form-encoded bodies and platform times (contract.md section 14). Pure: no I/O, no clock. */
#include "adapter.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void adapter_hook_init(adapter_hook_t *h)
{
    h->events = json_array();
    h->challenge = NULL;
    h->error[0] = '\0';
}

void adapter_hook_clear(adapter_hook_t *h)
{
    json_decref(h->events);
    free(h->challenge);
    h->events = NULL;
    h->challenge = NULL;
    h->error[0] = '\0';
}

int adapter_hook_fail(adapter_hook_t *h, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(h->error, sizeof(h->error), fmt, ap);
    va_end(ap);
    bg_utf8_sanitize(h->error);
    return -1;
}

int adapter_hook_add(adapter_hook_t *h, const char *type, const char *from, const char *id,
                     int64_t timestamp_ms, json_t *data, json_t *platform)
{
    json_t *ev;

    if (from == NULL || *from == '\0' || strlen(from) >= ADAPTER_ID_MAX) {
        json_decref(data);
        return adapter_hook_fail(h, "%s event without a valid sender", type);
    }
    if (id == NULL || *id == '\0' || strlen(id) >= ADAPTER_ID_MAX) {
        json_decref(data);
        return adapter_hook_fail(h, "%s event without a valid id", type);
    }
    if (h->events == NULL || json_array_size(h->events) >= ADAPTER_HOOK_EVENTS_MAX) {
        json_decref(data);
        return adapter_hook_fail(h, "more than %d events in one webhook", ADAPTER_HOOK_EVENTS_MAX);
    }
    ev = json_pack("{s:s,s:s,s:s,s:I,s:o,s:O}", "eventType", type, "from", from, "id", id,
                   "timestamp", (json_int_t)(timestamp_ms < 0 ? 0 : timestamp_ms), "data",
                   data ? data : json_object(), "platform", platform ? platform : json_null());
    if (ev == NULL || json_array_append_new(h->events, ev) < 0)
        return adapter_hook_fail(h, "out of memory");
    return 0;
}

int adapter_hook_tap(adapter_hook_t *h, const char *from, const char *id, int64_t timestamp_ms,
                     const char *payload, const char *title, json_t *platform)
{
    return adapter_hook_add(h, "POSTBACK", from, id, timestamp_ms,
                            json_pack("{s:s?,s:s?}", "payload", payload, "title", title), platform);
}

json_t *adapter_hook_json(const char *body, size_t len, adapter_hook_t *h)
{
    json_error_t e;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);

    if (j == NULL) {
        adapter_hook_fail(h, "body is not JSON: %s", e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        adapter_hook_fail(h, "body is not a JSON object");
        return NULL;
    }
    return j;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

char *adapter_form_value(const char *body, size_t len, const char *name)
{
    size_t nlen = strlen(name), i = 0;

    while (i < len) {
        size_t end = i;
        while (end < len && body[end] != '&')
            end++;
        if (end - i > nlen && memcmp(body + i, name, nlen) == 0 && body[i + nlen] == '=') {
            char *out = malloc(end - i - nlen), *o = out;
            if (out == NULL)
                return NULL;
            for (size_t k = i + nlen + 1; k < end; k++) {
                if (body[k] == '+') {
                    *o++ = ' ';
                } else if (body[k] == '%') {
                    int hi = k + 2 < end ? hexval((unsigned char)body[k + 1]) : -1;
                    int lo = hi >= 0 ? hexval((unsigned char)body[k + 2]) : -1;
                    if (lo < 0 || (hi == 0 && lo == 0)) { /* bad escape, or a NUL */
                        free(out);
                        return NULL;
                    }
                    *o++ = (char)(hi * 16 + lo);
                    k += 2;
                } else if (body[k] == '\0') {
                    free(out);
                    return NULL;
                } else {
                    *o++ = body[k];
                }
            }
            *o = '\0';
            return out;
        }
        i = end + 1;
    }
    return NULL;
}

json_t *adapter_hook_media(const char *type, const char *url)
{
    char upper[16];
    size_t i = 0;

    for (; type[i] != '\0' && i + 1 < sizeof(upper); i++)
        upper[i] = (char)toupper((unsigned char)type[i]);
    upper[i] = '\0';
    /* the platforms' words for a file */
    if (strcmp(upper, "DOCUMENT") == 0)
        strcpy(upper, "FILE");
    return url ? json_pack("{s:s,s:s}", "type", upper, "url", url)
               : json_pack("{s:s}", "type", upper);
}

int64_t adapter_hook_time(const json_t *v, int ms)
{
    int64_t t = 0;

    if (json_is_integer(v)) {
        t = json_integer_value(v);
        if (t < 0)
            return -1;
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        int digits = 0, frac = 0;
        if (*s == '\0')
            return -1;
        for (; isdigit((unsigned char)*s) && digits < 16; s++, digits++)
            t = t * 10 + (*s - '0');
        if (*s == '.' && !ms) {        /* slack: seconds with a fraction; keep the ms */
            if (t >= INT64_MAX / 1000) /* its ms and their fraction would not fit */
                return -1;
            for (s++; isdigit((unsigned char)*s); s++, frac++)
                if (frac < 3)
                    t = t * 10 + (*s - '0');
            for (; frac < 3; frac++)
                t *= 10;
            return *s == '\0' && digits > 0 ? t : -1;
        }
        if (*s != '\0' || digits == 0)
            return -1;
    } else {
        return -1;
    }
    if (ms)
        return t;
    return t > INT64_MAX / 1000 ? -1 : t * 1000;
}
