/* error.c - building error values and their JSON forms. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int bg_error_set(bg_error_t *err, int code, const char *fmt, ...)
{
    va_list ap;

    err->code = code;
    err->http_status = 500;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    bg_utf8_sanitize(err->msg);
    return -1;
}

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlongs, no surrogates, at most
 * U+10FFFF), 0 when it is not one. */
static size_t utf8_valid_at(const unsigned char *p)
{
    unsigned char c = p[0];

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

void bg_utf8_sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;

    bg_utf8_trim(s); /* a sequence cut at the end goes; broken bytes elsewhere become '?' */
    while (*p) {
        size_t n = utf8_valid_at(p);
        if (n == 0) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}

void bg_utf8_trim(char *s)
{
    size_t n = strlen(s), start = n, need;
    unsigned char c;

    /* Find the lead byte of the last sequence and drop it if the sequence is cut short. */
    while (start > 0 && ((unsigned char)s[start - 1] & 0xC0) == 0x80 && n - start < 4)
        start--;
    if (start == 0)
        return;
    c = (unsigned char)s[start - 1];
    if (c < 0x80)
        return;
    need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (n - (start - 1) < need)
        s[start - 1] = '\0';
}

void bg_error_clear(bg_error_t *err)
{
    err->code = BG_OK;
    err->http_status = 200;
    err->msg[0] = '\0';
}

json_t *bg_error_to_json(const bg_error_t *err)
{
    json_t *o = json_object();

    json_object_set_new(o, "ok", json_integer(0));
    if (err->code > 0)
        json_object_set_new(o, "err_code", json_integer(err->code));
    json_object_set_new(o, "err", json_string(err->msg));
    json_object_set_new(o, "error", json_string(err->msg));
    return o;
}

json_t *bg_error_element_json(const bg_error_t *err)
{
    json_t *o = json_object();

    json_object_set_new(o, "err_code", json_integer(err->code > 0 ? err->code : BG_ERR_PLATFORM));
    json_object_set_new(o, "err", json_string(err->msg));
    return o;
}
