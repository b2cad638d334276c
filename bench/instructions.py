#!/usr/bin/env python3
"""Instructions per request, counted by valgrind's callgrind: a figure that does not depend on
how busy the machine is, for comparing two builds of botgate.

    bench/instructions.py [BIN_DIR] [REQUESTS]    (default build-release/bin, 2000)

Starts Redis and the simulator (tests/integration/harness.py), botgate with one worker under
callgrind, loads the bench data, sends warm-up requests, zeroes the counters, sends REQUESTS
requests of each scenario one after the other (16 at a time), and prints instructions per
request for each."""
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "build-release", "bin"))
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
harness.BIN = BIN

SCENARIOS = {
    "a": ("/sendResponses", {"channelId": "fb", "memberId": "m",
                             "response": [{"type": "TEXT", "text": "hello from the bench"}]}),
    "b": ("/sendResponses", {"channelId": "fb", "memberId": "m",
                             "response": [{"type": "TEXT", "text": "one"},
                                          {"type": "TEXT", "text": "two"},
                                          {"type": "TEXT", "text": "three"}]}),
    "c": ("/redirectMemberToNode", {"channelId": "fb", "memberId": "m",
                                    "redirect": {"tree": "t", "nodeCompositeId": "two"}}),
}


def main():
    s = harness.Stack(workers=1, start_gateway=False)
    out = tempfile.mktemp(prefix="callgrind.", dir=s.dir)
    try:
        # the shared rate limits on, generous enough never to wait (bench/README.md)
        s.put("channel", harness.facebook_channel(
            "fb", "A", rateLimit={"perSecond": 1000000, "burst": 100000}))
        s.put("member", harness.member("m", "fb", "A", "2456789012345678"))
        tree = os.path.join(s.dir, "tree.json")
        with open(tree, "w") as f:
            f.write('{"_id":"t","app":"A","name":"b","nodes":{"two":{"response":['
                    '{"type":"TEXT","text":"a"},{"type":"TEXT","text":"b"}]}}}')
        s.ctl("tree", "import", tree)
        tok = s.token("A", "bot:admin")
        s.port = harness.free_port()
        s.url = "http://127.0.0.1:%d" % s.port
        env = s.gateway_env()
        env["BOTGATE_WORKERS"] = "1"
        env["BOTGATE_LOG_LEVEL"] = os.environ.get("BENCH_LOG_LEVEL", "warn")
        env["BOTGATE_REQUEST_TIMEOUT_MS"] = "60000"
        env["BOTGATE_UPSTREAM_TIMEOUT_MS"] = "50000"
        env["BOTGATE_REDIS_TIMEOUT_MS"] = "20000"
        p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                              os.path.join(BIN, "botgate")], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        harness.wait_for(lambda: harness.http("GET", s.url + "/readyz", timeout=5).status == 200,
                         timeout=60, what="botgate under callgrind")
        pool = ThreadPoolExecutor(max_workers=16)

        def burst(path, body, n):
            answers = list(pool.map(lambda _: s.post(path, body, token=tok, timeout=120), range(n)))
            bad = [a for a in answers if a.status != 200]
            if bad:
                raise SystemExit("failed answers: %r" % bad[:2])

        results = {}
        for name, (path, body) in SCENARIOS.items():
            burst(path, body, 50)  # warm-up: caches, connections, allocator
            subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True)
            burst(path, body, N)
            subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True)
            time.sleep(0.5)
            dumps = sorted(f for f in os.listdir(s.dir) if f.startswith(os.path.basename(out)))
            total = 0
            with open(os.path.join(s.dir, dumps[-1])) as f:
                for line in f:
                    if line.startswith("summary:") or line.startswith("totals:"):
                        total = int(line.split()[1])
            results[name] = total / N
            print("%s  %-22s %9.0f instructions per request" % (name, path, total / N), flush=True)
        p.terminate()
        p.wait(60)
        keep = os.environ.get("KEEP_CALLGRIND")
        if keep:
            for f in os.listdir(s.dir):
                if f.startswith(os.path.basename(out)):
                    os.rename(os.path.join(s.dir, f), os.path.join(keep, f))
    finally:
        s.close()
        s.cleanup_dir()


if __name__ == "__main__":
    main()
