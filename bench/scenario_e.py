#!/usr/bin/env python3
"""Scenario e of make bench: three botgate processes (one worker each) on one Redis hold one
whatsapp-cloud number to its shared limit of 1,000 messages a second.

    bench/scenario_e.py [BIN_DIR] [SECONDS] [RATE]    (default build-release/bin, 10, 1000)

Starts Redis and the simulator (tests/integration/harness.py; the simulator enforces the same
limit with a burst of 50 and records every arrival), the three instances, and one wrk per
instance (bench/bench.lua, scenario e, 32 connections each: far more than the limit lets
through, so every instance always has sends waiting for their slot). Prints the rate the
simulator saw (by its own arrival times), its refusals, the busiest one-second window and the
elements botgate refused with 120, as one line, and BENCH_E_JSON {...}."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
from test_sim_limits import max_in_window  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "build-release", "bin"))
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
RATE = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
SIM_BURST = 50  # 50 ms of scheduling jitter at 1,000/s (2 cores, 3 instances, wrk, Redis)
NUMBER = "1055551000"
harness.BIN = BIN


def arrivals(s, number):
    """The message calls the simulator took for the phone number id, in arrival order."""
    out, since = [], 0
    while True:
        page = s.sim("GET", "/_sim/log?since=%d" % since)
        out += [e for e in page["requests"]
                if e["kind"] == "messages" and "/%s/" % number in (e["path"] or "")]
        if not page["requests"]:
            return sorted(out, key=lambda e: e["ts_us"])
        since = page["next"]


def metric(url, series):
    for line in harness.http("GET", url + "/metrics").raw.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[1])
    return 0.0


def main():
    env = {"BOTGATE_WORKERS": "1", "BOTGATE_LOG_LEVEL": "warn",
           "BOTGATE_REQUEST_TIMEOUT_MS": "10000", "BOTGATE_UPSTREAM_TIMEOUT_MS": "5000"}
    s = harness.Stack(workers=1, env=env, sim_threads=2)
    try:
        urls = [s.url]
        for name in ("botgate2", "botgate3"):
            s.start_gateway(port=harness.free_port(), name=name)
            urls.append(s.url)
        s.put("channel", harness.cloud_channel(
            "bench-wc", "bench", rateLimit={"perSecond": RATE, "perRecipient": {"everyMs": 0}},
            info={"accessToken": "bench-cloud-token", "phoneNumberId": NUMBER, "wabaId": "1"}))
        tok = s.token("bench", "bot:sendResponses")
        r = harness.http("POST", s.sim_url + "/_sim/limits", {"rules": [
            {"platform": "whatsapp-cloud", "sender": NUMBER, "perSecond": RATE,
             "burst": SIM_BURST}]})
        assert r.status == 200, r
        wrks = [subprocess.Popen(["wrk", "-t1", "-c32", "-d%ds" % SECONDS, "--timeout", "15s",
                                  "-s", os.path.join(HERE, "bench.lua"), url, "--", "botgate",
                                  "e", tok], stdout=subprocess.PIPE, text=True)
                for url in urls]
        outs = [w.communicate()[0] for w in wrks]
        answered = 0
        for o in outs:
            for line in o.splitlines():
                if line.startswith("BENCH_JSON "):
                    answered += json.loads(line[len("BENCH_JSON "):])["requests"]
        got = arrivals(s, NUMBER)
        ts = [e["ts_us"] for e in got]
        refused_sim = sum(1 for e in got if e["limit"] is not None)
        refused_120 = sum(metric(u, 'botgate_rate_limit_refused_total{platform="whatsapp-cloud"}')
                          for u in urls)
        rate = (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e6) if len(ts) > 1 else 0.0
        res = {"instances": 3, "limit": RATE, "seconds": SECONDS, "arrivals": len(ts),
               "rate": round(rate, 1), "percent": round(100 * rate / RATE, 1),
               "busiest_second": max_in_window(ts), "sim_refusals": refused_sim,
               "refused_120": int(refused_120), "answered": answered}
        print("e  3 instances, one number limited to %d/s: %.1f/s at the platform (%.1f %%), "
              "busiest second %d, platform refusals %d, elements refused (120) %d"
              % (RATE, rate, res["percent"], res["busiest_second"], refused_sim,
                 res["refused_120"]))
        print("BENCH_E_JSON " + json.dumps(res), flush=True)
    finally:
        s.close()
        s.cleanup_dir()


if __name__ == "__main__":
    main()
