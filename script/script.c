/* script.c - the Lua sandbox of node code: one lua_State per run, capped by its allocator and
 * a count hook; http.request yields the run's coroutine to the caller. */
#include "script.h"

#include "script_json.h"
#include "script_lib.h"
#include "script_member.h"
#include "script_run.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ANSWER_FIELDS 5 /* status, body, json, contentType, error */

struct script {
    char *code; /* bytecode (lua_dump, with line information) */
    size_t len;
    char name[SCRIPT_NAME_MAX + 1];
};

/* ---- the http module ---- */

static void answer_clear(script_run_t *run)
{
    free(run->answer.body);
    free(run->answer.content_type);
    free(run->answer.error);
    memset(&run->answer, 0, sizeof(run->answer));
}

/* Runs when the coroutine is resumed after http.request yielded: hands the answer over. */
static int http_answer_k(lua_State *L, int status, lua_KContext ctx)
{
    script_run_t *run = script_run_of(L);
    json_t *v;
    int st;

    (void)status;
    (void)ctx;
    if (!run->answer.ready)
        return luaL_error(L, "http.request: resumed without an answer");
    lua_createtable(L, 0, ANSWER_FIELDS);
    lua_pushinteger(L, run->answer.status);
    lua_setfield(L, -2, "status");
    lua_pushlstring(L, run->answer.body ? run->answer.body : "", run->answer.body_len);
    lua_setfield(L, -2, "body");
    if (run->answer.content_type != NULL) {
        lua_pushstring(L, run->answer.content_type);
        lua_setfield(L, -2, "contentType");
    }
    if (run->answer.error != NULL) {
        lua_pushstring(L, run->answer.error);
        lua_setfield(L, -2, "error");
    }
    if (run->answer.body_len > 0 &&
        (v = json_loadb(run->answer.body, run->answer.body_len, JSON_DECODE_ANY, NULL)) != NULL) {
        st = script_call_protected(L, script_push_json_cf, v);
        json_decref(v);
        if (st != LUA_OK)
            return lua_error(L);
        lua_setfield(L, -2, "json");
    }
    answer_clear(run);
    return 1;
}

/* A header name a script may set: a token, and not one that frames the request or the
 * connection (curl sets those; a second one would make the request ambiguous). */
static int header_name_ok(const char *s)
{
    static const char *const framing[] = {"Host",       "Content-Length", "Transfer-Encoding",
                                          "Connection", "Keep-Alive",     "Expect",
                                          "TE",         "Trailer",        "Upgrade"};
    size_t n = strlen(s), i;

    if (n == 0 || n > 64 ||
        strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-") != n ||
        strncasecmp(s, "Proxy-", 6) == 0)
        return 0;
    for (i = 0; i < sizeof(framing) / sizeof(framing[0]); i++)
        if (strcasecmp(s, framing[i]) == 0)
            return 0;
    return 1;
}

