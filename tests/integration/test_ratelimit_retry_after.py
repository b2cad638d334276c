#!/usr/bin/env python3
"""A platform's Retry-After (contract.md section 8) as botgate honours it, against the simulator
and the real redis-server that holds the pauses, two botgate instances on it:

- facebook, whatsapp and whatsapp-cloud answering 429 with Retry-After: 3 pause the sender for
  3 s (the pause key's end and TTL in Redis), and the one retry reaches the platform 3 s after
  the refusal, not the doubling default's 1 s; an HTTP-date Retry-After counts the same;
- a Slack Retry-After of 2147483647 pauses the bot for 60 s, not 68 years;
- Slack's per-conversation limit (a 429 asking for 1 s) pauses that conversation only;
- sends that took their slot before a pause began (waiting for it, on either instance) do not
  reach the platform while the pause lasts.

The simulator's fault word ratelimitafter<N> answers the platform's rate-limit refusal as a 429
with Retry-After: N, ratelimitdate<N> with an HTTP-date N seconds ahead.

Run: BOTGATE_BIN_DIR=/work/main/build-asan/bin python3 test_ratelimit_retry_after.py"""
import json
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (StackTest, cloud_channel, facebook_channel, free_port,  # noqa: E402
                     http as http_call, wait_for, whatsapp_channel)
from test_send_more_platforms import slack  # noqa: E402

APP = "RA"
REQUEST_TIMEOUT_MS = 8000
UPSTREAM_TIMEOUT_MS = 1000  # a slot or a pause may be waited for up to about 7 s
PREFIX = "botgate:"


