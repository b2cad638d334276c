/* script_lib.c - node code's library functions whose C loops run no hook: each is wrapped so
 * that the work it is about to do (from the size of its input) is charged to the instruction
 * cap first, and tostring / string.format show no address. */
#include "script_lib.h"

#include "script_run.h"

#include <lauxlib.h>
#include <lualib.h>

#include <ctype.h>
#include <string.h>

/* What one unit (one VM instruction's worth, about 4-7 ns here) buys in each C loop, measured
 * on Lua 5.4.4 (bench/README.md): a matcher step about 15 ns, a table element moved or
 * concatenated about 20 ns, a comparison of table.sort about 35 ns, a byte converted to a
 * number about 3 ns, a byte of utf8.len about 1.5 ns. Charges err on the high side. */
#define UNITS_PER_STEP    1 /* of the pattern matcher, as pattern_work() bounds them */
#define UNITS_PER_ELEMENT 4 /* table.insert/remove/concat, per element read or moved */
#define UNITS_PER_COMPARE 3 /* table.sort */
#define BYTES_PER_UNIT    2 /* utf8.len / offset / codepoint scanning */

/* ---- the pattern matcher's worst case ---- */

/* Lua's character classes (lstrlib.c match_class): cl a class letter, or any other byte that
 * then stands for itself. */
static int class_match(int c, int cl)
{
    int res;

    switch (tolower(cl)) {
    case 'a':
        res = isalpha(c);
        break;
    case 'c':
        res = iscntrl(c);
        break;
    case 'd':
        res = isdigit(c);
        break;
    case 'g':
        res = isgraph(c);
        break;
    case 'l':
        res = islower(c);
        break;
    case 'p':
        res = ispunct(c);
        break;
    case 's':
        res = isspace(c);
        break;
    case 'u':
        res = isupper(c);
        break;
    case 'w':
        res = isalnum(c);
        break;
    case 'x':
        res = isxdigit(c);
        break;
    default:
        return cl == c;
    }
    return isupper(cl) ? !res : res != 0;
}

/* Past the set that starts at p[i] ('['), as Lua's matcher reads it (a ']' right after '[' or
 * "[^" belongs to the set). */
static size_t skip_set(const char *p, size_t plen, size_t i)
{
    i++;
    if (i < plen && p[i] == '^')
        i++;
    do {
        if (i >= plen)
            return plen;
        if (p[i++] == '%' && i < plen)
            i++;
    } while (i < plen && p[i] != ']');
    return i + 1 < plen ? i + 1 : plen;
}

/* Whether byte c matches the single item p[i..e) ('.', %x, [set] or a byte). */
static int item_match(int c, const char *p, size_t i, size_t e)
{
    size_t k, ec = e - 1; /* a set: its closing ']' */
    int yes = 1;

    switch (p[i]) {
    case '.':
        return 1;
    case '%':
        return i + 1 < e && class_match(c, (unsigned char)p[i + 1]);
    case '[':
        k = i + 1;
        if (k < ec && p[k] == '^') {
            yes = 0;
            k++;
        }
        for (; k < ec; k++) {
            if (p[k] == '%' && k + 1 < ec) {
                k++;
                if (class_match(c, (unsigned char)p[k]))
                    return yes;
            } else if (k + 2 < ec && p[k + 1] == '-') {
                if ((unsigned char)p[k] <= c && c <= (unsigned char)p[k + 2])
                    return yes;
                k += 2;
            } else if ((unsigned char)p[k] == c) {
                return yes;
            }
        }
        return !yes;
    default:
        return (unsigned char)p[i] == c;
    }
}

/* The longest run of subject bytes that the item p[i..e) matches one after another: how many
 * times a quantifier on it can try the rest of the pattern from one place. */
static size_t longest_run(const unsigned char *s, size_t n, const char *p, size_t i, size_t e)
{
    size_t best = 0, run = 0, k;

    if (p[i] == '.')
        return n;
    for (k = 0; k < n; k++) {
        run = item_match(s[k], p, i, e) ? run + 1 : 0;
        if (run > best)
            best = run;
    }
    return best;
}

#define SPECIALS "^$*+?.([%-"

/* Whether byte c is one of set (a NUL byte never is). */
static int one_of(char c, const char *set)
{
    return c != '\0' && strchr(set, c) != NULL;
}

