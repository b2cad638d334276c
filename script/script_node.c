/* script_node.c - the sandbox as core/'s node code runner (nodecode.h): the node engine and
 * tree validation run Lua through this table without knowing the sandbox. */
#include "script.h"

/* A nodecode_run_t is a script_run_t: core/ only hands it back. */
static script_run_t *as_script(nodecode_run_t *run)
{
    return (script_run_t *)run;
}

static const script_run_t *as_script_const(const nodecode_run_t *run)
{
    return (const script_run_t *)run;
}

static int code_compiles(const char *code, size_t len, const char *name, bg_error_t *err)
{
    script_t *s = script_compile(code, len, name, err);

    script_free(s);
    return s != NULL ? 0 : -1;
}

/* ctx: the worker's script_cache_t (its limits, its compiled code), or NULL: compiled now, run
 * with the default limits and no time limit. */
static nodecode_run_t *code_start(void *ctx, const char *name, const char *code, size_t len,
                                  const json_t *member, const json_t *channel,
                                  const json_t *agenda_meta, bg_error_t *err)
{
    script_limits_t limits = {SCRIPT_MAX_INSTRUCTIONS_DEFAULT, SCRIPT_MAX_MEMORY_KB_DEFAULT, 0,
                              NULL};
    script_cache_t *cache = ctx;
    script_t *own = NULL;
    const script_t *s;
    script_run_t *run;

    if (cache != NULL) {
        limits = script_cache_limits(cache);
        s = script_cache_get(cache, name, code, err);
    } else {
        s = own = script_compile(code, len, name, err);
    }
    if (s == NULL)
        return NULL;
    run = script_run_new(s, limits, member, channel, agenda_meta);
    script_free(own);
    if (run == NULL)
        bg_error_set(err, BG_ERR_UNAVAILABLE, "out of memory");
    return (nodecode_run_t *)run;
}

static nodecode_status_t code_resume(nodecode_run_t *run, bg_error_t *err)
{
    switch (script_run_resume(as_script(run), err)) {
    case SCRIPT_DONE:
        return NODECODE_DONE;
    case SCRIPT_NEED_HTTP:
        return NODECODE_NEED_HTTP;
    case SCRIPT_FAILED:
        break;
    }
    return NODECODE_FAILED;
}

static const json_t *code_http(const nodecode_run_t *run)
{
    return script_run_http(as_script_const(run));
}

static void code_http_done(nodecode_run_t *run, long status, const char *body, size_t body_len,
                           const char *content_type, const char *error)
{
    script_run_http_done(as_script(run), status, body, body_len, content_type, error);
}

static json_t *code_result(const nodecode_run_t *run)
{
    return script_run_result(as_script_const(run));
}

static const json_t *code_member_ops(const nodecode_run_t *run)
{
    return script_run_member_ops(as_script_const(run));
}

static void code_free(nodecode_run_t *run)
{
    script_run_free(as_script(run));
}

const nodecode_t script_nodecode = {
    .compiles = code_compiles,
    .start = code_start,
    .resume = code_resume,
    .http = code_http,
    .http_done = code_http_done,
    .result = code_result,
    .member_ops = code_member_ops,
    .free = code_free,
};
