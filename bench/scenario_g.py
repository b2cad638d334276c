#!/usr/bin/env python3
"""Scenario g of make bench (issue 34): broadcasts. Three botgate processes (one worker each)
on one Redis, as scenario f.

    bench/scenario_g.py [BIN_DIR] [DELIVERED] [RATE] [ACCEPTED]
                        (default build-release/bin, 100000, 1000, 1000000)

(1) Accepting: ACCEPTED recipients by tag, the tag's index written straight to Redis (ids
only: accepting copies the index, it reads no member record); the time to the 202 and Redis's
used_memory before and after (INFO memory): bytes per queued message. The broadcast is then
cancelled (DELETE). Then ACCEPTED recipients by member ids in one body (about 11 MB: the
records written straight to Redis, accepting checks only that each exists), the same figures,
while the conversational client below sends beside it to the same worker: its slowest send
and the longest step of the body's check (the gateway's log line) say how long the loop was
held at most.
(2) Delivering: DELIVERED members (bench/members.lua copies of one botgatectl record) tagged,
one broadcast to the tag, delivered by the three instances to a whatsapp-cloud number the
simulator limits to RATE a second (burst 50). Meanwhile one client sends synchronous
conversational messages to other members of the same channel, 20 a second; their p99 is
compared with the same sends' p99 before the broadcast (idle). The simulator's record judges:
the rate it took (share of RATE), its refusals, duplicates (a member's text twice) and lost
(a member with no message). Prints one line and BENCH_G_JSON {...}.

Done when (issue 34): 95-100 % of the limit, 0 refusals, 0 duplicates, 0 lost; conversational
p99 within 2x of idle."""
import json
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
from test_sim_limits import max_in_window  # noqa: E402
from scenario_f import arrivals, bigger_record, texts  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                      else os.path.join(HERE, "..", "build-release", "bin"))
DELIVERED = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
RATE = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
ACCEPTED = int(sys.argv[4]) if len(sys.argv) > 4 else 1000000
SIM_BURST = 50
TALK_EVERY_S = 0.05  # the conversational client's pace: 20 sends a second
IDLE_SENDS = 200
LIMITED, FREE = "1055551000", "1055552000"  # phoneNumberIds: delivered to; the accept's
harness.BIN = BIN

MEMBERS_SCRIPT = ("for i = tonumber(ARGV[2]), tonumber(ARGV[3]) - 1 do "
                  "redis.call('SET', KEYS[1] .. ARGV[1] .. i, '{}') end return 1")
DROP_SCRIPT = ("for i = tonumber(ARGV[2]), tonumber(ARGV[3]) - 1 do "
               "redis.call('DEL', KEYS[1] .. ARGV[1] .. i) end return 1")
SADD_SCRIPT = ("for i = tonumber(ARGV[2]), tonumber(ARGV[3]) - 1 do "
               "redis.call('SADD', KEYS[1], ARGV[1] .. i) end return redis.call('SCARD', KEYS[1])")


def used_memory(s):
    info = s.redis("INFO", "memory")
    info = info.decode() if isinstance(info, bytes) else str(info)
    for line in info.splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    raise SystemExit("no used_memory in INFO memory")


def tag_ids(s, channel, tag, prefix, n):
    """The tag's index holds prefix0 .. prefix<n-1>, 100,000 a script (Redis stays responsive)."""
    key = "botgate:tag:{%s}:%s" % (channel, tag)
    for lo in range(0, n, 100000):
        got = s.redis("EVAL", SADD_SCRIPT, "1", key, prefix, str(lo), str(min(lo + 100000, n)))
    if int(got) != n:
        raise SystemExit("tag %s holds %s ids, not %d" % (key, got, n))


def id_members(s, channel, prefix, n, drop=False):
    """Member keys prefix0 .. prefix<n-1> (bare records: accepting by id checks that each
    exists, it reads none), 100,000 a script; with drop, deleted."""
    for lo in range(0, n, 100000):
        s.redis("EVAL", DROP_SCRIPT if drop else MEMBERS_SCRIPT, "1", "botgate:member:{%s}:" % channel, prefix, str(lo),
                str(min(lo + 100000, n)))


