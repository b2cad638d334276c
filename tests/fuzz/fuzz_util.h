/* fuzz_util.h - what every fuzz target shares: invariant checks that abort (so that libFuzzer
 * keeps the input as a crash artifact) and a UTF-8 validator written apart from the one under
 * test (core/error.c), so that a bug there cannot hide itself. */
#ifndef BOTGATE_FUZZ_UTIL_H
#define BOTGATE_FUZZ_UTIL_H

#include "core/error.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NOW 1700000000000LL /* ms; the clock the pure modules are given */

/* Aborts with the condition and a printf-formatted note when cond is false. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "\nINVARIANT FAILED at %s:%d: %s\n  ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* 1 when s[0..n) is UTF-8 as RFC 3629 defines it: shortest forms only, no surrogates, nothing
 * above U+10FFFF. Decodes each code point and checks its range, unlike core/error.c, which
 * checks byte ranges. */
static inline int fuzz_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;

    while (p < end) {
        unsigned c = *p++, cp, need, min;
        if (c < 0x80)
            continue;
        if ((c & 0xE0) == 0xC0)
            need = 1, min = 0x80, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0)
            need = 2, min = 0x800, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0)
            need = 3, min = 0x10000, cp = c & 0x07;
        else
            return 0;
        if ((size_t)(end - p) < need)
            return 0;
        for (unsigned i = 0; i < need; i++, p++) {
            if ((*p & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (*p & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    }
    return 1;
}

static inline int fuzz_str_valid(const char *s)
{
    return s != NULL && fuzz_utf8_valid(s, strlen(s));
}

/* A fixed buffer holds a NUL within its size and valid UTF-8 before it. */
static inline int fuzz_buf_ok(const char *buf, size_t size)
{
    const char *nul = memchr(buf, '\0', size);

    return nul != NULL && fuzz_utf8_valid(buf, (size_t)(nul - buf));
}

/* A malloc'd NUL-terminated copy of data[0..n), so that ASan sees reads past the end. */
static inline char *fuzz_strndup(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);

    if (s == NULL)
        abort();
    if (n > 0)
        memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

/* v must survive json_dumps / json_loads unchanged: what goes to Redis or to a client. */
static inline void fuzz_json_roundtrip(const json_t *v, const char *what)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    json_error_t jerr;
    json_t *back;

    FUZZ_CHECK(text != NULL, "%s: json_dumps failed", what);
    back = json_loads(text, JSON_DECODE_ANY, &jerr);
    FUZZ_CHECK(back != NULL, "%s: its dump does not load again: %s in %.200s", what, jerr.text,
               text);
    FUZZ_CHECK(json_equal(back, v), "%s: changed by a dump and load: %.200s", what, text);
    json_decref(back);
    free(text);
}

/* A filled bg_error_t: a known code, a message that is valid UTF-8 and a valid JSON string,
 * and failure answers that always carry "err" and "error". */
static inline void fuzz_check_error(const bg_error_t *err, const char *what)
{
    json_t *o, *s;

    /* interface.md's codes and botgate's extensions (contract.md 5): 100 and up */
    FUZZ_CHECK(err->code == BG_ERR_UNAUTHORIZED || err->code == BG_ERR_INTERNAL ||
                   (err->code >= BG_ERR_PHONE_INVALID && err->code < 200),
               "%s: err_code %d", what, err->code);
    FUZZ_CHECK(err->http_status == 500 || (err->http_status == 413 && err->code == BG_ERR_LIMIT),
               "%s: http_status %d", what, err->http_status);
    FUZZ_CHECK(fuzz_buf_ok(err->msg, sizeof(err->msg)), "%s: message not valid UTF-8: %.*s", what,
               (int)sizeof(err->msg), err->msg);
    FUZZ_CHECK(err->msg[0] != '\0', "%s: empty message", what);
    s = json_string(err->msg);
    FUZZ_CHECK(s != NULL, "%s: json_string refuses the message %s", what, err->msg);
    json_decref(s);
    o = bg_error_to_json(err);
    FUZZ_CHECK(json_is_string(json_object_get(o, "err")), "%s: answer without err", what);
    FUZZ_CHECK(json_is_string(json_object_get(o, "error")), "%s: answer without error", what);
    FUZZ_CHECK(json_integer_value(json_object_get(o, "ok")) == 0, "%s: answer ok is not 0", what);
    FUZZ_CHECK(err->code <= 0 ||
                   json_integer_value(json_object_get(o, "err_code")) == (json_int_t)err->code,
               "%s: answer err_code", what);
    json_decref(o);
    o = bg_error_element_json(err);
    FUZZ_CHECK(json_is_string(json_object_get(o, "err")), "%s: element without err", what);
    json_decref(o);
}

#endif
