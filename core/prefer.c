/* prefer.c - the Prefer header's grammar (RFC 7240 section 2, with RFC 9110's token,
 * quoted-string and list rules): parsed whole, never searched for a substring, so that
 * "x=respond-async" or "respond-asyncx" states nothing. */
#include "prefer.h"

#include <string.h>
#include <strings.h>

static int is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* A token at p: its end, or NULL when there is none. */
static const char *token(const char *p)
{
    const char *start = p;

    while (is_tchar(*p))
        p++;
    return p > start ? p : NULL;
}

/* A quoted-string at p (p on the quote): past its closing quote, or NULL. */
static const char *quoted(const char *p)
{
    for (p++; *p != '"'; p++) {
        if (*p == '\\')
            p++;
        /* qdtext and quoted-pair: tab, space, visible ASCII and obs-text; no control byte */
        if (*p == '\0' || ((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
            return NULL;
    }
    return p + 1;
}

/* [BWS "=" BWS word] after a name at p: past it (p itself when there is no '='), NULL when
 * malformed. *has_value tells whether there was one. */
static const char *value(const char *p, int *has_value)
{
    const char *q = skip_ws(p);

    *has_value = 0;
    if (*q != '=')
        return p;
    *has_value = 1;
    q = skip_ws(q + 1);
    return *q == '"' ? quoted(q) : token(q);
}

int prefer_respond_async(const char *v)
{
    int found = 0, any = 0;
    const char *p = v;

    for (;;) {
        const char *name, *end;
        int has_value;
        p = skip_ws(p);
        if (*p == ',') { /* empty list elements are allowed (RFC 9110 5.6.1) */
            p++;
            continue;
        }
        if (*p == '\0')
            return any ? found : -1;
        name = p;
        if ((end = token(p)) == NULL || (p = value(end, &has_value)) == NULL)
            return -1;
        any = 1;
        if (!has_value && end - name == 13 && strncasecmp(name, "respond-async", 13) == 0)
            found = 1;
        for (p = skip_ws(p); *p == ';'; p = skip_ws(p)) {
            int ignored;
            p = skip_ws(p + 1);
            if (*p == ';' || *p == ',' || *p == '\0')
                continue; /* *( OWS ";" [ OWS parameter ] ): the parameter is optional */
            if ((end = token(p)) == NULL || (p = value(end, &ignored)) == NULL)
                return -1;
        }
        if (*p != ',' && *p != '\0')
            return -1;
    }
}
