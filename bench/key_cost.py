#!/usr/bin/env python3
"""Redis's CPU per request, measured inside Redis, for comparing two builds of botgate on a busy
machine: order off, order on, and order on with an Idempotency-Key (issue 30's targets: at
most 2x and 3x the order-off figure).

    bench/key_cost.py [BIN_DIR] [REQUESTS]    (default build/bin, 400)

Starts Redis and the simulator (tests/integration/harness.py) and two botgate processes of one
worker each on that Redis, order on (the default) and off; writes members; then, for ROUNDS
rounds, sends REQUESTS requests of each scenario, CONC (8) at a time, each to a member of its
own (nobody waits for a turn; one at a time leaves Redis's caches cold between requests), a new Idempotency-Key on every keyed one, and reads INFO commandstats
and INFO cpu before and after each. Per request it prints:

- cmd us: the microseconds Redis spent executing botgate's commands (commandstats' usec of every
  top-level command; a script's EVALSHA counts the calls it makes, which are left out by name:
  only PEXPIRE is both: the turn's, one per request with order on, is counted at its mean);
- cpu us: redis-server's CPU time (INFO cpu, user + sys: reading, parsing, writing too), minus
  what it spends idle over the same wall time (serverCron), measured before the rounds;
- commands and scripts per request.

The round trips do not depend on the machine's load; these figures do a little (caches, the
other processes' use of the cores): the medians over the rounds, scenarios interleaved, are
what to compare. CHANNEL=fbr measures a channel with a rate limit (make bench's scenario a),
fbc (the default) one without."""
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(HERE, "..", "build", "bin")
os.environ["BOTGATE_BIN_DIR"] = BIN
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402

N = int(sys.argv[2]) if len(sys.argv) > 2 else 400
ROUNDS = int(os.environ.get("ROUNDS", "5"))
CHANNEL = os.environ.get("CHANNEL", "fbc")
CONC = int(os.environ.get("CONC", "8"))
APP = "app-cost"
# the commands scripts call (the limiter's, the key's, the turn's join): their time is their
# EVALSHA's already
NESTED = {"time", "hmget", "hset", "hget", "hdel", "hexists", "hlen", "hkeys", "lpos", "llen",
          "zadd", "zrange", "zrem", "zremrangebyscore", "incrby", "pttl", "del", "set", "publish"}


def stats(redis):
    calls, usec, cpu = {}, {}, 0.0
    for line in redis("INFO", "cpu", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            f = dict(kv.split("=") for kv in rest.split(","))
            calls[name], usec[name] = int(f["calls"]), int(f["usec"])
        elif line.startswith(("used_cpu_user:", "used_cpu_sys:")):
            cpu += float(line.split(":")[1])
    return calls, usec, cpu


def main():
    s = harness.Stack(workers=1, env={"BOTGATE_MEMBER_ORDER": None,
                                      "BOTGATE_OUTBOX_CLAIM_MS": "3600000"})
    try:
        urls = {"on": s.url}
        s.start_gateway(port=harness.free_port(), name="botgate-off",
                        extra={"BOTGATE_MEMBER_ORDER": "0"})
        urls["off"] = s.url
        s.put("channel", harness.facebook_channel("fbc", APP, rateLimit={"perSecond": 0}))
        s.put("channel", harness.facebook_channel("fbr", APP, rateLimit={
            "perSecond": 100000, "burst": 10000}))
        total = (ROUNDS * 3 + 2) * N + 100
        for i in range(total):
            s.redis("SET", "botgate:member:{%s}:m%d" % (CHANNEL, i),
                    json.dumps(harness.member("m%d" % i, CHANNEL, APP, "2456%012d" % i)))
        tok = s.token(APP, "bot:sendResponses")
        nxt = [0]

        lock = threading.Lock()

        def send(url, keyed):
            with lock:
                i = nxt[0]
                nxt[0] += 1
            h = {"Authorization": "Bearer " + tok}
            if keyed:
                h["Idempotency-Key"] = "cost-%d" % i
            a = harness.http("POST", url + "/sendResponses",
                             {"channelId": CHANNEL, "memberId": "m%d" % i,
                              "response": [{"type": "TEXT", "text": "cost"}]}, h)
            assert a.status == 200, a

        # warm: caches filled, scripts loaded
        for url in urls.values():
            for k in (False, True) * 20:
                send(url, k)
        _, _, c0 = stats(s.redis)
        t0 = time.monotonic()
        time.sleep(5)
        idle = (stats(s.redis)[2] - c0) / (time.monotonic() - t0)  # CPU s per s, idle
        scenarios = (("off", "off", False), ("on", "on", False), ("key", "on", True))
        got = {name: [] for name, _, _ in scenarios}
        for _ in range(ROUNDS):
            for name, url, keyed in scenarios:
                calls0, usec0, cpu0 = stats(s.redis)
                t0 = time.monotonic()
                with ThreadPoolExecutor(CONC) as pool:
                    list(pool.map(lambda _: send(urls[url], keyed), range(N)))
                wall = time.monotonic() - t0
                time.sleep(0.2)  # the answers' own commands (the turn given back) land
                calls1, usec1, cpu1 = stats(s.redis)
                wall += 0.2
                d = {k: calls1[k] - calls0.get(k, 0) for k in calls1}
                u = {k: usec1[k] - usec0.get(k, 0) for k in usec1}
                own = {k for k in d if d[k] and k != "info" and not k.startswith("x")}
                scripts = d.get("evalsha", 0) + d.get("eval", 0)
                top = sum(u[k] for k in own if k not in NESTED and k != "pexpire")
                if d.get("pexpire"):
                    # the top-level PEXPIREs: the turn's (PEXPIRE NX, one per request with
                    # order on); the others are the scripts'
                    top += u["pexpire"] * min(d["pexpire"], N if url == "on" else 0) / d["pexpire"]
                got[name].append({
                    "cmd_us": top / N,
                    "cpu_us": (cpu1 - cpu0 - idle * wall) * 1e6 / N,
                    "commands": sum(d[k] for k in own) / N,
                    "scripts": scripts / N})
        print("Redis per request, %d requests x %d rounds, %d at a time, channel %s, %s; "
              "idle %.0f us/s" % (N, ROUNDS, CONC, CHANNEL, BIN, idle * 1e6))
        med = {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
               for name, rows in got.items()}
        for name, m in med.items():
            print("  %-4s cmd us %5.2f (%s)  cpu us %5.2f (%s)  commands %.2f  scripts %.2f"
                  % (name, m["cmd_us"], " ".join("%.1f" % r["cmd_us"] for r in got[name]),
                     m["cpu_us"], " ".join("%.1f" % r["cpu_us"] for r in got[name]),
                     m["commands"], m["scripts"]))
        for name in ("on", "key"):
            print("  %s / off: cmd %.2fx, cpu %.2fx" % (
                name, med[name]["cmd_us"] / med["off"]["cmd_us"],
                med[name]["cpu_us"] / med["off"]["cpu_us"]))
    finally:
        s.close()


if __name__ == "__main__":
    main()
