/* neterr.c - see neterr.h. */
#include "neterr.h"

#include <stdio.h>
#include <string.h>

const char *neterr_what(net_err_t err)
{
    switch (err) {
    case NET_OK:
        return "";
    case NET_ERR_DNS:
        return "Couldn't resolve host name";
    case NET_ERR_CONNECT:
    case NET_ERR_BLOCKED:
        return "Couldn't connect to server";
    case NET_ERR_TLS:
        return "SSL connect error";
    case NET_ERR_CERT:
        return "SSL peer certificate or SSH remote key was not OK";
    case NET_ERR_TIMEOUT:
        return "Timeout was reached";
    case NET_ERR_SEND:
        return "Failed sending data to the peer";
    case NET_ERR_NO_ANSWER:
        return "Server returned nothing (no headers, no data)";
    case NET_ERR_MAYBE_RECEIVED:
    case NET_ERR_RECV:
        return "Failure when receiving data from the peer";
    case NET_ERR_RESET:
        return "Stream error in the HTTP/2 framing layer";
    case NET_ERR_REFUSED:
        return "the platform refused the request";
    case NET_ERR_TOO_LARGE:
        return "Failed writing received data to disk/application";
    case NET_ERR_PROTOCOL:
        return "Weird server reply";
    case NET_ERR_REDIRECTS:
        return "Number of redirects hit maximum amount";
    case NET_ERR_URL:
        return "URL using bad/illegal format or missing URL";
    case NET_ERR_NOMEM:
        return "Out of memory";
    case NET_ERR_OTHER:
        break;
    }
    return "the call failed";
}

const char *neterr_format(char *buf, size_t size, const char *what, const char *detail,
                          int os_errno, long long total_us)
{
    char os_text[128];
    const char *os = "";

    if (os_errno != 0)
        os = strerror_r(os_errno, os_text, sizeof(os_text));
    snprintf(buf, size, "%s%s%s%s%s (after %lld ms)", what, *detail ? ": " : "", detail,
             *os ? ": " : "", os, total_us / 1000);
    return buf;
}