static int method_ok(const char *m)
{
    static const char *const allowed[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
    size_t i;

    for (i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        if (strcmp(m, allowed[i]) == 0)
            return 1;
    return 0;
}

/* http.request{url=, method=, body=, headers=, timeoutMs=}: checks the call, records it for
 * the caller and yields. Everything that may raise comes before any C memory is taken. */
static int http_request_lua(lua_State *L)
{
    script_run_t *run = script_run_of(L);
    const char *url, *method, *name, *value;
    lua_Integer timeout = SCRIPT_HTTP_TIMEOUT_MS;
    json_t *req, *headers, *body = NULL;
    char *text = NULL, line[1024];
    int nheaders = 0, has_type = 0;

    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    if (!lua_isyieldable(L))
        return luaL_error(L, "http.request cannot be called here (inside a metamethod or "
                             "a library callback)");
    if (run->http_calls >= SCRIPT_HTTP_MAX)
        return luaL_error(L, "http.request: more than %d calls in one run", SCRIPT_HTTP_MAX);
    lua_getfield(L, 1, "url");       /* 2 */
    lua_getfield(L, 1, "method");    /* 3 */
    lua_getfield(L, 1, "body");      /* 4 */
    lua_getfield(L, 1, "headers");   /* 5 */
    lua_getfield(L, 1, "timeoutMs"); /* 6 */
    url = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (url == NULL || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) ||
        strlen(url) > 2048 || strpbrk(url, " \r\n") != NULL)
        return luaL_error(L, "http.request: url must be an http:// or https:// URL of at most "
                             "2048 bytes, without spaces");
    if (lua_isnil(L, 3))
        method = lua_isnil(L, 4) ? "GET" : "POST";
    else if (lua_type(L, 3) != LUA_TSTRING || !method_ok(method = lua_tostring(L, 3)))
        return luaL_error(L, "http.request: method must be GET, POST, PUT, PATCH or DELETE");
    if (!lua_isnil(L, 4) && lua_type(L, 4) != LUA_TSTRING && lua_type(L, 4) != LUA_TTABLE)
        return luaL_error(L, "http.request: body must be a string or a table (sent as JSON)");
    if (!lua_isnil(L, 5)) {
        if (lua_type(L, 5) != LUA_TTABLE)
            return luaL_error(L, "http.request: headers must be a table of strings");
        lua_pushnil(L);
        while (lua_next(L, 5) != 0) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING ||
                !header_name_ok(lua_tostring(L, -2)) || strlen(lua_tostring(L, -1)) > 512 ||
                strlen(lua_tostring(L, -1)) != lua_rawlen(L, -1) ||
                strpbrk(lua_tostring(L, -1), "\r\n") != NULL)
                return luaL_error(L, "http.request: a header must be a name of letters, digits "
                                     "and '-' (not Host, Content-Length, Transfer-Encoding, "
                                     "Connection or another that frames the request) with a "
                                     "string value of at most 512 bytes, without line breaks");
            if (++nheaders > SCRIPT_HTTP_HEADERS_MAX)
                return luaL_error(L, "http.request: at most %d headers", SCRIPT_HTTP_HEADERS_MAX);
            lua_pop(L, 1);
        }
    }
    if (!lua_isnil(L, 6) && (!lua_isinteger(L, 6) || (timeout = lua_tointeger(L, 6)) < 1 ||
                             timeout > SCRIPT_HTTP_TIMEOUT_MAX))
        return luaL_error(L, "http.request: timeoutMs must be an integer from 1 to %d",
                          SCRIPT_HTTP_TIMEOUT_MAX);
    if (lua_type(L, 4) == LUA_TTABLE) {
        body = script_to_json(L, 4, "http.request body");
        text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(body);
        if (text == NULL)
            return luaL_error(L, "http.request: out of memory");
    }
    /* nothing below raises */
    req = json_object();
    headers = json_array();
    json_object_set_new(req, "url", json_string(url));
    json_object_set_new(req, "method", json_string(method));
    if (text != NULL)
        json_object_set_new(req, "body", json_string(text));
    else if (lua_type(L, 4) == LUA_TSTRING)
        json_object_set_new(req, "body", json_stringn(lua_tostring(L, 4), lua_rawlen(L, 4)));
    else
        json_object_set_new(req, "body", json_null());
    if (nheaders > 0) {
        lua_pushnil(L);
        while (lua_next(L, 5) != 0) {
            name = lua_tostring(L, -2);
            value = lua_tostring(L, -1);
            has_type |= strcasecmp(name, "Content-Type") == 0;
            snprintf(line, sizeof(line), "%s: %s", name, value);
            json_array_append_new(headers, json_string(line));
            lua_pop(L, 1);
        }
    }
    if (text != NULL && !has_type)
        json_array_append_new(headers, json_string("Content-Type: application/json"));
    /* a string that is not UTF-8 (or no memory) left something out */
    if (json_array_size(headers) != (size_t)nheaders + (text != NULL && !has_type)) {
        json_decref(headers);
        headers = NULL;
    }
    json_object_set_new(req, "headers", headers);
    json_object_set_new(req, "timeoutMs", json_integer(timeout));
    free(text);
    if (req == NULL || json_object_size(req) != 5) {
        json_decref(req);
        return luaL_error(L, "http.request: a url, body or header that is not UTF-8 text (or "
                             "out of memory)");
    }
    json_decref(run->http);
    run->http = req;
    run->http_calls++;
    answer_clear(run);
    return lua_yieldk(L, 0, 0, http_answer_k);
}

