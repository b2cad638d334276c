#!/usr/bin/env python3
"""The first message's slot of a channel's sender limit, taken ahead in the round trip of the
member's read (issue 30), keeps contract.md section 8 whole: real redis-server, the simulator,
botgate with member order on and a twin with it off, requests by memberId to a facebook page
limited to one send a second (the sender's TAT key in Redis shows every slot taken).

- No slot is taken for a member that does not exist, nor while another request holds the
  member's turn (the request takes one when its turn comes, and sends); on a Redis Cluster,
  where the member's turn queue is in its outbox shard's slot, one taken then goes back.
- A slot taken for a request that then sends nothing (a member without an address, a duplicate
  answered from its Idempotency-Key's record) goes back: the TAT is as before.
- A later slot is waited for on a timer (the second send goes a second after the first), a
  slot past the deadline fails the element with 120 and retryAfterMs and sends nothing, and a
  pause in force (a platform's Retry-After) holds the slot taken ahead too.

Run: BOTGATE_BIN_DIR=/work/main/build-asan/bin python3 test_ratelimit_ahead.py"""
import json
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (CLUSTER, StackTest, facebook_channel, free_port,  # noqa: E402
                     http as http_call, member, turn_queue, wait_for)

APP = "RH"
CID = "rh-fb"
REQUEST_TIMEOUT_MS = 8000
UPSTREAM_TIMEOUT_MS = 1000  # a slot may be waited for up to about 7 s
TAT = "botgate:rate:{%s}:sender" % CID
PAUSE = "botgate:ratepause:{%s}:sender" % CID


