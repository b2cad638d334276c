"""GET /metrics: the Prometheus text format (checked by promtool), and counters that follow
the traffic: requests by route/status/err_code, platform calls by outcome, Redis commands,
credential refreshes; no ids or secrets in any label."""
import json
import re
import shutil
import subprocess
import time
import unittest

from harness import StackTest, facebook_channel, member, http

APP = "app-metrics"


def parse(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', line)
        assert m, "bad exposition line: %r" % line
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


class Metrics(StackTest):
    def metrics(self):
        a = http("GET", self.s.url + "/metrics")
        self.assertEqual(a.status, 200)
        self.assertTrue(a.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        return a.raw

    def test_counters_follow_traffic_and_format_is_valid(self):
        s = self.s
        s.put("channel", facebook_channel("fm", APP))
        s.put("member", member("mem-zq7", "fm", APP, "psid-zq7"))
        tok = s.token(APP, "bot:sendResponses")
        before = parse(self.metrics())
        ok = {"channelId": "fm", "memberId": "mem-zq7", "response": [{"type": "TEXT", "text": "a"}]}
        for _ in range(3):
            self.assertEqual(s.send(ok, tok).status, 200)
        s.send(dict(ok, memberId="nobody"), tok)                           # 114
        s.send(ok, "bgt_wrong")                                             # unauthorized
        s.send({"channelId": "fm", "memberId": "mem-zq7",
                "response": [{"type": "TEXT", "text": "fail5xx"}]}, tok)   # 200, a 5xx call
        text = self.metrics()
        after = parse(text)

        def delta(key):
            return after.get(key, 0) - before.get(key, 0)

        send = 'route="sendResponses"'
        self.assertEqual(delta('botgate_requests_total{%s,status="200",err_code="0"}' % send), 4)
        self.assertEqual(delta('botgate_requests_total{%s,status="500",err_code="114"}' % send), 1)
        self.assertEqual(delta('botgate_requests_total{%s,status="500",err_code="unauthorized"}'
                               % send), 1)
        self.assertEqual(delta('botgate_request_duration_seconds_count{%s}' % send), 6)
        self.assertEqual(delta('botgate_platform_calls_total{target="facebook",outcome="2xx"}'), 3)
        self.assertEqual(delta('botgate_platform_calls_total{target="facebook",outcome="5xx"}'), 1)
        # at least the member of each of the 6 requests (tokens and channels may be cached)
        self.assertGreaterEqual(delta("botgate_redis_commands_total"), 6)
        self.assertEqual(after["botgate_requests_in_flight"], 0)
        self.assertEqual(after["botgate_workers"], 2)
        self.assertEqual(after["botgate_redis_connected_workers"], 2)
        # histogram buckets are cumulative
        buckets = [v for k, v in after.items()
                   if k.startswith("botgate_request_duration_seconds_bucket{%s" % send)]
        self.assertEqual(buckets, sorted(buckets))
        for secret in [tok, "fb-page-token", "psid-zq7", "mem-zq7"]:
            self.assertNotIn(secret, text)
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool (Debian package prometheus) is needed")
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class RequestLog(StackTest):
    stack_args = {"env": {"BOTGATE_LOG_LEVEL": "info"}}

    def lines(self, request_id):
        found = []
        for line in self.s.gateway_log().splitlines():
            if request_id in line:
                found.append(json.loads(line))
        return found

    def test_one_line_per_request_with_its_fields(self):
        s = self.s
        s.put("channel", facebook_channel("fl", APP))
        s.put("member", member("mem-log", "fl", APP, "psid-log"))
        tok = s.token(APP, "bot:sendResponses")
        ok = {"channelId": "fl", "memberId": "mem-log", "response": [{"type": "TEXT", "text": "a"}]}
        cases = [
            ("log-ok", ok, tok, {"status": 200, "client": "127.0.0.1", "app": APP,
                                 "channel": "fl", "member": "mem-log", "platform_calls": 1,
                                 "sent": 1, "failed": 0}),
            ("log-114", dict(ok, memberId="nobody"), tok,
             {"status": 500, "err_code": 114, "client": "127.0.0.1", "app": APP,
              "channel": "fl", "platform_calls": 0, "sent": 0, "failed": 0}),
            ("log-401", ok, "bgt_wrong", {"status": 500, "err": "unauthorized",
                                          "client": "127.0.0.1", "channel": "fl",
                                          "platform_calls": 0, "sent": 0, "failed": 0}),
        ]
        for rid, body, token, _ in cases:
            s.post("/sendResponses", body, token=token, headers={"X-Request-Id": rid})
        time.sleep(0.3)
        for rid, _, _, want in cases:
            got = self.lines(rid)
            self.assertEqual(len(got), 1, got)
            line = got[0]
            self.assertRegex(line.pop("ts"), r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            duration = line.pop("duration_ms")
            self.assertIsInstance(duration, float)
            self.assertTrue(0 <= duration < 4000, duration)
            self.assertEqual(line, dict({"level": "info", "msg": "request", "request_id": rid,
                                         "route": "sendResponses"}, **want))
        for secret in [tok, "fb-page-token", "psid-log"]:
            self.assertNotIn(secret, s.gateway_log())


if __name__ == "__main__":
    unittest.main()
