#!/usr/bin/env python3
"""make bench's report (bench/report.py table): the upstream-alone check, the system calls per
request, the a-tls lines, the delivery guarantees' rows (a-key), the order-off twins (a-off)
and their rounds in turn, and the webhooks of scenario h, from results files written as bench.sh's runs write them.

Run: python3 tests/integration/test_bench_report.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                      "report.py")


def timed(scenario, target, rps, **extra):
    """One record of `report.py measure`: 10 s of wrk at rps req/s."""
    rec = {"scenario": scenario, "target": target, "connections": 64, "wall_s": 10.0,
           "cpu_s": 5.0, "idle_rss_kib": 10240, "peak_rss_kib": 12288, "aux_cpu_s": {},
           "wrk_cpu_s": 3.0, "host_cpus_busy": 1.9, "others_cpu_s": 0.1, "others_top": [],
           "wrk_rc": 0, "note": "", "requests": int(rps * 10), "duration_us": 10000000,
           "bytes": 0, "connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0,
           "p50_us": 1000, "p90_us": 2000, "p99_us": 3000, "p999_us": 4000, "max_us": 5000,
           "mean_us": 1200.0}
    rec.update(extra)
    return rec


def table(records, **meta):
    with tempfile.TemporaryDirectory() as d:
        res = os.path.join(d, "results.jsonl")
        with open(res, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        m = os.path.join(d, "meta.json")
        with open(m, "w") as f:
            json.dump(dict({"nproc": "2", "duration": "10"}, **meta), f)
        r = subprocess.run([sys.executable, REPORT, "table", res, m], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError("report.py table failed:\n" + r.stdout)
    return r.stdout


def row(text, label, target):
    for line in text.splitlines():
        if line.startswith(label) and line.split()[len(label.split())] == target:
            return line
    raise AssertionError("no %s row of %s in:\n%s" % (target, label, text))


class UpstreamAlone(unittest.TestCase):
    def test_upstream_with_room_to_spare_shows_its_ratio_and_no_warning(self):
        out = table([timed("up", "upstream", 100000),
                     timed("a", "botgate", 20000, upstream_calls=200000,
                           upstream_conns_max=64, upstream_accepts=63),
                     timed("a", "nginx", 40000)])
        self.assertIn("2.50x", row(out, "upstream alone (static nginx)", "upstream"))
        self.assertIn("0.50x", row(out, "a  sendResponses, 1 TEXT", "botgate"))
        self.assertIn("64/63", row(out, "a  sendResponses, 1 TEXT", "botgate"))
        self.assertNotIn("WARNING", out)

    def test_upstream_under_twice_the_proxy_is_a_warning(self):
        out = table([timed("up", "upstream", 60000), timed("a", "botgate", 20000),
                     timed("a", "nginx", 40000),
                     timed("up-tls", "upstream", 90000), timed("a-tls", "nginx", 40000)])
        warnings = [line for line in out.splitlines() if line.startswith("WARNING")]
        self.assertEqual(1, len(warnings), out)
        self.assertIn("upstream alone (static nginx) did 60000 req/s", warnings[0])
        self.assertIn("1.50x", warnings[0])


class SyscallsAndTls(unittest.TestCase):
    def test_syscalls_per_request_and_the_tls_protocols_are_reported(self):
        out = table([timed("a-tls", "botgate", 15000, upstream_conns_max=1, upstream_accepts=0),
                     timed("a-tls", "nginx", 30000, upstream_conns_max=64,
                           upstream_accepts=64),
                     timed("a-tls-h1", "botgate", 18000, upstream_conns_max=64,
                           upstream_accepts=0),
                     timed("a-tls-h1", "nginx", 30000, upstream_conns_max=64,
                           upstream_accepts=0),
                     {"scenario": "a", "target": "botgate", "kind": "syscalls",
                      "connections": 64, "requests": 20000, "errors": 0, "calls": 184000,
                      "per_request": 9.2, "top": [["epoll_ctl", 2.2], ["poll", 2.0]]}],
                    tls_botgate_proto="HTTP/2.0", tls_h1_botgate_proto="HTTP/1.1",
                    tls_nginx_proto="HTTP/1.1", strace_count="10000")
        self.assertIn("botgate HTTP/2.0 (a-tls, told", out)
        self.assertIn("BOTGATE_UPSTREAM_HTTP=2, its default; a-tls-h1, told 1.1: HTTP/1.1), "
                      "nginx HTTP/1.1.", out)
        self.assertIn("a-tls    botgate  at most 1 upstream connection(s) open at once, 0 accepted",
                      out)
        self.assertIn("a-tls-h1 botgate  at most 64 upstream connection(s) open at once", out)
        # each TLS scenario against its own nginx run
        self.assertIn("0.50x", row(out, "a-tls  a over TLS, botgate HTTP/2", "botgate"))
        self.assertIn("0.60x", row(out, "a-tls-h1  a over TLS, botgate HTTP/1.1", "botgate"))
        line = [x for x in out.splitlines() if x.strip().startswith("a        botgate")]
        self.assertEqual(1, len(line), out)
        # a-tls without a-tls-h1: nothing said of the run that did not run
        out = table([timed("a-tls", "botgate", 15000), timed("a-tls", "nginx", 30000)],
                    tls_botgate_proto="HTTP/2.0", tls_h1_botgate_proto="",
                    tls_nginx_proto="HTTP/1.1")
        self.assertIn("BOTGATE_UPSTREAM_HTTP=2, its default), nginx HTTP/1.1.", out)
        self.assertIn("9.20 per request (20000 requests, 184000 calls): epoll_ctl 2.20, "
                      "poll 2.00", line[0])
        # the strace record is not a timed run: no row of its own, no effect on the pacing
        self.assertNotIn("FAILED", out)


class DeliveryGuarantees(unittest.TestCase):
    """a-key: botgate alone, compared with botgate's scenario a; a-off and d-off, the order-off
    twins of a and d, set beside them: req/s, CPU, Redis CPU and commands per request."""

    def records(self):
        return [timed("a", "botgate", 20000, cpu_s=4.4, redis_scripts=200000,
                      redis_commands=2000000, aux_cpu_s={"redis": 1.0}),
                timed("a", "nginx", 40000),
                timed("a-off", "botgate", 21000, cpu_s=4.2, redis_scripts=210000,
                      redis_commands=1260000, aux_cpu_s={"redis": 0.84}),
                timed("a-key", "botgate", 18000, cpu_s=3.96, redis_scripts=540000,
                      redis_commands=3060000, aux_cpu_s={"redis": 1.8}),
                timed("a-tls", "botgate", 15000, cpu_s=4.5, redis_commands=1800000,
                      aux_cpu_s={"redis": 1.2}),
                timed("a-tls-off", "botgate", 16000, cpu_s=4.0, redis_commands=1120000,
                      aux_cpu_s={"redis": 0.8}),
                timed("a-tls", "nginx", 32000)]

    def test_rows_carry_req_s_cpu_and_the_ratios(self):
        out = table(self.records())
        key = row(out, "a-key  a + Idempotency-Key", "botgate")
        self.assertIn(" 18000 ", key)
        self.assertIn(" 22 ", key)  # CPU us/req: 3.96 s over 180000 requests
        self.assertTrue(key.endswith("0.90x a"), key)
        self.assertIn(" 17.00 ", key)  # Redis commands per request
        # the twin's ratio is to nginx's a, as a's own
        self.assertTrue(row(out, "a-off  a, member order off", "botgate").endswith("0.53x"))
        self.assertTrue(row(out, "a  sendResponses, 1 TEXT", "botgate").endswith("0.50x"))
        for label in ("a-key", "a-off"):
            self.assertFalse([x for x in out.splitlines()
                              if x.startswith(label + " ") and " nginx " in x], out)
        self.assertNotIn("WARNING", out)

    def test_the_twin_section_sets_order_on_beside_off(self):
        out = table(self.records())
        line = [x for x in out.splitlines() if x.startswith("  a       req/s")][0]
        tls = [x for x in out.splitlines() if x.startswith("  a-tls   req/s")][0]
        self.assertEqual(tls, "  a-tls   req/s 15000 / 16000 = 0.94x; botgate CPU 30 / 25 us/req = "
                              "1.20x; Redis CPU 8.0 / 5.0 us/req = 1.60x, Redis commands 12.00 / "
                              "7.00 per request")
        # a-tls-off's ratio is to nginx's a-tls
        self.assertTrue(row(out, "a-tls-off  a-tls, member order off", "botgate").endswith("0.50x"))
        self.assertEqual(line, "  a       req/s 20000 / 21000 = 0.95x; botgate CPU 22 / 20 us/req = "
                               "1.10x; Redis CPU 5.0 / 4.0 us/req = 1.25x, Redis commands 10.00 / "
                               "6.00 per request")

    def test_the_rounds_in_turn_give_each_ratio_and_their_median(self):
        """bench.sh's order_rounds: a and a-off in turn (kind "pair", 4 s each), on first then
        off first; each round's on / off and the median, under the twin's line; not rows."""
        def pair(sc, rps, redis):
            return timed(sc, "botgate", rps, kind="pair", duration_us=4000000,
                         requests=rps * 4, aux_cpu_s={"redis": redis * rps * 4 / 1e6})
        rounds = [pair("a", 19000, 14.0), pair("a-off", 20000, 10.0),    # 0.95, 1.40x
                  pair("a-off", 21000, 10.0), pair("a", 18690, 13.0),    # 0.89, 1.30x
                  pair("a", 20000, 12.0), pair("a-off", 20000, 10.0),    # 1.00, 1.20x
                  pair("a-off", 25000, 10.0), pair("a", 20000, 15.0)]    # 0.80, 1.50x
        out = table(self.records() + rounds)
        lines = out.splitlines()
        at = lines.index([x for x in lines if x.startswith("  a       req/s")][0])
        self.assertIn("alternating: 4 rounds of 4 s each", lines[at + 1])
        self.assertIn("req/s on / off 0.95 0.89 1.00 0.80, median 0.92x; Redis CPU median 1.35x",
                      lines[at + 2])
        # the rounds are no rows: a's row is its own run's
        self.assertTrue(row(out, "a  sendResponses, 1 TEXT", "botgate").endswith("0.50x"))
        self.assertEqual(len([x for x in lines if x.startswith("a  sendResponses")
                              and " botgate " in x]), 1, out)
        # a round with a failed run is left out whole: the others keep their pairs
        failed = dict(pair("a", 30000, 14.0), error="wrk failed")
        out = table(self.records() + rounds[:2] + [failed, pair("a-off", 21000, 10.0)]
                    + rounds[4:])
        self.assertIn("3 rounds of 4 s each", out)
        self.assertIn("req/s on / off 0.95 1.00 0.80, median 0.95x", out)
        # none for a-tls, which ran no rounds
        tls = lines.index([x for x in lines if x.startswith("  a-tls   req/s")][0])
        self.assertNotIn("alternating", lines[tls + 1] if tls + 1 < len(lines) else "")

    def test_the_cost_section_compares_cpu_and_scripts(self):
        out = table(self.records())
        self.assertIn("0.90x a's req/s, CPU 22 -> 22 us/req (+0.0 %), Redis 10.0 us/req, "
                      "17.00 commands/req, 3.00 scripts/req",
                      [x for x in out.splitlines() if x.startswith("  a-key ")][0])
        self.assertIn("Redis CPU per request 2.00x a's", out)

    def test_without_scenario_a_there_is_no_comparison(self):
        out = table(self.records()[2:4])
        self.assertFalse(row(out, "a-key  a + Idempotency-Key", "botgate").endswith("x a"))
        self.assertNotIn("Idempotency-Key: what it costs", out)
        self.assertNotIn("Per-member order, on", out)


class Webhooks(unittest.TestCase):
    """h: webhooks/s per worker, the generator's headroom, the ack latency at half load against
    the 5 ms goal, and the events stored, posted, lost and duplicated (bench/webhooks.py drain's
    records, which are not timed runs)."""

    def records(self, lat_p99_us=4200, gen_rps=60000, lost=0, dups=0):
        def drain(sc, events, unique):
            return {"kind": "delivery", "scenario": sc, "events": events,
                    "posts": unique + dups, "unique": unique, "duplicates": dups,
                    "lost": events - unique, "drain_s": 0.4, "drain_cpu_s": 0.5,
                    "drain_aux_cpu_s": {"redis": 0.2, "upstream": 0.1}}
        return [timed("h-gen", "upstream", gen_rps),
                timed("h", "botgate", 5000, cpu_s=4.5, redis_scripts=250000,
                      redis_commands=1100000, upstream_calls=50000,
                      aux_cpu_s={"redis": 3.3, "upstream": 1.0}, wraps=0),
                drain("h", 50010, 50010 - lost),
                timed("h-lat", "botgate", 2500, cpu_s=4.5, redis_scripts=125000,
                      redis_commands=575000, p99_us=lat_p99_us,
                      aux_cpu_s={"redis": 3.8, "upstream": 0.6}, wraps=0),
                drain("h-lat", 25000, 25000)]

    def test_rows_and_the_section(self):
        out = table(self.records(), workers="1", pace_delay="20",
                    h_pace_desc="2500 webhooks/s, the half of h's")
        h = row(out, "h  signed webhooks in, events out", "botgate")
        self.assertIn(" 5000 ", h)
        self.assertIn(" 22.00 ", h)  # Redis commands per webhook
        self.assertIn(" 1.00 ", h)   # posts the subscriber got per webhook during the run
        self.assertTrue(row(out, "webhook generator alone (static nginx)",
                            "upstream").endswith("12.00x h"), out)
        self.assertIn("  max   5000 webhooks/s per worker (64 conns): ack p50 1.00 ms, "
                      "p99 3.00 ms, errors 0", out)
        self.assertIn("the generator alone: 60000 req/s, 12.0x", out)
        # CPU over the run and the drain after it: (4.5 + 0.5) s / 50000
        self.assertIn("botgate CPU 100 us per webhook (its event's post included), Redis 70.0 us "
                      "and 22.00 commands (5.00 scripts) per webhook", out)
        self.assertIn("events: stored 50010, posted 50010, distinct eventIds 50010: lost 0, "
                      "duplicates 0", out)
        self.assertIn("ack p50 1.00 ms, p99 4.20 ms, p99.9 4.00 ms, errors 0", out)
        self.assertIn("goal ack p99 under 5 ms at half load: met", out)
        self.assertNotIn("WARNING", out)
        self.assertNotIn("FAILED", out)

    def test_a_missed_goal_a_loss_and_a_slow_generator_are_said(self):
        out = table(self.records(lat_p99_us=6380, gen_rps=8000, lost=3, dups=2), workers="1")
        self.assertIn("goal ack p99 under 5 ms at half load: NOT met (6.38 ms)", out)
        self.assertIn("lost 3, duplicates 2", out)
        self.assertIn("WARNING: the webhook generator alone did 8000 req/s, less than 2x "
                      "botgate's h", out)

    def test_wraps_are_a_warning(self):
        recs = self.records()
        recs[1]["wraps"] = 2
        out = table(recs, workers="1")
        self.assertIn("came to the end of their signed bodies 2 time(s)", out)


if __name__ == "__main__":
    unittest.main()
