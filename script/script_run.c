/* script_run.c - the three caps of a run: its allocator (memory), the count hook
 * (instructions and the clock) and the charges of library calls whose C loops run no hook. */
#include "script_run.h"

#include <lauxlib.h>

#include <stdlib.h>

/* Work a C function does without running VM instructions is charged to the instruction cap
 * through what it allocates: one instruction per this many bytes (a loop that copies a large
 * string a million times is stopped like a loop of a million instructions). */
#define ALLOC_BYTES_PER_INSTRUCTION 64
/* A single library call may be charged at most this many units per ms of the time limit, so
 * that no call the hook cannot interrupt runs past the limit: 10 ns a unit, more than any
 * charged unit costs (bench/README.md); the clock is read again when the call returns. */
#define UNITS_PER_MS 100000
/* An allocation at least this large reads the clock (string building in C counts no
 * instruction between two hooks). */
#define CLOCK_ALLOC_BYTES 4096

int script_time_over(script_run_t *run)
{
    if (run->clock_us != NULL && run->resumed_at != 0 &&
        run->used_us + (run->clock_us() - run->resumed_at) > run->max_us)
        run->over_time = 1;
    return run->over_time;
}

/* A cap is passed: the hook raises at the next instruction and at every one after, so that no
 * pcall can keep the script alive (the chunk's own level is never protected). */
static void arm_hook(script_run_t *run)
{
    if (run->co != NULL)
        lua_sethook(run->co, script_count_hook, LUA_MASKCOUNT, 1);
}

void *script_cap_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    script_run_t *run = ud;
    size_t old = ptr != NULL ? osize : 0;

    if (nsize == 0) {
        free(ptr);
        run->mem_used -= old;
        return NULL;
    }
    if (nsize > old && nsize - old > run->mem_cap - run->mem_used) {
        run->over_memory = 1;
        arm_hook(run);
        return NULL;
    }
    if (nsize > old) {
        run->instructions += (long)((nsize - old) / ALLOC_BYTES_PER_INSTRUCTION);
        if (run->instructions > run->max_instructions)
            run->over_instructions = 1;
        if (run->over_instructions || (nsize - old >= CLOCK_ALLOC_BYTES && script_time_over(run))) {
            arm_hook(run);
            return NULL;
        }
    }
    ptr = realloc(ptr, nsize);
    if (ptr != NULL)
        run->mem_used = run->mem_used - old + nsize;
    return ptr;
}

/* Pushes what the cap that was passed says. */
static void push_over(lua_State *L, const script_run_t *run)
{
    if (run->over_memory)
        lua_pushfstring(L, "memory limit exceeded (%I KiB)", (lua_Integer)run->mem_limit_kb);
    else if (run->over_instructions)
        lua_pushfstring(L, "instruction limit exceeded (%I)", (lua_Integer)run->max_instructions);
    else
        lua_pushfstring(L, "time limit exceeded (%I ms)", (lua_Integer)(run->max_us / 1000));
}

void script_count_hook(lua_State *L, lua_Debug *ar)
{
    script_run_t *run = script_run_of(L);

    run->instructions += SCRIPT_HOOK_PERIOD;
    if (run->instructions > run->max_instructions)
        run->over_instructions = 1;
    if (!run->over_instructions && !run->over_memory && !script_time_over(run))
        return;
    lua_sethook(L, script_count_hook, LUA_MASKCOUNT, 1);
    lua_getinfo(L, "Sl", ar); /* the running function: luaL_where does not see it here */
    lua_pushfstring(L, "%s:%d: ", ar->short_src, ar->currentline);
    push_over(L, run);
    lua_concat(L, 2);
    lua_error(L);
}

void script_charge(lua_State *L, double units)
{
    script_run_t *run = script_run_of(L);

    if (units > (double)(run->max_instructions - run->instructions))
        run->over_instructions = 1;
    else
        run->instructions += (long)units;
    if (run->clock_us != NULL && units > (double)run->max_us / 1000 * UNITS_PER_MS)
        run->over_time = 1;
    if (!run->over_instructions && !run->over_memory && !script_time_over(run))
        return;
    lua_sethook(L, script_count_hook, LUA_MASKCOUNT, 1);
    luaL_where(L, 1);
    push_over(L, run);
    lua_concat(L, 2);
    lua_error(L);
}

double script_budget(lua_State *L)
{
    const script_run_t *run = script_run_of(L);
    double left = (double)(run->max_instructions - run->instructions);

    if (run->clock_us != NULL && left > (double)run->max_us / 1000 * UNITS_PER_MS)
        left = (double)run->max_us / 1000 * UNITS_PER_MS;
    return left;
}

size_t script_mem_limit(lua_State *L)
{
    return script_run_of(L)->mem_limit_kb * 1024;
}
