/* apps.c - botgatectl's app commands: the signing secret of an app's status callbacks
 * (contract.md section 12, Botgate-Signature). */
#include "ctl.h"

#include "../core/auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

/* app secret rotate --app A: a new secret replaces the old one at once (every instance reads
 * it for each callback), printed once. A receiver that must accept both during the switch
 * keeps the old one until the new one verifies. */
int ctl_app_secret(const ctl_opts_t *o)
{
    unsigned char raw[32];
    char secret[4 + 2 * sizeof(raw) + 1] = "bgs_", key[STORE_KEY_MAX];
    int rc;

    if (strcmp(o->args[0], "rotate") != 0)
        return ctl_die("unknown command app secret %s (see botgatectl help app)", o->args[0]);
    if (o->app == NULL)
        return ctl_die("app secret rotate needs --app (see botgatectl help app)");
    if (!auth_app_valid(o->app))
        return ctl_die("--app must be 1-%d bytes without ':' or control characters", AUTH_APP_MAX);
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return ctl_die("no randomness: %s", strerror(errno));
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(secret + 4 + 2 * i, 3, "%02x", raw[i]);
    if ((rc = ctl_redis_connect()) != 0)
        return rc;
    if (store_key_app_secret(key, sizeof(key), ctl_prefix, o->app) < 0)
        return ctl_die("BOTGATE_REDIS_PREFIX is too long");
    if ((rc = ctl_redis_set(key, secret)) != 0)
        return rc;
    printf("%s\n", secret);
    return 0;
}