/* The steps of comparing the literal lit[0..len) at every start in s (each comparison stops at
 * the first byte that differs), and in *found where it occurs whole. Stops once past limit. */
static double literal_steps(const unsigned char *s, size_t n, const char *lit, size_t len,
                            double limit, size_t *found)
{
    const unsigned char *at = s, *end = s + n;
    double steps = (double)n + 1;
    size_t k;

    *found = 0;
    while (at < end && steps <= limit && (at = memchr(at, lit[0], (size_t)(end - at))) != NULL) {
        for (k = 1; k < len && at + k < end && at[k] == (unsigned char)lit[k]; k++)
            ;
        steps += (double)k;
        *found += k == len;
        at++;
    }
    return steps;
}

/* An upper bound of the steps Lua's matcher takes for pattern p over subject s (a find, match,
 * gsub or gmatch over all of it), from the matcher's structure: an item without a quantifier is
 * tried once per place it is reached; x*, x+ and x- try the rest of the pattern at most (longest
 * run of x in s) + 1 times from each place, x? twice; %b and a back-reference scan at most n
 * bytes, once. A leading literal is compared at every start (counted as the matcher compares
 * it), and only where it occurs whole does the rest run. anchor: '^' anchors (not in gmatch).
 * plain: a literal search. Each quantified item also costs a scan of s for its longest run; past
 * limit the estimate stops there (the call is refused anyway), so that estimating costs no more
 * than the work it may allow. */
static double pattern_work(const char *p, size_t plen, const unsigned char *s, size_t n, int anchor,
                           int plain, double limit)
{
    double starts = (double)n + 1, total = 0, mult = 1, cost, scan;
    size_t i = 0, e, lit = 0, run, found;
    int quantified, special = 0;

    for (e = 0; e < plen && !special; e++)
        special = one_of(p[e], SPECIALS);
    if (plain || !special)
        return (double)(n + 1) * (double)(plen > 0 ? plen : 1);
    if (anchor && p[0] == '^') {
        starts = 1;
        i = 1;
    }
    /* the literal bytes the pattern starts with: only the starts where they occur go on */
    while (i + lit < plen && p[i + lit] != '\0' && !one_of(p[i + lit], SPECIALS) &&
           (i + lit + 1 >= plen || !one_of(p[i + lit + 1], "*+-?")))
        lit++;
    if (lit > 0) {
        total = literal_steps(s, n, p + i, lit, limit, &found);
        mult = starts < (double)found ? starts : (double)found;
        i += lit;
    } else {
        mult = starts;
    }
    while (i < plen) {
        char ch = p[i];
        if (ch == '(' || ch == ')' || (ch == '$' && i + 1 == plen)) {
            total += mult;
            i++;
            continue;
        }
        if (ch == '%' && i + 1 < plen && (p[i + 1] == 'b' || isdigit((unsigned char)p[i + 1]))) {
            total += mult * ((double)n + 1); /* a balance or a back-reference: one scan */
            i += p[i + 1] == 'b' ? 4 : 2;
            continue;
        }
        if (ch == '%' && i + 1 < plen && p[i + 1] == 'f') {
            i += 2;
            e = i < plen && p[i] == '[' ? skip_set(p, plen, i) : i + 1;
            total += mult * (double)(e - i + 1);
            i = e;
            continue;
        }
        e = ch == '%' ? i + 2 : ch == '[' ? skip_set(p, plen, i) : i + 1;
        if (e > plen)
            e = plen;
        cost = (double)(e - i); /* a set is read byte by byte */
        quantified = e < plen && one_of(p[e], "*+-");
        if (quantified) {
            scan = (double)n * cost / 4;
            if (total + scan > limit)
                return total + scan;
            run = longest_run(s, n, p, i, e);
            total += scan + mult * ((double)run + 1) * cost;
            mult *= (double)run + 1;
            e++;
        } else if (e < plen && p[e] == '?') {
            total += mult * cost;
            mult *= 2;
            e++;
        } else {
            total += mult * cost;
        }
        i = e;
    }
    return total + mult;
}

/* string.find/match/gmatch/gsub: upvalue 1 the original, upvalue 2 its kind. */
enum { PAT_FIND, PAT_MATCH, PAT_GMATCH, PAT_GSUB };

