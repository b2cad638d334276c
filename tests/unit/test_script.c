/* test_script.c - the Lua sandbox of node code: what is absent, the two caps, error lines,
 * http.request yielding and resuming, json, and the member set rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_util.h"

#include "script/script.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const script_limits_t LIMITS = {SCRIPT_MAX_INSTRUCTIONS_DEFAULT,
                                       SCRIPT_MAX_MEMORY_KB_DEFAULT, 0, NULL};

static const char MEMBER[] =
    "{\"_id\":\"M1\",\"firstName\":\"Ann\",\"lastName\":\"Lee\",\"customLocale\":null,"
    "\"tags\":[],\"meta\":{\"keep\":1,\"gone\":\"x\",\"n\":null},"
    "\"botMeta\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\",\"subscribed\":true,"
    "\"tempData\":{}}}";

/* A finished or failed run of code; *out gets the run (caller frees) when out != NULL. */
static script_status_t run_code(const char *code, script_limits_t lim, const char *member,
                                bg_error_t *err, script_run_t **out)
{
    bg_error_t cerr;
    script_t *s = script_compile(code, strlen(code), "test", &cerr);
    json_t *m = load(member ? member : MEMBER);
    json_t *channel = load("{\"_id\":\"C1\",\"type\":\"facebook\",\"info\":{\"secret\":\"s\"}}");
    json_t *meta = load("{\"status\":\"shipped\",\"n\":3}");
    script_run_t *run;
    script_status_t st;

    if (s == NULL)
        fail_msg("does not compile: %s", cerr.msg);
    run = script_run_new(s, lim, m, channel, meta);
    script_free(s);
    json_decref(m);
    json_decref(channel);
    json_decref(meta);
    assert_non_null(run);
    bg_error_clear(err);
    st = script_run_resume(run, err);
    if (out != NULL)
        *out = run;
    else
        script_run_free(run);
    return st;
}

/* The result of code, which must finish; new reference. */
static json_t *result_of(const char *code)
{
    script_run_t *run;
    bg_error_t err;
    json_t *r;

    if (run_code(code, LIMITS, NULL, &err, &run) != SCRIPT_DONE)
        fail_msg("%s: failed: %s", code, err.msg);
    r = script_run_result(run);
    script_run_free(run);
    return r;
}

static void assert_result(const char *code, const char *expected)
{
    json_t *r = result_of(code), *e = load(expected);
    char *text = json_dumps(r, JSON_ENCODE_ANY | JSON_COMPACT);

    if (!json_equal(r, e))
        fail_msg("%s: got %s, expected %s", code, text, expected);
    free(text);
    json_decref(r);
    json_decref(e);
}

static void assert_fails(const char *code, script_limits_t lim, const char *msg_part)
{
    bg_error_t err;

    if (run_code(code, lim, NULL, &err, NULL) != SCRIPT_FAILED)
        fail_msg("%s: did not fail", code);
    assert_int_equal(err.code, BG_ERR_SCRIPT);
    if (strstr(err.msg, msg_part) == NULL)
        fail_msg("%s: message \"%s\" lacks \"%s\"", code, err.msg, msg_part);
}

static void test_forbidden_absent(void **state)
{
    static const char *const names[] = {
        "io",     "os",       "package",   "require",    "debug",
        "dofile", "loadfile", "load",      "loadstring", "collectgarbage",
        "print",  "warn",     "coroutine", "module",     "setfenv"};
    char code[128];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(code, sizeof(code), "return %s == nil", names[i]);
        assert_result(code, "true");
    }
    assert_result("return string.dump == nil", "true");
    /* the table of string's functions is not reachable through a string's metatable */
    assert_result("return getmetatable('')", "false");
    assert_result("return type(string.format) == 'function' and type(table.concat) == "
                  "'function' and type(math.floor) == 'function' and type(utf8.char) == "
                  "'function' and type(pcall) == 'function'",
                  "true");
    /* text only: a compiled chunk is refused at compile time */
    {
        bg_error_t err;
        assert_null(script_compile("\x1bLua", 4, "bin", &err));
        assert_int_equal(err.code, BG_ERR_SCRIPT);
    }
}

static void test_no_state_between_runs(void **state)
{
    (void)state;
    assert_result("leak = 1; string.upper = nil; return 1", "1");
    assert_result("return leak == nil and string.upper ~= nil", "true");
}

