/* idemlua.h - an Idempotency-Key record's begin as Lua (C string literals): run as a script of
 * its own (idem.c), or ahead of the limiter's in the call that takes a request's slots ahead
 * (ratelimit.c), on one server, where one script call costs Redis less than two. */
#ifndef BOTGATE_STORE_IDEMLUA_H
#define BOTGATE_STORE_IDEMLUA_H

#include "eval.h"

/* The record's lease is its own TTL: begin sets it to ttl + lease and 'held' to ttl, so the
 * lease runs while the TTL is above 'held' (Redis's clock, without a TIME call), and an answer
 * written before the lease ends is kept at least ttl (no PEXPIRE in the answer's script).
 * Records written before 'held' carry 'lease', the lease's end on TIME's clock. ttl is the one
 * its runner was configured with: another instance's may differ. */
#define IDEM_LEASE_LEFT(k, r_lease, r_held)                                                        \
    "local function lease_left() "                                                                 \
    "if " r_held " then return redis.call('PTTL', " k ") - tonumber(" r_held                       \
    ") end " STORE_LUA_NOW_MS "return tonumber(" r_lease " or '0') - now end "

/* The begin of record k; fp, owner, held (ttl_ms, what 'held' says), ttl (ttl_ms + lease_ms):
 * Lua expressions. Its common case, a new key, is three calls: EXISTS, HSET, PEXPIRE, then
 * run, the statements that say so (an HMGET of the six fields a record that is there needs once
 * cost Redis a seventh more of the whole script; TIME was a fourth call). Every other case
 * returns: {'conflict'}, {'done', status, code, body}, {'wait', ms left}, or {'resume', at,
 * the elements delivered}. Every record has its fp: a key there is never taken for a new one.
 * A duplicate that is told to wait marks the record ('w'), so that the answer's script
 * publishes only for a waiter: it asks again once subscribed, so an answer that came before
 * the mark is seen then. */
/* clang-format off */ /* the lease macro sits in the script where it runs */
#define IDEM_BEGIN_LUA(k, fp, owner, held, ttl, run)                                               \
    "if redis.call('EXISTS', " k ") == 0 then "                                                    \
    "redis.call('HSET', " k ", 'fp', " fp ", 'owner', " owner ", 'held', " held ") "               \
    "redis.call('PEXPIRE', " k ", " ttl ") " run " else "                                          \
    "local r = redis.call('HMGET', " k ", 'fp', 'status', 'code', 'body', 'lease', 'held') "       \
    "if r[1] ~= " fp " then return {'conflict'} end "                                              \
    "if r[2] then return {'done', r[2], r[3], r[4]} end " IDEM_LEASE_LEFT(k, "r[5]", "r[6]")       \
    "local left = lease_left() "                                                                   \
    "if left > 0 then redis.call('HSET', " k ", 'w', '1') return {'wait', tostring(left)} end "    \
    "redis.call('HSET', " k ", 'owner', " owner ", 'held', " held ") "                             \
    "if r[5] then redis.call('HDEL', " k ", 'lease') end "                                         \
    "redis.call('PEXPIRE', " k ", " ttl ") "                                                       \
    "local at = tonumber(redis.call('HGET', " k ", 'at') or '0') "                                 \
    "local out = {'resume', at} "                                                                  \
    "for i = 0, at - 1 do out[#out + 1] = redis.call('HGET', " k ", 'e' .. i) end "                \
    "return out end "
/* clang-format on */

#endif
