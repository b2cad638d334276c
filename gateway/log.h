/* log.h - JSON lines on stderr, one write(2) per line so that lines of different threads never
 * interleave. Callers never pass a secret: tokens, passwords and channel info stay out. */
#ifndef BOTGATE_GATEWAY_LOG_H
#define BOTGATE_GATEWAY_LOG_H

#include <jansson.h>

typedef enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level_t;

void log_set_level(log_level_t level);
/* Set once at start (log_set_level), read on every request: a comparison, not a call. */
extern log_level_t log_level_now;
#define log_enabled(level) ((level) <= log_level_now)
/* Parses "error", "warn", "info", "debug"; -1 when unknown. */
int log_parse_level(const char *s);

void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes fields (an object, stolen) as one line, adding "ts" and "level". */
void log_fields(log_level_t level, json_t *fields);
/* The same with the fields already written as JSON text: the members of an object, without
 * its braces (len bytes, valid UTF-8). */
void log_fields_text(log_level_t level, const char *fields, size_t len);

#endif
