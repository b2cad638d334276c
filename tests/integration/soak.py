#!/usr/bin/env python3
"""make soak: a long run of mixed traffic with faults against the normal build.

A Stack (harness.py: redis-server, botgate-sim and botgate on free ports) takes, for
SOAK_SECONDS (default 600), sendResponses on facebook, whatsapp, whatsapp-cloud, slack, wechat
and teamwork channels and redirectMemberToNode on a small tree from SOAK_THREADS client threads
(default 8), some requests carrying a simulator fault word. Every minute, on top of that:
Redis is killed (SIGKILL) and restarted on the same port, its data reloaded; the simulator's
latency goes above botgate's deadline for 5 s; 200 idle connections are opened and held.
botgate's RSS is sampled every 5 s.

Checks (the exit status is 1 when one fails): no request without an answer; every answer a
200 or a 500 with err_code (well-formed JSON); none later than the deadline + 3 s; botgate never
exits during the run and exits 0 at the end; traffic succeeds on every channel afterwards (on
one that the "ratelimit" word paused, once its pause, at most 60 s, is over); RSS flat: end <=
start + 20 MiB and no steady growth over the last half (mean of the fourth quarter of the
samples within max(2 MiB, 5 %) of the third's).

Run: BOTGATE_BIN_DIR=build/bin python3 tests/integration/soak.py  (scripts/soak.sh does).
Not named test_*.py: ctest does not run it."""
import collections
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Stack, http, facebook_channel, whatsapp_channel, cloud_channel,  # noqa: E402
                     member, wait_for)

SECONDS = int(os.environ.get("SOAK_SECONDS", "600"))
THREADS = int(os.environ.get("SOAK_THREADS", "8"))
WORKERS = int(os.environ.get("SOAK_WORKERS", "2"))
DEADLINE_S = 2.0
LATE_S = DEADLINE_S + 3.0  # an answer later than this counts as late
PERIOD = 60
SAMPLE_EVERY = 5
APP = "app-soak"
MEMBERS = 16
FAULT_RATE = 0.08
FAULT_WORDS = ["fail5xx", "garbage", "truncated", "reset", "midreset", "huge", "timeout",
               "slow300", "ratelimit"]

CHANNELS = {
    "facebook": facebook_channel("s-fb", APP),
    "whatsapp": None,  # needs the simulator's URL: see seed()
    "whatsapp-cloud": cloud_channel("s-cl", APP),
    "slack": {"_id": "s-sl", "app": APP, "type": "slack", "on": True,
              "info": {"botAccessToken": "xoxb-soak", "botId": "B0SOAK"}},
    "wechat": {"_id": "s-wx", "app": APP, "type": "wechat", "on": True,
               "info": {"appId": "wxapp-soak", "appsecret": "wx-secret-soak",
                        "botOpenId": "gh_bot_soak"}},
    "teamwork": {"_id": "s-tw", "app": APP, "type": "teamwork", "on": True,
                 "info": {"apiKey": "tw-key-soak", "tbId": "tb-soak"}},
}
EXTERNAL = {"facebook": "psid-soak-%02d", "whatsapp": "8526100%04d",
            "whatsapp-cloud": "8526200%04d", "slack": "D%04d", "wechat": "openid-soak-%02d",
            "teamwork": "user-soak-%02d"}
TREE = {"_id": "ST", "app": APP, "name": "soak", "nodes": {
    "START": {
        "preAction": [{"type": "set", "path": "member.botMeta.tempData.n",
                       "value": "{{agendaMeta.n}}"}],
        "response": [{"type": "TEXT", "text": "soak {{agendaMeta.n}} {{agendaMeta.word}}"}],
        "postAction": [{"type": "addTags", "tags": ["soaked"]}],
        "redirect": {"tree": "ST", "nodeCompositeId": "NEXT"},
    },
    "NEXT": {"response": [{"type": "TEXT", "text": "next {{member.botMeta.tempData.n}}"}],
             "postAction": [{"type": "removeTags", "tags": ["soaked"]}]},
    "QUIET": {"preAction": [{"type": "set", "path": "member.meta.quiet",
                             "value": "{{agendaMeta.n}}"}]},
}}


