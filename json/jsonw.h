/* jsonw.h - writing JSON text straight into a growing buffer. The answer of sendResponses is
 * written this way: building it as jansson objects and dumping them cost more than all of
 * botgate's own work on the request. Strings must be valid UTF-8 (everything botgate writes
 * comes from jansson-checked input or is its own ASCII). */
#ifndef BOTGATE_JSON_JSONW_H
#define BOTGATE_JSON_JSONW_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Owned by its user; jw_free() releases the buffer. failed is set on out of memory: the text
 * is then incomplete and must not be used. */
typedef struct jsonw {
    char *buf;
    size_t len, cap;
    int failed;
} jsonw_t;

void jw_init(jsonw_t *w);
/* As jw_init, with room for about cap bytes from the start: a text whose size is known
 * roughly is written without growing, and holds no more memory than it needs. */
void jw_init_size(jsonw_t *w, size_t cap);
void jw_free(jsonw_t *w);
/* The text, NUL-terminated, handed over to the caller (free()); NULL when failed. */
char *jw_steal(jsonw_t *w, size_t *len);

void jw_raw(jsonw_t *w, const char *s, size_t n);
/* A literal piece of JSON syntax. Inline: the length of a literal is then counted when
 * compiling, not at every call (hundreds per request). */
static inline void jw_lit(jsonw_t *w, const char *s)
{
    jw_raw(w, s, strlen(s));
}
void jw_str(jsonw_t *w, const char *s); /* a string, quoted and escaped; NULL: null */
void jw_int(jsonw_t *w, long long v);
void jw_real(jsonw_t *w, double d);        /* a real as jansson writes it */
void jw_json(jsonw_t *w, const json_t *v); /* any jansson value, compact */
/* Any jansson value as compact text, the same text json_dumps(v, JSON_COMPACT |
 * JSON_ENCODE_ANY) gives, in one call: a malloc'd string, NULL on failure. */
char *jw_dump(const json_t *v, size_t *len);
/* An address: a number when all digits, at most 15 of them and no leading zero (so that it
 * survives a double), else a string; NULL: null. Same rule as result_address(). */
void jw_addr(jsonw_t *w, const char *addr);

#endif
