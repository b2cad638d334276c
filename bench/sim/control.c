/* The /_sim endpoints through which tests read the record and steer the simulator. */
#include "sim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void sim_ctl_log(sim_call_t *c, sim_reply_t *r)
{
    const char *since = sim_call_param(c, "since");
    unsigned long long n = 0;
    if (since != NULL) {
        char *end;
        errno = 0;
        n = strtoull(since, &end, 10);
        if (errno != 0 || end == since || *end != '\0' || since[0] == '-') {
            sim_reply_json(r, 400, json_pack("{s:s}", "error", "since must be a number"));
            return;
        }
    }
    sim_reply_json(r, 200, sim_record_log(n));
}

static void sim_ctl_reset(sim_call_t *c, sim_reply_t *r)
{
    (void)c;
    sim_record_reset();
    sim_limits_reset();
    sim_windows_reset();
    sim_reply_json(r, 200, json_pack("{s:b}", "ok", 1));
}

static void sim_ctl_stats(sim_call_t *c, sim_reply_t *r)
{
    (void)c;
    sim_reply_json(r, 200, sim_record_stats());
}

static void sim_ctl_config(sim_call_t *c, sim_reply_t *r)
{
    if (c->body != NULL) {
        json_t *lat = json_object_get(c->body, "latency_ms");
        if (lat != NULL) {
            if (!json_is_integer(lat) || json_integer_value(lat) < 0 ||
                json_integer_value(lat) > SIM_MAX_DELAY) {
                sim_reply_json(r, 400,
                               json_pack("{s:s}", "error", "latency_ms: an integer 0..600000"));
                return;
            }
            sim_latency_set((int)json_integer_value(lat));
        }
    } else if (c->raw_len > 0) {
        sim_reply_json(r, 400, json_pack("{s:s}", "error", "body is not a JSON object"));
        return;
    }
    sim_reply_json(r, 200, json_pack("{s:i}", "latency_ms", sim_latency_get()));
}

/* GET: the rules and the counts; POST {"rules":[...]}: replaces the rules ([] for none). */
static void sim_ctl_limits(sim_call_t *c, sim_reply_t *r)
{
    char err[256];
    if (strcmp(c->method, "POST") == 0) {
        if (!json_is_object(c->body)) {
            sim_reply_json(r, 400, json_pack("{s:s}", "error", "body is not a JSON object"));
            return;
        }
        if (sim_limits_configure(c->body, err, sizeof(err)) < 0) {
            sim_reply_json(r, 400, json_pack("{s:s}", "error", err));
            return;
        }
    }
    sim_reply_json(r, 200, sim_limits_get());
}

/* GET: the closed windows; POST {"platform","recipient","closed"}: closes or opens one. */
static void sim_ctl_windows(sim_call_t *c, sim_reply_t *r)
{
    char err[256];
    if (strcmp(c->method, "POST") == 0 &&
        (!json_is_object(c->body) || sim_windows_configure(c->body, err, sizeof(err)) < 0)) {
        sim_reply_json(r, 400,
                       json_pack("{s:s}", "error",
                                 json_is_object(c->body) ? err : "body is not a JSON object"));
        return;
    }
    sim_reply_json(r, 200, sim_windows_get());
}

static void sim_ctl_expire(sim_call_t *c, sim_reply_t *r)
{
    (void)c;
    size_t n = sim_tokens_expire();
    sim_reply_json(r, 200, json_pack("{s:b,s:I}", "ok", 1, "expired", (json_int_t)n));
}

static void sim_ctl_health(sim_call_t *c, sim_reply_t *r)
{
    (void)c;
    sim_reply_json(r, 200, json_pack("{s:b}", "ok", 1));
}

static const struct {
    const char *path;
    sim_endpoint_t ep;
} sim_ctl_routes[] = {
    {"/_sim/log", {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_GET, 0, sim_ctl_log}},
    {"/_sim/reset", {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_POST, 0, sim_ctl_reset}},
    {"/_sim/stats", {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_GET, 0, sim_ctl_stats}},
    {"/_sim/config",
     {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_GET | EVHTTP_REQ_POST, SIM_EP_JSON,
      sim_ctl_config}},
    {"/_sim/limits",
     {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_GET | EVHTTP_REQ_POST, SIM_EP_JSON,
      sim_ctl_limits}},
    {"/_sim/windows",
     {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_GET | EVHTTP_REQ_POST, SIM_EP_JSON,
      sim_ctl_windows}},
    {"/_sim/expire-tokens", {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_POST, 0, sim_ctl_expire}},
    {"/_sim/health", {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_GET, 0, sim_ctl_health}},
    {"/_sim/inbound",
     {SIM_PLATFORM_NONE, SIM_KIND_NONE, EVHTTP_REQ_POST, SIM_EP_JSON, sim_hooks_inbound}},
};

const sim_endpoint_t *sim_control_route(const char *path)
{
    for (size_t i = 0; i < sizeof(sim_ctl_routes) / sizeof(sim_ctl_routes[0]); i++)
        if (strcmp(path, sim_ctl_routes[i].path) == 0)
            return &sim_ctl_routes[i].ep;
    return NULL;
}
