/* jscan.h - picking a few top-level string fields out of a JSON object without building it:
 * sendResponses needs a member's _id and externalId on every request, and parsing the whole
 * member record with jansson cost more than the rest of botgate's work on it. */
#ifndef BOTGATE_JSON_JSCAN_H
#define BOTGATE_JSON_JSCAN_H

#include <stddef.h>

/* The most keys one scan looks for (numbers' bits name 32). */
#define JSCAN_MAX_KEYS 32

/* Scans the JSON object in s (n bytes), checking its syntax throughout, and for each of the
 * nkeys keys sets out[i] to a malloc'd copy of its string value (the last one when a key is
 * repeated), or NULL when the key is absent or its value is not a string. Returns 0, or -1
 * when s is not one well-formed JSON object or nkeys is over JSCAN_MAX_KEYS (then every out[i]
 * is NULL). */
int jscan_strings(const char *s, size_t n, const char *const *keys, size_t nkeys, char **out);

/* As jscan_strings, and for the keys whose bit is set in numbers (bit i: keys[i], i < 32) a
 * number value is copied too, as its text ("1764400000000", "-1.5e3"): the member's
 * lastInboundAt is one. The caller tells a number from a string by its text. */
int jscan_scalars(const char *s, size_t n, const char *const *keys, size_t nkeys, char **out,
                  unsigned numbers);

#endif