def log(msg):
    print("[soak %6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def rss_mib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def metric(s, name):
    for line in http("GET", s.url + "/metrics", timeout=5).raw.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def mid(ptype, i):
    return "m-%s-%02d" % (CHANNELS[ptype]["_id"], i)


def seed(s):
    CHANNELS["whatsapp"] = whatsapp_channel("s-wa", APP, s.sim_url + "/wa")
    for ptype, ch in CHANNELS.items():
        s.put("channel", ch)
        for i in range(MEMBERS):
            s.put("member", member(mid(ptype, i), ch["_id"], APP, EXTERNAL[ptype] % i,
                                   platform=ptype))
    path = os.path.join(s.dir, "tree-soak.json")
    with open(path, "w") as f:
        json.dump(TREE, f)
    s.ctl("tree", "import", path)
    return s.token(APP, "bot:sendResponses", "bot:redirectMemberToNode")


class Tally:
    """What the clients saw; every method is thread safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = 0
        self.answers = collections.Counter()
        self.lost = collections.Counter()
        self.unexpected = []
        self.late = 0
        self.slowest = 0.0
        self.store_down = []  # when each 119 was answered

    def add(self, label, took, bad=None):
        with self.lock:
            self.sent += 1
            if label.startswith("lost"):
                self.lost[label] += 1
            else:
                self.answers[label] += 1
            if bad is not None and len(self.unexpected) < 20:
                self.unexpected.append(bad)
            if label == "500 err_code 119":
                self.store_down.append(time.monotonic())
            if took > LATE_S:
                self.late += 1
            self.slowest = max(self.slowest, took)


def element_errors(j):
    """The error objects of a send answer's elements (j its JSON)."""
    result = j.get("sendResult", {}).get("result", []) if isinstance(j.get("sendResult"),
                                                                     dict) else []
    return [el["error"] for el in result
            if isinstance(el, dict) and isinstance(el.get("error"), dict)]


def classify(a):
    """A label for the answer, and a description when it is not what contract.md allows."""
    j = a.json
    if not isinstance(j, dict):
        return "unexpected %d" % a.status, repr(a)[:300]
    if a.status == 200 and j.get("ok") == 1 and isinstance(j.get("sendResult"), dict):
        codes = sorted({e.get("err_code") for e in element_errors(j)})
        if not codes:
            return "200", None
        return "200, element err_code %s" % "/".join(str(c) for c in codes), None
    if (a.status == 500 and j.get("ok") == 0 and isinstance(j.get("err_code"), int)
            and j.get("err") == j.get("error")):
        return "500 err_code %d" % j["err_code"], None
    return "unexpected %d" % a.status, repr(a)[:300]


def make_request(rnd, n):
    """(path, body) of one random request."""
    word = rnd.choice(FAULT_WORDS) if rnd.random() < FAULT_RATE else ""
    i = rnd.randrange(MEMBERS)
    if rnd.random() < 0.15:
        ptype = rnd.choice(["facebook", "whatsapp-cloud", "slack"])
        node = rnd.choice(["START", "START", "QUIET"])
        body = {"channelId": CHANNELS[ptype]["_id"], "memberId": mid(ptype, i),
                "redirect": {"tree": "ST", "nodeCompositeId": node},
                "meta": {"n": n, "word": word}}
        return "/redirectMemberToNode", body
    ptype = rnd.choice(list(CHANNELS))
    texts = ["soak %d.%d %s" % (n, k, word if k == 0 else "") for k in range(rnd.randint(1, 3))]
    body = {"channelId": CHANNELS[ptype]["_id"],
            "response": [{"type": "TEXT", "text": t} for t in texts]}
    if ptype == "facebook" and rnd.random() < 0.2:
        body["recipientId"] = "psid-soak-new-%03d" % rnd.randrange(300)  # found or created
    else:
        body["memberId"] = mid(ptype, i)
    return "/sendResponses", body


def client(s, tok, tally, stop, seed_n):
    rnd = random.Random(seed_n)
    n = seed_n * 10000000
    while not stop.is_set():
        n += 1
        path, body = make_request(rnd, n)
        t0 = time.monotonic()
        try:
            a = http("POST", s.url + path, body, {"Authorization": "Bearer " + tok},
                     timeout=DEADLINE_S + 10)
            label, bad = classify(a)
        except Exception as e:  # no answer at all (connection refused or reset, timed out)
            label, bad = "lost (%s)" % type(e).__name__, "%s: %s" % (path, e)
        tally.add(label, time.monotonic() - t0, bad)


class Watch:
    """Samples botgate's RSS every 5 s, notices an exit, keeps the simulator's record short."""

    def __init__(self, s):
        self.s = s
        self.proc = s.procs["botgate"]
        self.samples = []  # (seconds since start, MiB)
        self.crash = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(SAMPLE_EVERY):
            if self.proc.poll() is not None:
                self.crash = self.proc.returncode
                log("botgate exited with %s" % self.crash)
                return
            r = rss_mib(self.proc.pid)
            if r is not None:
                self.samples.append((time.monotonic() - T0, r))
            try:
                self.s.sim_reset()  # the record would grow by every call
            except OSError:
                pass


RESTARTS = []  # (fault start, killed, back up) monotonic times
RECOVERY_S = 5.0  # after Redis is back, 119 answers must stop within this


def fault_redis(s):
    # No persistence in tests: a snapshot taken now is what the restarted Redis loads before
    # it accepts anyone, so that no request meets an empty store.
    start = time.monotonic()  # before the kill: answers to requests in flight then count here
    s.redis("SAVE")
    s.stop_redis()  # SIGKILL
    killed = time.monotonic()
    time.sleep(1.0)
    s.start_redis(port=s.redis_port)
    RESTARTS.append((start, killed, time.monotonic()))


def fault_latency(s):
    s.sim("POST", "/_sim/config", {"latency_ms": int(DEADLINE_S * 1000) + 1000})
    time.sleep(5)
    s.sim("POST", "/_sim/config", {"latency_ms": 0})


def fault_idle(s):
    conns = []
    try:
        for _ in range(200):
            conns.append(socket.create_connection(("127.0.0.1", s.port), timeout=5))
        time.sleep(8)  # longer than BOTGATE_HTTP_TIMEOUT_S: botgate closes them first
    finally:
        for c in conns:
            c.close()


FAULTS = [(10, "Redis killed and restarted", fault_redis),
          (25, "simulator latency above the deadline for 5 s", fault_latency),
          (40, "200 idle connections", fault_idle)]


PAUSE_MAX_S = 60.0  # a platform's rate-limit answer pauses its sender this long at most


def retry_after_s(a):
    """The longest retryAfterMs of the answer's elements refused for a rate limit (120), in s."""
    waits = [e.get("retryAfterMs", 0) / 1000.0
             for e in element_errors(a.json if isinstance(a.json, dict) else {})
             if e.get("err_code") == 120]
    return max(waits) if waits else None


def traffic_ok(s, tok):
    """After the soak: a plain message on every channel succeeds within 15 s. A channel that a
    platform's rate-limit answer paused (the "ratelimit" word: 1 s doubling up to 60 s while
    they repeat, contract.md section 8) gets that pause on top: it is tried again once the
    answer's retryAfterMs has passed, and the pause may not exceed 60 s."""
    start = time.monotonic()
    end = {ptype: start + 15 for ptype in CHANNELS}
    next_try = {ptype: start for ptype in CHANNELS}
    pending = set(CHANNELS)
    while pending and time.monotonic() < max(end[p] for p in pending):
        for ptype in sorted(pending):
            now = time.monotonic()
            if now >= end[ptype] or now < next_try[ptype]:
                continue
            a = http("POST", s.url + "/sendResponses",
                     {"channelId": CHANNELS[ptype]["_id"], "memberId": mid(ptype, 0),
                      "response": [{"type": "TEXT", "text": "after the soak"}]},
                     {"Authorization": "Bearer " + tok}, timeout=DEADLINE_S + 10)
            if classify(a)[0] == "200":
                pending.discard(ptype)
                continue
            wait = retry_after_s(a)
            if wait is not None and wait <= PAUSE_MAX_S:
                next_try[ptype] = time.monotonic() + wait
                end[ptype] = min(start + 15 + PAUSE_MAX_S, max(end[ptype], next_try[ptype] + 15))
        time.sleep(0.2)
    return sorted(pending), time.monotonic() - start


def main():
    global T0
    T0 = time.monotonic()
    s = Stack(workers=WORKERS, env={"BOTGATE_REQUEST_TIMEOUT_MS": str(int(DEADLINE_S * 1000)),
                                    "BOTGATE_UPSTREAM_TIMEOUT_MS": "1500",
                                    "BOTGATE_REDIS_TIMEOUT_MS": "300",
                                    "BOTGATE_HTTP_TIMEOUT_S": "5",
                                    "BOTGATE_LOG_LEVEL": os.environ.get("SOAK_LOG_LEVEL", "warn")})
    ok = False
    try:
        ok = run(s)
    finally:
        codes = s.close()
        code = codes.get("botgate")
        print("  botgate exit code at the end  %s%s" % (code, "" if code == 0 else "   FAIL"))
        ok = ok and code == 0
        if ok and not os.environ.get("SOAK_KEEP_LOGS"):
            s.cleanup_dir()
        else:
            print("  logs kept in %s" % s.dir)
        print("RESULT: %s" % ("PASS" if ok else "FAIL"), flush=True)
    return 0 if ok else 1


def run(s):
    tok = seed(s)
    log("stack up (botgate pid %d, %d workers); %d s of load from %d threads"
        % (s.procs["botgate"].pid, WORKERS, SECONDS, THREADS))
    tally = Tally()
    stop = threading.Event()
    watch = Watch(s)
    time.sleep(0.5)
    rss_start = rss_mib(s.procs["botgate"].pid)
    watch.samples.append((time.monotonic() - T0, rss_start))
    watch.thread.start()
    clients = [threading.Thread(target=client, args=(s, tok, tally, stop, k + 1))
               for k in range(THREADS)]
    t_start = time.monotonic()
    for t in clients:
        t.start()
    schedule = sorted((p * PERIOD + off, name, fn) for p in range(SECONDS // PERIOD + 1)
                      for off, name, fn in FAULTS if p * PERIOD + off < SECONDS - 5)
    done = collections.Counter()
    try:
        for at, name, fn in schedule:
            while time.monotonic() - t_start < at and watch.crash is None:
                time.sleep(0.2)
            if watch.crash is not None:
                break
            log("fault: %s (%d requests so far)" % (name, tally.sent))
            fn(s)
            done[name] += 1
        while time.monotonic() - t_start < SECONDS and watch.crash is None:
            time.sleep(0.2)
    finally:
        stop.set()
        for t in clients:
            t.join()
        watch.stop.set()
        watch.thread.join()
    load_samples = list(watch.samples)
    crashes = 1 if watch.crash is not None or s.procs["botgate"].poll() is not None else 0
    in_flight = None
    after, after_s = [], 0.0
    rss_end = None
    if not crashes:
        try:
            wait_for(lambda: metric(s, "botgate_requests_in_flight") == 0, timeout=10,
                     what="no request in flight")
        except AssertionError:
            pass
        in_flight = metric(s, "botgate_requests_in_flight")
        after, after_s = traffic_ok(s, tok)
        time.sleep(3)
        rss_end = rss_mib(s.procs["botgate"].pid)

    # -- the summary --
    answered = sum(tally.answers.values())
    lost = sum(tally.lost.values())
    rss = [r for _, r in load_samples]
    q = len(rss) // 4
    q3 = rss[2 * q:3 * q] if q else rss
    q4 = rss[3 * q:] if q else rss
    mean3 = sum(q3) / len(q3)
    mean4 = sum(q4) / len(q4)
    rss_max = max(rss + ([rss_end] if rss_end else []))
    tolerance = max(2.0, 0.05 * mean3)
    flat = rss_end is not None and rss_end <= rss_start + 20 and mean4 - mean3 <= tolerance
    recoveries = []
    for i, (start, killed, up) in enumerate(RESTARTS):
        # the 119 answers of this outage: from its start to the start of the next one (the
        # requests in flight when the next kill comes are answered before it is recorded)
        end = RESTARTS[i + 1][0] if i + 1 < len(RESTARTS) else float("inf")
        last = max([t for t in tally.store_down if start <= t < end] or [up])
        recoveries.append((up - killed, max(0.0, last - up)))
    checks = {
        # every worker is back on Redis within a few seconds of Redis (backoff at most 2 s)
        "recovery": all(after_up <= RECOVERY_S for _, after_up in recoveries),
        "lost": lost == 0,
        "unexpected": not tally.unexpected,
        "late": tally.late == 0,
        "crashes": crashes == 0,
        "in_flight": in_flight == 0,
        "after": not crashes and not after,
        "rss": flat,
        "some_success": tally.answers["200"] > 0,
    }

    def mark(key):
        return "" if checks[key] else "   FAIL"

    print()
    print("soak summary: %d s, %d client threads, botgate with %d workers"
          % (SECONDS, THREADS, WORKERS))
    print("  requests sent                 %d (%.0f/s)"
          % (tally.sent, tally.sent / max(1.0, time.monotonic() - t_start)))
    print("  answers                       %d" % answered)
    for label, n in sorted(tally.answers.items()):
        print("      %-38s %d" % (label, n))
    print("  lost answers (no answer)      %d%s" % (lost, mark("lost")))
    for label, n in sorted(tally.lost.items()):
        print("      %-38s %d" % (label, n))
    print("  unexpected answers            %d%s" % (len(tally.unexpected), mark("unexpected")))
    for bad in tally.unexpected[:5]:
        print("      " + bad)
    print("  answers later than %.0f s       %d (slowest %.2f s)%s"
          % (LATE_S, tally.late, tally.slowest, mark("late")))
    print("  crashes (botgate exits)       %d%s" % (crashes, mark("crashes")))
    print("  faults                        %s" % ", ".join("%s x%d" % (k, v)
                                                          for k, v in sorted(done.items())))
    for down, after_up in recoveries:
        print("  Redis down %.1f s: 119 answered until %.1f s after it was back%s"
              % (down, after_up, "" if after_up <= RECOVERY_S else "   FAIL"))
    print("  in flight after the load      %s%s" % (in_flight, mark("in_flight")))
    print("  traffic after the soak        %s%s"
          % ("ok on every channel (in %.1f s)" % after_s if checks["after"]
             else "failing: %s" % after,
             mark("after")))
    print("  RSS start %.1f MiB, max %.1f MiB, end %s MiB (%d samples; mean of the 3rd quarter "
          "%.1f, of the 4th %.1f)" % (rss_start, rss_max,
                                      "%.1f" % rss_end if rss_end else "-", len(rss), mean3,
                                      mean4))
    print("  RSS flat                      %s (end <= start + 20 MiB, 4th quarter <= 3rd + "
          "%.1f MiB)%s" % ("yes" if flat else "no", tolerance, mark("rss")))
    if not checks["some_success"]:
        print("  no request succeeded   FAIL")
    return all(checks.values())


if __name__ == "__main__":
    T0 = time.monotonic()
    sys.exit(main())
