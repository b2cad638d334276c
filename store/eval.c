/* eval.c - scripts run by EVALSHA, EVAL once after NOSCRIPT (eval.h). */
#include "eval.h"

#include "../json/numfmt.h"
#include "resp.h"

#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

/* Owned by itself from store_eval until its reply has come (cancelled or not): the command's
 * wire form stays in buf for the EVAL that follows a NOSCRIPT. */
struct store_eval {
    store_t *st;
    store_script_t *script; /* the calling thread's: replies come on the same thread */
    redisc_cb *cb;          /* NULL once cancelled */
    void *arg;
    int argc;        /* words of the command, EVALSHA and the SHA-1 included */
    size_t len;      /* of the command in buf */
    size_t words_at; /* where numkeys starts in buf: the part EVAL shares with EVALSHA */
    char buf[];      /* the command, then the first key with its NUL (its slot) */
};

static void head_make(store_script_t *s)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[SHA_DIGEST_LENGTH];
    char sha[2 * SHA_DIGEST_LENGTH];
    char *p = s->_head;

    SHA1((const unsigned char *)s->text, s->len, md);
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++) {
        sha[2 * i] = hex[md[i] >> 4];
        sha[2 * i + 1] = hex[md[i] & 15];
    }
    p = resp_bulk(p, "EVALSHA", 7);
    p = resp_bulk(p, sha, sizeof(sha));
    s->_head_len = (size_t)(p - s->_head);
}

static void on_eval_reply(redisReply *reply, void *arg);

/* Sends the call as EVALSHA (by_sha) or as EVAL with the script's text. */
static int eval_send(store_eval_t *ev, int by_sha)
{
    const char *key = ev->buf + ev->len;
    store_cmd_t *ignored;
    size_t tail = ev->len - ev->words_at;
    char *cmd, *p;
    int rc;

    if (by_sha)
        return store_command_formatted(ev->st, key, on_eval_reply, ev, ev->buf, ev->len, &ignored);
    if ((cmd = malloc(3 * 24 + 4 + ev->script->len + 8 + tail)) == NULL)
        return REDISC_BUSY;
    p = resp_count(cmd, '*', (size_t)ev->argc);
    p = resp_bulk(p, "EVAL", 4);
    p = resp_bulk(p, ev->script->text, ev->script->len);
    memcpy(p, ev->buf + ev->words_at, tail);
    rc = store_command_formatted(ev->st, key, on_eval_reply, ev, cmd, (size_t)(p - cmd) + tail,
                                 &ignored);
    free(cmd);
    return rc;
}

static void on_eval_reply(redisReply *reply, void *arg)
{
    store_eval_t *ev = arg;

    if (reply != NULL && reply->type == REDIS_REPLY_ERROR &&
        strncmp(reply->str, "NOSCRIPT", 8) == 0 && eval_send(ev, 0) == REDISC_OK)
        return; /* the text goes this once; the server keeps it for the next */
    if (ev->cb != NULL)
        ev->cb(reply, ev->arg);
    free(ev);
}

int store_eval(store_t *st, store_script_t *script, int nkeys, int nwords, const char *const *words,
               const size_t *lens, redisc_cb *cb, void *arg, store_eval_t **out)
{
    size_t size, key_len = lens != NULL ? lens[0] : strlen(words[0]);
    size_t wlens[STORE_EVAL_WORDS_MAX];
    char numkeys[NUMFMT_DEC_SIZE];
    const char *nk;
    store_eval_t *ev;
    char *p;
    int rc;

    if (nwords < 1 || nwords > STORE_EVAL_WORDS_MAX || nkeys < 1 || nkeys > nwords)
        return REDISC_BUSY;
    if (script->_head_len == 0)
        head_make(script);
    size = 24 + script->_head_len + 24 + 24 + key_len + 1;
    for (int i = 0; i < nwords; i++) {
        wlens[i] = lens != NULL ? lens[i] : strlen(words[i]);
        size += 24 + wlens[i] + 2;
    }
    if ((ev = malloc(sizeof(*ev) + size)) == NULL)
        return REDISC_BUSY;
    ev->st = st;
    ev->script = script;
    ev->cb = cb;
    ev->arg = arg;
    ev->argc = 3 + nwords;
    p = resp_count(ev->buf, '*', (size_t)ev->argc);
    memcpy(p, script->_head, script->_head_len);
    p += script->_head_len;
    ev->words_at = (size_t)(p - ev->buf);
    nk = numfmt_dec(numkeys, nkeys);
    p = resp_bulk(p, nk, strlen(nk));
    for (int i = 0; i < nwords; i++)
        p = resp_bulk(p, words[i], wlens[i]);
    ev->len = (size_t)(p - ev->buf);
    memcpy(p, words[0], key_len);
    p[key_len] = '\0';
    if ((rc = eval_send(ev, 1)) != REDISC_OK) {
        free(ev);
        return rc;
    }
    if (out != NULL)
        *out = ev;
    return REDISC_OK;
}

int64_t store_eval_int(const redisReply *r)
{
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        return (int64_t)r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return -1;
}

const char *store_eval_str(const redisReply *r, size_t *len)
{
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (len != NULL)
            *len = 0;
        return "";
    }
    if (len != NULL)
        *len = r->len;
    return r->str;
}

void store_eval_cancel(store_eval_t *ev)
{
    if (ev != NULL)
        ev->cb = NULL;
}
