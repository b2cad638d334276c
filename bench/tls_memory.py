#!/usr/bin/env python3
"""Memory per send in flight when the platform is over TLS, scenario d's shape: the simulator
answering after 1 s behind an nginx HTTPS front (HTTP/2 offered by ALPN, 128 streams per
connection), wrk holding N requests in flight on N connections for a few seconds, one botgate
worker. Measured for each upstream HTTP setting (BOTGATE_UPSTREAM_HTTP), both botgate's own:
HTTP/2 (the default, one connection per 128 sends) and HTTP/1.1 (a TLS connection per send in
flight). Per-member order is on (the product's default) and the requests are spread over 2N
members (bench.lua's BENCH_MEMBERS, written by bench/members.lua), so that none waits for its
member's turn.

    bench/tls_memory.py [BIN_DIR] [N]      (default build-release/bin, 2000)

Per setting: botgate is started, warmed up with a short run of 8 connections, its RSS read and
its peak RSS reset (/proc/PID/clear_refs 5), then wrk runs -cN -d8s --timeout 10s bench.lua (scenario d's request);
the figure is (peak RSS - RSS before) / N, with the answers counted and the upstream connections
botgate held at the end of the run (/proc/net/tcp)."""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
from test_tls import established_to, start_tls_front  # noqa: E402

PSID = "2456789012345678"  # bench.lua's
MEMBERS = [1]  # how many members the requests are spread over (load_members)


def rss_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def load_members(s, n):
    """bench-m0 as botgatectl stores it, and n - 1 copies in one script (bench/members.lua)."""
    s.put("member", harness.member("bench-m0", "bench-fb", "A", "3000000000000000"))
    with open(os.path.join(HERE, "members.lua")) as f:
        script = f.read()
    got = s.redis("EVAL", script, "2", "botgate:member:{bench-fb}:bench-m0",
                  "botgate:recipient:{bench-fb}:3000000000000000", str(n), "bench-m0",
                  "3000000000000000", "bench-m", "3", "15")
    if str(got) != str(n):
        raise SystemExit("members.lua answered %r, not %d" % (got, n))


def wrk(url, token, conns, seconds, pid=None):
    """Runs wrk; with pid, also samples that process's RSS every 0.2 s: (answers, failed,
    samples in KiB)."""
    p = subprocess.Popen(["wrk", "-t2", "-c%d" % conns, "-d%ds" % seconds, "--timeout", "10s",
                          "-s", os.path.join(HERE, "bench.lua"), url, "--", "botgate", "d",
                          token], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, BENCH_THREADS="2", BENCH_MEMBERS=str(MEMBERS[0])))
    samples = []
    while p.poll() is None:
        if pid is not None:
            samples.append(rss_kib(pid, "VmRSS"))
        time.sleep(0.2)
    out = p.stdout.read()
    answers, failed = 0, 0
    for line in out.splitlines():
        if "requests in" in line:
            answers = int(line.split()[0])
        if "Non-2xx" in line or "Socket errors" in line:
            failed += sum(int(w.strip(",")) for w in line.replace(":", " ").split()
                          if w.strip(",").isdigit())
    return answers, failed, samples


def main():
    args = sys.argv[1:]
    harness.BIN = os.path.abspath(args[0] if args else os.path.join(HERE, "..", "build-release",
                                                                    "bin"))
    n = int(args[1]) if len(args) > 1 else 2000
    s = harness.Stack(workers=1, start_gateway=False, sim_threads=2)
    nginx = None
    try:
        nginx, port, cert = start_tls_front(s, "front", conns=2 * n + 1024)
        # the shared rate limit on, generous enough never to wait (as make bench has it)
        s.put("channel", harness.facebook_channel(
            "bench-fb", "A", rateLimit={"perSecond": 1000000, "burst": 100000}))
        s.put("member", harness.member("bench-member", "bench-fb", "A", PSID))
        load_members(s, 2 * n)
        MEMBERS[0] = 2 * n
        token = s.token("A", "bot:sendResponses")
        print("memory per send in flight over TLS, %d in flight, one worker, simulator 1 s "
              "behind nginx (listen ssl http2, 128 streams):" % n)
        for setting in ("2", "1.1"):
            s.start_gateway(extra={
                "BOTGATE_FACEBOOK_API_URL": "https://127.0.0.1:%d/graph/v19.0" % port,
                "BOTGATE_CA_FILE": cert, "BOTGATE_UPSTREAM_HTTP": setting,
                "BOTGATE_MEMBER_ORDER": "1", "BOTGATE_LOG_LEVEL": "warn",
                "BOTGATE_MAX_CONNECTIONS": str(n + 1000)})
            pid = s.procs["botgate"].pid
            wrk(s.url, token, 8, 1)  # the first connections, the TLS session, the caches
            time.sleep(0.5)
            before = rss_kib(pid, "VmRSS")
            s.sim("POST", "/_sim/config", {"latency_ms": 1000})
            with open("/proc/%d/clear_refs" % pid, "w") as f:
                f.write("5")
            answers, failed, samples = wrk(s.url, token, n, 8, pid)
            # in the run's second half every send waits on a connection made before
            steady = sorted(samples[len(samples) // 2:])[len(samples[len(samples) // 2:]) // 2]
            conns = established_to(port)
            peak = rss_kib(pid, "VmHWM")
            print("  HTTP/%-3s  RSS %6.1f -> peak %6.1f MiB: %5.1f KiB per send in flight (in the "
                  "run's second half: %.1f); %d answers in 8 s (%d failed); %d upstream "
                  "connections at the end"
                  % (setting, before / 1024, peak / 1024, (peak - before) / n,
                     (steady - before) / n, answers, failed, conns))
            s.sim("POST", "/_sim/config", {"latency_ms": 0})
            s.stop_gateway()
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait()
        s.close()


if __name__ == "__main__":
    main()
