/* net-t.h - the words of net/, botgate's outbound HTTP: a request, its answer, and what went
 * wrong, shared by the client (net.h) and the files it drives. No adapter's and no curl's. */
#ifndef BOTGATE_NET_NET_T_H
#define BOTGATE_NET_NET_T_H

#include <stddef.h>

/* A client's settings (net_new). */
typedef struct net_config {
    const char *ca_file; /* extra CA bundle, or NULL/"" */
    int guard;           /* 1: every connection passes the SSRF guard (user URLs) */
    int direct;          /* 1: never through a proxy of the environment (user URLs) */
    long buffer_size;    /* curl's receive buffer per transfer in flight (bytes) */
    int http1;           /* 1: HTTP/1.1 only; 0: HTTP/2 where TLS offers it (both botgate's own) */
} net_config_t;

enum {
    NET_FOLLOW = 1u << 0, /* follow up to 3 redirects (each checked by the guard) */
};

/* The User-Agent line of every call, whichever path carries it. */
#define NET_USER_AGENT "User-Agent: botgate/1.0"

/* One outbound call. Borrowed by net_start for the length of the call, except the body. */
typedef struct net_request {
    const char *method;         /* "GET", "POST", "PUT", "PATCH" or "DELETE": a static string */
    const char *url;            /* absolute, its query already encoded */
    const char *const *headers; /* "Name: value" lines, NULL-terminated; NULL: none */
    char *body;                 /* malloc'd, or NULL: net_start takes it, started or not */
    size_t body_len;
    long timeout_ms;   /* the whole call: connect, send, answer */
    size_t max_answer; /* bytes of the answer's body at most */
    unsigned flags;    /* NET_FOLLOW */
} net_request_t;

/* What kept a call from its answer, in botgate's words. */
typedef enum net_err {
    NET_OK = 0,        /* an HTTP answer came (of any status) */
    NET_ERR_DNS,       /* the host's name did not resolve */
    NET_ERR_CONNECT,   /* no connection could be made (refused, unreachable) */
    NET_ERR_BLOCKED,   /* the SSRF guard refused every address of the host */
    NET_ERR_TLS,       /* the TLS handshake failed, for another reason than the certificate */
    NET_ERR_CERT,      /* the platform's certificate was refused */
    NET_ERR_TIMEOUT,   /* the call's time ran out */
    NET_ERR_SEND,      /* sending the request failed */
    NET_ERR_NO_ANSWER, /* the connection closed after the request went out, before any answer */
    NET_ERR_MAYBE_RECEIVED, /* as NO_ANSWER, on a connection whose peer may have read the
                               request: it was not sent again */
    NET_ERR_RECV,           /* reading the answer failed */
    NET_ERR_RESET,          /* the platform reset the request's HTTP/2 stream */
    NET_ERR_REFUSED,        /* the platform refused it on every try, or allows no request */
    NET_ERR_TOO_LARGE,      /* the answer's body was longer than max_answer */
    NET_ERR_PROTOCOL,       /* the answer (or the connection) broke HTTP */
    NET_ERR_REDIRECTS,      /* more redirects than NET_FOLLOW follows */
    NET_ERR_URL,            /* the URL is not one net/ can call */
    NET_ERR_NOMEM,          /* out of memory */
    NET_ERR_OTHER,          /* anything else libcurl reports */
} net_err_t;

/* A call's end. Valid only during the callback. */
typedef struct net_answer {
    net_err_t err;
    int not_sent;     /* 1 when the request surely never reached the peer: it may go
                         again; 0 when it may have, whatever err says */
    long status;      /* the HTTP status; 0 when no HTTP answer came */
    const char *body; /* NUL-terminated ("" when none) */
    size_t body_len;
    const char *retry_after;  /* the Retry-After field's value, or NULL */
    const char *content_type; /* the Content-Type field's value, or NULL */
    const char *error;        /* what went wrong, in words for an operator; "" when nothing */
    long long elapsed_us;
} net_answer_t;

typedef void net_cb(void *arg, const net_answer_t *ans);

#endif
