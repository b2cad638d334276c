"""Failures that look like successes are seen: botgate_messages_total counts each message by
platform, outcome and err_code (a request answered 200 may carry failed messages), the
request's log line says its app, client and sent/failed counts; the alerts shipped in
deploy/prometheus pass promtool's checks and unit tests, the PrometheusRule carries the same
groups, and every series the Grafana dashboard queries is one botgate exposes."""
import json
import os
import re
import shutil
import subprocess
import unittest

from harness import StackTest, facebook_channel, member, http

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
PROM = os.path.join(ROOT, "deploy/prometheus")
APP = "app-alerts"


def series(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


class MessagesAndLog(StackTest):
    def test_failed_messages_of_a_200_are_counted_and_logged(self):
        s = self.s
        s.put("channel", facebook_channel("fal", APP))
        s.put("member", member("mem-al", "fal", APP, "psid-al"))
        tok = s.token(APP, "bot:sendResponses")
        before = series(http("GET", s.url + "/metrics").raw)
        body = {"channelId": "fal", "memberId": "mem-al",
                "response": [{"type": "TEXT", "text": "one"}, {"type": "TEXT", "text": "fail5xx"},
                             {"type": "TEXT", "text": "three"}]}
        a = s.send(body, tok, headers={"X-Request-Id": "alerts-req-1"})
        self.assertEqual(a.status, 200, a)
        codes = [e.get("err_code", 0) for e in a.json["data"]] if "data" in a.json else None
        after = series(http("GET", s.url + "/metrics").raw)

        def delta(key):
            return after.get(key, 0) - before.get(key, 0)

        sent = 'botgate_messages_total{platform="facebook",outcome="sent",err_code="0"}'
        failed = 'botgate_messages_total{platform="facebook",outcome="failed",err_code="113"}'
        self.assertEqual((delta(sent), delta(failed)), (2, 1), codes)
        # the request itself still counts as a success: that is why the messages are counted
        self.assertEqual(delta('botgate_requests_total{route="sendResponses",status="200",'
                               'err_code="0"}'), 1)
        # every platform's sent series exists from the start, so that rate() has a base
        for p in ("facebook", "whatsapp", "whatsapp-cloud", "slack", "wechat", "teamwork"):
            self.assertIn('botgate_messages_total{platform="%s",outcome="sent",err_code="0"}' % p,
                          after)
        line = [json.loads(l) for l in s.gateway_log().splitlines()
                if '"request_id":"alerts-req-1"' in l]
        self.assertEqual(len(line), 1)
        self.assertEqual((line[0]["app"], line[0]["client"], line[0]["sent"], line[0]["failed"]),
                         (APP, "127.0.0.1", 2, 1))

    def test_an_unauthorized_request_names_no_app(self):
        s = self.s
        s.send({"channelId": "fal", "memberId": "mem-al", "response": [{"type": "TEXT",
                "text": "x"}]}, "bgt_wrong", headers={"X-Request-Id": "alerts-req-2"})
        line = [json.loads(l) for l in s.gateway_log().splitlines()
                if '"request_id":"alerts-req-2"' in l]
        self.assertEqual(len(line), 1)
        self.assertNotIn("app", line[0])
        self.assertEqual((line[0]["sent"], line[0]["failed"]), (0, 0))

    def test_the_dashboard_queries_only_series_botgate_exposes(self):
        exposed = set()
        for line in http("GET", self.s.url + "/metrics").raw.splitlines():
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if m:
                exposed.add(m.group(1))
                if m.group(2) == "histogram":
                    exposed.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
        with open(os.path.join(ROOT, "deploy/grafana/botgate.json")) as f:
            dash = json.load(f)
        exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
        self.assertGreater(len(exprs), 10)
        for e in exprs:
            for name in re.findall(r"\b(botgate_[a-z_]+)", e):
                self.assertIn(name, exposed, e)
        with open(os.path.join(PROM, "botgate.rules.yml")) as f:
            for name in re.findall(r"\b(botgate_[a-z_]+)", f.read()):
                self.assertIn(name, exposed, "botgate.rules.yml")


@unittest.skipUnless(shutil.which("promtool"), "promtool (Debian's prometheus) checks the rules")
class Rules(unittest.TestCase):
    def promtool(self, *args):
        r = subprocess.run(["promtool"] + list(args), cwd=PROM, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_rules_are_valid(self):
        self.assertIn("SUCCESS: 10 rules found", self.promtool("check", "rules",
                                                               "botgate.rules.yml"))

    def test_rules_fire_as_their_unit_tests_say(self):
        self.assertIn("SUCCESS", self.promtool("test", "rules", "botgate.rules.test.yml"))

    def test_the_prometheusrule_carries_the_same_groups(self):
        with open(os.path.join(PROM, "botgate.rules.yml")) as f:
            rules = f.read()
        with open(os.path.join(PROM, "prometheusrule.yaml")) as f:
            crd = f.read()
        groups = rules[rules.index("groups:"):]
        spec = crd[crd.index("\nspec:\n") + 7:]
        self.assertEqual("".join(l[2:] if l.strip() else l for l in spec.splitlines(True)),
                         groups)
        self.assertIn("kind: PrometheusRule", crd)


if __name__ == "__main__":
    unittest.main()
