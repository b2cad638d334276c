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
    bg_utf8_trim(err->msg);
    return -1;
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