static int open_http(lua_State *L)
{
    static const luaL_Reg fns[] = {{"request", http_request_lua}, {NULL, NULL}};

    luaL_newlib(L, fns);
    return 1;
}

/* The libraries made on first use: most scripts need few of them, and making one costs
 * thousands of instructions (math's random seeding most). */
static const luaL_Reg LAZY_LIBS[] = {{LUA_TABLIBNAME, script_open_table},
                                     {LUA_MATHLIBNAME, script_open_math},
                                     {LUA_UTF8LIBNAME, script_open_utf8},
                                     {"json", script_open_json},
                                     {"http", open_http}};

/* __index of the globals: a lazy library is made, stored and returned; anything else is nil. */
static int lazy_global(lua_State *L)
{
    const char *key = lua_tostring(L, 2);
    size_t i;

    if (lua_type(L, 2) != LUA_TSTRING)
        return 0;
    for (i = 0; i < sizeof(LAZY_LIBS) / sizeof(LAZY_LIBS[0]); i++) {
        if (strcmp(key, LAZY_LIBS[i].name) != 0)
            continue;
        lua_pushcfunction(L, LAZY_LIBS[i].func);
        lua_call(L, 0, 1);
        lua_pushvalue(L, 2);
        lua_pushvalue(L, -2);
        lua_rawset(L, 1);
        return 1;
    }
    return 0;
}

/* ---- a run ---- */

/* __index of self: member, channel (without info) and agendaMeta become tables when the script
 * first reads them, and stay in self; a script that never reads the member pays nothing for it,
 * neither here nor when its changes are looked for. */
static int self_field(lua_State *L)
{
    script_run_t *run = script_run_of(L);
    const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
    const json_t *v;

    if (strcmp(key, "member") == 0)
        v = run->original;
    else if (strcmp(key, "channel") == 0)
        v = run->channel;
    else if (strcmp(key, "agendaMeta") == 0)
        v = run->agenda_meta;
    else
        return 0;
    if (json_is_object(v))
        script_push_json(L, v);
    else
        lua_newtable(L);
    if (v == run->channel) {
        lua_pushnil(L);
        lua_setfield(L, -2, "info");
    }
    lua_pushvalue(L, 2);
    lua_pushvalue(L, -2);
    lua_rawset(L, 1);
    return 1;
}

static const char *const REMOVED_GLOBALS[] = {"dofile",         "loadfile", "load", "require",
                                              "collectgarbage", "print",    "warn", "loadstring"};

/* Builds the sandbox, self and the coroutine in run->L; run as a protected call. */
static int setup_cf(lua_State *L)
{
    script_run_t *run = lua_touserdata(L, 1);
    static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base}, {LUA_STRLIBNAME, luaopen_string}};
    size_t i;
    int st;

    /* everything built here lives as long as the run: collecting during setup finds nothing
     * (an allocation over the cap still runs an emergency collection) */
    lua_gc(L, LUA_GCSTOP);
    for (i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
        luaL_requiref(L, libs[i].name, libs[i].func, 1);
        lua_pop(L, 1);
    }
    for (i = 0; i < sizeof(REMOVED_GLOBALS) / sizeof(REMOVED_GLOBALS[0]); i++) {
        lua_pushnil(L);
        lua_setglobal(L, REMOVED_GLOBALS[i]);
    }
    script_lib_guard(L);
    lua_pushglobaltable(L);
    lua_createtable(L, 0, 2); /* the globals' metatable: the lazy libraries */
    lua_pushcfunction(L, lazy_global);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pop(L, 1);
    /* getmetatable("") answers false instead of the table that holds string's functions */
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 2);

    script_json_init(L);

    lua_createtable(L, 0, 3); /* self: its fields are made on first use (self_field) */
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, self_field);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setglobal(L, "self");
    run->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);

    run->co = lua_newthread(L);
    luaL_ref(L, LUA_REGISTRYINDEX); /* keeps the coroutine alive */
    st = luaL_loadbufferx(L, run->script->code, run->script->len, run->script->name, "b");
    if (st != LUA_OK)
        return lua_error(L);
    lua_xmove(L, run->co, 1);
    lua_sethook(run->co, script_count_hook, LUA_MASKCOUNT, SCRIPT_HOOK_PERIOD);
    lua_gc(L, LUA_GCRESTART);
    run->mem_base = run->mem_used;
    return 0;
}

