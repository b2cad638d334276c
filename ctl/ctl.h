/* ctl.h - what the files of botgatectl share: its options, its errors, its Redis (redis.c)
 * and the output and input of records (records.c). */
#ifndef BOTGATE_CTL_H
#define BOTGATE_CTL_H

#include "../store/keys.h"

#include <hiredis/hiredis.h>
#include <jansson.h>

/* Exit statuses: a command that failed; a command line that is not understood. */
#define CTL_FAIL  1
#define CTL_USAGE 2

/* The options of one command line, as main.c parsed them. Owned by main (freed there). */
typedef struct ctl_opts {
    const char *app;     /* --app: the app of a new token; else a filter of list/get */
    json_t *scopes;      /* --scope ... (array of strings; NULL when none) */
    json_t *channels;    /* --channel ... (array of strings; NULL when none) */
    const char *label;   /* --label */
    const char *expires; /* --expires-in */
    const char *hash;    /* --hash: a token by the hex SHA-256 it is stored under */
    const char *url;     /* --url: a subscription's */
    const char *events;  /* --events: a subscription's event types, comma-separated */
    int json;            /* --json: machine output */
    const char *group;   /* "token", "channel", ... for messages and help */
    json_t *members;     /* broadcast create: --member ..., --recipient ..., --tag ... */
    json_t *recipients;
    json_t *tags;
    int watch;   /* broadcast status --watch */
    char **args; /* the operands, in order */
    int nargs;
} ctl_opts_t;

/* Prints "botgatectl: <message>" on stderr; returns CTL_FAIL. */
int ctl_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- redis.c ---- */

extern char ctl_prefix[STORE_PREFIX_MAX];

/* The Redis URL to use: the --redis-url option when given (url not NULL), else
 * BOTGATE_REDIS_URL, else redis://127.0.0.1:6379/0. Connects only when first needed. */
void ctl_redis_use(const char *url);
/* Connects (once) to the URL's Redis, or to the Cluster of BOTGATE_REDIS_CLUSTER. 0, or
 * CTL_FAIL after printing why. */
int ctl_redis_connect(void);
void ctl_redis_close(void);
/* Runs argv (argv[1], or EVAL's first key argv[3], routes it in a Cluster); the reply, or NULL
 * after printing the error (an error reply included). lens may be NULL. */
redisReply *ctl_redis_command(int argc, const char **argv, const size_t *lens);
/* SET key value; 0 or CTL_FAIL. */
int ctl_redis_set(const char *key, const char *value);

/* One command to run on every key a scan finds; the key goes in argv[1]. */
typedef struct ctl_fetch {
    int argc;
    const char *argv[4];
} ctl_fetch_t;

/* Called for each key found with the replies of the fetches, in order (never NULL, never an
 * error). Returns 0 to go on, else that value ends the scan. */
typedef int ctl_scan_fn(void *arg, const char *key, redisReply **replies);

/* Every key matching pattern, by SCAN with a cursor (never KEYS: it blocks a big Redis) on
 * the server, or on every master of a Cluster; each batch's fetches pipelined on the node that
 * holds them. A key may come twice or not at all when records change meanwhile (SCAN's
 * guarantee). 0, the value fn ended with, or CTL_FAIL after printing why. */
int ctl_redis_scan(const char *pattern, const ctl_fetch_t *fetch, int nfetch, ctl_scan_fn *fn,
                   void *arg);

/* ---- records.c ---- */

/* The JSON object in path ("-": stdin); NULL after printing why, naming path. */
json_t *ctl_load_file(const char *path);
/* Prints a record: indented, or on one line with --json. */
void ctl_print_record(const ctl_opts_t *o, const json_t *record);
/* A text table's cell: s, "-" when empty, tabs and newlines shown as spaces. */
void ctl_print_cell(const char *s, int last);
/* A list's output: JSON array with --json (records streamed, one per line), else the
 * header's line then one line a record. */