class RateAhead(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_REQUEST_TIMEOUT_MS": str(REQUEST_TIMEOUT_MS),
                                        "BOTGATE_UPSTREAM_TIMEOUT_MS": str(UPSTREAM_TIMEOUT_MS)}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.on = s.url
        s.start_gateway(port=free_port(), name="botgate-off", extra={"BOTGATE_MEMBER_ORDER": "0"})
        cls.off = s.url
        s.put("channel", facebook_channel(CID, APP, rateLimit={"perSecond": 1, "burst": 1}))
        for i in range(40):
            s.redis("SET", "botgate:member:{%s}:m%d" % (CID, i),
                    json.dumps(member("m%d" % i, CID, APP, "2457%012d" % i)))
        s.redis("SET", "botgate:member:{%s}:noaddr" % CID,
                json.dumps(member("noaddr", CID, APP, "")))
        cls.tok = s.token(APP, "bot:sendResponses")
        cls.next = 0

    def setUp(self):
        # each test starts with the limit free: no slot ahead of now, no pause
        self.s.redis("DEL", TAT, PAUSE)

    def member_id(self):
        self.__class__.next += 1
        return "m%d" % self.__class__.next

    def post(self, url, mid, text, key=None):
        headers = {"Authorization": "Bearer " + self.tok}
        if key is not None:
            headers["Idempotency-Key"] = key
        return http_call("POST", url + "/sendResponses",
                         {"channelId": CID, "memberId": mid,
                          "response": [{"type": "TEXT", "text": text}]}, headers, 30)

    def sent(self, marker):
        """The simulator's message calls whose body holds marker, in arrival order."""
        return sorted((e for e in self.s.sim_log()
                       if e["kind"] == "messages" and marker in json.dumps(e["body"])),
                      key=lambda e: e["ts_us"])

    def evalsha(self):
        for line in self.s.redis("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_evalsha:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def tat(self):
        return self.s.redis("GET", TAT)

    def test_no_slot_for_a_missing_member(self):
        for url in (self.on, self.off):
            a = self.post(url, "nobody", "missing")
            self.assertEqual(a.status, 500, a)
            self.assertIsNone(self.tat())

    def test_a_slot_unused_goes_back(self):
        for url in (self.on, self.off):
            with self.subTest(url=url):
                self.s.redis("DEL", TAT)
                mid = self.member_id()
                self.assertEqual(self.post(url, mid, "first " + mid).status, 200)
                before = self.tat()
                self.assertIsNotNone(before)
                # no address: refused after the member's read, which took the next slot
                e0 = self.evalsha()
                a = self.post(url, "noaddr", "noaddr")
                self.assertEqual(a.status, 500, a)
                # taken and given back: two scripts (counted on one server), and the TAT as it
                # was (taken before the member's read answered: it was one slot later then)
                wait_for(lambda: (CLUSTER or self.evalsha() - e0 == 2) and self.tat() == before,
                         timeout=10, what="the slot given back")
                # a duplicate answered from the key's record sends nothing either
                key, keyed = "dup-" + mid, self.member_id()
                self.s.redis("DEL", TAT)
                first = self.post(url, keyed, "keyed " + mid, key)
                self.assertEqual(first.status, 200, first)
                before = self.tat()
                dup = self.post(url, keyed, "keyed " + mid, key)
                self.assertEqual((dup.status, dup.raw), (200, first.raw))
                self.assertEqual(dup.headers.get("Idempotent-Replayed"), "true")
                wait_for(lambda: self.tat() == before, timeout=10, what="the slot given back")
                self.assertEqual(len(self.sent("keyed " + mid)), 1)

    def test_a_later_slot_waits_on_a_timer(self):
        for url in (self.on, self.off):
            with self.subTest(url=url):
                self.s.redis("DEL", TAT)
                a, b = self.member_id(), self.member_id()
                answers = {}
                t = threading.Thread(target=lambda: answers.update(
                    a=self.post(url, a, "timer-a " + a)))
                t.start()
                wait_for(lambda: self.sent("timer-a " + a), timeout=10, what="the first send")
                answers["b"] = self.post(url, b, "timer-b " + a)
                t.join(30)
                self.assertEqual((answers["a"].status, answers["b"].status), (200, 200))
                first, second = self.sent("timer-a " + a)[0], self.sent("timer-b " + a)[0]
                # one a second: the second slot is a second after the first; each call goes a
                # little after its slot (the first by the reply's trip, the second by its
                # timer's), which moves the gap by a few ms either way, not by 100
                self.assertGreaterEqual(second["ts_us"] - first["ts_us"], 900000)

    def test_past_the_deadline_120_and_a_pause_holds_it(self):
        sec, usec = self.s.redis("TIME")
        now = int(sec) * 1000000 + int(usec)
        for url in (self.on, self.off):
            with self.subTest(url=url):
                self.s.redis("DEL", TAT)
                # a pause of 30 s (a Retry-After: 30 heard by any instance): past the deadline
                self.s.redis("HSET", PAUSE, "until", str(now + 30000000), "next", "1000")
                self.s.redis("PEXPIRE", PAUSE, "31000")
                mid = self.member_id()
                a = self.post(url, mid, "paused " + mid)
                self.assertEqual(a.status, 200, a)
                el = a.json["sendResult"]["result"][0]
                self.assertEqual(el["error"]["err_code"], 120, el)
                self.assertTrue(25000 < el["error"]["retryAfterMs"] <= 30000, el)
                self.assertEqual(self.sent("paused " + mid), [])
                self.assertIsNone(self.tat())  # too late: nothing was taken
                # a pause of 1.5 s: the slot taken ahead is after it, waited for
                sec, usec = self.s.redis("TIME")
                until = int(sec) * 1000000 + int(usec) + 1500000
                self.s.redis("HSET", PAUSE, "until", str(until), "next", "1000")
                mid = self.member_id()
                self.assertEqual(self.post(url, mid, "after " + mid).status, 200)
                self.assertGreaterEqual(self.sent("after " + mid)[0]["ts_us"], until - 1000)
                self.s.redis("DEL", PAUSE)

    def test_no_slot_while_the_turn_is_held(self):
        warm, mid = self.member_id(), self.member_id()
        queue = turn_queue(CID, mid)
        # the token and channel in the worker's cache: only then is a slot taken ahead
        self.assertEqual(self.post(self.on, warm, "warm " + warm).status, 200)
        # the channel's slots are taken 3 s ahead (kept 10 s): the request's would be 3 s ahead,
        # still in time when its turn comes, and the TAT shows whether one is held
        sec, usec = self.s.redis("TIME")
        before = str(int(sec) * 1000000 + int(usec) + 3000000)
        self.s.redis("SET", TAT, before, "PX", "10000")
        # another request (of a dead instance) holds the member's turn for 2 s more
        self.s.redis("RPUSH", queue, "0123456789abcdef")
        self.s.redis("PEXPIRE", queue, "2000")
        answers = {}
        t = threading.Thread(target=lambda: answers.update(a=self.post(self.on, mid, "held " + mid)))
        t.start()
        wait_for(lambda: self.s.redis("LLEN", queue) == 2, timeout=10, what="the request queued")
        # its slot would be stale when the turn comes: none is held while it waits (on one
        # server none is taken; on a cluster, where the limiter's script cannot see the queue in
        # another slot, the one taken goes back once the request is told someone is ahead)
        wait_for(lambda: self.tat() == before, timeout=5, what="no slot held while it waits")
        t.join(30)
        self.assertEqual(answers["a"].status, 200, answers["a"])
        self.assertEqual(len(self.sent("held " + mid)), 1)
        self.assertNotEqual(self.tat(), before)  # taken when its turn came

if __name__ == "__main__":
    unittest.main()