static int guarded_match(lua_State *L)
{
    int kind = (int)lua_tointeger(L, lua_upvalueindex(2));
    size_t n, plen;
    const char *s = luaL_checklstring(L, 1, &n), *p = luaL_checklstring(L, 2, &plen);
    int plain = kind == PAT_FIND && lua_toboolean(L, 4);
    double work = pattern_work(p, plen, (const unsigned char *)s, n, kind != PAT_GMATCH, plain,
                               script_budget(L) / UNITS_PER_STEP);

    if (kind == PAT_GSUB)
        work += (double)n + 1; /* a replacement per match at most */
    script_charge(L, work * UNITS_PER_STEP);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    script_charge(L, 0);
    return lua_gettop(L);
}

/* ---- the rest: each charged by the size of its input before the original runs ---- */

/* The length a table function reads from the table at idx. Its metatable may not have __len,
 * __index or __newindex: the C loop would run them (and read __len twice) with no hook. */
static lua_Integer plain_len(lua_State *L, int idx, const char *fname)
{
    static const char *const fields[] = {"__len", "__index", "__newindex"};
    size_t i;

    luaL_checktype(L, idx, LUA_TTABLE);
    for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (luaL_getmetafield(L, idx, fields[i]) != LUA_TNIL)
            luaL_error(L, "%s: a table with %s is not available in node code", fname, fields[i]);
    }
    return (lua_Integer)lua_rawlen(L, idx);
}

static double str_len_at(lua_State *L, int idx)
{
    return lua_type(L, idx) == LUA_TSTRING ? (double)lua_rawlen(L, idx) : 0;
}

/* Bytes of the string arguments from idx on: a number given as text is converted in C, at
 * about 3 ns a byte (strtod). */
static double string_args(lua_State *L, int idx)
{
    double bytes = 0;
    int top = lua_gettop(L);

    for (; idx <= top; idx++)
        bytes += str_len_at(L, idx) + 1;
    return bytes;
}

/* How many positions i..j holds (0 when j < i). */
static double count_of(lua_Integer i, lua_Integer j)
{
    return j >= i ? (double)j - (double)i + 1 : 0;
}

/* The positions string.byte / utf8.codepoint read: s:byte(i, j), j defaulting to i, negative
 * ones counted from the end. */
static double positions(lua_State *L, size_t len)
{
    lua_Integer i = luaL_optinteger(L, 2, 1), j = luaL_optinteger(L, 3, i);

    if (i < 0)
        i = -i > (lua_Integer)len ? 1 : (lua_Integer)len + i + 1;
    if (j < 0)
        j = -j > (lua_Integer)len ? 0 : (lua_Integer)len + j + 1;
    if (j > (lua_Integer)len)
        j = (lua_Integer)len;
    return count_of(i, j);
}

enum {
    G_SORT,
    G_INSERT,
    G_REMOVE,
    G_CONCAT,
    G_UNPACK,
    G_BYTE,
    G_UTF8_CODEPOINT,
    G_UTF8_SCAN,   /* utf8.len, utf8.offset */
    G_STRING_ARGS, /* tonumber, math.max/min, string.char, utf8.char, string.pack, arithmetic */
    G_FORMAT_ARG,  /* string.unpack, packsize: the format's length */
};

