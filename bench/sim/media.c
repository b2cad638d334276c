/* Targets of the gateway's own outbound calls: media downloads (/media) and webhooks (/hook). */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#define SIM_BIG_SIZE ((size_t)50 * 1024 * 1024)

/* A valid 4x4 RGB PNG (104 bytes), so that clients which check the image are satisfied. */
static const unsigned char sim_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x04, 0x08, 0x02, 0x00, 0x00, 0x00, 0x26,
    0x93, 0x09, 0x29, 0x00, 0x00, 0x00, 0x13, 0x74, 0x45, 0x58, 0x74, 0x43, 0x6f, 0x6d, 0x6d,
    0x65, 0x6e, 0x74, 0x00, 0x62, 0x6f, 0x74, 0x67, 0x61, 0x74, 0x65, 0x2d, 0x73, 0x69, 0x6d,
    0x3c, 0xf0, 0xf9, 0xb3, 0x00, 0x00, 0x00, 0x10, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63,
    0x30, 0x4e, 0x9b, 0x09, 0x47, 0x0c, 0xc4, 0x71, 0x00, 0xeb, 0x23, 0x13, 0x21, 0x2a, 0x62,
    0x60, 0x73, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};

/* big.png is this megabyte referenced 50 times: no copy per download, nothing on disk. */
static const unsigned char sim_zeros[1024 * 1024];

static const char sim_page[] = "<!doctype html><html><head><title>botgate-sim</title></head>"
                               "<body><p>This is a web page, not an image.</p></body></html>";

/* ---- /media ---- */

/* The media types served, by extension: big.<ext> is large (big.mp3 is 3 MiB: over a wechat
 * voice's 2 MiB, under every other limit), any other name a few bytes. */
static const struct {
    const char *ext, *type;
    size_t big;
} sim_media_types[] = {
    {".png", "image/png", SIM_BIG_SIZE},
    {".mp4", "video/mp4", SIM_BIG_SIZE},
    {".mp3", "audio/mpeg", (size_t)3 * 1024 * 1024},
    {".pdf", "application/pdf", SIM_BIG_SIZE},
    {".webp", "image/webp", SIM_BIG_SIZE},
};

static int sim_media_type(const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; i < sizeof(sim_media_types) / sizeof(sim_media_types[0]); i++) {
        size_t e = strlen(sim_media_types[i].ext);
        if (n > e && strcmp(name + n - e, sim_media_types[i].ext) == 0)
            return (int)i;
    }
    return -1;
}

static void sim_media_png(sim_call_t *c, sim_reply_t *r)
{
    const char *name = c->path + strlen("/media/");
    int t = sim_media_type(name);

    r->body = evbuffer_new();
    r->status = 200;
    r->content_type = t >= 0 ? sim_media_types[t].type : "image/png";
    if (r->body == NULL)
        return;
    if (t >= 0 && strncmp(name, "big.", 4) == 0) {
        evbuffer_add(r->body, sim_png, 8); /* the signature: it looks like a PNG */
        for (size_t left = sim_media_types[t].big - 8; left > 0;) {
            size_t n = left < sizeof(sim_zeros) ? left : sizeof(sim_zeros);
            evbuffer_add_reference(r->body, sim_zeros, n, NULL, NULL);
            left -= n;
        }
    } else {
        evbuffer_add_reference(r->body, sim_png, sizeof(sim_png), NULL, NULL);
    }
}

static void sim_media_page(sim_call_t *c, sim_reply_t *r)
{
    (void)c;
    sim_reply_text(r, 200, "text/html; charset=utf-8", sim_page);
}

/* A redirect with the given status to the query's "to" (any URL: the client must judge it). */
static void sim_redirect(sim_call_t *c, sim_reply_t *r, int status)
{
    const char *to = sim_call_param(c, "to");
    if (to == NULL || *to == '\0') {
        sim_reply_json(r, 400, json_pack("{s:s}", "error", "missing to"));
        return;
    }
    r->location = strdup(to);
    sim_reply_json(r, status, json_pack("{s:s}", "location", to));
}

static void sim_media_redirect(sim_call_t *c, sim_reply_t *r)
{
    sim_redirect(c, r, 302);
}

/* ---- /hook ---- */

static void sim_hook_echo(sim_call_t *c, sim_reply_t *r)
{
    sim_reply_json(r, 200,
                   json_pack("{s:b,s:s,s:s,s:O?}", "ok", 1, "method", c->method, "query",
                             c->query ? c->query : "", "body", c->body));
}

