"""BOTGATE_HTTP_STATUS=conventional: the same bodies, with the HTTP status a generic client and
its retry middleware understand (400, 401, 404, 409, 413, 429, 502, 503); the default stays the
interface's (every failure 500), and /metrics counts each status."""
import subprocess
import unittest

from harness import (CLUSTER, REDIS_CLI, StackTest, facebook_channel, member, whatsapp_channel,
                     http)

APP = "app-status"


class Conventional(StackTest):
    stack_args = {"env": {"BOTGATE_HTTP_STATUS": "conventional"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        s.put("channel", facebook_channel("fst", APP))
        s.put("channel", facebook_channel("fst-off", APP, on=False))
        s.put("member", member("mem-st", "fst", APP, "psid-st"))
        s.put("member", member("mem-st-off", "fst-off", APP, "psid-st-off"))
        cls.tok = s.token(APP, "bot:sendResponses")

    def body(self, *texts, **over):
        b = {"channelId": "fst", "memberId": "mem-st",
             "response": [{"type": "TEXT", "text": t} for t in texts]}
        b.update(over)
        return b

    def test_success_stays_200(self):
        self.assertEqual(self.s.send(self.body("hello"), self.tok).status, 200)

    def test_a_partial_failure_stays_200(self):
        a = self.s.send(self.body("one", "fail5xx"), self.tok)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["data"]["sendResult"]["ok"] if "data" in a.json else 0, 0)

    def test_client_errors(self):
        s = self.s
        self.assert_error(s.send({"channelId": "fst"}, self.tok), 108, 400, "memberId")
        self.assert_error(s.send(self.body("x", channelId="nope"), self.tok), 112, 404)
        self.assert_error(s.send(self.body("x", memberId="nobody"), self.tok), 114, 404)
        self.assert_error(s.send(self.body("x", channelId="fst-off", memberId="mem-st-off"),
                                 self.tok), 116, 409)
        big = self.body("x" * (1024 * 1024 + 10))
        self.assert_error(s.send(big, self.tok), 118, 413)

    def test_unauthorized_is_401_with_its_scheme(self):
        a = self.s.send(self.body("x"), "bgt_wrong")
        self.assertEqual(a.status, 401, a)
        self.assertEqual(a.json, {"ok": 0, "err": "User is not authorized",
                                  "error": "User is not authorized"})
        self.assertEqual(a.headers.get("WWW-Authenticate"), "Bearer")

    def test_idempotency_key_reused_for_another_body_is_409(self):
        s = self.s
        h = {"Idempotency-Key": "status-key-1"}
        self.assertEqual(s.send(self.body("first"), self.tok, headers=h).status, 200)
        self.assert_error(s.send(self.body("other"), self.tok, headers=h), 124, 409)
        again = s.send(self.body("first"), self.tok, headers=h)
        self.assertEqual((again.status, again.headers.get("Idempotent-Replayed")), (200, "true"))

    def test_only_rate_limited_is_429(self):
        s = self.s
        # a channel of its own: the pause the platform asks for holds back its later sends
        s.put("channel", facebook_channel("fst-rl", APP, info={"accessToken": "fb-rl",
                                                                 "pageId": "5550001"}))
        s.put("member", member("mem-st-rl", "fst-rl", APP, "psid-st-rl"))
        # the platform asks for 30 s, past the request's deadline: nothing sent, 120
        a = s.send(self.body("ratelimitafter30", channelId="fst-rl", memberId="mem-st-rl"),
                   self.tok)
        self.assertEqual(a.status, 429, a)
        self.assertEqual(a.json["ok"], 1)
        self.assertIn("retryAfterMs", a.raw)
        # with a key, the answer is not kept: the retry runs (and is paused again), no replay
        h = {"Idempotency-Key": "status-429"}
        body = self.body("ratelimitafter30", channelId="fst-rl", memberId="mem-st-rl")
        for _ in range(2):
            a = s.send(body, self.tok, headers=h)
            self.assertEqual((a.status, a.headers.get("Idempotent-Replayed")), (429, None), a)

    def test_platform_failure_that_aborts_is_502(self):
        s = self.s
        s.put("channel", whatsapp_channel("wst", APP, s.sim_url + "/wa"))
        s.put("member", member("mem-wst", "wst", APP, "85291110000", platform="whatsapp"))
        a = s.send({"channelId": "wst", "memberId": "mem-wst",
                    "response": [{"type": "TEXT", "text": "fail5xx"}]}, self.tok)
        self.assert_error(a, 113, 502)

    @unittest.skipIf(CLUSTER, "one server's DEBUG SLEEP")
    def test_store_down_is_503_with_retry_after(self):
        s = self.s
        # Redis holds every client's commands for 1.5 s once CLIENT PAUSE has answered: the
        # member's read times out after BOTGATE_REDIS_TIMEOUT_MS (500 ms)
        subprocess.run([REDIS_CLI, "-p", str(s.redis_port), "CLIENT", "PAUSE", "1500", "ALL"],
                       check=True, stdout=subprocess.DEVNULL, timeout=10)
        try:
            a = s.send(self.body("x"), self.tok)
        finally:
            subprocess.run([REDIS_CLI, "-p", str(s.redis_port), "CLIENT", "UNPAUSE"],
                           stdout=subprocess.DEVNULL, timeout=10)
        self.assert_error(a, 119, 503)
        self.assertEqual(a.headers.get("Retry-After"), "1")

    def test_metrics_count_each_status(self):
        s = self.s
        s.send(self.body("x", memberId="nobody-metrics"), self.tok)
        m = http("GET", s.url + "/metrics").raw
        self.assertIn('botgate_requests_total{route="sendResponses",status="404",err_code="114"}',
                      m)


class InterfaceDefault(StackTest):
    def test_failures_are_500_by_default(self):
        s = self.s
        s.put("channel", facebook_channel("fsd", APP))
        tok = s.token(APP, "bot:sendResponses")
        self.assert_error(s.send({"channelId": "fsd"}, tok), 108, 500)
        self.assert_error(s.send({"channelId": "nope", "memberId": "m",
                                  "response": [{"type": "TEXT", "text": "x"}]}, tok), 112, 500)
        self.assertEqual(s.send({"channelId": "fsd"}, "bgt_wrong").status, 500)

    def test_a_bad_setting_is_refused(self):
        p = self.s.run_refused(BOTGATE_HTTP_STATUS="rest")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"BOTGATE_HTTP_STATUS must be interface or conventional", p.stderr)


if __name__ == "__main__":
    unittest.main()