/* A library function (upvalue 1) with its kind (upvalue 2): charges, then calls it. */
static int guarded_call(lua_State *L)
{
    int kind = (int)lua_tointeger(L, lua_upvalueindex(2));
    double units = 1, n, k;

    switch (kind) {
    case G_SORT:
        n = (double)plain_len(L, 1, "table.sort");
        for (k = n, units = n; k > 1; k /= 2) /* n log2 n comparisons at most, on average */
            units += n;
        units *= UNITS_PER_COMPARE;
        break;
    case G_INSERT: /* table.insert(t, pos, v) moves the elements from pos on */
        n = (double)plain_len(L, 1, "table.insert");
        if (lua_gettop(L) >= 3)
            units = (n - (double)luaL_checkinteger(L, 2) + 2) * UNITS_PER_ELEMENT;
        break;
    case G_REMOVE: /* table.remove(t, pos) too */
        n = (double)plain_len(L, 1, "table.remove");
        if (!lua_isnoneornil(L, 2))
            units = (n - (double)luaL_checkinteger(L, 2) + 2) * UNITS_PER_ELEMENT;
        break;
    case G_CONCAT:
        n = (double)plain_len(L, 1, "table.concat");
        units = (count_of(luaL_optinteger(L, 3, 1), luaL_optinteger(L, 4, (lua_Integer)n)) + 1) *
                    UNITS_PER_ELEMENT +
                str_len_at(L, 2);
        break;
    case G_UNPACK:
        n = (double)plain_len(L, 1, "table.unpack");
        units = count_of(luaL_optinteger(L, 2, 1), luaL_optinteger(L, 3, (lua_Integer)n)) + 1;
        break;
    case G_BYTE:
    case G_UTF8_CODEPOINT:
        units = positions(L, (size_t)str_len_at(L, 1)) * (kind == G_BYTE ? 1 : 2) + 1;
        break;
    case G_UTF8_SCAN:
        units = str_len_at(L, 1) / BYTES_PER_UNIT + string_args(L, 2) + 1;
        break;
    case G_STRING_ARGS:
        units = string_args(L, 1);
        break;
    case G_FORMAT_ARG:
        units = str_len_at(L, 1) + 1;
        break;
    }
    if (units < 1)
        units = 1;
    script_charge(L, units);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    script_charge(L, 0);
    return lua_gettop(L);
}

/* string.rep (upvalue 1): an empty string repeated n times loops n times without
 * allocating, so the allocator would never see it. */
