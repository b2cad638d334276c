/* eval.h - Lua scripts run by their SHA-1 (EVALSHA), the command written in Redis's wire format
 * here from a head made once per thread: hiredis 0.14's formatter costs thousands of
 * instructions for a script of a few hundred bytes (bench/README.md). A server that does not
 * know a script (a restart, a failover, SCRIPT FLUSH) answers NOSCRIPT: the call then goes once
 * more as EVAL with the script's text, and the server keeps it for the next. */
#ifndef BOTGATE_STORE_EVAL_H
#define BOTGATE_STORE_EVAL_H

#include "store.h"

#include <stddef.h>
#include <stdint.h>

/* A script. Declare each one static _Thread_local: every thread fills its own head on its
 * first call, so that no lock is needed. */
typedef struct store_script {
    const char *text;
    size_t len;
    size_t _head_len; /* 0 until the first call */
    char _head[64];   /* "$7\r\nEVALSHA\r\n$40\r\n<SHA-1 in hex>\r\n" */
} store_script_t;

#define STORE_SCRIPT(text)                                                                         \
    {                                                                                              \
        (text), sizeof(text) - 1, 0,                                                               \
        {                                                                                          \
            0                                                                                      \
        }                                                                                          \
    }

/* Redis's clock, in ms, as a script's local `now`: the one every instance shares. Every
 * script that needs it starts with this text. */
#define STORE_LUA_NOW_MS                                                                           \
    "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "

typedef struct store_eval store_eval_t;

#define STORE_EVAL_WORDS_MAX 128 /* store_outbox_end: 118 words at most (50 index keys) */

/* Runs script on nwords words (at most STORE_EVAL_WORDS_MAX): nkeys keys, then its arguments. lens
 * NULL: each word is a C string. Every key shares the first one's slot (it names the server in a
 * cluster). cb, when not NULL, gets the final reply (NULL when the command failed or timed out)
 * unless the call is cancelled first. REDISC_OK with *out set (when out is not NULL; valid until cb
 * runs or store_eval_cancel), else REDISC_DOWN or REDISC_BUSY: nothing was sent and cb will not
 * run. */
int store_eval(store_t *st, store_script_t *script, int nkeys, int nwords, const char *const *words,
               const size_t *lens, redisc_cb *cb, void *arg, store_eval_t **out);
/* cb will not run; the command still ends in Redis. */
void store_eval_cancel(store_eval_t *ev);
/* A script's number in its reply: an integer, or a string of digits (Lua's tostring); -1 for
 * anything else (NULL included). */
int64_t store_eval_int(const redisReply *r);
/* A script's string in its reply ("" for anything else), its length in *len when not NULL. */
const char *store_eval_str(const redisReply *r, size_t *len);

#endif