static void test_instruction_cap(void **state)
{
    script_limits_t lim = {100000, SCRIPT_MAX_MEMORY_KB_DEFAULT, 0, NULL};
    script_run_t *run;
    bg_error_t err;

    (void)state;
    assert_fails("local x = 0\nwhile true do x = x + 1 end", lim,
                 "test:2: instruction limit exceeded (100000)");
    /* pcall cannot keep the script going past the cap */
    assert_fails("while true do pcall(function() while true do end end) end", lim,
                 "instruction limit exceeded");
    assert_fails("local ok = pcall(function() while true do end end)\nreturn ok", lim,
                 "instruction limit exceeded");
    /* well under the cap: runs */
    assert_int_equal(
        run_code("local x = 0 for i = 1, 1000 do x = x + i end return x", lim, NULL, &err, &run),
        SCRIPT_DONE);
    assert_true(script_run_instructions(run) <= 100000);
    script_run_free(run);
}

static void test_memory_cap(void **state)
{
    (void)state;
    assert_fails("local s = string.rep('x', 100 * 1024 * 1024)\nreturn #s", LIMITS,
                 "memory limit exceeded (1024 KiB)");
    assert_fails("local t = {}\nfor i = 1, 1e7 do t[i] = i end", LIMITS, "memory limit exceeded");
    /* caught by pcall, it is still a failure */
    assert_fails("local ok = pcall(string.rep, 'x', 1e8)\nreturn ok", LIMITS,
                 "memory limit exceeded");
    /* a string of 100 KiB fits */
    assert_result("return #string.rep('x', 100 * 1024)", "102400");
}

static void test_error_line(void **state)
{
    bg_error_t err;

    (void)state;
    assert_fails("local a = 1\n\nerror('boom')", LIMITS, "test:3: boom");
    assert_fails("local t = nil\nreturn t.x", LIMITS, "test:2: attempt to index a nil value");
    assert_fails("error({})", LIMITS, "script error (a table value)");
    assert_null(script_compile("x = = 1", 7, "nodes.N1.transform", &err));
    assert_int_equal(err.code, BG_ERR_SCRIPT);
    assert_non_null(strstr(err.msg, "nodes.N1.transform:1:"));
}

static void test_self(void **state)
{
    (void)state;
    assert_result("return {self.member.firstName, self.agendaMeta.status, self.channel.type, "
                  "self.channel.info == nil}",
                  "[\"Ann\",\"shipped\",\"facebook\",true]");
    assert_result("if self.agendaMeta.status == 'shipped' then return {{type='TEXT', "
                  "text='on its way'}} end return {}",
                  "[{\"type\":\"TEXT\",\"text\":\"on its way\"}]");
}

static void test_json(void **state)
{
    (void)state;
    assert_result("return json.decode(json.encode({a={1,2,{b=true}}, s='\\u{e9}', e=json.array(), "
                  "n=json.null, f=1.5}))",
                  "{\"a\":[1,2,{\"b\":true}],\"s\":\"\\u00e9\",\"e\":[],\"f\":1.5}");
    assert_result("return json.encode(json.decode('[]'))", "\"[]\"");
    assert_result("return json.encode({})", "\"{}\"");
    assert_result("return json.encode(json.array(nil))", "\"[]\"");
    assert_fails("return json.encode({[2] = 'x'})", LIMITS, "neither all strings nor 1..n");
    assert_result("return json.decode('{\"x\":[1,null,3]}').x[2] == json.null", "true");
    assert_fails("return json.decode('{')", LIMITS, "json.decode:");
    assert_fails("local t = {} t.t = t return json.encode(t)", LIMITS, "nested deeper");
    assert_fails("return json.encode({[1]=1, a=2})", LIMITS, "json.encode:");
    assert_fails("return json.encode(function() end)", LIMITS, "has no JSON form");
}