script_run_t *script_run_new(const script_t *s, script_limits_t limits, const json_t *member,
                             const json_t *channel, const json_t *agenda_meta)
{
    script_run_t *run = calloc(1, sizeof(*run));

    if (run == NULL)
        return NULL;
    run->mem_limit_kb = (size_t)(limits.max_memory_kb > 0 ? limits.max_memory_kb : 1);
    run->mem_cap = run->mem_limit_kb * 1024;
    run->max_instructions = limits.max_instructions > 0 ? limits.max_instructions : 1;
    if (limits.clock_us != NULL && limits.max_ms > 0) {
        run->clock_us = limits.clock_us;
        run->max_us = (int64_t)limits.max_ms * 1000;
    }
    run->original = json_is_object(member) ? json_incref((json_t *)member) : json_object();
    run->L = lua_newstate(script_cap_alloc, run);
    if (run->original == NULL) {
        script_run_free(run);
        return NULL;
    }
    if (run->L == NULL) { /* a cap too small for an empty state: the first resume says so */
        run->over_memory = 1;
        return run;
    }
    run->script = s;
    run->channel = json_incref((json_t *)channel);
    run->agenda_meta = json_incref((json_t *)agenda_meta);
    if (script_call_protected(run->L, setup_cf, run) != LUA_OK) {
        const char *msg = lua_type(run->L, -1) == LUA_TSTRING ? lua_tostring(run->L, -1) : NULL;
        if (!run->over_memory)
            bg_error_set(&run->err, BG_ERR_SCRIPT, "%s", msg ? msg : "script setup failed");
        run->co = NULL;
    }
    run->script = NULL;
    return run;
}

void script_run_free(script_run_t *run)
{
    if (run == NULL)
        return;
    if (run->L != NULL)
        lua_close(run->L);
    json_decref(run->original);
    json_decref(run->channel);
    json_decref(run->agenda_meta);
    json_decref(run->http);
    json_decref(run->result);
    json_decref(run->ops);
    answer_clear(run);
    free(run);
}

const json_t *script_run_http(const script_run_t *run)
{
    return run->http;
}

