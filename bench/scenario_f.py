#!/usr/bin/env python3
"""Scenario f of make bench (issue 31): the outbox under load. COUNT sends with Prefer:
respond-async, over MEMBERS members, accepted by three botgate processes (one worker each) on
one Redis and delivered by them to a whatsapp-cloud number the simulator limits to RATE a
second (burst 50).

    bench/scenario_f.py [BIN_DIR] [COUNT] [RATE] [MEMBERS]
                        (default build-release/bin, 100000, 1000, 1000)

Phases: (1) a synchronous baseline, SYNC_COUNT sends to an unlimited number through the first
instance: its CPU per send; (2) the accept phase, one wrk per instance (16 connections) until
COUNT are answered: accept latency, and the instances' CPU less what the deliveries of that
time cost; (3) the drain, until the simulator has seen every accepted message (or nothing came
for 30 s): the CPU per delivery. The simulator's record judges: arrivals, duplicates (a text
twice), lost (accepted, never arrived), refusals (over its limit). Prints one line and
BENCH_F_JSON {...}.

Done when (issue 31): the platform sees 95-100 % of its limit, 0 refusals, 0 duplicates, 0 lost;
accepting costs at most 1.5x a synchronous send's CPU."""
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
from test_sim_limits import max_in_window  # noqa: E402
from scenario_e import arrivals, metric  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                      else os.path.join(HERE, "..", "build-release", "bin"))
COUNT = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
RATE = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
MEMBERS = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
SYNC_COUNT = min(COUNT // 10, 5000)
SIM_BURST = 50
LIMITED, FREE = "1055551000", "1055552000"  # phoneNumberIds: the limited number, the baseline's
harness.BIN = BIN


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(urls, mode, tok, channel, count):
    """One wrk per url until count are answered in all (each stops after its share; wrk then
    waits out its -d, so it is interrupted once the instances counted the answers): their
    BENCH_JSON records."""
    series = ('botgate_requests_total{route="sendResponses",status="%s",err_code="0"}'
              % ("202" if mode == "async" else "200"))
    base = sum(metric(u, series) for u in urls)
    env = dict(os.environ, BENCH_MEMBERS=str(MEMBERS), BENCH_COUNT=str(-(-count // len(urls))))
    wrks = [subprocess.Popen(["wrk", "-t1", "-c16", "-d600s", "--timeout", "15s", "--latency",
                              "-s", os.path.join(HERE, "scenario_f.lua"), url, "--", mode, tok,
                              channel, "%s%d" % (mode, i)],
                             stdout=subprocess.PIPE, text=True, env=env)
            for i, url in enumerate(urls)]
    while any(w.poll() is None for w in wrks):
        if sum(metric(u, series) for u in urls) - base >= count:
            break
        time.sleep(0.2)
    recs = []
    for w in wrks:
        if w.poll() is None:
            w.send_signal(signal.SIGINT)  # wrk prints its summary and done() on SIGINT
        for line in w.communicate()[0].splitlines():
            if line.startswith("BENCH_JSON "):
                recs.append(json.loads(line[len("BENCH_JSON "):]))
    return recs


def bigger_record(s, entries):
    """The harness's simulator keeps the last 100,000 requests; this run needs more: it is
    started again on its port (the instances know it by it) with room for entries."""
    p = s.procs["sim"]
    p.terminate()
    p.wait()
    with open(os.path.join(s.dir, "sim.log"), "ab") as log:
        s.procs["sim"] = subprocess.Popen(
            [os.path.join(BIN, "botgate-sim"), "--listen", "127.0.0.1:%d" % s.sim_port,
             "--threads", "2", "--quiet", "--log-max", str(entries)], stdout=log, stderr=log)

    def up():
        try:
            return harness.http("GET", s.sim_url + "/_sim/stats", timeout=2).status == 200
        except OSError:
            return False
    harness.wait_for(up, what="the simulator again")


def texts(events):
    return [((e.get("body") or {}).get("text") or {}).get("body", "") for e in events]


def main():
    env = {"BOTGATE_WORKERS": "1", "BOTGATE_LOG_LEVEL": "warn", "BOTGATE_MEMBER_ORDER": "1",
           "BOTGATE_REQUEST_TIMEOUT_MS": "10000", "BOTGATE_UPSTREAM_TIMEOUT_MS": "5000"}
    s = harness.Stack(workers=1, env=env, sim_threads=2)
    try:
        urls = [s.url]
        for name in ("botgate2", "botgate3"):
            s.start_gateway(port=harness.free_port(), name=name)
            urls.append(s.url)
        pids = [p.pid for n, p in s.procs.items() if n.startswith("botgate")]
        bigger_record(s, 2 * COUNT + 10000)
        for cid, number, limit in (("bench-wf", LIMITED, RATE), ("bench-ws", FREE, 0)):
            s.put("channel", harness.cloud_channel(
                cid, "bench", rateLimit={"perSecond": limit, "perRecipient": {"everyMs": 0}},
                info={"accessToken": "bench-cloud-token", "phoneNumberId": number,
                      "wabaId": "1"}))
        tok = s.token("bench", "bot:sendResponses")
        r = harness.http("POST", s.sim_url + "/_sim/limits", {"rules": [
            {"platform": "whatsapp-cloud", "sender": LIMITED, "perSecond": RATE,
             "burst": SIM_BURST}]})
        assert r.status == 200, r

        # (1) the synchronous baseline, on the first instance (its members made first)
        run_wrk(urls[:1], "sync", tok, "bench-ws", MEMBERS)
        c0 = cpu_s(pids[0])
        sync = run_wrk(urls[:1], "sync", tok, "bench-ws", SYNC_COUNT)
        sync_n = sum(x["requests"] for x in sync)
        sync_us = (cpu_s(pids[0]) - c0) * 1e6 / max(sync_n, 1)

        # (2) accepting, while the instances deliver what they accepted (the record holds only
        # this and what follows)
        s.sim_reset()
        c0 = sum(cpu_s(p) for p in pids)
        t0 = time.time()
        acc = run_wrk(urls, "async", tok, "bench-wf", COUNT)
        accept_s = time.time() - t0
        cpu_accept = sum(cpu_s(p) for p in pids) - c0
        during = len(arrivals(s, LIMITED))
        accepted = int(sum(metric(u, "botgate_outbox_accepted_total") for u in urls))

        # (3) the drain
        c1 = sum(cpu_s(p) for p in pids)
        def ended():
            return int(sum(metric(u, 'botgate_outbox_ended_total{status="%s"}' % st)
                           for u in urls for st in ("done", "failed")))
        seen, last_change = ended(), time.time()
        while seen < accepted and time.time() - last_change < 30:
            time.sleep(1)
            n = ended()
            if n != seen:
                seen, last_change = n, time.time()
        cpu_drain = sum(cpu_s(p) for p in pids) - c1
        got = arrivals(s, LIMITED)
        per_delivery = cpu_drain / max(len(got) - during, 1)
        accept_us = max(cpu_accept - during * per_delivery, 0) * 1e6 / max(accepted, 1)

        refused = sum(1 for e in got if e["limit"] is not None)
        got = [e for e in got if e["limit"] is None]  # taken by the platform
        ts = [e["ts_us"] for e in got]
        words = texts(got)
        unique = len(set(words))
        rate = (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e6) if len(ts) > 1 else 0.0
        p99 = max((x["p99_us"] for x in acc), default=0) / 1000
        res = {"instances": 3, "count": COUNT, "members": MEMBERS, "limit": RATE,
               "accepted": accepted, "answered": sum(x["requests"] for x in acc),
               "non_2xx": sum(x["status"] for x in acc), "accept_s": round(accept_s, 1),
               "accept_p99_ms": round(p99, 1), "arrivals": len(ts), "rate": round(rate, 1),
               "percent": round(100 * rate / RATE, 1), "busiest_second": max_in_window(ts),
               "sim_refusals": refused, "duplicates": len(words) - unique,
               "lost": accepted - unique, "accept_cpu_us": round(accept_us, 1),
               "delivery_cpu_us": round(per_delivery * 1e6, 1),
               "sync_cpu_us": round(sync_us, 1),
               "accept_x_sync": round(accept_us / sync_us, 2) if sync_us else None}
        print("f  3 instances, %d async sends on %d members, one number limited to %d/s: "
              "%.1f/s at the platform (%.1f %%), refusals %d, duplicates %d, lost %d; accept "
              "p99 %.1f ms, %.0f us CPU per accept (%.2fx a sync send's %.0f us)"
              % (accepted, MEMBERS, RATE, rate, res["percent"], refused, res["duplicates"],
                 res["lost"], p99, accept_us, res["accept_x_sync"] or 0, sync_us))
        print("BENCH_F_JSON " + json.dumps(res), flush=True)
    finally:
        s.close()
        s.cleanup_dir()


if __name__ == "__main__":
    main()
