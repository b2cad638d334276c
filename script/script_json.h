/* script_json.h - private to the sandbox: JSON values in and out of a run's Lua state
 * (script_json.c). */
#ifndef BOTGATE_SCRIPT_SCRIPT_JSON_H
#define BOTGATE_SCRIPT_SCRIPT_JSON_H

#include <jansson.h>
#include <lua.h>
#include <stddef.h>

/* Text to push in a protected call (script_push_text_cf). */
typedef struct script_text {
    const char *s;
    size_t len;
} script_text_t;

/* Makes the metatable that marks a table as a JSON array in L, whose run remembers it; once,
 * while the run is set up. */
void script_json_init(lua_State *L);

/* Pushes v as a Lua value (objects and arrays as tables, null as json.null); raises past the
 * nesting limit or out of memory. */
void script_push_json(lua_State *L, const json_t *v);

/* The value at idx as JSON (new reference), or a Lua error "what: why" (a value with no JSON
 * form, nesting or size past what the run's memory cap allows). */
json_t *script_to_json(lua_State *L, int idx, const char *what);

/* Calls f(arg) protected: 0 with its one result pushed, else the error object pushed. What
 * holds C memory must not be left behind by a raise. */
int script_call_protected(lua_State *L, lua_CFunction f, const void *arg);

/* For script_call_protected: pushes the json_t, or the script_text_t, given as its argument. */
int script_push_json_cf(lua_State *L);
int script_push_text_cf(lua_State *L);

/* The json module: encode, decode, array, null. */
int script_open_json(lua_State *L);

#endif
