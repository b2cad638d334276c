#!/usr/bin/env python3
"""botgate-sim's platform rate limits: per sender and per pair, configured through
POST /_sim/limits, answered with each platform's own rate-limit error, every refusal and every
arrival time in the record, so that tests can check "no one-second window above rate + burst".

Run: BOTGATE_BIN_DIR=build/bin python3 tests/integration/test_sim_limits.py
"""
import http.client
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import test_sim  # noqa: E402

CLOUD_PATH = "/graph/v19.0/1234567/messages"


def cloud_body(to):
    return {"messaging_product": "whatsapp", "recipient_type": "individual", "to": to,
            "type": "text", "text": {"body": "hi"}}


def max_in_window(times_us, window_us=1000000):
    """The most arrivals in any window of window_us (each window starting at an arrival)."""
    times_us = sorted(times_us)
    best, j = 0, 0
    for i, t in enumerate(times_us):
        while times_us[j] <= t - window_us:
            j += 1
        best = max(best, i - j + 1)
    return best


class SimLimitsTest(test_sim.SimTestCase):
    args = ("--threads", "2")

    def limits(self, rules):
        r = self.post("/_sim/limits", {"rules": rules})
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def sends(self):
        entries, since = [], 0
        while True:  # the log comes in pages
            page = self.log(since)
            entries += page["requests"]
            if not page["requests"]:
                break
            since = page["next"]
        return [e for e in entries if e["kind"] in ("messages", "send")]

    def test_config_is_validated(self):
        for body, msg in [({"rules": {}}, "rules must be an array"),
                          ({"rules": [{"platform": "icq", "perSecond": 1}]}, "rules[0]: platform"),
                          ({"rules": [{"platform": "slack", "perSecond": -1}]},
                           "rules[0]: perSecond must be an integer 0..1000000"),
                          ({"rules": [{"platform": "slack", "burst": 0}]},
                           "rules[0]: burst must be an integer"),
                          ({"rules": [{"platform": "slack", "perRecipient": 5}]},
                           "rules[0]: perRecipient must be an object"),
                          ({"rules": [{"platform": "slack", "sender": 5}]},
                           "rules[0]: sender must be a string"),
                          ({"rules": [{"platform": "slack",
                                       "perRecipient": {"everyMs": "1"}}]},
                           "rules[0]: everyMs must be an integer")]:
            r = self.post("/_sim/limits", body)
            self.assertEqual(r.status, 400, body)
            self.assertIn(msg, r.json()["error"])
        r = self.post("/_sim/limits", raw=b"[", headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 400)
        rules = [{"platform": "whatsapp-cloud", "perSecond": 80,
                  "perRecipient": {"everyMs": 6000, "burst": 45}}]
        got = self.limits(rules)
        self.assertEqual(got["rules"], rules)
        self.assertEqual(self.get("/_sim/limits").json()["rules"], rules)
        self.assertEqual(self.limits([])["rules"], [])

    def test_no_rules_no_limit(self):
        for i in range(30):
            self.assertEqual(self.send("whatsapp-cloud", "u1").status, 200)
        self.assertEqual(self.get("/_sim/limits").json()["refused"], {"sender": 0, "pair": 0})

    def test_sender_limit_holds_every_window_under_load(self):
        rate, burst, seconds = 20, 5, 2.5
        self.limits([{"platform": "whatsapp-cloud", "perSecond": rate, "burst": burst}])
        port = int(self.base.rsplit(":", 1)[1])
        stop = time.monotonic() + seconds
        answers = []

        def load(n):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            while time.monotonic() < stop:
                conn.request("POST", CLOUD_PATH, json.dumps(cloud_body("u%d" % n)),
                             {"Authorization": "Bearer CLOUD",
                              "Content-Type": "application/json"})
                resp = conn.getresponse()
                answers.append((resp.status, resp.read()))
            conn.close()

        threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        refused = [json.loads(b) for s, b in answers if s != 200]
        self.assertTrue(refused, "the load must meet the limit")
        for s, b in answers:
            if s != 200:
                self.assertEqual(s, 429)
                self.assertEqual(json.loads(b)["error"]["code"], 130429)
        log = self.sends()
        self.assertEqual(len(log), len(answers))
        passed = [e["ts_us"] for e in log if e["limit"] is None]
        self.assertEqual(len(passed), sum(1 for s, _ in answers if s == 200))
        self.assertEqual(sum(1 for e in log if e["limit"] == "sender"), len(refused))
        self.assertLessEqual(max_in_window(passed), rate + burst)
        # and it lets through what the limit allows: the burst, then the rate
        self.assertGreaterEqual(len(passed), burst + rate * (seconds - 0.3))
        counts = self.get("/_sim/limits").json()
        self.assertEqual(counts["passed"], len(passed))
        self.assertEqual(counts["refused"]["sender"], len(refused))

    def test_pair_limit(self):
        self.limits([{"platform": "whatsapp-cloud",
                      "perRecipient": {"everyMs": 60000, "burst": 3}}])
        got = [self.send("whatsapp-cloud", "u1") for _ in range(5)]
        self.assertEqual([r.status for r in got], [200, 200, 200, 400, 400])
        self.assertEqual(got[3].json()["error"]["code"], 131056)
        # another recipient, and another sender to the same recipient, have their own pair
        self.assertEqual(self.send("whatsapp-cloud", "u2").status, 200)
        other = self.post("/graph/v19.0/7654321/messages", cloud_body("u1"),
                          headers={"Authorization": "Bearer CLOUD"})
        self.assertEqual(other.status, 200, other.body)
        self.assertEqual([e["limit"] for e in self.sends()],
                         [None, None, None, "pair", "pair", None, None])
        self.assertEqual(self.get("/_sim/limits").json()["refused"], {"sender": 0, "pair": 2})

    def test_a_sender_rule_wins_over_the_platform_rule(self):
        self.limits([{"platform": "whatsapp-cloud", "perSecond": 1000, "burst": 1000},
                     {"platform": "whatsapp-cloud", "sender": "1234567", "perSecond": 1}])
        self.assertEqual(self.send("whatsapp-cloud", "u1").status, 200)
        self.assertEqual(self.send("whatsapp-cloud", "u2").status, 429)
        for i in range(5):
            r = self.post("/graph/v19.0/7654321/messages", cloud_body("u%d" % i),
                          headers={"Authorization": "Bearer CLOUD"})
            self.assertEqual(r.status, 200)

    def test_each_platform_answers_its_own_rate_limit_error(self):
        platforms = ["facebook", "whatsapp", "whatsapp-cloud", "slack", "wechat", "teamwork"]
        self.limits([{"platform": p, "perSecond": 1} for p in platforms])
        for p in platforms:
            self.assertEqual(self.send(p, "u1").status, 200, p)
            r = self.send(p, "u2")
            j = r.json()
            if p == "facebook":
                self.assertEqual((r.status, j["error"]["code"]), (400, 613))
            elif p == "whatsapp-cloud":
                self.assertEqual((r.status, j["error"]["code"]), (429, 130429))
            elif p == "whatsapp":
                self.assertEqual((r.status, j["errors"][0]["code"]), (429, 1015))
            elif p == "slack":
                self.assertEqual((r.status, j), (429, {"ok": False, "error": "ratelimited"}))
                self.assertEqual(r.headers["Retry-After"], "1")
            elif p == "wechat":
                self.assertEqual((r.status, j["errcode"]), (200, 45009))
            else:
                self.assertEqual((r.status, j), (429, {"message": "rate limited"}))
        self.assertEqual([e["limit"] for e in self.sends()], [None, "sender"] * 6)

    def test_slack_pair_retry_after_says_when(self):
        self.limits([{"platform": "slack", "perRecipient": {"everyMs": 5000, "burst": 1}}])
        self.assertEqual(self.send("slack", "C1").status, 200)
        r = self.send("slack", "C1")
        self.assertEqual(r.status, 429)
        self.assertIn(r.headers["Retry-After"], ("4", "5"))

    def test_refusals_take_no_slot_and_faults_none(self):
        self.limits([{"platform": "whatsapp-cloud", "perSecond": 2, "burst": 1}])
        # an answer that is an error (fault word) is no send: it takes no slot
        self.assertEqual(self.send("whatsapp-cloud", "invalid-u").status, 400)
        self.assertEqual(self.send("whatsapp-cloud", "u1").status, 200)
        self.assertEqual(self.send("whatsapp-cloud", "u1").status, 429)
        time.sleep(0.55)  # one interval: the refusal did not push the slot back
        self.assertEqual(self.send("whatsapp-cloud", "u1").status, 200)

    def test_reset_forgets_the_state_not_the_rules(self):
        self.limits([{"platform": "whatsapp-cloud", "perSecond": 1}])
        self.assertEqual(self.send("whatsapp-cloud", "u1").status, 200)
        self.assertEqual(self.send("whatsapp-cloud", "u1").status, 429)
        self.post("/_sim/reset", {})
        self.assertEqual(self.get("/_sim/limits").json()["refused"], {"sender": 0, "pair": 0})
        self.assertEqual(self.send("whatsapp-cloud", "u1").status, 200)
        self.assertEqual(self.send("whatsapp-cloud", "u1").status, 429)

    def test_arrivals_are_recorded_in_microseconds(self):
        before = time.time() * 1e6
        self.send("facebook", "u1")
        after = time.time() * 1e6
        e = self.sends()[-1]
        self.assertTrue(before - 1000 <= e["ts_us"] <= after + 1000)
        self.assertEqual(e["ts_ms"], e["ts_us"] // 1000)
        self.assertIsNone(e["limit"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
