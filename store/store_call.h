/* store_call.h - the calls of store.c as the store's other files make them (store_records.c):
 * a call for a key, sent with its words, answered to its store_cb. Not part of the store's API. */
#ifndef BOTGATE_STORE_STORE_CALL_H
#define BOTGATE_STORE_STORE_CALL_H

#include "store.h"

typedef enum {
    CALL_GET_JSON,   /* GET, value parsed as JSON */
    CALL_GET_STRING, /* GET, value returned as a JSON string */
    CALL_RESOLVE,    /* EVAL RESOLVE_SCRIPT */
    CALL_CAS_READ,   /* GET before a compare-and-set */
    CALL_CAS_WRITE,  /* EVAL CAS_SCRIPT */
    CALL_NODE,       /* HMGET tree _tree node */
    CALL_LOCK,       /* SET NX PX */
    CALL_IGNORE,     /* fire and forget */
} store_call_kind_t;

/* A call of kind for key (copied), answered to cb; NULL when out of memory. */
store_call_t *store_call_new(store_t *st, store_call_kind_t kind, const char *key, store_cb *cb,
                             void *arg);
/* The call for the key the caller built (key_len, what store_key_* returned), or NULL with
 * *status set: the key did not fit (ids are bounded before this, so it means a bad record),
 * or memory ran out. */
store_call_t *store_call_for(store_t *st, store_call_kind_t kind, int key_len, const char *key,
                             store_cb *cb, void *arg, store_status_t *status);
/* Sends c's command (argv, with lens or NUL-terminated): c, or NULL (freed) with *status. */
store_call_t *store_call_start(store_call_t *c, int argc, const char **argv, const size_t *lens,
                               store_status_t *status);
/* GET of c's key. */
store_call_t *store_call_get(store_call_t *c, store_status_t *status);
/* The worker's subscriber connection, made at the first call; NULL when out of memory. */
redisc_t *store_subscriber(store_t *st);

#endif
