/* script_lib.h - private to the sandbox: the library functions of node code whose C loops run
 * no hook, wrapped so that their work counts (script_lib.c), and what they need of a run
 * (script.c). */
#ifndef BOTGATE_CORE_SCRIPT_LIB_H
#define BOTGATE_CORE_SCRIPT_LIB_H

#include <lua.h>
#include <stddef.h>

/* Charges units (instruction equivalents) of work a C function is about to do, and checks the
 * clock. Raises as the hook does, before the work, when the instruction cap or the time limit
 * would be passed (a single call is also refused when its charge alone is more than the time
 * limit allows); units 0 only checks the clock. */
void script_charge(lua_State *L, double units);

/* The most units a single charge may still take. */
double script_budget(lua_State *L);

/* Bytes of the run's memory cap as configured. */
size_t script_mem_limit(lua_State *L);

/* Wraps the base and string functions of L (the globals and the string table in place) and
 * string's arithmetic metamethods. */
void script_lib_guard(lua_State *L);

/* The lazily made libraries, with their guards. */
int script_open_table(lua_State *L);
int script_open_math(lua_State *L);
int script_open_utf8(lua_State *L);

#endif
