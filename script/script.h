/* script.h - node code: sandboxed Lua 5.4 run as a pure state machine (contract.md 10).
 *
 * A script is compiled once (script_compile, or through a worker's script_cache_t) into
 * bytecode; every run loads it into a lua_State of its own, so that nothing is shared between
 * requests, and runs it as a coroutine. The caller drives the run: script_run_resume() runs
 * until the script ends, fails, or calls http.request{}, which yields; the caller makes the
 * call on its event loop, reports it with script_run_http_done() and resumes.
 *
 * The sandbox has the safe base functions (no load, dofile, loadfile, require, collectgarbage,
 * print, warn), string (no string.dump; the string metatable is protected), table, math,
 * utf8, json and http; no io, os, package, coroutine, debug; tostring shows no address. A run
 * executes at most limits.max_instructions VM instructions (a count hook; the work of library
 * calls whose C loops run no hook is charged from their input, script_lib.c), computes for at
 * most limits.max_ms (the hook reads limits.clock_us; waits for http.request not counted) and
 * holds at most limits.max_memory_kb KiB (the allocator, the state's own tables included); past
 * any, or on a Lua error, it fails with err_code 126 and the script's message ("name:line:
 * text"), and none of its member changes are kept. A limit cannot be caught with pcall. */
#ifndef BOTGATE_SCRIPT_SCRIPT_H
#define BOTGATE_SCRIPT_SCRIPT_H

#include "../core/error.h"
#include "../core/nodecode.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SCRIPT_MAX_INSTRUCTIONS_DEFAULT 1000000
#define SCRIPT_MAX_MEMORY_KB_DEFAULT    1024
#define SCRIPT_MAX_MS_DEFAULT           50
#define SCRIPT_CODE_MAX                 (64 * 1024) /* bytes of source */
#define SCRIPT_NAME_MAX                 96          /* bytes of a chunk name */
#define SCRIPT_HTTP_MAX                 16          /* http.request calls in one run */
#define SCRIPT_HTTP_TIMEOUT_MS          3000        /* an http.request without timeoutMs */
#define SCRIPT_HTTP_TIMEOUT_MAX         30000
#define SCRIPT_HTTP_HEADERS_MAX         5                  /* headers an http.request may set */
#define SCRIPT_CACHE_BYTES              (16 * 1024 * 1024) /* code and bytecode in a cache */

typedef struct script_limits {
    long max_instructions;
    long max_memory_kb;
    long max_ms;               /* of the run's own work (not its http.request waits); 0: none */
    int64_t (*clock_us)(void); /* monotonic microseconds, read by the hook; NULL: no time limit */
} script_limits_t;

/* Compiled code: its bytecode with line information. Owned by whoever compiled it
 * (script_free), or by the cache that hands it out. */
typedef struct script script_t;

/* Compiles code (at most SCRIPT_CODE_MAX bytes, text only) as a chunk called name (what
 * error messages start with: "name:3: ..."). NULL with err (126, "name:3: <syntax error>")
 * when it does not compile. */
script_t *script_compile(const char *code, size_t len, const char *name, bg_error_t *err);
void script_free(script_t *s);

/* A worker's compiled scripts, keyed by name and code: a tree import that changes a script's
 * code compiles the new code on its first run; entries of code no tree runs any more are
 * dropped when the cache is full, at max_entries or SCRIPT_CACHE_BYTES (all of them: it is
 * refilled at once by what runs). Owned by the worker (script_cache_free); only its thread
 * uses it. */
typedef struct script_cache script_cache_t;

script_cache_t *script_cache_new(script_limits_t limits, size_t max_entries);
void script_cache_free(script_cache_t *c);
script_limits_t script_cache_limits(const script_cache_t *c);

/* The compiled script for name and code (compiled now when new). Borrowed: valid until the
 * next script_cache_get(). NULL with err when the code does not compile (not cached: a broken
 * script fails each time, cheaply, because tree import refuses it in the first place). */
const script_t *script_cache_get(script_cache_t *c, const char *name, const char *code,
                                 bg_error_t *err);

typedef struct script_run script_run_t;

typedef enum {
    SCRIPT_DONE,      /* the script returned: script_run_result(), script_run_member_ops() */
    SCRIPT_NEED_HTTP, /* script_run_http() describes the call to make */
    SCRIPT_FAILED,    /* err says why (126) */
} script_status_t;

/* A run of s with self.member, self.channel (its info is dropped) and self.agendaMeta (NULL
 * gives an empty table), each made into a Lua table of the run's own state when the script
 * first reads it. The run keeps references to the three, which must not change while it
 * lasts (member is also the base of the member ops); it does not keep s. NULL only when out of
 * memory. */
script_run_t *script_run_new(const script_t *s, script_limits_t limits, const json_t *member,
                             const json_t *channel, const json_t *agenda_meta);
void script_run_free(script_run_t *run);

/* Starts or continues the run. After SCRIPT_NEED_HTTP, script_run_http_done() must come
 * before the next resume. */
script_status_t script_run_resume(script_run_t *run, bg_error_t *err);

/* The call asked for: {"url","method","headers":["Name: value",..],"body":text or null,
 * "timeoutMs":N}; url is http(s) but its address is not checked (the SSRF guard is the
 * caller's). Borrowed, valid until script_run_http_done(). */
const json_t *script_run_http(const script_run_t *run);

/* The answer: status 0 when none arrived (error then says why, never a secret); body and
 * content_type may be NULL. The script gets {status=, body=, json= (a JSON body decoded),
 * contentType=, error=}. Copied. */
void script_run_http_done(script_run_t *run, long status, const char *body, size_t body_len,
                          const char *content_type, const char *error);

/* After SCRIPT_DONE: the script's first return value as JSON (nil: JSON null). New
 * reference. */
json_t *script_run_result(const script_run_t *run);

/* After SCRIPT_DONE: the member changes as member.h "set" operations, already checked against
 * the member the run started with (member_apply_op succeeds on it for each, in order).
 * Borrowed. Only self.member.meta.<k>, .botMeta.tempData.<k>, .botMeta.subscribed,
 * .customLocale, .firstName and .lastName are read back; a change anywhere else is ignored. A
 * change that breaks the set rules (a firstName that is not a string, a meta key with a dot)
 * makes the resume answer SCRIPT_FAILED instead. */
const json_t *script_run_member_ops(const script_run_t *run);

/* VM instructions run so far (counted in steps of the hook's period). */
long script_run_instructions(const script_run_t *run);

/* The sandbox as the runner of core/'s node code (script_node.c): give it to the node engine
 * (node_run_set_code, with a script_cache_t or NULL as its ctx) and to tree_validate. */
extern const nodecode_t script_nodecode;

#endif
