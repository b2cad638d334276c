/* bcslice.c - the words of a broadcast's accepting scripts for a slice of ids (bcslice.h). */
#include "bcslice.h"

#include "keys.h"
#include "../json/numfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KEYS record, todo, then each member's key (store_bc_member_keys); ARGV keep_ms, then the
 * ids, in the keys' order. Every id is checked before any is added: a refused accept is
 * deleted whole anyway. */
const char store_bc_add_members_script[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'accepting' then return {-1, ''} end "
    "for i = 3, #KEYS do if redis.call('EXISTS', KEYS[i]) == 0 then "
    "return {0, ARGV[i - 1]} end end "
    "redis.call('SADD', KEYS[2], unpack(ARGV, 2)) redis.call('PEXPIRE', KEYS[2], ARGV[1]) "
    "return {#ARGV - 1, ''}";

/* KEYS record, todo, then per recipient its key, the key of the member guessed (the new one's
 * without a guess), the key of the new member; ARGV keep_ms, then per recipient the guess (""
 * none), a new member id, a new member record: the get-or-create of a sendResponses by
 * recipientId (store.c's RESOLVE_SCRIPT), for each. Every key it touches is among KEYS (a
 * Redis Cluster refuses others while their slot migrates): a recipient that is another
 * member's than guessed is not added; the answer names it, {n, '', its place in this run, the
 * member's id, ...}, and it goes again with that guess (store_bc_rslice_t). */
const char store_bc_add_recipients_script[] =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'accepting' then return {-1, ''} end "
    "local n, out = 0, {0, ''} for i = 3, #KEYS, 3 do "
    "local id = redis.call('GET', KEYS[i]) "
    "if id and id ~= ARGV[i - 1] then out[#out + 1] = (i - 3) / 3 out[#out + 1] = id else "
    "if not id or redis.call('EXISTS', KEYS[i + 1]) == 0 then id = ARGV[i] "
    "redis.call('SET', KEYS[i], id) redis.call('SET', KEYS[i + 2], ARGV[i + 1]) end "
    "redis.call('SADD', KEYS[2], id) n = n + 1 end end "
    "if n > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end out[1] = n return out";

const char **store_bc_member_keys(const char *prefix, const char *channel_id,
                                  const char *record_key, const char *todo_key,
                                  const char *const *members, size_t n)
{
    char base[STORE_KEY_MAX], *at;
    size_t bl, len = 0;
    const char **keys;

    if (store_key_member_base(base, sizeof(base), prefix, channel_id) < 0)
        return NULL;
    bl = strlen(base);
    for (size_t i = 0; i < n; i++)
        len += bl + strlen(members[i]) + 1;
    if ((keys = malloc((2 + n) * sizeof(*keys) + len)) == NULL)
        return NULL;
    at = (char *)(keys + 2 + n);
    keys[0] = record_key;
    keys[1] = todo_key;
    for (size_t i = 0; i < n; i++) {
        keys[2 + i] = at;
        at += sprintf(at, "%s%s", base, members[i]) + 1;
    }
    return keys;
}

/* ---- a slice of recipient ids ---- */

#define RSLICE_RUNS   3  /* a guess that was wrong, then one the recipient moved from meanwhile */
#define RSLICE_ID_MAX 64 /* a member id the script names (store.c's resolve takes no longer) */

typedef struct rs_item {
    const char *rid, *fresh, *record; /* in the slice's buf */
    char guess[RSLICE_ID_MAX];        /* "": none */
    int pending;                      /* not added yet */
} rs_item_t;

struct store_bc_rslice {
    size_t n, pending;
    int runs;
    int64_t added;
    char keys[2][STORE_KEY_MAX]; /* the broadcast's record and todo */
    char rbase[STORE_KEY_MAX], mbase[STORE_KEY_MAX], channel[STORE_KEY_MAX];
    char nkeys[NUMFMT_DEC_SIZE];
    const char **argv; /* the last run's words */
    size_t *order;     /* the last run's recipients, by their place in it */
    char *keybuf;      /* the last run's recipient and member keys */
    char *buf;         /* the recipients, new ids and records */
    rs_item_t item[];
};

store_bc_rslice_t *store_bc_rslice_new(const char *prefix, const char *channel_id,
                                       const char *record_key, const char *todo_key,
                                       const char *const *recipients, const char *const *new_ids,
                                       const char *const *new_records, size_t n,
                                       const hint_table_t *guesses)
{
    store_bc_rslice_t *s;
    size_t len = 0, at = 0;

    if (n == 0 || n > STORE_BROADCAST_SLICE_MAX || strlen(channel_id) >= STORE_KEY_MAX ||
        strlen(record_key) >= STORE_KEY_MAX || strlen(todo_key) >= STORE_KEY_MAX)
        return NULL;
    if ((s = calloc(1, sizeof(*s) + n * sizeof(s->item[0]))) == NULL)
        return NULL;
    s->n = s->pending = n;
    strcpy(s->keys[0], record_key);
    strcpy(s->keys[1], todo_key);
    strcpy(s->channel, channel_id);
    for (size_t i = 0; i < n; i++)
        len += strlen(recipients[i]) + strlen(new_ids[i]) + strlen(new_records[i]) + 3;
    if (store_key_recipient(s->rbase, sizeof(s->rbase), prefix, channel_id, "") < 0 ||
        store_key_member_base(s->mbase, sizeof(s->mbase), prefix, channel_id) < 0 ||
        (s->buf = malloc(len)) == NULL) {
        free(s);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *const words[] = {recipients[i], new_ids[i], new_records[i]};
        const char **to[] = {&s->item[i].rid, &s->item[i].fresh, &s->item[i].record};
        for (int w = 0; w < 3; w++) {
            size_t l = strlen(words[w]) + 1;
            *to[w] = memcpy(s->buf + at, words[w], l);
            at += l;
        }
        s->item[i].pending = 1;
        if (guesses != NULL) { /* the member this worker found last for the recipient */
            const char *g = hint_get(guesses, hint_hash(channel_id, recipients[i]));
            if (g != NULL && strlen(g) < RSLICE_ID_MAX)
                strcpy(s->item[i].guess, g);
        }
    }
    return s;
}

int store_bc_rslice_words(store_bc_rslice_t *s, const char ***argv)
{
    size_t m = s->pending, rl = strlen(s->rbase), ml = strlen(s->mbase), len = 0, j = 0, w = 0;
    char *k;

    free(s->argv);
    free(s->order);
    free(s->keybuf);
    s->keybuf = NULL;
    s->order = malloc(m * sizeof(*s->order));
    s->argv = malloc((6 + 6 * m) * sizeof(*s->argv));
    for (size_t i = 0; i < s->n; i++) {
        const rs_item_t *it = &s->item[i];
        if (it->pending)
            len += rl + strlen(it->rid) + 2 * ml + strlen(it->guess) + 2 * strlen(it->fresh) + 3;
    }
    if (s->order == NULL || s->argv == NULL || (s->keybuf = k = malloc(len)) == NULL)
        return -1;
    s->argv[w++] = "EVAL";
    s->argv[w++] = store_bc_add_recipients_script;
    s->argv[w++] = numfmt_dec(s->nkeys, (long long)(2 + 3 * m));
    s->argv[w++] = s->keys[0];
    s->argv[w++] = s->keys[1];
    for (size_t i = 0; i < s->n; i++) {
        const rs_item_t *it = &s->item[i];
        if (!it->pending)
            continue;
        s->order[j++] = i;
        s->argv[w++] = k;
        k += sprintf(k, "%s%s", s->rbase, it->rid) + 1;
        s->argv[w++] = k;
        k += sprintf(k, "%s%s", s->mbase, it->guess[0] != '\0' ? it->guess : it->fresh) + 1;
        s->argv[w++] = k;
        k += sprintf(k, "%s%s", s->mbase, it->fresh) + 1;
    }
    s->argv[w++] = "3600000"; /* an accepting broadcast's set: kept an hour */
    for (j = 0; j < m; j++) {
        const rs_item_t *it = &s->item[s->order[j]];
        s->argv[w++] = it->guess;
        s->argv[w++] = it->fresh;
        s->argv[w++] = it->record;
    }
    s->runs++;
    *argv = s->argv;
    return (int)w;
}

store_status_t store_bc_rslice_reply(store_bc_rslice_t *s, const redisReply *reply,
                                     hint_table_t *learn, int *again)
{
    size_t m = s->pending, moved = 0;
    int64_t n;

    *again = 0;
    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
        reply->elements % 2 != 0 || reply->element[0]->type != REDIS_REPLY_INTEGER)
        return STORE_BAD_RECORD;
    if ((n = reply->element[0]->integer) < 0) { /* not accepting */
        s->added = -1;
        return STORE_OK;
    }
    for (size_t e = 2; e < reply->elements; e += 2) {
        const redisReply *at = reply->element[e], *id = reply->element[e + 1];
        rs_item_t *it;
        if (at->type != REDIS_REPLY_INTEGER || at->integer < 0 || (size_t)at->integer >= m ||
            id->type != REDIS_REPLY_STRING || id->len == 0 || id->len >= RSLICE_ID_MAX ||
            strlen(id->str) != id->len)
            return STORE_BAD_RECORD;
        it = &s->item[s->order[at->integer]];
        memcpy(it->guess, id->str, id->len + 1);
        it->pending = 2; /* still, named by this run */
        if (learn != NULL)
            hint_put(learn, hint_hash(s->channel, it->rid), it->guess);
        moved++;
    }
    if ((size_t)n + moved != m)
        return STORE_BAD_RECORD;
    for (size_t j = 0; j < m; j++) {
        rs_item_t *it = &s->item[s->order[j]];
        it->pending = it->pending == 2;
    }
    s->added += n;
    s->pending = moved;
    if (moved == 0)
        return STORE_OK;
    if (s->runs >= RSLICE_RUNS)
        return STORE_CONFLICT;
    *again = 1;
    return STORE_OK;
}

int64_t store_bc_rslice_added(const store_bc_rslice_t *s)
{
    return s->added;
}

void store_bc_rslice_free(store_bc_rslice_t *s)
{
    if (s == NULL)
        return;
    free(s->argv);
    free(s->order);
    free(s->keybuf);
    free(s->buf);
    free(s);
}
