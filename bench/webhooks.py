#!/usr/bin/env python3
"""Scenario h of make bench: signed Messenger webhooks in, their events out to a subscriber.

  webhooks.py bodies PREFIX COUNT THREADS SECRET RUN [--members N] [--page ID]
        write COUNT webhooks, signed as Meta signs them (X-Hub-Signature-256, HMAC-SHA256 of
        the raw body with the app secret), to PREFIX.0 .. PREFIX.<THREADS-1>, one
        "<signature>\\t<body>" line each, for bench/webhook.lua to cycle through (wrk's Lua has
        no HMAC). Every body is one inbound text whose message id (m_h.RUN.thread.n) is new, so
        botgate takes none as a platform's retry; the senders cycle through N (default 8192)
        PSIDs, each thread its own share of them, as bench.lua shares out its members.
  webhooks.py drain SUBSCRIBER BOTGATE [--timeout S] [--pids P,..] [--aux name=pid,..]
        after a run: wait until the subscriber (a botgate-sim recording /hook/status/200) has
        every event botgate stored (its botgate_webhook_events_total, counted since the last
        drain or /_sim/reset) or nothing came for 10 s; then count the posts, the distinct
        eventIds among them and the events stored, reset the subscriber's record, and print
        one JSON line: events, posts, unique, duplicates, lost, how long the drain took and the
        CPU seconds of the pids (and of each aux) during it.
Python 3 standard library only.
"""
import argparse
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import cpu_seconds, parse_aux, parse_pids, tree  # noqa: E402

PAGE = "100200300"


def cmd_bodies(args):
    key = args.secret.encode()
    ts = int(time.time() * 1000)
    share = max(1, args.members // args.threads)
    per = -(-args.count // args.threads)
    for t in range(args.threads):
        with open("%s.%d" % (args.prefix, t), "w") as f:
            for n in range(per):
                psid = 4000000000000000 + t * share + n % share
                body = ('{"object":"page","entry":[{"id":"%s","time":%d,"messaging":[{"sender":'
                        '{"id":"%d"},"recipient":{"id":"%s"},"timestamp":%d,"message":{"mid":'
                        '"m_h.%s.%d.%d","text":"hello from a bench webhook, an ordinary line"}}]}]}'
                        % (args.page, ts, psid, args.page, ts, args.run, t, n)).encode()
                sig = hmac.new(key, body, hashlib.sha256).hexdigest()
                f.write("sha256=%s\t%s\n" % (sig, body.decode()))


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def events_stored(botgate):
    """botgate_webhook_events_total, every platform summed."""
    with urllib.request.urlopen(botgate + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return int(sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("botgate_webhook_events_total")))


def event_ids(sub):
    """The eventId of every post the subscriber recorded since its last reset, in order."""
    out, since = [], 0
    while True:
        page = get_json("%s/_sim/log?since=%d" % (sub, since))
        for e in page["requests"]:
            if e.get("kind") == "webhook" and isinstance(e.get("body"), dict):
                out.append(e["body"].get("eventId"))
        if not page["requests"]:
            return out
        since = page["next"]


def cmd_drain(args):
    state = args.state
    base = 0
    if os.path.exists(state):
        with open(state) as f:
            base = int(f.read().strip() or 0)
    pids = tree(parse_pids(args.pids))
    aux = parse_aux(args.aux)
    cpu0, aux0 = cpu_seconds(pids), {k: cpu_seconds(v) for k, v in aux.items()}
    t0 = time.monotonic()
    stored = events_stored(args.botgate) - base
    last, last_change = -1, t0
    while True:
        posts = get_json(args.sub + "/_sim/stats")["total"]
        if posts >= stored:
            break
        if posts != last:
            last, last_change = posts, time.monotonic()
        elif time.monotonic() - last_change > 10 or time.monotonic() - t0 > args.timeout:
            break
        time.sleep(0.2)
    drain = time.monotonic() - t0
    cpu1, aux1 = cpu_seconds(pids), {k: cpu_seconds(v) for k, v in aux.items()}
    time.sleep(1)  # a post answered at the last moment is counted, and a duplicate shows
    ids = event_ids(args.sub)
    total = events_stored(args.botgate)
    stored = total - base
    with open(state, "w") as f:
        f.write(str(total))
    urllib.request.urlopen(urllib.request.Request(args.sub + "/_sim/reset", b"{}"), timeout=10)
    unique = len(set(ids))
    res = {"kind": "delivery", "scenario": args.scenario, "events": stored, "posts": len(ids),
           "unique": unique, "duplicates": len(ids) - unique, "lost": max(0, stored - unique),
           "drain_s": round(drain, 2), "drain_cpu_s": round(cpu1 - cpu0, 3),
           "drain_aux_cpu_s": {k: round(aux1[k] - aux0[k], 3) for k in aux}}
    print(json.dumps(res))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("bodies")
    p.add_argument("prefix")
    p.add_argument("count", type=int)
    p.add_argument("threads", type=int)
    p.add_argument("secret")
    p.add_argument("run")
    p.add_argument("--members", type=int, default=8192)
    p.add_argument("--page", default=PAGE)
    p.set_defaults(func=cmd_bodies)
    p = sub.add_parser("drain")
    p.add_argument("sub")
    p.add_argument("botgate")
    p.add_argument("--scenario", default="h")
    p.add_argument("--state", required=True, help="file keeping the events counted so far")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--pids", default="")
    p.add_argument("--aux", default="")
    p.set_defaults(func=cmd_drain)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
