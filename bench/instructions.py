#!/usr/bin/env python3
"""Instructions per request, counted by valgrind's callgrind: a figure that does not depend on
how busy the machine is, for comparing two builds of botgate.

    bench/instructions.py [BIN_DIR] [REQUESTS]    (default build-release/bin, 2000)

Starts Redis and the simulator (tests/integration/harness.py), botgate with one worker under
callgrind, loads the bench data, sends warm-up requests, zeroes the counters, sends REQUESTS
requests of each scenario one after the other (16 at a time), and prints instructions per
request for each, and the scripts (EVAL, EVALSHA) it sent Redis per request (INFO
commandstats).

BENCH_SCENARIOS (space-separated names of SCENARIOS) picks some scenarios; KEEP_CALLGRIND (a
folder) keeps callgrind's output files, for callgrind_annotate. Each request comes on a new
connection, closed after its answer, unless BENCH_KEEPALIVE=1: then each of the 16 senders keeps
one connection open for all its requests, as wrk does in make bench, so that what a connection
costs once (accept, evhttp's and botgate's connection records, close) is not counted per request.

It does so for each configuration of CONFIGS (a botgate process each): per-member order on (the
default) and off. Scenario a-key is a with a new Idempotency-Key on every request.

BENCH_TLS=1.1 or BENCH_TLS=2 puts the simulator behind nginx over HTTPS (HTTP/2 offered by ALPN,
tests/integration/test_tls.py's front) and has botgate call it with BOTGATE_UPSTREAM_HTTP set so:
what a platform call over TLS costs botgate (nginx's own work is not counted)."""
import http.client
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
from test_tls import start_tls_front  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "build-release", "bin"))
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
harness.BIN = BIN

# name -> the environment botgate runs with (BENCH_CONFIGS picks some, comma-separated)
CONFIGS = {
    "order-off": {"BOTGATE_MEMBER_ORDER": "0"},
    "order-on": {"BOTGATE_MEMBER_ORDER": "1"},
}

# a-16m's members, taken in turn: far more than the 16 requests in flight, so that a request
# never finds the previous one to its member still holding the turn (with 16 members, a slow
# answer made about a fifth of the requests under callgrind wait, each running the turn's
# script and counting its cost)
SPREAD = 1024

# name -> (path, body, a new Idempotency-Key on every request)
SCENARIOS = {
    "a": ("/sendResponses", {"channelId": "fb", "memberId": "m",
                             "response": [{"type": "TEXT", "text": "hello from the bench"}]}),
    "a-key": ("/sendResponses", {"channelId": "fb", "memberId": "m",
                                 "response": [{"type": "TEXT", "text": "hello from the bench"}]}),
    # a, its 16 requests at a time each to another member (of SPREAD): in member order none
    # waits
    "a-16m": ("/sendResponses", {"channelId": "fb", "memberId": "m",
                                 "response": [{"type": "TEXT", "text": "hello from the bench"}]}),
    "b": ("/sendResponses", {"channelId": "fb", "memberId": "m",
                             "response": [{"type": "TEXT", "text": "one"},
                                          {"type": "TEXT", "text": "two"},
                                          {"type": "TEXT", "text": "three"}]}),
    # 50 TEXT, and 50 of the other types Messenger has (contract.md section 11): what the
    # rich types cost beside plain text (run with fewer requests: 50 sends each)
    "t50": ("/sendResponses", {"channelId": "fb", "memberId": "m",
                               "response": [{"type": "TEXT", "text": "hello %d" % i}
                                            for i in range(50)]}),
    "m50": ("/sendResponses", {"channelId": "fb", "memberId": "m", "response": [
        r for _ in range(5) for r in (
            {"type": "TEXT", "text": "Pick", "quickReplies": [
                {"title": "Red", "payload": "RED"}, {"title": "Blue", "payload": "BLUE"},
                {"title": "Green", "payload": "GREEN"}]},
            {"type": "BUTTON", "text": "Choose", "buttons": [
                {"type": "postback", "title": "Yes", "payload": "Y"},
                {"type": "postback", "title": "No", "payload": "N"},
                {"type": "url", "title": "More", "url": "https://example.com/more"}]},
            {"type": "CAROUSEL", "cards": [
                {"title": "A", "subtitle": "a", "imageUrl": "https://example.com/a.png",
                 "buttons": [{"type": "postback", "title": "Buy", "payload": "BUY_A"}]},
                {"title": "B", "subtitle": "b"}]},
            {"type": "VIDEO", "url": "https://example.com/v.mp4"},
            {"type": "AUDIO", "url": "https://example.com/a.mp3"},
            {"type": "FILE", "url": "https://example.com/f.pdf"},
            {"type": "IMAGE", "url": "https://example.com/i.png"},
            {"type": "NATIVE", "message": {"message": {"text": "native"}}},
            {"type": "LOCATION", "latitude": 22.28, "longitude": 114.16,
             "fallback": {"type": "TEXT", "text": "at 22.28, 114.16"}},
            {"type": "TEXT", "text": "plain"})]}),
    "c": ("/redirectMemberToNode", {"channelId": "fb", "memberId": "m",
                                    "redirect": {"tree": "t", "nodeCompositeId": "two"}}),
    # c with the two responses returned by a small Lua transform (node code)
    "c-lua": ("/redirectMemberToNode", {"channelId": "fb", "memberId": "m",
                                        "redirect": {"tree": "t", "nodeCompositeId": "lua"},
                                        "meta": {"status": "shipped"}}),
}


