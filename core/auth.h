/* auth.h - tokens: hashing, scopes, expiry and channel binding (contract.md section 4). */
#ifndef BOTGATE_CORE_AUTH_H
#define BOTGATE_CORE_AUTH_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum {
    AUTH_SCOPE_SEND = 1u << 0,      /* bot:sendResponses */
    AUTH_SCOPE_REDIRECT = 1u << 1,  /* bot:redirectMemberToNode */
    AUTH_SCOPE_BOT_ADMIN = 1u << 2, /* bot:admin */
    AUTH_SCOPE_API_ADMIN = 1u << 3, /* api:admin */
    AUTH_SCOPE_BROADCAST = 1u << 4, /* bot:broadcast */
};

#define AUTH_ACCEPT_SEND      (AUTH_SCOPE_SEND | AUTH_SCOPE_BOT_ADMIN)
#define AUTH_ACCEPT_BROADCAST (AUTH_SCOPE_BROADCAST | AUTH_SCOPE_BOT_ADMIN)
#define AUTH_ACCEPT_REDIRECT  (AUTH_SCOPE_REDIRECT | AUTH_SCOPE_BOT_ADMIN | AUTH_SCOPE_API_ADMIN)

#define AUTH_HASH_HEX  65  /* 64 hex digits and the NUL */
#define AUTH_TOKEN_MAX 512 /* longer tokens are refused without a lookup */

#define AUTH_APP_MAX 128 /* a record with a longer app name is not a valid record */

/* A token record, decoded. Holds one reference to the record, which app and channels point
 * into: every request in flight holds its token, and a copy of the app name would cost more
 * than the rest of it. */
typedef struct auth_token {
    json_t *record;
    const char *app;
    const json_t *channels; /* array of allowed channel ids, or NULL for all of the app's */
    int64_t expires_at;     /* ms since epoch; 0 when it never expires */
    unsigned scopes;
} auth_token_t;

/* SHA-256 of the token as lower-case hex: the only form a token is stored or looked up in. */
void auth_hash_token(const char *token, size_t len, char out[AUTH_HASH_HEX]);
/* SHA-256 of a then b (alen and blen bytes), as lower-case hex; "" when out of memory. */
void auth_hash_parts(const char *a, size_t alen, const char *b, size_t blen,
                     char out[AUTH_HASH_HEX]);

/* The scope bit of a scope name, 0 when unknown. */
unsigned auth_scope_bit(const char *name);

/* 1 when app is a usable app id: 1-AUTH_APP_MAX bytes, no ':' and no control character.
 * botgatectl writes only such ids; a token record holding another is not a valid record. */
int auth_app_valid(const char *app);

/* Decodes a token record; -1 when it is not a valid record (its app id included). */
int auth_token_decode(const json_t *record, auth_token_t *out);
void auth_token_free(auth_token_t *t);

/* 1 when the token holds one of the accepted scopes and has not expired. */
int auth_allows(const auth_token_t *t, unsigned accepted, int64_t now_ms);

/* 1 when a channel of app channel_app with this id is visible to the token. */
int auth_sees_channel(const auth_token_t *t, const char *channel_id, const char *channel_app);

/* The token of a request: an Authorization header wins over the accessToken query value
 * (query_len bytes, decoded: it may hold a NUL). A header that is present must be
 * "Bearer <token>"; anything else refuses the request rather than falling back to the query.
 * A token holding a control character (NUL included) is refused. Returns a pointer into one of
 * the inputs and its length, or NULL: no token, or not a usable one (both are "not authorized"). */
const char *auth_request_token(const char *authorization, const char *query_token, size_t query_len,
                               size_t *len);

#endif
