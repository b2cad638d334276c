/* log.c - the process log. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static log_level_t current = LOG_INFO;
static const char *const names[] = {"error", "warn", "info", "debug"};

void log_set_level(log_level_t level)
{
    current = level;
}

int log_enabled(log_level_t level)
{
    return level <= current;
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

void log_fields(log_level_t level, json_t *fields)
{
    struct timespec ts;
    struct tm tm;
    char when[40];
    char *line;
    size_t n;

    if (!log_enabled(level)) {
        json_decref(fields);
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof(when) - n, ".%03ldZ", ts.tv_nsec / 1000000);
    /* ts and level first: put them in a new object, then the caller's fields. */
    json_t *o = json_object();
    json_object_set_new(o, "ts", json_string(when));
    json_object_set_new(o, "level", json_string(names[level]));
    json_object_update(o, fields);
    json_decref(fields);
    n = json_dumpb(o, NULL, 0, JSON_COMPACT);
    line = malloc(n + 2);
    if (line != NULL) {
        json_dumpb(o, line, n, JSON_COMPACT);
        line[n] = '\0';
        write_line(line);
        free(line);
    }
    json_decref(o);
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
