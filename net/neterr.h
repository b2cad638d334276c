/* neterr.h - a failed call's words for an operator: what kind of failure, its detail, the
 * system's error and how long it took, the same text whichever path carried the call. */
#ifndef BOTGATE_NET_NETERR_H
#define BOTGATE_NET_NETERR_H

#include "net-t.h"

#include <stddef.h>

/* What the failures that end a call whatever else happened say, in place of any other text. */
#define NETERR_BLOCKED "address not allowed (private, loopback or link-local)"
#define NETERR_MAYBE_RECEIVED                                                                      \
    "the connection closed after the request was sent; not sent again, as the platform may "       \
    "have received it"
#define NETERR_TOO_LARGE "answer too large"

/* The usual words for err: libcurl's for the same failure, which botgate's answers have
 * always said (docs/api.md). */
const char *neterr_what(net_err_t err);

/* "what: detail: the system's words (after N ms)", without the parts that are empty; in buf. */
const char *neterr_format(char *buf, size_t size, const char *what, const char *detail,
                          int os_errno, long long total_us);

#endif