static void test_http_yield(void **state)
{
    const char *code = "local a = http.request{url='http://h/one', timeoutMs=500}\n"
                       "local b = http.request{url='http://h/two', body={x=a.json.v}, "
                       "headers={['X-Id']='7'}}\n"
                       "return {a.status, a.json.v, b.status, b.body, b.error}";
    script_run_t *run;
    const json_t *req;
    bg_error_t err;
    json_t *r;

    (void)state;
    assert_int_equal(run_code(code, LIMITS, NULL, &err, &run), SCRIPT_NEED_HTTP);
    req = script_run_http(run);
    assert_string_equal(json_string_value(json_object_get(req, "url")), "http://h/one");
    assert_string_equal(json_string_value(json_object_get(req, "method")), "GET");
    assert_int_equal(json_integer_value(json_object_get(req, "timeoutMs")), 500);
    assert_true(json_is_null(json_object_get(req, "body")));
    script_run_http_done(run, 200, "{\"v\":41}", 8, "application/json", NULL);
    assert_int_equal(script_run_resume(run, &err), SCRIPT_NEED_HTTP);
    req = script_run_http(run);
    assert_string_equal(json_string_value(json_object_get(req, "method")), "POST");
    assert_string_equal(json_string_value(json_object_get(req, "body")), "{\"x\":41}");
    assert_string_equal(json_string_value(json_array_get(json_object_get(req, "headers"), 0)),
                        "X-Id: 7");
    assert_string_equal(json_string_value(json_array_get(json_object_get(req, "headers"), 1)),
                        "Content-Type: application/json");
    script_run_http_done(run, 0, NULL, 0, NULL, "timed out");
    assert_int_equal(script_run_resume(run, &err), SCRIPT_DONE);
    r = script_run_result(run);
    {
        json_t *e = load("[200,41,0,\"\",\"timed out\"]");
        assert_true(json_equal(r, e));
        json_decref(e);
    }
    json_decref(r);
    script_run_free(run);

    /* a run left waiting is freed cleanly */
    assert_int_equal(run_code(code, LIMITS, NULL, &err, &run), SCRIPT_NEED_HTTP);
    script_run_free(run);

    /* bad calls fail with the line */
    assert_fails("\nhttp.request{url='ftp://x'}", LIMITS, "test:2: http.request: url");
    assert_fails("http.request{url='http://x', method='TRACE'}", LIMITS, "method must be");
    assert_fails("http.request{url='http://x', headers={['Bad Name']='v'}}", LIMITS,
                 "a header must be");
    assert_fails("http.request{url='http://x', timeoutMs=0}", LIMITS, "timeoutMs");
    assert_fails("http.request{url='http://x', headers={host='internal'}}", LIMITS, "not Host");
    assert_fails("http.request{url='http://x', headers={['Content-Length']='5'}}", LIMITS,
                 "not Host");
    assert_fails("http.request{url='http://x', headers={['Proxy-Authorization']='x'}}", LIMITS,
                 "not Host");
    assert_fails("http.request{url='http://x', body='\xff'}", LIMITS, "not UTF-8");
    assert_fails("http.request{url='http://x', headers={['X-A']='\xff'}}", LIMITS, "not UTF-8");
    assert_fails("table.sort({1,2}, function(a, b) http.request{url='http://x'} return a < b "
                 "end)",
                 LIMITS, "cannot be called here");
}

static void test_http_pcall_yields(void **state)
{
    script_run_t *run;
    bg_error_t err;
    json_t *r;

    (void)state;
    assert_int_equal(run_code("local ok, a = pcall(http.request, {url='https://h/'})\n"
                              "return {ok, a.status}",
                              LIMITS, NULL, &err, &run),
                     SCRIPT_NEED_HTTP);
    script_run_http_done(run, 204, "", 0, NULL, NULL);
    assert_int_equal(script_run_resume(run, &err), SCRIPT_DONE);
    r = script_run_result(run);
    assert_true(json_is_true(json_array_get(r, 0)));
    assert_int_equal(json_integer_value(json_array_get(r, 1)), 204);
    json_decref(r);
    script_run_free(run);
}

/* The ops of code as compact JSON text (caller frees), or NULL with err when it failed. */
static char *ops_of(const char *code, bg_error_t *err)
{
    script_run_t *run;
    char *text = NULL;

    if (run_code(code, LIMITS, NULL, err, &run) == SCRIPT_DONE)
        text = json_dumps(script_run_member_ops(run), JSON_COMPACT);
    script_run_free(run);
    return text;
}

