/* Fault words: which misbehaviour a recipient id or message text asks the simulator for. */
#include "sim.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Order matters: tests rely on "first word found wins", e.g. "invalid-timeout" is invalid. */
static const struct {
    const char *word;
    sim_fault_kind_t kind;
} sim_fault_words[] = {
    {"invalid", SIM_FAULT_INVALID},     {"badtoken", SIM_FAULT_BADTOKEN},
    {"fail5xx", SIM_FAULT_FAIL5XX},     {"ratelimit", SIM_FAULT_RATELIMIT},
    {"timeout", SIM_FAULT_TIMEOUT},     {"garbage", SIM_FAULT_GARBAGE},
    {"truncated", SIM_FAULT_TRUNCATED}, {"reset", SIM_FAULT_RESET},
    {"slow", SIM_FAULT_SLOW},
};

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
            const char *hit = strstr(s, sim_fault_words[w].word);
            if (hit == NULL)
                continue;
            f->kind = sim_fault_words[w].kind;
            if (f->kind == SIM_FAULT_RATELIMIT && strncmp(hit + 9, "613", 3) == 0) {
                f->ratelimit_613 = 1;
                snprintf(f->word, sizeof(f->word), "ratelimit613");
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
        r->retry_after = NULL;
        break;
    }
    case SIM_FAULT_RESET:
        r->action = SIM_ACT_RESET;
        break;
    case SIM_FAULT_SLOW:
        r->delay_ms += f->slow_ms;
        break;
    default:
        break;
    }
}
