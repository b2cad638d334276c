/* script_json.c - JSON in and out of a run: self.* and http answers made into Lua tables,
 * tables made into JSON (bounded by the run's memory cap), and the json module of node code. */
#include "script_json.h"

#include "script_run.h"

#include <lauxlib.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_DEPTH 64 /* nesting of tables converted to or from JSON */
/* Converting a table to JSON (its text, or json_t outside the memory cap): at most this many
 * values and string bytes per KiB of the memory cap, so that a table that refers to the same
 * subtable or string many times cannot expand without bound. */
#define JSON_VALUES_PER_KB 128
#define JSON_BYTES_PER_KB  4096

/* The registry key of the metatable that marks a table as a JSON array (json.decode, and
 * arrays in self.*): an empty one encodes as [] rather than {}. */
static const char ARRAY_MT[] = "botgate.array";
/* json.null: a light userdata whose address is unique. */
static const char LUA_JSON_NULL = 0;

static void push_array_mt(lua_State *L)
{
    luaL_getmetatable(L, ARRAY_MT);
    lua_setmetatable(L, -2);
}

static void push_json(lua_State *L, const json_t *v, int depth)
{
    const char *key;
    const json_t *item;
    size_t i;

    if (depth > JSON_DEPTH)
        luaL_error(L, "json: nested deeper than %d", JSON_DEPTH);
    luaL_checkstack(L, 3, "json");
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        lua_createtable(L, 0, (int)json_object_size(v));
        json_object_foreach((json_t *)v, key, item) {
            if (json_is_null(item)) /* a missing key reads as nil too */
                continue;
            push_json(L, item, depth + 1);
            lua_setfield(L, -2, key);
        }
        return;
    case JSON_ARRAY:
        lua_createtable(L, (int)json_array_size(v), 0);
        json_array_foreach(v, i, item) {
            push_json(L, item, depth + 1);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        push_array_mt(L);
        return;
    case JSON_STRING:
        lua_pushlstring(L, json_string_value(v), json_string_length(v));
        return;
    case JSON_INTEGER:
        lua_pushinteger(L, (lua_Integer)json_integer_value(v));
        return;
    case JSON_REAL:
        lua_pushnumber(L, json_real_value(v));
        return;
    case JSON_TRUE:
        lua_pushboolean(L, 1);
        return;
    case JSON_FALSE:
        lua_pushboolean(L, 0);
        return;
    case JSON_NULL:
        lua_pushlightuserdata(L, (void *)&LUA_JSON_NULL);
        return;
    }
}

/* A table is an array when it carries ARRAY_MT, or when its keys are exactly 1..n (n > 0).
 * Allocates nothing, so it cannot raise. */
static int table_is_array(lua_State *L, int idx, size_t *n)
{
    script_run_t *run = script_run_of(L);
    lua_Integer count = 0;

    *n = (size_t)lua_rawlen(L, idx);
    if (lua_getmetatable(L, idx)) {
        int marked = lua_topointer(L, -1) == run->array_mt;
        lua_pop(L, 1);
        if (marked)
            return 1;
    }
    if (*n == 0)
        return 0;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        lua_pop(L, 1);
        if (!lua_isinteger(L, -1))
            count = -1;
        else if (count >= 0)
            count++;
    }
    return count == (lua_Integer)*n;
}

/* What one conversion to JSON may still build, and why it stopped. */
typedef struct conv {
    size_t values, bytes;
    char why[128];
} conv_t;

/* The value at idx as JSON (new reference), or NULL with c->why filled. It raises no Lua error
 * (a raise would leak what was built): the caller raises once it is cleaned up. */