static char *dup_or_null(const char *s, size_t len)
{
    char *d;

    if (s == NULL)
        return NULL;
    if ((d = malloc(len + 1)) != NULL) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

void script_run_http_done(script_run_t *run, long status, const char *body, size_t body_len,
                          const char *content_type, const char *error)
{
    answer_clear(run);
    json_decref(run->http);
    run->http = NULL;
    run->answer.ready = 1;
    run->answer.status = status;
    run->answer.body = dup_or_null(body, body_len);
    run->answer.body_len = run->answer.body != NULL ? body_len : 0;
    run->answer.content_type = dup_or_null(content_type, content_type ? strlen(content_type) : 0);
    if (error != NULL && error[0] != '\0')
        run->answer.error = dup_or_null(error, strlen(error));
}

long script_run_instructions(const script_run_t *run)
{
    return run->instructions;
}

/* 1 when a run can load member as self.member within its memory cap: built into a state of
 * its own, as the next run would, next to what a run holds once set up. What a run writes back
 * is bounded so (not by its JSON text: a table that refers to one string many times is small
 * in Lua and large once written, and would fail every later run that reads it). */
static int member_fits(const script_run_t *run, const json_t *member)
{
    script_run_t probe = {0}; /* only the allocator's fields: no hook, no clock */
    size_t cap = run->mem_limit_kb * 1024;
    lua_State *L;
    int ok;

    probe.mem_cap = SIZE_MAX;
    probe.max_instructions = LONG_MAX;
    if ((L = lua_newstate(script_cap_alloc, &probe)) == NULL)
        return 0;
    probe.mem_cap = cap > run->mem_base ? probe.mem_used + (cap - run->mem_base) : probe.mem_used;
    ok = script_call_protected(L, script_push_json_cf, member) == LUA_OK;
    lua_close(L);
    return ok;
}

typedef struct finish_arg {
    script_run_t *run;
    json_t *member; /* self.member as JSON; NULL when the script never touched it */
} finish_arg_t;

/* Converts the result (on top of L) and self.member; run as a protected call. */
static int finish_cf(lua_State *L)
{
    finish_arg_t *f = lua_touserdata(L, 1);

    f->run->result = script_to_json(L, 2, "the returned value");
    lua_rawgeti(L, LUA_REGISTRYINDEX, f->run->self_ref);
    lua_pushliteral(L, "member");
    switch (lua_rawget(L, -2)) {
    case LUA_TNIL: /* never read nor set: unchanged */
        return 0;
    case LUA_TTABLE:
        f->member = script_to_json(L, -1, "self.member");
        return 0;
    default:
        return luaL_error(L, "self.member must stay a table");
    }
}

/* The position in the script where co stopped, as "name:line", or "" when unknown. */
static void where_stopped(lua_State *co, char *buf, size_t size)
{
    lua_Debug ar;
    int level;

    buf[0] = '\0';
    for (level = 0; lua_getstack(co, level, &ar); level++) {
        if (lua_getinfo(co, "Sl", &ar) && ar.currentline > 0) {
            snprintf(buf, size, "%s:%d: ", ar.short_src, ar.currentline);
            return;
        }
    }
}

static script_status_t run_failed(script_run_t *run, int status)
{
    char where[SCRIPT_NAME_MAX + 24];
    const char *msg;

    if (run->err.code != BG_OK) {
        /* set by setup or the member check */
    } else if (run->over_memory &&
               (status == LUA_ERRMEM || status == LUA_OK || status == LUA_YIELD)) {
        where[0] = '\0';
        if (run->co != NULL)
            where_stopped(run->co, where, sizeof(where));
        bg_error_set(&run->err, BG_ERR_SCRIPT, "%smemory limit exceeded (%ld KiB)", where,
                     (long)(run->mem_cap / 1024));
    } else if (run->over_instructions &&
               (status == LUA_OK || status == LUA_ERRMEM || status == LUA_YIELD)) {
        where[0] = '\0';
        if (run->co != NULL)
            where_stopped(run->co, where, sizeof(where));
        bg_error_set(&run->err, BG_ERR_SCRIPT, "%sinstruction limit exceeded (%ld)", where,
                     run->max_instructions);
    } else if (run->over_time &&
               (status == LUA_OK || status == LUA_ERRMEM || status == LUA_YIELD)) {
        where[0] = '\0';
        if (run->co != NULL)
            where_stopped(run->co, where, sizeof(where));
        bg_error_set(&run->err, BG_ERR_SCRIPT, "%stime limit exceeded (%ld ms)", where,
                     (long)(run->max_us / 1000));
    } else if (status == LUA_ERRMEM) {
        bg_error_set(&run->err, BG_ERR_SCRIPT, "out of memory");
    } else if ((msg = lua_type(run->co, -1) == LUA_TSTRING ? lua_tostring(run->co, -1) : NULL) !=
               NULL) {
        bg_error_set(&run->err, BG_ERR_SCRIPT, "%s", msg);
    } else {
        bg_error_set(&run->err, BG_ERR_SCRIPT, "script error (a %s value)",
                     luaL_typename(run->co, -1));
    }
    run->done = 1;
    if (run->L != NULL)
        lua_close(run->L);
    run->L = NULL;
    run->co = NULL;
    json_decref(run->result);
    run->result = NULL;
    return SCRIPT_FAILED;
}

static script_status_t run_finished(script_run_t *run, int nres)
{
    finish_arg_t f = {run, NULL};
    lua_State *L = run->L;
    json_t *after = NULL;

    /* the script's own memory is what the cap is for; the conversions below are ours */
    run->mem_cap = SIZE_MAX;
    run->max_instructions = LONG_MAX;
    lua_sethook(run->co, NULL, 0, 0);
    if (!lua_checkstack(L, 8)) {
        bg_error_set(&run->err, BG_ERR_SCRIPT, "out of memory");
        return run_failed(run, LUA_ERRMEM);
    }
    if (nres > 0)
        lua_pop(run->co, nres - 1);
    else if (lua_checkstack(run->co, 1))
        lua_pushnil(run->co);
    else
        return run_failed(run, LUA_ERRMEM);
    lua_pushcfunction(L, finish_cf);
    lua_pushlightuserdata(L, &f);
    lua_xmove(run->co, L, 1);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
        const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        bg_error_set(&run->err, BG_ERR_SCRIPT, "%s", msg ? msg : "script error");
        json_decref(f.member);
        return run_failed(run, LUA_ERRRUN);
    }
    run->ops = f.member != NULL ? script_member_ops(run->original, f.member, &after, &run->err)
                                : json_array();
    json_decref(f.member);
    if (run->ops != NULL && after != NULL && !member_fits(run, after)) {
        bg_error_set(&run->err, BG_ERR_SCRIPT,
                     "self.member: the member it leaves takes more than the memory limit (%ld "
                     "KiB) to load in a run; not written",
                     (long)run->mem_limit_kb);
        json_decref(run->ops);
        run->ops = NULL;
    }
    json_decref(after);
    if (run->ops == NULL)
        return run_failed(run, LUA_ERRRUN);
    run->done = 1;
    lua_close(run->L);
    run->L = NULL;
    run->co = NULL;
    return SCRIPT_DONE;
}