static void assert_ops(const char *code, const char *expected)
{
    bg_error_t err;
    char *text = ops_of(code, &err);

    json_t *got, *want = load(expected);

    if (text == NULL)
        fail_msg("%s: failed: %s", code, err.msg);
    /* compared as JSON: the keys of an object built in Lua come in no fixed order */
    got = load(text);
    if (!json_equal(got, want))
        fail_msg("%s: ops %s, expected %s", code, text, expected);
    json_decref(got);
    json_decref(want);
    free(text);
}

static void test_member_set_rules(void **state)
{
    bg_error_t err;

    (void)state;
    /* nothing changed: no op, whatever was read */
    assert_ops("local m = self.member; local x = m.meta.keep; return x", "[]");
    assert_ops("self.member.meta.a = {b = 1}; self.member.meta.gone = nil; "
               "self.member.botMeta.tempData.order = 'o1'; self.member.firstName = 'Bo'",
               "[{\"op\":\"set\",\"path\":\"member.meta.a\",\"value\":{\"b\":1}},"
               "{\"op\":\"set\",\"path\":\"member.meta.gone\",\"value\":null},"
               "{\"op\":\"set\",\"path\":\"member.botMeta.tempData.order\",\"value\":\"o1\"},"
               "{\"op\":\"set\",\"path\":\"member.firstName\",\"value\":\"Bo\"}]");
    assert_ops("self.member.botMeta.subscribed = false; self.member.customLocale = 'zh-HK'",
               "[{\"op\":\"set\",\"path\":\"member.botMeta.subscribed\",\"value\":false},"
               "{\"op\":\"set\",\"path\":\"member.customLocale\",\"value\":\"zh-HK\"}]");
    /* nil where null is not a value, or for a whole table: nothing changes */
    assert_ops("self.member.firstName = nil; self.member.botMeta = nil; self.member.meta = nil",
               "[]");
    assert_ops("self.member = {meta = {keep = 1, x = 2}}",
               "[{\"op\":\"set\",\"path\":\"member.meta.x\",\"value\":2},"
               "{\"op\":\"set\",\"path\":\"member.meta.gone\",\"value\":null}]");
    assert_ops("self.member.customLocale = 'fr'; self.member.customLocale = nil", "[]");
    /* self's fields are made when first read */
    assert_result("local before = rawget(self, 'member') == nil\n"
                  "local name = self.member.firstName\n"
                  "return {before, rawget(self, 'member') ~= nil, name}",
                  "[true,true,\"Ann\"]");
    /* a set names the deepest key that changed; a key below that a path cannot name makes
     * its object set whole */
    assert_ops(
        "self.member.meta.keep = {a = {x = 1, y = 2}}",
        "[{\"op\":\"set\",\"path\":\"member.meta.keep\",\"value\":{\"a\":{\"x\":1,\"y\":2}}}]");
    {
        bg_error_t err;
        script_run_t *run;
        char *text;
        const char *deep = "{\"_id\":\"M1\",\"firstName\":\"Ann\",\"meta\":{\"o\":{\"a\":"
                           "{\"x\":1,\"y\":2},\"b\":3}},\"botMeta\":{\"tempData\":{}}}";

        assert_int_equal(run_code("self.member.meta.o.a.x = 5; self.member.meta.o.b = nil", LIMITS,
                                  deep, &err, &run),
                         SCRIPT_DONE);
        text = json_dumps(script_run_member_ops(run), JSON_COMPACT);
        assert_string_equal(text, "[{\"op\":\"set\",\"path\":\"member.meta.o.a.x\",\"value\":5},"
                                  "{\"op\":\"set\",\"path\":\"member.meta.o.b\",\"value\":null}]");
        free(text);
        script_run_free(run);
        assert_int_equal(run_code("self.member.meta.o.a['p.q'] = 1", LIMITS, deep, &err, &run),
                         SCRIPT_DONE);
        {
            /* compared as JSON: a Lua table's keys come in no fixed order */
            json_t *want = load("[{\"op\":\"set\",\"path\":\"member.meta.o.a\",\"value\":"
                                "{\"x\":1,\"y\":2,\"p.q\":1}}]");
            assert_true(json_equal(script_run_member_ops(run), want));
            json_decref(want);
        }
        script_run_free(run);
    }
    /* elsewhere: ignored */
    assert_ops("self.member.tags[1] = 'x'; self.member._id = 'M2'; "
               "self.member.botMeta.tree = 'T9'; self.member.locale = 'fr'",
               "[]");
    /* against the rules: the run fails, nothing is kept */
    assert_null(ops_of("self.member.meta.ok = 1; self.member.firstName = 5", &err));
    assert_int_equal(err.code, BG_ERR_SCRIPT);
    assert_non_null(strstr(err.msg, "self.firstName"));
    assert_null(ops_of("self.member.meta['a.b'] = 1", &err));
    assert_non_null(strstr(err.msg, "has a dot"));
    assert_null(ops_of("self.member.meta = 'x'", &err));
    assert_non_null(strstr(err.msg, "self.meta must be a table"));
    assert_null(ops_of("self.member = 1", &err));
    assert_non_null(strstr(err.msg, "self.member must stay a table"));
    assert_null(ops_of("self.member.botMeta.subscribed = 'yes'", &err));
    /* a failed run has no ops */
    {
        script_run_t *run;
        assert_int_equal(run_code("self.member.meta.a = 1; error('no')", LIMITS, NULL, &err, &run),
                         SCRIPT_FAILED);
        assert_null(script_run_member_ops(run));
        script_run_free(run);
    }
}

