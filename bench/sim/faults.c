/* Fault words: which misbehaviour a recipient id or message text asks the simulator for. */
#include "sim.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Order matters: tests rely on "first word found wins", e.g. "invalid-timeout" is invalid.
 * "reset" inside "midreset" does not count as reset (sim_fault_search). */
static const struct {
    const char *word;
    sim_fault_kind_t kind;
} sim_fault_words[] = {
    {"invalid", SIM_FAULT_INVALID},     {"badtoken", SIM_FAULT_BADTOKEN},
    {"fail5xx", SIM_FAULT_FAIL5XX},     {"ratelimit", SIM_FAULT_RATELIMIT},
    {"timeout", SIM_FAULT_TIMEOUT},     {"garbage", SIM_FAULT_GARBAGE},
    {"truncated", SIM_FAULT_TRUNCATED}, {"reset", SIM_FAULT_RESET},
    {"midreset", SIM_FAULT_MIDRESET},   {"huge", SIM_FAULT_HUGE},
    {"slow", SIM_FAULT_SLOW},
};

#define SIM_HUGE_SIZE  ((size_t)50 * 1024 * 1024)
#define SIM_BLOCK_SIZE ((size_t)1024 * 1024)

/* huge is padded with this megabyte of spaces, referenced as often as needed: JSON allows
 * whitespace before a value, so the body stays the platform's valid answer. */
static char sim_spaces[SIM_BLOCK_SIZE];
static pthread_once_t sim_spaces_once = PTHREAD_ONCE_INIT;

static void sim_spaces_init(void)
{
    memset(sim_spaces, ' ', sizeof(sim_spaces));
}

/* The first occurrence of word in s; a "reset" that is the tail of "midreset" is skipped. */
static const char *sim_fault_search(const char *s, const char *word, sim_fault_kind_t kind)
{
    for (const char *p = strstr(s, word); p; p = strstr(p + 1, word)) {
        if (kind != SIM_FAULT_RESET || p - s < 3 || strncmp(p - 3, "mid", 3) != 0)
            return p;
    }
    return NULL;
}

/* slow counts only with digits after it, so that a name like "slowpoke" stays harmless. */
static int sim_fault_slow(const char *s, int *ms)
{
    for (const char *p = strstr(s, "slow"); p; p = strstr(p + 1, "slow")) {
        if (isdigit((unsigned char)p[4])) {
            long v = strtol(p + 4, NULL, 10);
            *ms = v > SIM_MAX_DELAY ? SIM_MAX_DELAY : (int)v;
            return 1;
        }
    }
    return 0;
}

/* "after<N>" or "date<N>" (N: up to 19 digits, 6 for a date) after "ratelimit": the
 * Retry-After to answer, N as given (the client must cope with any number) or an IMF-fixdate N
 * seconds from now. Sets the word too. */
static int sim_fault_retry_after(sim_fault_t *f, const char *s)
{
    size_t n, len; /* the digits; "after" or "date" and the digits */
    time_t at;
    struct tm tm;

    if (strncmp(s, "after", 5) == 0 && (n = strspn(s + 5, "0123456789")) > 0 && n < 20) {
        snprintf(f->retry_after, sizeof(f->retry_after), "%.*s", (int)n, s + 5);
        len = 5 + n;
    } else if (strncmp(s, "date", 4) == 0 && (n = strspn(s + 4, "0123456789")) > 0 && n < 7) {
        at = time(NULL) + strtol(s + 4, NULL, 10);
        if (gmtime_r(&at, &tm) == NULL ||
            strftime(f->retry_after, sizeof(f->retry_after), "%a, %d %b %Y %H:%M:%S GMT", &tm) == 0)
            return 0;
        len = 4 + n;
    } else {
        return 0;
    }
    snprintf(f->word, sizeof(f->word), "ratelimit%.*s", (int)len, s);
    return 1;
}

