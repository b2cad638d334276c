/* window.c - conversation windows: when a platform takes a message, from the member's last
 * inbound message. */
#include "window.h"

#include "request.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define HOUR_MS 3600000LL

static int is(const char *s, const char *want)
{
    return s != NULL && strcmp(s, want) == 0;
}

static int whatsapp_kind(const char *type)
{
    return is(type, "whatsapp") || is(type, "whatsapp-cloud");
}

int window_hours(const char *channel_type)
{
    if (whatsapp_kind(channel_type) || is(channel_type, "facebook"))
        return 24;
    if (is(channel_type, "wechat"))
        return 48;
    return 0;
}

/* n digits at s as a number; -1 when one is not a digit. */
static int digits(const char *s, int n)
{
    int v = 0;

    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* "YYYY-MM-DDTHH:MM:SS[.fraction][Z|+HH:MM|+HHMM|-...]" (T, t or a space; no zone: UTC) in ms
 * since the epoch; WINDOW_NEVER when it is not that. */
static int64_t iso_ms(const char *s)
{
    struct tm tm;
    int y = digits(s, 4), mo, d, h, mi, sec, ms = 0, scale = 100, off = 0;
    time_t t;

    if (y < 0 || strlen(s) < 19 || s[4] != '-' || s[7] != '-' ||
        (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':')
        return WINDOW_NEVER;
    mo = digits(s + 5, 2);
    d = digits(s + 8, 2);
    h = digits(s + 11, 2);
    mi = digits(s + 14, 2);
    sec = digits(s + 17, 2);
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 ||
        sec > 60)
        return WINDOW_NEVER;
    s += 19;
    if (*s == '.' || *s == ',') {
        if (s[1] < '0' || s[1] > '9')
            return WINDOW_NEVER;
        for (s++; *s >= '0' && *s <= '9'; s++, scale /= 10)
            ms += (*s - '0') * scale; /* digits past the ms add 0 */
    }
    if (*s == '+' || *s == '-') {
        int oh = digits(s + 1, 2), om = s[3] == ':' ? digits(s + 4, 2) : digits(s + 3, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return WINDOW_NEVER;
        off = (*s == '-' ? -1 : 1) * (oh * 60 + om);
        s += s[3] == ':' ? 6 : 5;
    } else if (*s == 'Z' || *s == 'z') {
        s++;
    }
    if (*s != '\0')
        return WINDOW_NEVER;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    t = timegm(&tm);
    return ((int64_t)t - (int64_t)off * 60) * 1000 + ms;
}

int64_t window_last_inbound(const json_t *member)
{
    const json_t *v = json_object_get(member, "lastInboundAt");
    double real;

    if (json_is_integer(v))
        return json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : WINDOW_NEVER;
    if (json_is_real(v)) {
        real = json_real_value(v);
        /* beyond year 275,000 or negative: not a date botgate can have seen */
        return isfinite(real) && real >= 0 && real < 8.64e18 ? (int64_t)real : WINDOW_NEVER;
    }
    if (json_is_string(v))
        return iso_ms(json_string_value(v));
    return WINDOW_NEVER;
}

int64_t window_closed_hours(const char *channel_type, int64_t last_ms, int64_t now_ms)
{
    int hours = window_hours(channel_type);

    if (hours == 0 || last_ms == WINDOW_NEVER || now_ms < last_ms ||
        now_ms - last_ms < hours * HOUR_MS)
        return -1;
    return (now_ms - last_ms) / HOUR_MS;
}

int window_exempt(const char *channel_type, const json_t *response)
{
    const char *type = json_string_value(json_object_get(response, "type"));
    const json_t *native = is(type, "NATIVE") ? json_object_get(response, "message") : NULL;

    if (whatsapp_kind(channel_type))
        return is(type, "TEMPLATE") ||
               is(json_string_value(json_object_get(native, "type")), "template");
    if (is(channel_type, "facebook"))
        return json_object_get(response, "messageTag") != NULL ||
               is(json_string_value(json_object_get(native, "messaging_type")), "MESSAGE_TAG");
    return 0;
}

int window_error(bg_error_t *err, const char *channel_type, int64_t hours)
{
    /* the way out differs: facebook has no TEMPLATE but tags, wechat has neither */
    const char *way = is(channel_type, "facebook") ? "send it with a messageTag"
                      : is(channel_type, "wechat") ? "it opens again when the member writes"
                                                   : "send a TEMPLATE";

    return bg_error_set(err, BG_ERR_WINDOW,
                        "outside the conversation window: the member last wrote %lld h ago; %s",
                        (long long)hours, way);
}

const json_t *window_channel_template(const json_t *info, bg_error_t *err)
{
    const json_t *t = json_object_get(info, "windowTemplate");

    if (t == NULL || json_is_null(t))
        return NULL;
    if (!json_is_object(t) || !is(json_string_value(json_object_get(t, "type")), "TEMPLATE")) {
        bg_error_set(err, BG_ERR_MISSING_PARAM,
                     "info.windowTemplate must be an object of type TEMPLATE");
        return NULL;
    }
    if (json_object_get(t, "fallback") != NULL) {
        bg_error_set(err, BG_ERR_MISSING_PARAM, "info.windowTemplate has a fallback");
        return NULL;
    }
    return request_check_response(t, "info.windowTemplate", err) == 0 ? t : NULL;
}

int window_refusal(bg_error_t *err, const char *channel_type, int64_t hours, const json_t *info)
{
    bg_error_t why;
    size_t n;

    window_error(err, channel_type, hours);
    bg_error_clear(&why);
    window_channel_template(info, &why);
    if (why.code != BG_OK && (n = strlen(err->msg)) < sizeof(err->msg))
        snprintf(err->msg + n, sizeof(err->msg) - n, " (the channel's %.*s)",
                 (int)(sizeof(err->msg) - n), why.msg);
    return -1;
}

int window_check(const char *channel_type, int64_t last_ms, int64_t now_ms, const json_t *response,
                 bg_error_t *err)
{
    int64_t hours = window_closed_hours(channel_type, last_ms, now_ms);

    if (hours < 0 || window_exempt(channel_type, response))
        return 0;
    return window_error(err, channel_type, hours);
}