static int sim_hook_number(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static void sim_hook_status(sim_call_t *c, sim_reply_t *r)
{
    long code;
    if (sim_hook_number(c->path + strlen("/hook/status/"), 200, 599, &code) != 0) {
        sim_reply_json(r, 404, json_pack("{s:s}", "error", "not found"));
        return;
    }
    sim_reply_json(r, (int)code, json_pack("{s:i}", "status", (int)code));
}

static void sim_hook_slow(sim_call_t *c, sim_reply_t *r)
{
    long ms;
    if (sim_hook_number(c->path + strlen("/hook/slow/"), 0, SIM_MAX_DELAY, &ms) != 0) {
        sim_reply_json(r, 404, json_pack("{s:s}", "error", "not found"));
        return;
    }
    sim_reply_json(r, 200, json_pack("{s:b}", "ok", 1));
    r->delay_ms = (int)ms;
}

/* /hook/redirect/<3xx>?to=URL, for GET and POST: recorded, so a test sees every hop. */
static void sim_hook_redirect(sim_call_t *c, sim_reply_t *r)
{
    long code;
    if (sim_hook_number(c->path + strlen("/hook/redirect/"), 300, 399, &code) != 0) {
        sim_reply_json(r, 404, json_pack("{s:s}", "error", "not found"));
        return;
    }
    sim_redirect(c, r, (int)code);
}

static void sim_hook_text(sim_call_t *c, sim_reply_t *r)
{
    (void)c;
    sim_reply_text(r, 200, "text/plain", "hello");
}

/* ---- routes ---- */

#define SIM_GET      EVHTTP_REQ_GET
#define SIM_GET_POST (EVHTTP_REQ_GET | EVHTTP_REQ_POST)
#define SIM_EP_HOOK  (SIM_EP_RECORD | SIM_EP_JSON | SIM_EP_INFLIGHT)

static const sim_endpoint_t sim_ep_png = {SIM_PLATFORM_NONE, SIM_KIND_NONE, SIM_GET,
                                          SIM_EP_INFLIGHT, sim_media_png};
static const sim_endpoint_t sim_ep_page = {SIM_PLATFORM_NONE, SIM_KIND_NONE, SIM_GET,
                                           SIM_EP_INFLIGHT, sim_media_page};
static const sim_endpoint_t sim_ep_redirect = {SIM_PLATFORM_NONE, SIM_KIND_NONE, SIM_GET,
                                               SIM_EP_INFLIGHT, sim_media_redirect};
static const sim_endpoint_t sim_ep_echo = {SIM_PLATFORM_HOOK, SIM_KIND_WEBHOOK, SIM_GET_POST,
                                           SIM_EP_HOOK, sim_hook_echo};
static const sim_endpoint_t sim_ep_status = {SIM_PLATFORM_HOOK, SIM_KIND_WEBHOOK, SIM_GET_POST,
                                             SIM_EP_HOOK, sim_hook_status};
static const sim_endpoint_t sim_ep_slow = {SIM_PLATFORM_HOOK, SIM_KIND_WEBHOOK, SIM_GET_POST,
                                           SIM_EP_HOOK, sim_hook_slow};
static const sim_endpoint_t sim_ep_hook_redirect = {SIM_PLATFORM_HOOK, SIM_KIND_WEBHOOK,
                                                    SIM_GET_POST, SIM_EP_HOOK, sim_hook_redirect};
static const sim_endpoint_t sim_ep_text = {SIM_PLATFORM_HOOK, SIM_KIND_WEBHOOK, SIM_GET_POST,
                                           SIM_EP_HOOK, sim_hook_text};

const sim_endpoint_t *sim_media_route(const char *path)
{
    if (strncmp(path, "/media/", 7) == 0) {
        const char *name = path + 7;
        size_t n = strlen(name);
        if (strcmp(name, "redirect") == 0)
            return &sim_ep_redirect;
        if (strcmp(name, "page.html") == 0)
            return &sim_ep_page;
        if (n > 4 && sim_media_type(name) >= 0 && strchr(name, '/') == NULL)
            return &sim_ep_png;
        return NULL;
    }
    if (strcmp(path, "/hook/echo") == 0)
        return &sim_ep_echo;
    if (strcmp(path, "/hook/text") == 0)
        return &sim_ep_text;
    if (strncmp(path, "/hook/status/", 13) == 0)
        return &sim_ep_status;
    if (strncmp(path, "/hook/slow/", 11) == 0)
        return &sim_ep_slow;
    if (strncmp(path, "/hook/redirect/", 15) == 0)
        return &sim_ep_hook_redirect;
    return NULL;
}
