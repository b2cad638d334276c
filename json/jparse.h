/* jparse.h - one JSON text to a jansson value, read from a buffer directly (json/jparse.c). */
#ifndef BOTGATE_JSON_JPARSE_H
#define BOTGATE_JSON_JPARSE_H

#include <jansson.h>
#include <stddef.h>

/* The JSON value in text[0..len), accepted and decoded exactly as jansson's json_loadb with
 * JSON_DECODE_ANY reads it (one value of any type, duplicate keys keep the last, UTF-8 checked,
 * at most 64 levels deep); NULL when it is not one or memory ran out. New reference. */
json_t *jparse_value(const char *text, size_t len);

/* jparse_value, and NULL when an object repeats a key (json_loadb's JSON_REJECT_DUPLICATES). */
json_t *jparse_value_unique(const char *text, size_t len);

#endif