class RetryAfter(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_REQUEST_TIMEOUT_MS": str(REQUEST_TIMEOUT_MS),
                                        "BOTGATE_UPSTREAM_TIMEOUT_MS": str(UPSTREAM_TIMEOUT_MS)}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.urls = [s.url]
        url, log = s.url, s.log_path
        s.start_gateway(port=free_port(), name="botgate2")
        cls.urls.append(s.url)
        s.url, s.log_path = url, log
        for cid, ch in [
                ("ra-fb", facebook_channel("ra-fb", APP)),
                ("ra-wa", whatsapp_channel("ra-wa", APP, s.sim_url + "/wa")),
                ("ra-wc", cloud_channel("ra-wc", APP)),
                ("ra-wc-date", cloud_channel("ra-wc-date", APP)),
                ("ra-sl-cap", dict(slack("ra-sl-cap"), app=APP)),
                ("ra-sl-conv", dict(slack("ra-sl-conv"), app=APP)),
                # one send a second: slots are handed out a second apart, ahead of time
                ("ra-hold", facebook_channel("ra-hold", APP,
                                             rateLimit={"perSecond": 1, "burst": 1}))]:
            s.put("channel", ch)
        cls.tok = s.token(APP, "bot:sendResponses")

    def send(self, cid, to, text, instance=0):
        body = {"channelId": cid, "recipientId": to, "response": [{"type": "TEXT", "text": text}]}
        r = http_call("POST", self.urls[instance] + "/sendResponses", body,
                      {"Authorization": "Bearer " + self.tok}, 30)
        self.assertEqual(r.status, 200, r)
        return r.json["sendResult"]["result"][0]

    def calls(self, marker):
        """The simulator's message calls whose body holds marker, in arrival order."""
        out, since = [], 0
        while True:
            page = self.s.sim("GET", "/_sim/log?since=%d" % since)
            out += [e for e in page["requests"]
                    if e["kind"] == "messages" and marker in json.dumps(e["body"])]
            if not page["requests"]:
                return sorted(out, key=lambda e: e["ts_us"])
            since = page["next"]

    def pause_left_ms(self, cid, pair=None):
        """(ms left of the pause by Redis's clock, the key's PTTL), or None without a pause.
        pair: a recipient id, whose pair's keys are its member's."""
        if pair is not None:
            pair = self.s.redis("GET", PREFIX + "recipient:{%s}:%s" % (cid, pair))
        key = PREFIX + "ratepause:{%s}:" % cid + ("sender" if pair is None else "pairm:" + pair)
        until, ttl = self.s.redis("HGET", key, "until"), self.s.redis("PTTL", key)
        if until is None:
            return None
        sec, usec = self.s.redis("TIME")
        return (int(until) - (int(sec) * 1000000 + int(usec))) / 1000.0, ttl

    def assert_paused_for(self, cid, text, to, seconds, instance=0):
        el = self.send(cid, to, text, instance)
        # the retry after the pause was refused again: 120, with the pause now in force
        self.assertEqual(el["error"]["err_code"], 120, el)
        left, ttl = self.pause_left_ms(cid)
        self.assertTrue(seconds * 1000 - 1500 < left <= seconds * 1000, (left, ttl))
        # the key outlives the pause by the next doubling pause's length (1 s), no more
        self.assertTrue(left < ttl <= left + 1000 + 50, (left, ttl))
        self.assertTrue(seconds * 1000 - 1500 < el["error"]["retryAfterMs"] <= seconds * 1000, el)
        got = self.calls(text)
        self.assertEqual(len(got), 2, [e["ts_us"] for e in got])
        gap_ms = (got[1]["ts_us"] - got[0]["ts_us"]) / 1000.0
        # the pause began after the refusal reached the platform: the retry comes at least the
        # Retry-After later (1 ms for the clocks' rounding), and not much more
        self.assertGreaterEqual(gap_ms, seconds * 1000 - 1, got)
        self.assertLess(gap_ms, seconds * 1000 + 1500, got)
        return el

    def test_facebook_retry_after(self):
        self.assert_paused_for("ra-fb", "ratelimitafter3 fb", "psid-ra", 3)

    def test_whatsapp_retry_after(self):
        self.assert_paused_for("ra-wa", "ratelimitafter3 wa", "+85291234567", 3)

    def test_whatsapp_cloud_retry_after(self):
        self.assert_paused_for("ra-wc", "ratelimitafter3 wc", "+85291234568", 3, instance=1)

    def test_http_date_retry_after(self):
        # the date is whole seconds: 3 s ahead of the simulator's second is 2-3 s from now
        el = self.send("ra-wc-date", "+85291234569", "ratelimitdate3 date")
        self.assertEqual(el["error"]["err_code"], 120, el)
        left, _ = self.pause_left_ms("ra-wc-date")
        self.assertTrue(500 < left <= 3000, left)
        got = self.calls("ratelimitdate3 date")
        self.assertEqual(len(got), 2, got)
        self.assertGreater(got[1]["ts_us"] - got[0]["ts_us"], 1500000, got)

    def test_retry_after_is_capped_at_60_s(self):
        el = self.send("ra-sl-cap", "C0CAP", "ratelimitafter2147483647 cap")
        self.assertEqual(el["error"]["err_code"], 120, el)
        # past the deadline: refused at once, told when it could go, never retried
        self.assertTrue(55000 < el["error"]["retryAfterMs"] <= 60000, el)
        left, ttl = self.pause_left_ms("ra-sl-cap")
        self.assertTrue(55000 < left <= 60000, left)
        self.assertLessEqual(ttl, 61000 + 50)
        self.assertEqual(len(self.calls("ratelimitafter2147483647 cap")), 1)
        # a longer wait is the bot's limit: every conversation waits, 60 s at most
        other = self.send("ra-sl-cap", "C0OTHER", "another conversation", instance=1)
        self.assertEqual(other["error"]["err_code"], 120, other)
        self.assertTrue(0 < other["error"]["retryAfterMs"] <= 60000, other)
        self.assertEqual(self.calls("another conversation"), [])

    def test_slack_conversation_limit_pauses_that_conversation_only(self):
        # the simulator's Slack refusal says Retry-After: 1, chat.postMessage's per-conversation
        # limit: the bot's other conversations go on
        el = self.send("ra-sl-conv", "C0BUSY", "ratelimit busy")
        self.assertEqual(el["error"]["err_code"], 120, el)
        self.assertIsNone(self.pause_left_ms("ra-sl-conv"), "the whole bot was paused")
        left, _ = self.pause_left_ms("ra-sl-conv", pair="C0BUSY")
        self.assertTrue(0 < left <= 1000, left)
        other = self.send("ra-sl-conv", "C0QUIET", "quiet conversation", instance=1)
        self.assertNotIn("error", other)
        busy, quiet = self.calls("ratelimit busy"), self.calls("quiet conversation")
        self.assertEqual(len(busy), 2)
        self.assertGreaterEqual(busy[1]["ts_us"] - busy[0]["ts_us"], 999000, busy)
        # it did not wait for the conversation's pause (which had most of 1 s left)
        self.assertLess(quiet[0]["ts_us"] - busy[1]["ts_us"], left * 1000 - 100000, (busy, quiet))

    def test_slots_taken_before_a_pause_wait_for_it(self):
        cid, tat_key = "ra-hold", PREFIX + "rate:{ra-hold}:sender"
        answers, threads = {}, []

        def tat():
            return int(self.s.redis("GET", tat_key) or 0)

        def start(name, to, text, instance):
            before = tat()
            t = threading.Thread(target=lambda: answers.__setitem__(
                name, self.send(cid, to, text, instance)))
            t.start()
            threads.append(t)
            # its slot is taken (the limit's clock moved on) before the next one asks
            wait_for(lambda: tat() > before, timeout=5, what="the slot of " + name)

        # slots a second apart: the first goes now, the refused one a second later (its 429
        # pauses the page for 3 s), three more hold slots inside that pause, on both instances
        start("first", "u1", "hold first", 0)
        start("refused", "u2", "ratelimitafter3 hold", 0)
        start("second", "u3", "hold second", 1)
        start("third", "u4", "hold third", 0)
        start("fourth", "u5", "hold fourth", 1)
        for t in threads:
            t.join()
        refusal = self.calls("ratelimitafter3 hold")[0]["ts_us"]
        during = [(e["ts_us"] - refusal) / 1000.0 for e in self.calls("hold")
                  if refusal < e["ts_us"] < refusal + 3000000 - 50000]
        self.assertEqual(during, [], "ms after the refusal, inside its 3 s pause: %s" % answers)
        for name in ("second", "third", "fourth"):  # each went after the pause, or got 120
            el = answers[name]
            self.assertTrue("error" not in el or el["error"]["err_code"] == 120, el)


if __name__ == "__main__":
    unittest.main(verbosity=2)