void sim_fault_find(sim_fault_t *f, const char *const *texts, size_t n)
{
    memset(f, 0, sizeof(*f));
    for (size_t w = 0; w < sizeof(sim_fault_words) / sizeof(sim_fault_words[0]); w++) {
        for (size_t i = 0; i < n; i++) {
            const char *s = texts[i];
            if (s == NULL)
                continue;
            if (sim_fault_words[w].kind == SIM_FAULT_SLOW) {
                if (!sim_fault_slow(s, &f->slow_ms))
                    continue;
                f->kind = SIM_FAULT_SLOW;
                snprintf(f->word, sizeof(f->word), "slow%d", f->slow_ms);
                return;
            }
            const char *hit = sim_fault_search(s, sim_fault_words[w].word, sim_fault_words[w].kind);
            if (hit == NULL)
                continue;
            f->kind = sim_fault_words[w].kind;
            if (f->kind == SIM_FAULT_RATELIMIT && strncmp(hit + 9, "613", 3) == 0) {
                f->ratelimit_613 = 1;
                snprintf(f->word, sizeof(f->word), "ratelimit613");
            } else if (f->kind == SIM_FAULT_RATELIMIT && sim_fault_retry_after(f, hit + 9)) {
                /* the word and retry_after are set */
            } else {
                snprintf(f->word, sizeof(f->word), "%s", sim_fault_words[w].word);
            }
            return;
        }
    }
}

int sim_fault_is_error(const sim_fault_t *f)
{
    return f->kind == SIM_FAULT_INVALID || f->kind == SIM_FAULT_BADTOKEN ||
           f->kind == SIM_FAULT_FAIL5XX || f->kind == SIM_FAULT_RATELIMIT;
}

/* The platform-independent faults, applied to whatever the platform handler answered. */
void sim_fault_apply(const sim_fault_t *f, sim_reply_t *r)
{
    switch (f->kind) {
    case SIM_FAULT_TIMEOUT:
        r->action = SIM_ACT_HOLD;
        break;
    case SIM_FAULT_GARBAGE:
        sim_reply_text(r, 200, "text/html", "<html>not json");
        break;
    case SIM_FAULT_TRUNCATED: {
        /* A complete HTTP answer whose JSON is cut: the client must fail at parsing, not I/O. */
        struct evbuffer *half = evbuffer_new();
        if (half != NULL && r->body != NULL)
            evbuffer_remove_buffer(r->body, half, evbuffer_get_length(r->body) / 2);
        if (r->body != NULL)
            evbuffer_free(r->body);
        r->body = half;
        r->status = 200;
        r->retry_after[0] = '\0';
        break;
    }
    case SIM_FAULT_RESET:
        r->action = SIM_ACT_RESET;
        break;
    case SIM_FAULT_MIDRESET:
        /* server.c sends the headers (Content-Length of the whole body) and half of it. */
        r->action = SIM_ACT_MIDRESET;
        r->status = 200;
        r->retry_after[0] = '\0';
        break;
    case SIM_FAULT_HUGE: {
        /* The platform's answer after 50 MiB minus its length of spaces; never in memory. */
        struct evbuffer *big = evbuffer_new();
        size_t len = r->body != NULL ? evbuffer_get_length(r->body) : 0;
        pthread_once(&sim_spaces_once, sim_spaces_init);
        if (big != NULL) {
            for (size_t left = len < SIM_HUGE_SIZE ? SIM_HUGE_SIZE - len : 0; left > 0;) {
                size_t n = left < SIM_BLOCK_SIZE ? left : SIM_BLOCK_SIZE;
                evbuffer_add_reference(big, sim_spaces, n, NULL, NULL);
                left -= n;
            }
            if (r->body != NULL)
                evbuffer_add_buffer(big, r->body);
        }
        if (r->body != NULL)
            evbuffer_free(r->body);
        r->body = big;
        r->status = 200;
        r->content_type = "application/json";
        r->retry_after[0] = '\0';
        break;
    }
    case SIM_FAULT_SLOW:
        r->delay_ms += f->slow_ms;
        break;
    case SIM_FAULT_RATELIMIT:
        /* the platform's refusal, as a 429 (WeChat's stay 200: it answers nothing else) */
        if (f->retry_after[0] != '\0') {
            if (r->status != 200)
                r->status = 429;
            snprintf(r->retry_after, sizeof(r->retry_after), "%s", f->retry_after);
        }
        break;
    default:
        break;
    }
}
