/* script_lib.h - private to the sandbox: the library functions of node code whose C loops run
 * no hook, wrapped so that their work counts (script_lib.c; the charges: script_run.h). */
#ifndef BOTGATE_SCRIPT_SCRIPT_LIB_H
#define BOTGATE_SCRIPT_SCRIPT_LIB_H

#include <lua.h>

/* Wraps the base and string functions of L (the globals and the string table in place) and
 * string's arithmetic metamethods. */
void script_lib_guard(lua_State *L);

/* The lazily made libraries, with their guards. */
int script_open_table(lua_State *L);
int script_open_math(lua_State *L);
int script_open_utf8(lua_State *L);

#endif
