/* script_run.h - private to the sandbox: the state of one run, which every file of it reads
 * through the allocator's user data, and the three caps every file charges (script_run.c). */
#ifndef BOTGATE_SCRIPT_SCRIPT_RUN_H
#define BOTGATE_SCRIPT_SCRIPT_RUN_H

#include "script.h"

#include <lua.h>
#include <stddef.h>
#include <stdint.h>

#define SCRIPT_HOOK_PERIOD 250 /* instructions between two calls of the count hook */

/* Owned by the caller (script_run_free). */
struct script_run {
    lua_State *L; /* the run's own state; NULL once closed */
    lua_State *co;
    size_t mem_used, mem_cap; /* bytes; mem_cap SIZE_MAX once the script has ended */
    size_t mem_limit_kb;      /* the cap as configured */
    size_t mem_base;          /* bytes of the state once set up */
    long instructions, max_instructions;
    int64_t (*clock_us)(void); /* NULL: no time limit */
    int64_t max_us, used_us;   /* time limit; time spent in resumes before this one */
    int64_t resumed_at;        /* clock when the running resume started; 0 outside one */
    int over_memory, over_instructions, over_time;
    int done;             /* ended: err says how, or result and ops hold what it did */
    int self_ref;         /* the self table in the registry */
    const void *array_mt; /* ARRAY_MT, compared by address */

    const script_t *script; /* during script_run_new only */
    /* self's fields as given (references), made into Lua tables on first use */
    json_t *original; /* the member, also the base of the member ops */
    json_t *channel, *agenda_meta;
    json_t *http; /* the call asked for, until http_done */
    int http_calls;
    struct { /* the answer, until the coroutine has taken it */
        int ready;
        long status;
        char *body, *content_type, *error;
        size_t body_len;
    } answer;

    json_t *result; /* after SCRIPT_DONE */
    json_t *ops;
    bg_error_t err; /* a failure found in a protected call */
};

/* The run L belongs to (the allocator's user data). */
static inline script_run_t *script_run_of(lua_State *L)
{
    void *ud;

    lua_getallocf(L, &ud);
    return ud;
}

/* The allocator of a run's state (ud: the run): holds it to its memory cap, and charges what
 * it allocates to the instruction cap. */
void *script_cap_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

/* Counts instructions and reads the clock; past a cap, raises (and arms itself to raise on
 * every instruction from then on). */
void script_count_hook(lua_State *L, lua_Debug *ar);

/* 1 when the running resume has passed the time limit (over_time set). */
int script_time_over(script_run_t *run);

/* Charges units (instruction equivalents) of work a C function is about to do, and checks the
 * clock. Raises as the hook does, before the work, when the instruction cap or the time limit
 * would be passed (a single call is also refused when its charge alone is more than the time
 * limit allows); units 0 only checks the clock. */
void script_charge(lua_State *L, double units);

/* The most units a single charge may still take. */
double script_budget(lua_State *L);

/* Bytes of the run's memory cap as configured. */
size_t script_mem_limit(lua_State *L);

#endif
