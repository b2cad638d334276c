#!/usr/bin/env python3
"""Revocation delay: how long a revoked token is still accepted by a worker that had it
cached, measured from the reply to the DEL that revoked it to the first request refused.

    bench/revocation_delay.py [BIN_DIR] [REVOCATIONS]    (default build-release/bin, 200)

Starts Redis, the simulator and botgate (one worker, so that the keep-alive connection below
always meets the worker whose cache holds the token), all on loopback (tests/integration/
harness.py). For each revocation: a new token, sends on one keep-alive connection until one
costs no token GET (the token is cached), then DEL of the token key (what botgatectl token
revoke sends), then sends at once, one after the other, until one is refused. Prints the
delays' p50, p99 and maximum, in ms; a delay includes one request's round trip."""
import hashlib
import http.client
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "build-release", "bin"))
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
harness.BIN = BIN
MAX_TRIES = 2000  # sends after a DEL before giving up on one revocation


def send(conn, body, tok):
    conn.request("POST", "/sendResponses", body,
                 {"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def main():
    s = harness.Stack(workers=1, env={"BOTGATE_LOG_LEVEL": "warn"})
    try:
        _, body = harness.tenant(s, "rd", "mrd", "psid-rd")
        body = json.dumps(body)
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        delays, tries = [], []
        for _ in range(N):
            tok = s.token("A", "bot:sendResponses")
            key = "botgate:token:" + hashlib.sha256(tok.encode()).hexdigest()
            while True:  # until the token is served from the cache: 1 command (the member)
                before = s.metric("botgate_redis_commands_total")
                status, _ = send(conn, body, tok)
                if status != 200:
                    raise SystemExit("send refused before the revocation: %d" % status)
                if s.metric("botgate_redis_commands_total") - before == 1:
                    break
            s.redis("DEL", key)
            t0 = time.perf_counter()
            for n in range(1, MAX_TRIES + 1):
                status, answer = send(conn, body, tok)
                if answer.get("err") == "User is not authorized":
                    delays.append((time.perf_counter() - t0) * 1000)
                    tries.append(n)
                    break
            else:
                raise SystemExit("a revoked token still accepted after %d sends" % MAX_TRIES)
        delays.sort()
        p = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]  # noqa: E731
        print("revocations %d: delay p50 %.2f ms, p99 %.2f ms, max %.2f ms; refused at the "
              "first send after the DEL in %d of %d" % (len(delays), p(0.50), p(0.99),
                                                        delays[-1], tries.count(1), len(tries)))
    finally:
        s.close()
        s.cleanup_dir()


if __name__ == "__main__":
    main()