static int guarded_rep(lua_State *L)
{
    size_t l, lsep = 0;

    luaL_checklstring(L, 1, &l);
    luaL_optlstring(L, 3, "", &lsep);
    if (luaL_checkinteger(L, 2) <= 0 || l + lsep == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

/* table.move (upvalue 1): at most as many elements as the memory cap could hold, since moving
 * nils allocates nothing; charged per element. */
static int guarded_move(lua_State *L)
{
    lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
    lua_Unsigned most = (lua_Unsigned)(script_mem_limit(L) / sizeof(lua_Number));

    if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= most)
        return luaL_error(L, "table.move: more than %I elements", (lua_Integer)most);
    script_charge(L, e >= f ? ((double)e - (double)f + 1) * UNITS_PER_ELEMENT : 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

/* setmetatable (upvalue 1) without __gc: a finalizer may run when the state is closed, where
 * no hook counts its instructions. */
static int guarded_setmetatable(lua_State *L)
{
    if (lua_type(L, 2) == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL)
            return luaL_error(L, "setmetatable: __gc is not available in node code");
        lua_pop(L, 1);
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

/* ---- no addresses: tostring and string.format ---- */

/* The registry key of the weak table that numbers the tables, functions and userdata a run
 * has shown as text. */
static const char NAMES_KEY[] = "botgate.names";

/* Pushes the text of the value at idx: what tostring gives, except that a table, function or
 * userdata without __tostring reads "table: 1", "function: 2" ... (numbered in the order the
 * run first shows them) instead of its heap or code address. */
static void push_text(lua_State *L, int idx)
{
    lua_Integer id;

    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TTABLE:
    case LUA_TFUNCTION:
    case LUA_TUSERDATA:
    case LUA_TLIGHTUSERDATA:
    case LUA_TTHREAD:
        if (luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) {
            lua_pop(L, 1);
            break;
        }
        if (luaL_getsubtable(L, LUA_REGISTRYINDEX, NAMES_KEY) == 0) {
            lua_createtable(L, 0, 1);
            lua_pushliteral(L, "k");
            lua_setfield(L, -2, "__mode");
            lua_setmetatable(L, -2);
        }
        lua_pushvalue(L, idx);
        if (lua_rawget(L, -2) == LUA_TNUMBER) {
            id = lua_tointeger(L, -1);
        } else {
            lua_rawgeti(L, -2, 0); /* the last number given */
            id = lua_tointeger(L, -1) + 1;
            lua_pop(L, 1);
            lua_pushinteger(L, id);
            lua_rawseti(L, -3, 0);
            lua_pushvalue(L, idx);
            lua_pushinteger(L, id);
            lua_rawset(L, -4);
        }
        lua_pop(L, 2);
        lua_pushfstring(L, "%s: %I", luaL_typename(L, idx), id);
        return;
    default:
        break;
    }
    luaL_tolstring(L, idx, NULL);
}

static int safe_tostring(lua_State *L)
{
    luaL_checkany(L, 1);
    push_text(L, 1);
    return 1;
}

/* string.format (upvalue 1): %s of a value without __tostring gets push_text's text, %p is
 * refused, and a number given as text to a numeric conversion is charged by its length. */
static int safe_format(lua_State *L)
{
    size_t len;
    const char *f = luaL_checklstring(L, 1, &len), *end = f + len;
    int arg = 1, top = lua_gettop(L);
    double units = (double)len;

    while ((f = memchr(f, '%', (size_t)(end - f))) != NULL && ++f < end) {
        if (*f == '%') {
            f++;
            continue;
        }
        f += strspn(f, "-+ #0123456789.");
        if (f >= end)
            break;
        if (++arg > top)
            break; /* the original says which argument is missing */
        if (*f == 'p')
            return luaL_error(L, "string.format: %%p is not available in node code");
        if (*f == 's' && lua_type(L, arg) != LUA_TSTRING && lua_type(L, arg) != LUA_TNUMBER) {
            push_text(L, arg);
            lua_replace(L, arg);
        } else if (*f != 's' && *f != 'q') {
            units += str_len_at(L, arg);
        }
        f++;
    }
    script_charge(L, units);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, top, 1);
    return 1;
}

/* ---- installing the guards ---- */

/* Replaces t[name] (t the table on top of the stack) by f with the original as upvalue 1 and
 * kind as upvalue 2. */
static void wrap(lua_State *L, const char *name, lua_CFunction f, int kind)
{
    lua_getfield(L, -1, name);
    lua_pushinteger(L, kind);
    lua_pushcclosure(L, f, 2);
    lua_setfield(L, -2, name);
}

void script_lib_guard(lua_State *L)
{
    static const char *const arith[] = {"__add", "__sub", "__mul", "__div",
                                        "__mod", "__pow", "__unm", "__idiv"};
    size_t i;

    lua_pushglobaltable(L);
    wrap(L, "setmetatable", guarded_setmetatable, 0);
    wrap(L, "tonumber", guarded_call, G_STRING_ARGS);
    lua_pushcfunction(L, safe_tostring);
    lua_setfield(L, -2, "tostring");
    lua_pop(L, 1);

    lua_getglobal(L, LUA_STRLIBNAME);
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    wrap(L, "find", guarded_match, PAT_FIND);
    wrap(L, "match", guarded_match, PAT_MATCH);
    wrap(L, "gmatch", guarded_match, PAT_GMATCH);
    wrap(L, "gsub", guarded_match, PAT_GSUB);
    wrap(L, "rep", guarded_rep, 0);
    wrap(L, "format", safe_format, 0);
    wrap(L, "byte", guarded_call, G_BYTE);
    wrap(L, "char", guarded_call, G_STRING_ARGS);
    wrap(L, "pack", guarded_call, G_STRING_ARGS);
    wrap(L, "unpack", guarded_call, G_FORMAT_ARG);
    wrap(L, "packsize", guarded_call, G_FORMAT_ARG);
    lua_pop(L, 1);

    /* "10" + 1: string's metamethods convert the text in C */
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    for (i = 0; i < sizeof(arith) / sizeof(arith[0]); i++)
        wrap(L, arith[i], guarded_call, G_STRING_ARGS);
    lua_pop(L, 2);
}

int script_open_table(lua_State *L)
{
    luaopen_table(L);
    wrap(L, "move", guarded_move, 0);
    wrap(L, "sort", guarded_call, G_SORT);
    wrap(L, "insert", guarded_call, G_INSERT);
    wrap(L, "remove", guarded_call, G_REMOVE);
    wrap(L, "concat", guarded_call, G_CONCAT);
    wrap(L, "unpack", guarded_call, G_UNPACK);
    return 1;
}

int script_open_math(lua_State *L)
{
    luaopen_math(L);
    wrap(L, "max", guarded_call, G_STRING_ARGS);
    wrap(L, "min", guarded_call, G_STRING_ARGS);
    return 1;
}

int script_open_utf8(lua_State *L)
{
    luaopen_utf8(L);
    wrap(L, "len", guarded_call, G_UTF8_SCAN);
    wrap(L, "codepoint", guarded_call, G_UTF8_CODEPOINT);
    wrap(L, "offset", guarded_call, G_UTF8_SCAN);
    wrap(L, "char", guarded_call, G_STRING_ARGS);
    return 1;
}
