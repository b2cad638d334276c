"""Concurrency and the store going away: 100 concurrent requests to 100 members each delivered
exactly once; Redis stopped mid-test answers 119 within the deadline, and botgate recovers
when Redis comes back without being restarted."""
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from harness import StackTest, Redis, facebook_channel, member, http

APP = "app-load"


class Load(StackTest):
    stack_args = {"env": {"BOTGATE_REQUEST_TIMEOUT_MS": "3000", "BOTGATE_REDIS_TIMEOUT_MS": "300"}}

    def seed(self):
        s = self.s
        s.put("channel", facebook_channel("fbl", APP))
        for i in range(100):
            s.put("member", member("m%03d" % i, "fbl", APP, "psid-%03d" % i))
        return s.token(APP, "bot:sendResponses")

    def test_1_hundred_concurrent_requests_each_delivered_once(self):
        tok = self.seed()
        self.s.sim_reset()

        def one(i):
            return self.s.send({"channelId": "fbl", "memberId": "m%03d" % i,
                                "response": [{"type": "TEXT", "text": "msg-%03d" % i}]}, tok)

        with ThreadPoolExecutor(max_workers=100) as pool:
            answers = list(pool.map(one, range(100)))
        for i, a in enumerate(answers):
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.json["member"], "m%03d" % i)
        log = self.s.sim_log()
        got = sorted((r["recipient"], r["body"]["message"]["text"]) for r in log)
        self.assertEqual(got, [("psid-%03d" % i, "msg-%03d" % i) for i in range(100)])

    def test_2_redis_down_answers_119_then_recovers(self):
        tok = self.seed()
        body = {"channelId": "fbl", "memberId": "m001", "response": [{"type": "TEXT", "text": "x"}]}
        self.assertEqual(self.s.send(body, tok).status, 200)
        self.s.stop_redis()
        try:
            for _ in range(5):
                t0 = time.time()
                a = self.s.send(body, tok)
                took = time.time() - t0
                self.assertEqual(a.status, 500, a)
                self.assertEqual(a.json["err_code"], 119, a)
                self.assertEqual(a.json["err"], a.json["error"])
                self.assertLess(took, 3.0 + 0.5)  # within the request deadline
            self.assertEqual(http("GET", self.s.url + "/readyz").status, 503)
            self.assertEqual(http("GET", self.s.url + "/healthz").status, 200)
        finally:
            self.s.start_redis(port=self.s.redis_port)
        # the data did not survive (no persistence in tests): load it again
        tok = self.seed()
        # every worker reconnects (with backoff): soon every request and readiness check passes
        deadline, streak = time.time() + 10, 0
        while streak < 8 and time.time() < deadline:
            ok = (self.s.send(body, tok).status == 200 and
                  http("GET", self.s.url + "/readyz").status == 200)
            streak = streak + 1 if ok else 0
            time.sleep(0.05)
        self.assertEqual(streak, 8)

    def test_3_redis_stuck_answers_119_by_deadline(self):
        tok = self.seed()
        body = {"channelId": "fbl", "memberId": "m002", "response": [{"type": "TEXT", "text": "y"}]}
        self.assertEqual(self.s.send(body, tok).status, 200)
        # DEBUG SLEEP blocks Redis longer than the command timeout (300 ms)
        side = Redis(self.s.redis_port)  # a connection of its own: this one blocks
        sleeper = threading.Thread(target=lambda: side("DEBUG", "SLEEP", "2"))
        sleeper.start()
        time.sleep(0.1)
        t0 = time.time()
        a = self.s.send(body, tok)
        took = time.time() - t0
        sleeper.join()
        side.close()
        self.assertEqual(a.status, 500, a)
        self.assertEqual(a.json["err_code"], 119, a)
        self.assertLess(took, 1.5)
        # every worker reconnects (with backoff): soon every request succeeds again
        deadline, streak = time.time() + 10, 0
        while streak < 8 and time.time() < deadline:
            streak = streak + 1 if self.s.send(body, tok).status == 200 else 0
            time.sleep(0.05)
        self.assertEqual(streak, 8)


if __name__ == "__main__":
    unittest.main()