static void test_cache(void **state)
{
    script_cache_t *c = script_cache_new(LIMITS, 2);
    const script_t *a, *b;
    bg_error_t err;

    (void)state;
    assert_non_null(c);
    a = script_cache_get(c, "n1", "return 1", &err);
    assert_non_null(a);
    assert_ptr_equal(script_cache_get(c, "n1", "return 1", &err), a);
    b = script_cache_get(c, "n1", "return 2", &err); /* new code: compiled again */
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    assert_non_null(script_cache_get(c, "n2", "return 1", &err)); /* full: cleared, refilled */
    assert_null(script_cache_get(c, "n3", "return +", &err));
    assert_non_null(strstr(err.msg, "n3:1:"));
    assert_int_equal(script_cache_limits(c).max_memory_kb, SCRIPT_MAX_MEMORY_KB_DEFAULT);
    script_cache_free(c);
}

/* C functions whose loops run no hook are bounded another way. */
static void test_work_outside_the_vm(void **state)
{
    script_limits_t lim = {100000, SCRIPT_MAX_MEMORY_KB_DEFAULT, 0, NULL};

    (void)state;
    assert_result("return #string.rep('', 1e15) + #string.rep('', 1e15, '')", "0");
    assert_result("return #string.rep('ab', 3, ',')", "8");
    assert_fails("return string.find(string.rep('a', 5000), string.rep('a*', 10) .. 'b')", LIMITS,
                 "instruction limit exceeded");
    assert_fails("local s = string.rep('a', 100000)\nreturn s:find(string.rep('a', 5000), 1, "
                 "true)",
                 LIMITS, "test:2: instruction limit exceeded");
    assert_result("return (('a  b   c'):gsub('%s+', ' '))", "\"a b c\"");
    assert_result("return {('k=v'):match('^(%w+)=(%w+)$')}", "[\"k\",\"v\"]");
    assert_result("return ('x'):rep(3000):find('y', 1, true) == nil", "true");
    assert_fails("table.move({}, 1, 1e15, 2)", LIMITS, "table.move: more than");
    assert_result("return table.move({1, 2, 3}, 1, 3, 2)", "[1,1,2,3]");
    assert_fails("setmetatable({}, {__gc = function() while true do end end})", LIMITS,
                 "__gc is not available");
    assert_result("return getmetatable(setmetatable({}, {__index = {a = 1}})).__index.a", "1");
    /* a table that refers to one subtable twice per level would expand to 2^40 values */
    assert_fails("local t = {}\nfor i = 1, 40 do t = {t, t} end\nreturn json.encode(t)", LIMITS,
                 "more values than a conversion may build");
    assert_fails("local s = string.rep('x', 100000)\nlocal t = {}\nfor i = 1, 100 do t[i] = s "
                 "end\nreturn json.encode(t)",
                 LIMITS, "more text than a conversion may build");
    /* copying a large string over and over: charged by what it allocates */
    assert_fails("local s = string.rep('x', 200000)\nfor i = 1, 1e6 do local t = s .. i end", lim,
                 "instruction limit exceeded (100000)");
}

/* A monotonic clock for the time limit: the real one, and one that moves 1 ms a read. */
static int64_t real_clock_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t fake_now_us;

