/* nodecode.h - node code as core/ sees it: the functions that run it, which script/ provides
 * (script_nodecode, the Lua sandbox), so that the node engine and tree validation run code
 * without knowing the sandbox (core/ is below script/). */
#ifndef BOTGATE_CORE_NODECODE_H
#define BOTGATE_CORE_NODECODE_H

#include "error.h"

#include <jansson.h>
#include <stddef.h>

/* One run of node code; the runner's own (free). */
typedef struct nodecode_run nodecode_run_t;

typedef enum {
    NODECODE_DONE,      /* it returned: result(), member_ops() */
    NODECODE_NEED_HTTP, /* http() describes the call to make */
    NODECODE_FAILED,    /* err says why (126) */
} nodecode_status_t;

/* The runner. Each function is as its script.h namesake says. ctx is the runner's (for
 * script/: the worker's script_cache_t, or NULL to compile each run's code anew with the
 * default limits). */
typedef struct nodecode {
    /* 0 when code compiles as a chunk called name, else -1 with err (126, "name:3: ..."). */
    int (*compiles)(const char *code, size_t len, const char *name, bg_error_t *err);
    /* A run of code called name on self.member, self.channel and self.agendaMeta (borrowed,
     * unchanged while it lasts); NULL with err when it does not compile (126) or memory ran
     * out (err_code 0 then). It has not started: resume() starts it. */
    nodecode_run_t *(*start)(void *ctx, const char *name, const char *code, size_t len,
                             const json_t *member, const json_t *channel, const json_t *agenda_meta,
                             bg_error_t *err);
    nodecode_status_t (*resume)(nodecode_run_t *run, bg_error_t *err);
    const json_t *(*http)(const nodecode_run_t *run);
    void (*http_done)(nodecode_run_t *run, long status, const char *body, size_t body_len,
                      const char *content_type, const char *error);
    json_t *(*result)(const nodecode_run_t *run);
    const json_t *(*member_ops)(const nodecode_run_t *run);
    void (*free)(nodecode_run_t *run);
} nodecode_t;

#endif