script_status_t script_run_resume(script_run_t *run, bg_error_t *err)
{
    script_status_t st;
    int status, nres = 0, over;

    if (run->done) {
        st = run->err.code != BG_OK ? SCRIPT_FAILED : SCRIPT_DONE;
    } else if (run->L == NULL || run->co == NULL) {
        st = run_failed(run, LUA_ERRMEM);
    } else if (run->http != NULL) {
        bg_error_set(&run->err, BG_ERR_SCRIPT, "resumed before the http.request answer");
        st = run_failed(run, LUA_ERRRUN);
    } else {
        /* the time limit counts the run's own work, not its waits for http.request */
        run->resumed_at = run->clock_us != NULL ? run->clock_us() : 0;
        status = lua_resume(run->co, run->L, 0, &nres);
        script_time_over(run); /* a run that ends past the limit fails too: nothing is kept */
        if (run->resumed_at != 0)
            run->used_us += run->clock_us() - run->resumed_at;
        run->resumed_at = 0;
        over = run->over_memory || run->over_instructions || run->over_time;
        if (status == LUA_YIELD && run->http != NULL && !over) {
            lua_pop(run->co, nres);
            return SCRIPT_NEED_HTTP;
        }
        if (status == LUA_YIELD && !over)
            bg_error_set(&run->err, BG_ERR_SCRIPT, "the script yielded without a call");
        if (status == LUA_OK && !over)
            st = run_finished(run, nres);
        else
            st = run_failed(run, status);
    }
    if (st == SCRIPT_FAILED && err != NULL)
        *err = run->err;
    return st;
}

json_t *script_run_result(const script_run_t *run)
{
    return run->result != NULL ? json_incref(run->result) : json_null();
}

const json_t *script_run_member_ops(const script_run_t *run)
{
    return run->ops;
}

/* ---- compiling ---- */

typedef struct dump_buf {
    char *p;
    size_t len, cap;
    int failed;
} dump_buf_t;

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud)
{
    dump_buf_t *b = ud;
    char *n;

    (void)L;
    if (b->len + sz > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096);
        while (cap < b->len + sz)
            cap *= 2;
        if ((n = realloc(b->p, cap)) == NULL) {
            b->failed = 1;
            return 1;
        }
        b->p = n;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, sz);
    b->len += sz;
    return 0;
}