static int64_t fake_clock_us(void)
{
    return fake_now_us += 1000;
}

/* Work done inside C library calls counts against the instruction cap: loops of calls that
 * each stay under any per-call bound (issue 27: 80 finds of 187 ms, 17.7 s in all) end at
 * once with 126. */
static void test_c_work_is_charged(void **state)
{
    static const char *const loops[] = {
        "local s=('a'):rep(5000) for i=1,80 do s:find('.-x') end",
        "local s=('a'):rep(5000) for i=1,80 do s:gsub('.-x', '') end",
        "local s=('a'):rep(5000) for i=1,80 do for w in s:gmatch('.-x') do end end",
        "local t={} for i=1,20000 do t[i]=(i*7919)%20011 end for k=1,80 do table.sort(t) end",
        "local t={} for i=1,30000 do t[i]=i end for k=1,1000 do table.insert(t,1,0) "
        "table.remove(t,1) end",
        "local t={} for i=1,30000 do t[i]='' end for k=1,1000 do table.concat(t) end",
        "local s=('1'):rep(300000) for k=1,1000 do local x=tonumber(s) + s end",
        "local s=('a'):rep(300000) for k=1,1000 do local x=utf8.len(s) end",
        "local s=('a'):rep(7000) for k=1,100000 do local x=s:byte(1,-1) end",
    };
    script_limits_t timed = {1000000000, SCRIPT_MAX_MEMORY_KB_DEFAULT, 50, real_clock_us};
    size_t i;
    int64_t t0;

    (void)state;
    for (i = 0; i < sizeof(loops) / sizeof(loops[0]); i++) {
        t0 = real_clock_us();
        assert_fails(loops[i], LIMITS, "instruction limit exceeded (1000000)");
        /* unbounded, each of these ran for seconds; charged, they end after a few calls */
        if (real_clock_us() - t0 > 1000000)
            fail_msg("%s: took %lld ms", loops[i], (long long)(real_clock_us() - t0) / 1000);
        /* with no instruction cap to speak of, the time limit ends them */
        t0 = real_clock_us();
        assert_fails(loops[i], timed, "limit exceeded");
        if (real_clock_us() - t0 > 1000000)
            fail_msg("%s: took %lld ms", loops[i], (long long)(real_clock_us() - t0) / 1000);
    }
    /* what node code commonly does still fits */
    assert_result("return ('  hello  '):match('^%s*(.-)%s*$')", "\"hello\"");
    assert_result("return #(('x'):rep(2000) .. '  '):match('^%s*(.-)%s*$')", "2000");
    assert_result("local b = ('{\"a\":1,'):rep(3000) .. '\"token\":\"abc\"}'\n"
                  "return b:match('\"token\":\"(.-)\"')",
                  "\"abc\"");
    assert_result("local t = {} for i = 1, 2000 do t[i] = (i * 7) % 2001 end table.sort(t)\n"
                  "return {t[1], t[2000], table.concat({1, 2, 3}, ',')}",
                  "[1,2000,\"1,2,3\"]");
    assert_result("local t = {1, 3} table.insert(t, 2, 2) table.insert(t, 4) "
                  "return {table.remove(t, 1), table.remove(t), table.unpack(t)}",
                  "[1,4,2,3]");
    /* a table function does not run metamethods in its C loop */
    assert_fails("table.sort(setmetatable({}, {__len = function() return 1e9 end}))", LIMITS,
                 "table.sort: a table with __len is not available");
    assert_fails("table.concat(setmetatable({}, {__index = rawlen}), '', 1, 1e6)", LIMITS,
                 "table.concat: a table with __index is not available");
}

/* BOTGATE_SCRIPT_MAX_MS: the hook reads the clock; past the limit the run fails (126), pcall
 * cannot catch it, and the time spent waiting for http.request does not count. */