void ctl_list_begin(const ctl_opts_t *o, const char *header);
void ctl_list_item(const ctl_opts_t *o, const json_t *record);
void ctl_list_end(const ctl_opts_t *o, size_t n);

int ctl_channel_put(const ctl_opts_t *o);
int ctl_channel_list(const ctl_opts_t *o);
int ctl_channel_get(const ctl_opts_t *o);
int ctl_channel_delete(const ctl_opts_t *o);
int ctl_member_put(const ctl_opts_t *o);
int ctl_member_list(const ctl_opts_t *o);
int ctl_member_get(const ctl_opts_t *o);
int ctl_member_delete(const ctl_opts_t *o);
int ctl_tree_import(const ctl_opts_t *o);
int ctl_tree_list(const ctl_opts_t *o);
int ctl_tree_get(const ctl_opts_t *o);
int ctl_tree_delete(const ctl_opts_t *o);
int ctl_get(const ctl_opts_t *o); /* get KIND ID...: routes to the commands above */

/* ---- tags.c: the tag index of contract.md section 13 ---- */

/* The member's write and delete name every key their scripts touch among KEYS (a Redis Cluster
 * refuses others while their slot migrates): the record is read first, its tags' index keys
 * computed here, and the script runs only if the record is still the one read (else read
 * again, at most CTL_TAG_TRIES times). */
#define CTL_TAG_TRIES 10

/* ctl_tag_script's first lines: the stored record is still the one read (ARGV[1], ARGV[2] "1"
 * when one was), else "changed"; KEYS[2 + ARGV[6]] on: the old tags' index keys (ARGV[4] of them),
 * then the new. */
#define CTL_TAG_CHECK_LUA                                                                          \
    "local cur = redis.call('GET', KEYS[1]) "                                                      \
    "if (cur and (ARGV[2] ~= '1' or cur ~= ARGV[1])) or (not cur and ARGV[2] == '1') then "        \
    "return 'changed' end local first, nold = 2 + tonumber(ARGV[6]), tonumber(ARGV[4]) "

/* Runs script (KEYS: key, then extra_keys of the caller, then the index keys of the stored
 * record's tags, then those of text's; ARGV: the record read, "1" when there was one, member_id,
 * how many index keys of the stored record, text or "", how many extra_keys) until the record read
 * was still stored: the script's reply (freeReplyObject), or NULL after printing why. The
 * script returns the string "changed" when the record is no longer the one read. */
redisReply *ctl_tag_script(const char *script, const char *channel, const char *member_id,
                           const char *key, const char *const *extra_keys, size_t n_extra,
                           const char *text);

/* Stores a member record (JSON text) at key, its tags' index with it: 0 or CTL_FAIL. */
int ctl_member_write(const char *channel, const char *member_id, const char *key, const char *text);
int ctl_member_reindex(const ctl_opts_t *o); /* member reindex --channel C */

/* ---- broadcasts.c ---- */

int ctl_broadcast_create(const ctl_opts_t *o); /* --channel C --member|--recipient|--tag FILE */
int ctl_broadcast_status(const ctl_opts_t *o); /* ID [--watch] */
int ctl_broadcast_cancel(const ctl_opts_t *o); /* ID */

/* ---- tokens.c ---- */

int ctl_token_create(const ctl_opts_t *o);
int ctl_token_revoke(const ctl_opts_t *o);
int ctl_token_list(const ctl_opts_t *o);
int ctl_token_get(const ctl_opts_t *o);
int ctl_token_delete(const ctl_opts_t *o);

/* ---- apps.c ---- */

int ctl_app_secret(const ctl_opts_t *o); /* app secret rotate --app A */

/* ---- subscriptions.c ---- */

int ctl_subscription_add(const ctl_opts_t *o);
int ctl_subscription_list(const ctl_opts_t *o);
int ctl_subscription_delete(const ctl_opts_t *o);

#endif
