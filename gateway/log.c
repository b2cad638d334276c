/* log.c - the process log. */
#include "log.h"

#include "../core/clock.h"
#include "../json/jsonw.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

log_level_t log_level_now = LOG_INFO;
static const char *const names[] = {"error", "warn", "info", "debug"};

void log_set_level(log_level_t level)
{
    log_level_now = level;
}

int log_parse_level(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

static void write_line(char *line)
{
    size_t n = strlen(line);
    ssize_t w;

    line[n] = '\n';
    /* A short write to stderr is not worth a retry loop that could block. */
    w = write(STDERR_FILENO, line, n + 1);
    (void)w;
}

/* "2026-11-22T09:40:12.345Z": the part up to the seconds is made once a second per thread. */
static void timestamp(char *out, size_t size)
{
    static _Thread_local time_t shown = (time_t)-1;
    static _Thread_local char second[32];
    int64_t ms = clock_wall_ms();
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    size_t n;

    if (sec != shown) {
        gmtime_r(&sec, &tm);
        if (strftime(second, sizeof(second), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
            second[0] = '\0';
        shown = sec;
    }
    /* the milliseconds by hand: this runs for every request line at the default level */
    n = strnlen(second, size > 6 ? size - 6 : 0);
    memcpy(out, second, n);
    ms %= 1000;
    out[n] = '.';
    out[n + 1] = (char)('0' + ms / 100);
    out[n + 2] = (char)('0' + ms / 10 % 10);
    out[n + 3] = (char)('0' + ms % 10);
    memcpy(out + n + 4, "Z", 2);
}

static void line_put(char *line, size_t *at, const char *s, size_t n)
{
    memcpy(line + *at, s, n);
    *at += n;
}

void log_fields_text(log_level_t level, const char *fields, size_t len)
{
    static const char head[] = "{\"ts\":\"";
    char when[48], *line;
    size_t n, w;

    if (!log_enabled(level))
        return;
    timestamp(when, sizeof(when));
    /* {"ts":"<when>","level":"<name>",<fields>}\n */
    n = sizeof(head) - 1 + strlen(when) + 11 + strlen(names[level]) + 2 + len + 2;
    if ((line = malloc(n + 1)) == NULL)
        return;
    w = 0;
    line_put(line, &w, head, sizeof(head) - 1);
    line_put(line, &w, when, strlen(when));
    line_put(line, &w, "\",\"level\":\"", 11);
    line_put(line, &w, names[level], strlen(names[level]));
    line_put(line, &w, len > 0 ? "\"," : "\"", len > 0 ? 2 : 1);
    memcpy(line + w, fields, len);
    w += len;
    line[w++] = '}';
    line[w] = '\0';
    write_line(line);
    free(line);
}

void log_fields(log_level_t level, json_t *fields)
{
    char *text;
    size_t n = 0;

    if (!log_enabled(level) || (text = jw_dump(fields, &n)) == NULL) {
        json_decref(fields);
        return;
    }
    /* the members without the object's braces */
    if (n >= 2)
        log_fields_text(level, text + 1, n - 2);
    free(text);
    json_decref(fields);
}

void log_msg(log_level_t level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    json_t *o;

    if (!log_enabled(level))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    o = json_object();
    /* A message may be cut inside a UTF-8 sequence; stringn_nocheck would then write invalid
     * JSON, so use the checked form and fall back. */
    json_t *m = json_string(msg);
    json_object_set_new(o, "msg", m ? m : json_string("(message not UTF-8)"));
    log_fields(level, o);
}