def step_line(s):
    """(steps, longest step in us) of the last large body's check, from the log of the first
    gateway (the one s.url names)."""
    with open(os.path.join(s.dir, "botgate.log"), errors="replace") as f:
        log = f.read()
    found = re.findall(r"checked in (\d+) steps, the longest (\d+) us", log)
    return tuple(int(x) for x in found[-1]) if found else (None, None)


def load_members(s, channel, n):
    """bench-g0 as botgatectl stores it (tag g), and n - 1 copies (bench/members.lua)."""
    s.put("member", harness.member("bench-g0", channel, "bench", "15550000000",
                                   platform="whatsapp-cloud", tags=["g"]))
    with open(os.path.join(HERE, "members.lua")) as f:
        script = f.read()
    got = s.redis("EVAL", script, "2", "botgate:member:{%s}:bench-g0" % channel,
                  "botgate:recipient:{%s}:15550000000" % channel, str(n), "bench-g0",
                  "15550000000", "bench-g", "1555", "7")
    if str(got) != str(n):
        raise SystemExit("members.lua answered %r, not %d" % (got, n))
    tag_ids(s, channel, "g", "bench-g", n)


def redis_calls(s):
    """Commands Redis has run (INFO commandstats): a script counts once."""
    info = s.redis("INFO", "commandstats")
    info = info.decode() if isinstance(info, bytes) else str(info)
    return sum(int(part.split("=")[1]) for line in info.splitlines()
               if line.startswith("cmdstat_")
               for part in line.split(":", 1)[1].split(",") if part.startswith("calls="))


def broadcast(s, tok, body):
    t0 = time.time()
    a = harness.http("POST", s.url + "/broadcasts", body, {"Authorization": "Bearer " + tok},
                     timeout=300)
    if a.status != 202:
        raise SystemExit("POST /broadcasts: %d %s" % (a.status, a.raw[:300]))
    return a.json, time.time() - t0


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else 0.0


def p99(xs):
    return quantile(xs, 0.99)


class Talker(threading.Thread):
    """Synchronous sends to the talkers of the channel, one at a time every TALK_EVERY_S: their
    latencies (ms), until stopped or count sends."""

    def __init__(self, s, tok, channel, count=None):
        super().__init__(daemon=True)
        self.s, self.tok, self.channel, self.count = s, tok, channel, count
        self.lat, self.failed, self.stop = [], 0, threading.Event()

    def run(self):
        n = 0
        while not self.stop.is_set() and (self.count is None or n < self.count):
            t0 = time.time()
            body = {"channelId": self.channel, "memberId": "bench-t%d" % (n % 10),
                    "response": [{"type": "TEXT", "text": "talk-%d-%f" % (n, t0)}]}
            r = harness.http("POST", self.s.url + "/sendResponses", body,
                             {"Authorization": "Bearer " + self.tok})
            self.lat.append((time.time() - t0) * 1000)
            if r.status != 200 or (r.json or {}).get("sendResult", {}).get("ok") != 1:
                self.failed += 1
            n += 1
            time.sleep(max(0.0, TALK_EVERY_S - (time.time() - t0)))


