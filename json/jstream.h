/* jstream.h - checking one JSON text that comes in pieces, in bounded steps, and reading the
 * strings of one array of it without building the value: a broadcast's body of a million ids
 * (tens of MB) is checked between other work of the loop, not parsed whole at once. */
#ifndef BOTGATE_JSON_JSTREAM_H
#define BOTGATE_JSON_JSTREAM_H

#include <stddef.h>
#include <sys/types.h>

#define JSTREAM_DEPTH_MAX  64  /* as jparse: a value inside 64 containers is refused */
#define JSTREAM_STRING_MAX 512 /* bytes of an element handed over; longer ones have s NULL */

/* The array watched: the value of "recipients" -> "memberIds" or "recipientIds" in the top
 * object (the first one met); with JSTREAM_TOP_ARRAY the text itself (an array's text taken
 * from a checked body, read again). */
#define JSTREAM_TOP_ARRAY 1u

/* An element of the watched array (index from 0): a string's decoded bytes s (len of them,
 * NUL-terminated), or s NULL with len its length when it is longer than JSTREAM_STRING_MAX,
 * or s NULL and len 0 when the element is not a string (then called where it starts). A
 * string's call returning nonzero pauses jstream_feed right after the string. */
typedef int jstream_element_fn(void *arg, size_t index, const char *s, size_t len);

typedef struct jstream jstream_t;

jstream_t *jstream_new(unsigned flags, jstream_element_fn *fn, void *arg); /* NULL: no memory */
void jstream_free(jstream_t *s);

/* The next n bytes of the text. Returns the bytes taken: n, or fewer when an element's call
 * paused it; -1 once the text is not valid JSON (RFC 8259 and UTF-8, no \u0000, depth). */
ssize_t jstream_feed(jstream_t *s, const char *p, size_t n);

/* The text ended: 0 when it was one complete value, -1 when not (or it was refused before). */
int jstream_end(jstream_t *s);

/* What made it invalid ("invalid escape at byte 17"), "" when nothing did. */
const char *jstream_error(const jstream_t *s);

/* The first non-blank byte of the text: '{' for an object; 0 before it came. */
char jstream_top(const jstream_t *s);

/* The watched array, once it closed: its bytes [start, end) of the text ('[' to ']'), its
 * elements, and its key ("memberIds", "recipientIds"; "" with JSTREAM_TOP_ARRAY). -1 when the
 * text has none (or it has not closed yet). */
int jstream_array(const jstream_t *s, size_t *start, size_t *end, size_t *count, const char **key);

#endif