script_t *script_compile(const char *code, size_t len, const char *name, bg_error_t *err)
{
    char chunk[SCRIPT_NAME_MAX + 1];
    dump_buf_t b = {0};
    script_t *s = NULL;
    lua_State *L;

    if (len > SCRIPT_CODE_MAX) {
        bg_error_set(err, BG_ERR_SCRIPT, "%.80s: code longer than %d bytes", name, SCRIPT_CODE_MAX);
        return NULL;
    }
    snprintf(chunk, sizeof(chunk), "=%s", name);
    if ((L = luaL_newstate()) == NULL) {
        bg_error_set(err, BG_ERR_SCRIPT, "out of memory");
        return NULL;
    }
    if (luaL_loadbufferx(L, code, len, chunk, "t") != LUA_OK) {
        const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        bg_error_set(err, BG_ERR_SCRIPT, "%s", msg ? msg : "does not compile");
        goto out;
    }
    if (lua_dump(L, dump_writer, &b, 0) != 0 || b.failed || (s = calloc(1, sizeof(*s))) == NULL) {
        bg_error_set(err, BG_ERR_SCRIPT, "out of memory");
        goto out;
    }
    s->code = b.p;
    s->len = b.len;
    b.p = NULL;
    snprintf(s->name, sizeof(s->name), "%s", chunk);
out:
    free(b.p);
    lua_close(L);
    return s;
}

void script_free(script_t *s)
{
    if (s == NULL)
        return;
    free(s->code);
    free(s);
}

/* ---- the per-worker cache ---- */

typedef struct cache_entry {
    uint64_t hash;
    char *key; /* name, NUL, code */
    size_t key_len;
    script_t *script;
} cache_entry_t;

struct script_cache {
    script_limits_t limits;
    size_t count, max;
    size_t bytes; /* of the keys and the bytecode held */
    cache_entry_t *entries;
};

script_cache_t *script_cache_new(script_limits_t limits, size_t max_entries)
{
    script_cache_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->limits = limits;
    c->max = max_entries > 0 ? max_entries : 1;
    if ((c->entries = calloc(c->max, sizeof(*c->entries))) == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

static void cache_clear(script_cache_t *c)
{
    size_t i;

    for (i = 0; i < c->count; i++) {
        free(c->entries[i].key);
        script_free(c->entries[i].script);
    }
    c->count = 0;
    c->bytes = 0;
}

void script_cache_free(script_cache_t *c)
{
    if (c == NULL)
        return;
    cache_clear(c);
    free(c->entries);
    free(c);
}

script_limits_t script_cache_limits(const script_cache_t *c)
{
    return c->limits;
}

static uint64_t fnv1a(uint64_t h, const char *p, size_t n)
{
    while (n-- > 0) {
        h ^= (unsigned char)*p++;
        h *= 1099511628211ULL;
    }
    return h;
}

const script_t *script_cache_get(script_cache_t *c, const char *name, const char *code,
                                 bg_error_t *err)
{
    size_t name_len = strlen(name) + 1, code_len = strlen(code), i;
    uint64_t h = fnv1a(fnv1a(14695981039346656037ULL, name, name_len), code, code_len);
    cache_entry_t *e;
    script_t *s;

    for (i = 0; i < c->count; i++) {
        e = &c->entries[i];
        if (e->hash == h && e->key_len == name_len + code_len &&
            memcmp(e->key, name, name_len) == 0 && memcmp(e->key + name_len, code, code_len) == 0)
            return e->script;
    }
    if ((s = script_compile(code, code_len, name, err)) == NULL)
        return NULL;
    if (c->count == c->max || c->bytes + name_len + code_len + s->len > SCRIPT_CACHE_BYTES)
        cache_clear(c);
    e = &c->entries[c->count];
    if ((e->key = malloc(name_len + code_len)) == NULL) {
        script_free(s);
        bg_error_set(err, BG_ERR_SCRIPT, "out of memory");
        return NULL;
    }
    memcpy(e->key, name, name_len);
    memcpy(e->key + name_len, code, code_len);
    e->key_len = name_len + code_len;
    e->hash = h;
    e->script = s;
    c->count++;
    c->bytes += e->key_len + s->len;
    return s;
}