static void test_time_limit(void **state)
{
    script_limits_t lim = {1000000000, SCRIPT_MAX_MEMORY_KB_DEFAULT, 50, fake_clock_us};
    script_run_t *run;
    bg_error_t err;

    (void)state;
    assert_fails("local x = 0\nwhile true do x = x + 1 end", lim,
                 "test:2: time limit exceeded (50 ms)");
    assert_fails("while true do pcall(function() while true do end end) end", lim,
                 "time limit exceeded (50 ms)");
    assert_fails("self.member.meta.x = 1\nwhile true do end", lim, "time limit exceeded");
    /* a run that ends past the limit keeps nothing either */
    assert_int_equal(run_code("self.member.meta.x = 1\nlocal y = 0\nfor i = 1, 60 * 250 do "
                              "y = y + 1 end",
                              lim, NULL, &err, &run),
                     SCRIPT_FAILED);
    assert_null(script_run_member_ops(run));
    script_run_free(run);
    /* 10 s between the call and its answer: not the script's time */
    assert_int_equal(run_code("local r = http.request{url='http://h/x'}\nself.member.meta.s = "
                              "r.status",
                              lim, NULL, &err, &run),
                     SCRIPT_NEED_HTTP);
    fake_now_us += 10 * 1000 * 1000;
    script_run_http_done(run, 200, "", 0, NULL, NULL);
    assert_int_equal(script_run_resume(run, &err), SCRIPT_DONE);
    assert_int_equal(json_array_size(script_run_member_ops(run)), 1);
    script_run_free(run);
}

/* tostring and string.format show no heap or code address. */
static void test_no_addresses(void **state)
{
    (void)state;
    assert_result("local t, f = {}, string.len\n"
                  "return {tostring(t), tostring(f), tostring(t), tostring({}), "
                  "string.format('%s|%5s', t, 1), tostring(json.null)}",
                  "[\"table: 1\",\"function: 2\",\"table: 1\",\"table: 3\",\"table: 1|    1\","
                  "\"userdata: 4\"]");
    assert_result("return tostring(setmetatable({}, {__tostring = function() return 'me' end}))",
                  "\"me\"");
    assert_result("return {tostring(1.5), tostring(nil), tostring(true), ('%s'):format('x')}",
                  "[\"1.5\",\"nil\",\"true\",\"x\"]");
    assert_fails("return string.format('%p', {})", LIMITS, "%p is not available");
    assert_result("return tostring(print) == tostring(nil) and not tostring(string.len):find('0x')",
                  "true");
}

/* What a run writes back is bounded by the memory cap as the next run loads it (issue 27: 130
 * references to one 30 KB string wrote a 3.9 MB member that failed every later run). */
static void test_write_back_bounded(void **state)
{
    script_run_t *run;
    bg_error_t err;
    json_t *big;
    char *text;

    (void)state;
    assert_int_equal(run_code("local s = ('x'):rep(30000)\nfor i = 1, 130 do "
                              "self.member.meta['k' .. i] = s end",
                              LIMITS, NULL, &err, &run),
                     SCRIPT_FAILED);
    assert_non_null(strstr(err.msg, "takes more than the memory limit (1024 KiB)"));
    assert_null(script_run_member_ops(run));
    script_run_free(run);
    /* what fits is written, and the next run loads it */
    assert_int_equal(run_code("local s = ('x'):rep(30000)\nfor i = 1, 20 do "
                              "self.member.meta['k' .. i] = s end",
                              LIMITS, NULL, &err, &run),
                     SCRIPT_DONE);
    assert_int_equal(json_array_size(script_run_member_ops(run)), 20);
    script_run_free(run);
    big = load(MEMBER);
    for (int i = 0; i < 20; i++) {
        char key[8];
        char *v = malloc(30001);
        memset(v, 'x', 30000);
        v[30000] = '\0';
        snprintf(key, sizeof(key), "k%d", i);
        json_object_set_new(json_object_get(big, "meta"), key, json_string(v));
        free(v);
    }
    text = json_dumps(big, JSON_COMPACT);
    assert_int_equal(run_code("return #self.member.meta.k1", LIMITS, text, &err, NULL),
                     SCRIPT_DONE);
    free(text);
    json_decref(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forbidden_absent),
        cmocka_unit_test(test_no_state_between_runs),
        cmocka_unit_test(test_instruction_cap),
        cmocka_unit_test(test_memory_cap),
        cmocka_unit_test(test_error_line),
        cmocka_unit_test(test_self),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_http_yield),
        cmocka_unit_test(test_http_pcall_yields),
        cmocka_unit_test(test_member_set_rules),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_work_outside_the_vm),
        cmocka_unit_test(test_c_work_is_charged),
        cmocka_unit_test(test_time_limit),
        cmocka_unit_test(test_no_addresses),
        cmocka_unit_test(test_write_back_bounded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
