"""contract.md section 7: an Idempotency-Key's answer is kept for the key even when Redis does
not take its write at once. Redis holds writes (CLIENT PAUSE WRITE, longer than
BOTGATE_REDIS_TIMEOUT_MS) while the request's platform call is out, so that the answer's write
times out: the client still has its answer at once, the request writes it again until Redis
takes it, and a duplicate sent after the stall gets that answer replayed, the platform called
once. Before, the answer was written once and lost: the duplicate waited for the first one's
lease to end (its deadline plus 2 s), then resumed it and answered 125 ("outcome unknown") for
a message that had been delivered."""
import threading
import time
import unittest

from harness import StackTest, http, tenant, wait_for

APP = "app-keep"
PAUSE_MS = 3000  # six of the write's timeouts (BOTGATE_REDIS_TIMEOUT_MS 500, the harness's)


def idem_record(app, route, key):
    """An Idempotency-Key's record: docs/operations.md, botgate's own keys."""
    return "botgate:idem:{%d:%s:%s:%s}" % (len(app.encode()), app, route, key)


class KeyedSends(StackTest):
    """Sends with a key to the member TENANT (channel, member, psid) of APP."""
    TENANT = ("fbk", "mk", "psid-keep")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tok, _ = tenant(cls.s, *cls.TENANT, APP)

    def post(self, body, key):
        return http("POST", self.s.url + "/sendResponses", body,
                    {"Authorization": "Bearer " + self.tok, "Idempotency-Key": key}, 30)

    def texts(self, word):
        return [r["body"]["message"]["text"] for r in self.s.sim_log()
                if word in r["body"].get("message", {}).get("text", "")]


class AnswerKept(KeyedSends):
    stack_args = {"workers": 1, "env": {"BOTGATE_REQUEST_TIMEOUT_MS": "8000",
                                        "BOTGATE_UPSTREAM_TIMEOUT_MS": "6000"}}

    def stalled_answer(self, word, key, pause_ms):
        """Sends word with key; once its call (answered after 1.5 s) is on the platform, Redis
        holds writes for pause_ms. Returns the answer, which came during the stall."""
        body = {"channelId": "fbk", "memberId": "mk",
                "response": [{"type": "TEXT", "text": word + " slow1500"}]}
        first = {}

        def run_first():
            first["a"] = self.post(body, key)
            first["at"] = time.monotonic()
        t = threading.Thread(target=run_first)
        t.start()
        wait_for(lambda: self.texts(word), what="the call on the platform")
        paused_at = time.monotonic()
        self.s.redis("CLIENT", "PAUSE", str(pause_ms), "WRITE")
        t.join()
        a = first["a"]
        # the client had its answer during the stall, without waiting for the write ...
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["ok"], 1, a)
        self.assertLess(first["at"] - paused_at, pause_ms / 1000 - 0.5,
                        "the answer waited for Redis")
        # ... which did not land: the stall began before it (a read goes through the pause)
        record = idem_record(APP, "sendResponses", key)
        self.assertIsNone(self.s.redis("HGET", record, "status"), "the stall came after the write")
        return body, a

    def test_answer_written_after_a_stall_is_replayed(self):
        s = self.s
        body, a = self.stalled_answer("kept", "key-kept", PAUSE_MS)
        # a write of our own returns once the pause is over
        s.redis("SET", "test:after-pause", "1")
        b = self.post(body, "key-kept")
        self.assertEqual((b.status, b.raw), (200, a.raw))
        self.assertEqual(b.headers.get("Idempotent-Replayed"), "true")
        self.assertEqual(self.texts("kept"), ["kept slow1500"])
        self.assertEqual(s.redis("HGET", idem_record(APP, "sendResponses", "key-kept"),
                                 "status"), "200")

    def test_z_exit_does_not_wait_for_redis(self):
        """SIGTERM while Redis still holds the answer's write (a pause far longer than the
        drain): botgate exits at once, cleanly (every kept answer freed), and says what it gave
        up; the record is then taken over at its lease end as after a crash."""
        s = self.s
        self.stalled_answer("exit", "key-exit", 30000)
        try:
            t0 = time.monotonic()
            code = s.stop_gateway()
            took = time.monotonic() - t0
        finally:
            s.redis("CLIENT", "UNPAUSE")
        self.assertEqual(code, 0)
        self.assertLess(took, 15)
        self.assertIn("Idempotency-Key answers not taken by Redis given up at exit",
                      s.gateway_log())


class DropKept(KeyedSends):
    """A request with a key that stops before it ran drops its record, so that a retry runs
    afresh; that write too is written again when Redis did not take it. The member's turn is
    held by a dead instance's id (pushed by the test, its lease past the request's deadline), so
    that the request stops at its deadline (121) after its begin made it the record's owner;
    Redis holds writes from before that stop until after the write's timeout. Before, the drop
    was sent once and lost: the retry waited for the record's lease to end (the deadline plus
    2 s), resumed it and answered 125 ("outcome unknown") for a message never sent."""
    TENANT = ("fbd", "md", "psid-drop")
    DEADLINE_MS = 3000
    stack_args = {"workers": 1, "env": {"BOTGATE_REQUEST_TIMEOUT_MS": str(DEADLINE_MS),
                                        "BOTGATE_MEMBER_ORDER": None}}  # the default: on

    def test_drop_written_after_a_stall_lets_the_retry_run(self):
        s = self.s
        queue, leases = "botgate:turnq:{fbd}:md", "botgate:turnlease:{fbd}:md"
        record = idem_record(APP, "sendResponses", "key-drop")
        s.redis("RPUSH", queue, "dead-instance")
        s.redis("PEXPIRE", queue, "60000")
        body = {"channelId": "fbd", "memberId": "md",
                "response": [{"type": "TEXT", "text": "dropped once"}]}
        first = {}
        t0 = time.monotonic()
        t = threading.Thread(target=lambda: first.update(a=self.post(body, "key-drop")))
        t.start()
        # its begin made it the owner and it queued behind the dead id (reads pass the pause)
        wait_for(lambda: s.redis("HGET", record, "owner") and s.redis("LLEN", queue) == 2,
                 what="the request waiting for the member's turn")
        # Redis holds writes from now until past its stop at the deadline and the drop's
        # timeout (500 ms), ending well before the record's lease (the deadline plus 2 s)
        pause_ms = int((t0 + self.DEADLINE_MS / 1000 + 1.0 - time.monotonic()) * 1000)
        self.assertGreater(pause_ms, 1500, "the request took too long to queue")
        s.redis("CLIENT", "PAUSE", str(pause_ms), "WRITE")
        t.join()
        a = first["a"]
        self.assertEqual(a.status, 500, a)
        self.assertIn(a.json["err_code"], (121, 119), a)
        s.redis("SET", "test:after-pause", "1")  # returns once the pause is over
        # the dead instance's id and the request's own (its give-back was lost too) go
        s.redis("DEL", queue, leases)
        b = self.post(body, "key-drop")
        self.assertEqual(b.status, 200, b)
        self.assertEqual(b.json["ok"], 1, b)
        self.assertIsNone(b.headers.get("Idempotent-Replayed"))
        self.assertNotIn("125", b.raw)
        self.assertEqual(self.texts("dropped"), ["dropped once"])


if __name__ == "__main__":
    unittest.main()
