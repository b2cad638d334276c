/* auth.c - token hashing and the authorization decisions; the lookup itself is the store's. */
#include "auth.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static EVP_MD *sha256;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

/* OpenSSL 3 looks EVP_sha256() up again on every digest; fetched once, the lookup is gone
 * (an EVP_MD may be shared by threads). */
static void sha256_fetch(void)
{
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

static void to_hex(const unsigned char *md, unsigned int n, char out[AUTH_HASH_HEX])
{
    static const char hex[] = "0123456789abcdef";

    for (unsigned int i = 0; i < n; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[2 * n] = '\0';
}

void auth_hash_token(const char *token, size_t len, char out[AUTH_HASH_HEX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;

    pthread_once(&sha256_once, sha256_fetch);
    EVP_Digest(token, len, md, &n, sha256 != NULL ? sha256 : EVP_sha256(), NULL);
    to_hex(md, n, out);
}

void auth_hash_parts(const char *a, size_t alen, const char *b, size_t blen,
                     char out[AUTH_HASH_HEX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char small[4096];
    EVP_MD_CTX *ctx;

    /* A digest context costs an allocation and twice the instructions of a one-shot digest of
     * a copy, for the small inputs most are. */
    if (alen + blen <= sizeof(small)) {
        memcpy(small, a, alen);
        memcpy(small + alen, b, blen);
        auth_hash_token(small, alen + blen, out);
        return;
    }
    ctx = EVP_MD_CTX_new();
    pthread_once(&sha256_once, sha256_fetch);
    if (ctx != NULL && EVP_DigestInit_ex(ctx, sha256 != NULL ? sha256 : EVP_sha256(), NULL) == 1 &&
        EVP_DigestUpdate(ctx, a, alen) == 1 && EVP_DigestUpdate(ctx, b, blen) == 1 &&
        EVP_DigestFinal_ex(ctx, md, &n) == 1 && n * 2 < AUTH_HASH_HEX)
        to_hex(md, n, out);
    else
        out[0] = '\0';
    EVP_MD_CTX_free(ctx);
}

unsigned auth_scope_bit(const char *name)
{
    static const struct {
        const char *name;
        unsigned bit;
    } scopes[] = {
        {"bot:sendResponses", AUTH_SCOPE_SEND},  {"bot:redirectMemberToNode", AUTH_SCOPE_REDIRECT},
        {"bot:admin", AUTH_SCOPE_BOT_ADMIN},     {"api:admin", AUTH_SCOPE_API_ADMIN},
        {"bot:broadcast", AUTH_SCOPE_BROADCAST},
    };

    for (size_t i = 0; name && i < sizeof(scopes) / sizeof(scopes[0]); i++)
        if (strcmp(scopes[i].name, name) == 0)
            return scopes[i].bit;
    return 0;
}

/* ':' is refused although the record names no longer need it (store_key_idem encodes the
 * app): an app id is a name other systems build keys and logs from, and one with ':' or a
 * control character in it is a mistake or an attack on such a system. */
int auth_app_valid(const char *app)
{
    size_t n = 0;

    if (app == NULL)
        return 0;
    for (; app[n] != '\0'; n++)
        if (app[n] == ':' || (unsigned char)app[n] < 0x20 || app[n] == 0x7f || n >= AUTH_APP_MAX)
            return 0;
    return n > 0;
}

int auth_token_decode(const json_t *root, auth_token_t *out)
{
    json_t *v;
    const char *app;
    size_t i;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(root))
        goto fail;
    v = json_object_get(root, "app");
    app = json_string_value(v);
    /* a NUL inside would end the id early: "A\u0000x" would act as app "A" */
    if (!auth_app_valid(app) || json_string_length(v) != strlen(app))
        goto fail;
    out->record = json_incref((json_t *)root);
    out->app = app;
    json_array_foreach(json_object_get(root, "scopes"), i, v)
        out->scopes |= auth_scope_bit(json_string_value(v));
    v = json_object_get(root, "expiresAt");
    if (json_is_integer(v)) {
        out->expires_at = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d > -9.2e18 && d < 9.2e18)) /* casting it to int64_t would be undefined */
            goto fail;
        out->expires_at = (int64_t)d;
    } else if (v != NULL && !json_is_null(v)) {
        goto fail;
    }
    /* 0 in expires_at means "never"; a record's 0 (or less) is a moment long past. */
    if (v != NULL && !json_is_null(v) && out->expires_at <= 0)
        out->expires_at = -1;
    v = json_object_get(root, "channels");
    if (json_is_array(v))
        out->channels = v;
    else if (v != NULL && !json_is_null(v))
        goto fail;
    return 0;
fail:
    auth_token_free(out);
    return -1;
}

void auth_token_free(auth_token_t *t)
{
    json_decref(t->record);
    memset(t, 0, sizeof(*t));
}

int auth_allows(const auth_token_t *t, unsigned accepted, int64_t now_ms)
{
    if ((t->scopes & accepted) == 0)
        return 0;
    return t->expires_at == 0 || now_ms < t->expires_at;
}

int auth_sees_channel(const auth_token_t *t, const char *channel_id, const char *channel_app)
{
    json_t *v;
    size_t i;

    if (channel_app == NULL || strcmp(channel_app, t->app) != 0)
        return 0;
    if (t->channels == NULL)
        return 1;
    json_array_foreach((json_t *)t->channels, i, v) {
        const char *id = json_string_value(v);
        if (id != NULL && strcmp(id, channel_id) == 0)
            return 1;
    }
    return 0;
}

/* Control characters have no place in a token; a NUL would cut it short where it is
 * hashed as a C string (evhttp's decoded query), so TOKEN%00junk would pass as TOKEN. */
static int token_usable(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
            return 0;
    return 1;
}

const char *auth_request_token(const char *authorization, const char *query_token, size_t query_len,
                               size_t *len)
{
    const char *p;
    size_t n;

    if (authorization != NULL) {
        if (strncasecmp(authorization, "Bearer ", 7) != 0)
            return NULL;
        p = authorization + 7;
        while (*p == ' ')
            p++;
        n = strlen(p);
        while (n > 0 && p[n - 1] == ' ')
            n--;
    } else {
        p = query_token;
        n = query_token != NULL ? query_len : 0;
    }
    if (!token_usable(p, n))
        return NULL;
    *len = n;
    return p;
}