KEYS = itertools.count()
KEEPALIVE = os.environ.get("BENCH_KEEPALIVE", "0") != "0"
SENDER = threading.local()  # BENCH_KEEPALIVE: each sender thread's connection


def post_kept(port, path, body, token, headers):
    """POST on the calling thread's kept-alive connection (made on its first call)."""
    conn = getattr(SENDER, "conn", None)
    if conn is None:
        conn = SENDER.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    hdrs = {"Content-Type": "application/json", "Authorization": "Bearer " + token}
    hdrs.update(headers or {})
    conn.request("POST", path, json.dumps(body).encode(), hdrs)
    r = conn.getresponse()
    text = r.read().decode("utf-8", "replace")
    return harness.Answer(r.status, text, dict(r.headers), list(r.headers.items()))


def redis_calls(s):
    """Scripts Redis has run so far (EVAL and EVALSHA: only clients send them; the commands a
    script runs are counted under their own names, so other counts would mix both)."""
    calls = 0
    for line in s.redis("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_eval:") or line.startswith("cmdstat_evalsha:"):
            calls += int(line.split("calls=")[1].split(",")[0])
    return calls


def main():
    wanted = os.environ.get("BENCH_CONFIGS")
    for config, extra in CONFIGS.items():
        if wanted and config not in wanted.split(","):
            continue
        print("%s:" % config, flush=True)
        run_config(extra)


def run_config(extra):
    s = harness.Stack(workers=1, start_gateway=False)
    out = tempfile.mktemp(prefix="callgrind.", dir=s.dir)
    try:
        # the shared rate limits on, generous enough never to wait (bench/README.md)
        s.put("channel", harness.facebook_channel(
            "fb", "A", rateLimit={"perSecond": 1000000, "burst": 100000}))
        s.put("member", harness.member("m", "fb", "A", "2456789012345678"))
        for i in range(SPREAD):
            s.put("member", harness.member("m%d" % i, "fb", "A", "2456789%09d" % i))
        tree = os.path.join(s.dir, "tree.json")
        with open(tree, "w") as f:
            f.write('{"_id":"t","app":"A","name":"b","nodes":{"two":{"response":['
                    '{"type":"TEXT","text":"a"},{"type":"TEXT","text":"b"}]},'
                    '"lua":{"transform":"if self.agendaMeta.status == \'shipped\' then '
                    'return {{type = \'TEXT\', text = \'a\'}, {type = \'TEXT\', '
                    'text = \'b\'}} end return nil"}}}')
        s.ctl("tree", "import", tree)
        tok = s.token("A", "bot:admin")
        settings = dict({"BOTGATE_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "warn")}, **extra)
        tls = os.environ.get("BENCH_TLS")
        if tls:
            nginx, port, cert = start_tls_front(s, "front")
            s.procs["nginx-front"] = nginx  # stopped with the stack
            settings.update({"BOTGATE_FACEBOOK_API_URL": "https://127.0.0.1:%d/graph/v19.0" % port,
                             "BOTGATE_CA_FILE": cert, "BOTGATE_UPSTREAM_HTTP": tls})
        p = s.start_gateway_under_callgrind(out, settings)
        pool = ThreadPoolExecutor(max_workers=16)

        def one(path, body, keyed, spread):
            n = next(KEYS)
            headers = {"Idempotency-Key": "bench-%d" % n} if keyed else None
            if spread:
                body = dict(body, memberId="m%d" % (n % SPREAD))
            if KEEPALIVE:
                return post_kept(s.port, path, body, tok, headers)
            return s.post(path, body, token=tok, headers=headers, timeout=120)

        def burst(path, body, n, keyed, spread):
            answers = list(pool.map(lambda _: one(path, body, keyed, spread), range(n)))
            bad = [a for a in answers if a.status != 200]
            if bad:
                raise SystemExit("failed answers: %r" % bad[:2])

        results = {}
        only = os.environ.get("BENCH_SCENARIOS")
        for name, (path, body) in SCENARIOS.items():
            if only and name not in only.split():
                continue
            keyed, spread = name.endswith("-key"), name.endswith("-16m")
            burst(path, body, 50, keyed, spread)  # warm-up: caches, connections, allocator
            subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True)
            calls = redis_calls(s)
            burst(path, body, N, keyed, spread)
            calls = (redis_calls(s) - calls) / N
            subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True)
            time.sleep(0.5)
            dumps = sorted(f for f in os.listdir(s.dir) if f.startswith(os.path.basename(out)))
            total = 0
            with open(os.path.join(s.dir, dumps[-1])) as f:
                for line in f:
                    if line.startswith("summary:") or line.startswith("totals:"):
                        total = int(line.split()[1])
            results[name] = total / N
            print("%-6s %-22s %9.0f instructions per request, %.2f scripts per request"
                  % (name, path, total / N, calls), flush=True)
        p.terminate()
        p.wait(60)
        keep = os.environ.get("KEEP_CALLGRIND")
        if keep:
            os.makedirs(keep, exist_ok=True)
            for f in os.listdir(s.dir):
                if f.startswith(os.path.basename(out)):
                    os.rename(os.path.join(s.dir, f), os.path.join(keep, f))
    finally:
        s.close()
        s.cleanup_dir()


if __name__ == "__main__":
    main()