static json_t *to_json(lua_State *L, int idx, int depth, conv_t *c)
{
    json_t *out = NULL, *item;
    size_t len, n, i;
    const char *s;
    char *why = c->why;
    size_t why_size = sizeof(c->why);

    if (c->values == 0) {
        snprintf(why, why_size, "more values than a conversion may build");
        return NULL;
    }
    c->values--;
    if (depth > JSON_DEPTH || !lua_checkstack(L, 4)) {
        snprintf(why, why_size, "nested deeper than %d (or a table that contains itself)",
                 JSON_DEPTH);
        return NULL;
    }
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        return json_null();
    case LUA_TBOOLEAN:
        return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            return json_integer((json_int_t)lua_tointeger(L, idx));
        if ((out = json_real(lua_tonumber(L, idx))) == NULL)
            snprintf(why, why_size, "a number that is NaN or infinite");
        return out;
    case LUA_TSTRING:
        s = lua_tolstring(L, idx, &len);
        if (len > c->bytes) {
            snprintf(why, why_size, "more text than a conversion may build");
            return NULL;
        }
        c->bytes -= len;
        if ((out = json_stringn(s, len)) == NULL)
            snprintf(why, why_size, "a string that is not valid UTF-8");
        return out;
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == &LUA_JSON_NULL)
            return json_null();
        break;
    case LUA_TTABLE:
        if (table_is_array(L, idx, &n)) {
            out = json_array();
            for (i = 1; out != NULL && i <= n; i++) {
                lua_rawgeti(L, idx, (lua_Integer)i);
                item = to_json(L, -1, depth + 1, c);
                lua_pop(L, 1);
                if (item == NULL || json_array_append_new(out, item) < 0) {
                    json_decref(out);
                    return NULL;
                }
            }
            return out;
        }
        out = json_object();
        lua_pushnil(L);
        while (out != NULL && lua_next(L, idx) != 0) {
            if (lua_type(L, -2) != LUA_TSTRING) {
                snprintf(why, why_size, "a table whose keys are neither all strings nor 1..n");
                lua_pop(L, 2);
                json_decref(out);
                return NULL;
            }
            if (lua_rawlen(L, -2) > c->bytes) {
                snprintf(why, why_size, "more text than a conversion may build");
                lua_pop(L, 2);
                json_decref(out);
                return NULL;
            }
            c->bytes -= lua_rawlen(L, -2);
            item = to_json(L, -1, depth + 1, c);
            if (item == NULL ||
                json_object_setn_new(out, lua_tostring(L, -2), lua_rawlen(L, -2), item) < 0) {
                lua_pop(L, 2);
                json_decref(out);
                return NULL;
            }
            lua_pop(L, 1);
        }
        return out;
    default:
        break;
    }
    snprintf(why, why_size, "a %s has no JSON form", lua_typename(L, lua_type(L, idx)));
    return NULL;
}

json_t *script_to_json(lua_State *L, int idx, const char *what)
{
    script_run_t *run = script_run_of(L);
    size_t kb = run->mem_limit_kb;
    conv_t c = {kb * JSON_VALUES_PER_KB, kb * JSON_BYTES_PER_KB, "out of memory"};
    json_t *v = to_json(L, idx, 0, &c);

    if (v == NULL)
        luaL_error(L, "%s: %s", what, c.why);
    return v;
}

int script_push_json_cf(lua_State *L)
{
    push_json(L, lua_touserdata(L, 1), 0);
    return 1;
}

int script_push_text_cf(lua_State *L)
{
    const script_text_t *t = lua_touserdata(L, 1);

    lua_pushlstring(L, t->s, t->len);
    return 1;
}

int script_call_protected(lua_State *L, lua_CFunction f, const void *arg)
{
    lua_pushcfunction(L, f);
    lua_pushlightuserdata(L, (void *)arg);
    return lua_pcall(L, 1, 1, 0);
}

static int json_encode_lua(lua_State *L)
{
    json_t *v;
    script_text_t t;
    int st;

    luaL_checkany(L, 1);
    v = script_to_json(L, 1, "json.encode");
    t.s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(v);
    if (t.s == NULL)
        return luaL_error(L, "json.encode: out of memory");
    t.len = strlen(t.s);
    st = script_call_protected(L, script_push_text_cf, &t);
    free((char *)t.s);
    return st == LUA_OK ? 1 : lua_error(L);
}

static int json_decode_lua(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    json_error_t je;
    json_t *v = json_loadb(s, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    int st;

    if (v == NULL)
        return luaL_error(L, "json.decode: %s at position %d", je.text, je.position);
    st = script_call_protected(L, script_push_json_cf, v);
    json_decref(v);
    return st == LUA_OK ? 1 : lua_error(L);
}

/* json.array(t): marks t as an array, so that it encodes as [] when empty. */
static int json_array_lua(lua_State *L)
{
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    push_array_mt(L);
    return 1;
}

void script_json_init(lua_State *L)
{
    luaL_newmetatable(L, ARRAY_MT);
    script_run_of(L)->array_mt = lua_topointer(L, -1);
    lua_pop(L, 1);
}

void script_push_json(lua_State *L, const json_t *v)
{
    push_json(L, v, 0);
}

int script_open_json(lua_State *L)
{
    static const luaL_Reg fns[] = {{"encode", json_encode_lua},
                                   {"decode", json_decode_lua},
                                   {"array", json_array_lua},
                                   {NULL, NULL}};

    luaL_newlib(L, fns);
    lua_pushlightuserdata(L, (void *)&LUA_JSON_NULL);
    lua_setfield(L, -2, "null");
    return 1;
}