def main():
    env = {"BOTGATE_WORKERS": "1", "BOTGATE_LOG_LEVEL": "info", "BOTGATE_MEMBER_ORDER": "1",
           "BOTGATE_REQUEST_TIMEOUT_MS": "10000", "BOTGATE_UPSTREAM_TIMEOUT_MS": "5000"}
    s = harness.Stack(workers=1, env=env, sim_threads=2)
    try:
        urls = [s.url]
        for name in ("botgate2", "botgate3"):
            s.start_gateway(port=harness.free_port(), name=name)
            urls.append(s.url)
        s.url = urls[0]
        bigger_record(s, 2 * DELIVERED + 20000)
        for cid, number, limit in (("bench-gw", LIMITED, RATE), ("bench-ga", FREE, 1)):
            s.put("channel", harness.cloud_channel(
                cid, "bench", rateLimit={"perSecond": limit, "perRecipient": {"everyMs": 0}},
                info={"accessToken": "bench-cloud-token", "phoneNumberId": number,
                      "wabaId": "1"}))
        tok = s.token("bench", "bot:admin")
        r = harness.http("POST", s.sim_url + "/_sim/limits", {"rules": [
            {"platform": "whatsapp-cloud", "sender": LIMITED, "perSecond": RATE,
             "burst": SIM_BURST}]})
        assert r.status == 200, r
        auth = {"Authorization": "Bearer " + tok}

        # (1) accepting a million by tag
        tag_ids(s, "bench-ga", "all", "bench-a", ACCEPTED)
        mem0 = used_memory(s)
        acc, accept_s = broadcast(s, tok, {
            "channelId": "bench-ga", "recipients": {"tags": ["all"]},
            "response": [{"type": "TEXT", "text": "never {{member._id}}"}]})
        mem1 = used_memory(s)
        harness.http("DELETE", s.url + "/broadcasts/" + acc["broadcastId"], headers=auth,
                     timeout=60)
        per_msg = (mem1 - mem0) / max(acc["total"], 1)
        s.redis("DEL", "botgate:tag:{bench-ga}:all")

        # (1b) accepting a million by member ids, one body, a conversation beside it
        for i in range(10):
            s.put("member", harness.member("bench-t%d" % i, "bench-gw", "bench",
                                           "1666000000%d" % i, platform="whatsapp-cloud"))
        id_members(s, "bench-ga", "bench-i", ACCEPTED)
        body = ('{"channelId": "bench-ga", "recipients": {"memberIds": [%s]}, "response": '
                '[{"type": "TEXT", "text": "never {{member._id}}"}]}'
                % ",".join('"bench-i%d"' % i for i in range(ACCEPTED))).encode()
        beside = Talker(s, tok, "bench-gw")
        beside.start()
        time.sleep(1)  # a few sends before, for the comparison
        mem2 = used_memory(s)
        ids_acc, ids_accept_s = broadcast(s, tok, body)
        mem3 = used_memory(s)
        beside.stop.set()
        beside.join()
        harness.http("DELETE", s.url + "/broadcasts/" + ids_acc["broadcastId"], headers=auth,
                     timeout=60)
        ids_per_msg = (mem3 - mem2) / max(ids_acc["total"], 1)
        steps, longest_us = step_line(s)
        id_members(s, "bench-ga", "bench-i", ACCEPTED, drop=True)  # not needed below

        # (2) delivering DELIVERED members, with conversational sends beside
        load_members(s, "bench-gw", DELIVERED)
        idle = Talker(s, tok, "bench-gw", IDLE_SENDS)
        idle.run()
        s.sim_reset()
        talk = Talker(s, tok, "bench-gw")
        calls0 = redis_calls(s)
        bc, deliver_accept_s = broadcast(s, tok, {
            "channelId": "bench-gw", "recipients": {"tags": ["g"]},
            "response": [{"type": "TEXT", "text": "g {{member._id}}"}]})
        talk.start()
        last, changed, st = -1, time.time(), {}
        while time.time() - changed < 30:
            st = harness.http("GET", s.url + "/broadcasts/" + bc["broadcastId"],
                              headers=auth).json
            if st.get("state") != "running":
                break
            n = st["sent"] + st["failed"] + st["unknown"]
            if n != last:
                last, changed = n, time.time()
            time.sleep(1)
        talk.stop.set()
        talk.join()
        calls = redis_calls(s) - calls0

        got = arrivals(s, LIMITED)
        refused = sum(1 for e in got if e["limit"] is not None)
        got = [e for e in got if e["limit"] is None]  # taken by the platform
        words = texts(got)
        bwords = [w for w in words if w.startswith("g bench-g")]
        bts = [e["ts_us"] for e, w in zip(got, words) if w.startswith("g bench-g")]
        # the platform's rate over the broadcast's span, conversational messages included
        ts = [e["ts_us"] for e in got if bts and bts[0] <= e["ts_us"] <= bts[-1]]
        rate = (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e6) if len(ts) > 1 else 0.0
        unique = len(set(bwords))
        idle_p99, busy_p99 = p99(idle.lat), p99(talk.lat)
        res = {"instances": 3, "accepted": acc["total"], "accept_s": round(accept_s, 2),
               "redis_bytes_per_queued": round(per_msg, 1), "used_memory_before": mem0,
               "used_memory_after": mem1, "ids_accepted": ids_acc["total"],
               "ids_body_bytes": len(body), "ids_accept_s": round(ids_accept_s, 2),
               "ids_redis_bytes_per_queued": round(ids_per_msg, 1), "ids_check_steps": steps,
               "ids_longest_step_ms": longest_us / 1000 if longest_us is not None else None,
               "ids_talk_sends": len(beside.lat),
               "ids_talk_max_ms": round(max(beside.lat), 1) if beside.lat else None,
               "ids_talk_p50_ms": round(quantile(beside.lat, 0.5), 1), "delivered_total": bc["total"],
               "delivered_accept_s": round(deliver_accept_s, 2), "limit": RATE,
               "state": st.get("state"), "sent": st.get("sent"), "failed": st.get("failed"),
               "unknown": st.get("unknown"), "arrivals": len(bwords),
               "rate": round(rate, 1), "percent": round(100 * rate / RATE, 1),
               "busiest_second": max_in_window(ts), "sim_refusals": refused,
               "duplicates": len(bwords) - unique, "lost": bc["total"] - unique,
               "talk_idle_p99_ms": round(idle_p99, 1), "talk_busy_p99_ms": round(busy_p99, 1),
               "talk_idle_p50_ms": round(quantile(idle.lat, 0.5), 1),
               "talk_busy_p50_ms": round(quantile(talk.lat, 0.5), 1),
               "talk_sends": len(talk.lat), "talk_failed": talk.failed + idle.failed,
               "talk_x_idle": round(busy_p99 / idle_p99, 2) if idle_p99 else None,
               # every Redis command while it ran (the conversational sends' too, and the
               # status polls), per member delivered
               "redis_calls_per_member": round(calls / max(len(bwords), 1), 1)}
        print("g  by member ids: %d accepted in %.2f s from a body of %d bytes, %.0f bytes of "
              "Redis per queued message; the body checked in %s steps, the longest %s ms; %d "
              "sends beside it on the same worker, the slowest %s ms (p50 %.1f)"
              % (ids_acc["total"], ids_accept_s, len(body), ids_per_msg, steps,
                 res["ids_longest_step_ms"], len(beside.lat), res["ids_talk_max_ms"],
                 res["ids_talk_p50_ms"]))
        print("g  3 instances: %d recipients by tag accepted in %.2f s, %.0f bytes of Redis per "
              "queued message; %d members delivered to one number limited to %d/s: %.1f/s at "
              "the platform (%.1f %%), refusals %d, duplicates %d, lost %d; conversational "
              "p99 %.1f ms during it, %.1f ms idle (%.2fx; p50 %.1f against %.1f ms); %.1f Redis "
              "commands per member"
              % (acc["total"], accept_s, per_msg, bc["total"], RATE, rate, res["percent"],
                 refused, res["duplicates"], res["lost"], busy_p99, idle_p99,
                 res["talk_x_idle"] or 0, res["talk_busy_p50_ms"], res["talk_idle_p50_ms"],
                 res["redis_calls_per_member"]))
        print("BENCH_G_JSON " + json.dumps(res), flush=True)
    finally:
        s.close()
        s.cleanup_dir()


if __name__ == "__main__":
    main()
