#!/usr/bin/env python3
"""The shared rate limiter's script (store/ratelimit.c) against a real redis-server: bursts, the
pair limit, queueing, "too late", pauses and their doubling, two clients sharing one limit, and
Redis's clock as the only clock. Also: botgatectl refuses a channel with a bad rateLimit.

The script is read from store/ratelimit.c, between its BEGIN/END RATE_SCRIPT markers: the very
text the C code sends.
"""
import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

SRC = os.path.join(os.path.dirname(__file__), "../../store/ratelimit.c")
GO, WAIT, TOO_LATE, RETAKE = 0, 1, 2, 3
NO_LIMIT = 10 ** 9  # max wait ms that never refuses


def load_script():
    with open(SRC) as f:
        src = f.read()
    m = re.search(r"/\* BEGIN RATE_SCRIPT \*/(.*?)/\* END RATE_SCRIPT \*/", src, re.S)
    assert m, "markers not found in store/ratelimit.c"
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))
    return "".join(p.encode().decode("unicode_escape") for p in parts)


SCRIPT = load_script()


class Limiter:
    """One "instance": its own connection, the keys botgate builds (store/keys.c)."""

    def __init__(self, port, prefix="botgate:"):
        self.r = harness.Redis(port)
        self.prefix = prefix

    def keys(self, ch, rcpt=None):
        ks = [self.prefix + "rate:{%s}:sender" % ch, self.prefix + "ratepause:{%s}:sender" % ch]
        if rcpt is not None:
            ks += [self.prefix + "rate:{%s}:pairm:%s" % (ch, rcpt),
                   self.prefix + "ratepause:{%s}:pairm:%s" % (ch, rcpt)]
        return ks

    def take_us(self, ch, rcpt=None, s=(0, 0), p=(0, 0), max_wait=NO_LIMIT, lag=None):
        """The script's answer: (verdict, wait in microseconds). lag: a broadcast's take
        (store_rate_take_bulk)."""
        ks = self.keys(ch, rcpt)
        return tuple(self.r("EVAL", SCRIPT, len(ks), *ks, "take", s[0], s[1], p[0], p[1],
                            max_wait, *([lag] if lag is not None else [])))

    def take(self, *args, **kw):
        """(verdict, wait in whole milliseconds, rounded up): the schedule's tests read it in
        the limits' own unit."""
        verdict, wait_us = self.take_us(*args, **kw)
        return verdict, -(-wait_us // 1000)

    def pause(self, ch, rcpt=None, retry_after_ms=0, board=None):
        key = self.keys(ch, rcpt)[-1]
        return self.r("EVAL", SCRIPT, 1, key, "pause", retry_after_ms, 1000, 60000,
                      *([board] if board else []))

    def time_us(self):
        sec, usec = self.r("TIME")
        return int(sec) * 1000000 + int(usec)


class RateLimitScriptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = harness.Stack(start_gateway=False)
        cls.a = Limiter(cls.s.redis_port)
        cls.b = Limiter(cls.s.redis_port)

    @classmethod
    def tearDownClass(cls):
        cls.a.r.close()
        cls.b.r.close()
        cls.s.close()
        cls.s.cleanup_dir()

    def setUp(self):
        self.s.redis("FLUSHALL")

    def test_burst_then_one_per_interval_in_order(self):
        lim = (100000, 5)  # 10/s, burst 5
        got = [self.a.take("C1", s=lim) for _ in range(5)]
        self.assertEqual(got, [(GO, 0)] * 5)
        waits, tats = [], []
        for _ in range(3):
            verdict, wait = self.a.take("C1", s=lim)
            self.assertEqual(verdict, WAIT)
            waits.append(wait)
            tats.append(int(self.s.redis("GET", self.a.keys("C1")[0])))
        # queued callers get successive slots, one interval apart: exactly, by the TATs they
        # set (their waits count from when each came, which a loaded machine spreads)
        self.assertTrue(0 < waits[0] <= 100, waits)
        self.assertEqual([t1 - t0 for t0, t1 in zip(tats, tats[1:])], [100000, 100000], tats)
        self.assertTrue(waits[0] < waits[1] < waits[2] <= 300, waits)
        # another channel is not affected
        self.assertEqual(self.a.take("C2", s=lim), (GO, 0))

    def test_too_late_takes_nothing(self):
        lim = (200000, 1)  # 5/s
        self.assertEqual(self.a.take("C1", s=lim), (GO, 0))
        verdict, wait = self.a.take("C1", s=lim, max_wait=50)
        self.assertEqual(verdict, TOO_LATE)
        self.assertTrue(150 < wait <= 200, wait)
        verdict, wait2 = self.a.take("C1", s=lim, max_wait=50)
        self.assertEqual(verdict, TOO_LATE)
        self.assertLessEqual(wait2, wait)  # nothing was reserved by the refusal
        verdict, wait3 = self.a.take("C1", s=lim)
        self.assertEqual(verdict, WAIT)
        self.assertLessEqual(wait3, wait)
        verdict, wait4 = self.a.take("C1", s=lim)
        self.assertTrue(wait4 - wait3 >= 195, (wait3, wait4))

    def test_slot_is_free_again_after_waiting(self):
        lim = (50000, 2)
        self.a.take("C1", s=lim)
        self.a.take("C1", s=lim)
        verdict, wait = self.a.take("C1", s=lim)
        self.assertEqual(verdict, WAIT)
        time.sleep((wait + 60) / 1000)  # past the reserved slot and one more interval
        self.assertEqual(self.a.take("C1", s=lim), (GO, 0))

    def test_pair_limit(self):
        pair = (1000000, 2)  # 1/s per recipient, burst 2; no sender limit
        self.assertEqual(self.a.take("C1", "u1", p=pair), (GO, 0))
        self.assertEqual(self.a.take("C1", "u1", p=pair), (GO, 0))
        verdict, wait = self.a.take("C1", "u1", p=pair)
        self.assertEqual(verdict, WAIT)  # no sender limit: nothing to take later
        self.assertTrue(900 < wait <= 1000, wait)
        verdict, wait2 = self.a.take("C1", "u1", p=pair)
        self.assertTrue(1900 < wait2 <= 2000, wait2)
        # another recipient of the same channel has its own pair limit
        self.assertEqual(self.a.take("C1", "u2", p=pair), (GO, 0))

    def test_pair_later_than_sender_keeps_sender_free(self):
        snd, pair = (100000, 1), (1000000, 1)
        self.assertEqual(self.a.take("C1", "u1", s=snd, p=pair), (GO, 0))
        verdict, wait = self.a.take("C1", "u1", s=snd, p=pair)
        self.assertEqual(verdict, RETAKE)
        self.assertTrue(900 < wait <= 1000, wait)
        # the sender's next slot was not spent on the call that waits for its pair
        verdict, w2 = self.a.take("C1", "u2", s=snd, p=pair)
        self.assertEqual(verdict, WAIT)
        self.assertTrue(0 < w2 <= 100, w2)
        # the pair's slot was taken: the next call to u1 queues a second later
        verdict, w3 = self.a.take("C1", "u1", s=snd, p=pair)
        self.assertEqual(verdict, RETAKE)
        self.assertTrue(1900 < w3 <= 2000, w3)
        # the retake (pair held) takes only the sender's slot
        verdict, w4 = self.a.take("C1", None, s=snd)
        self.assertEqual(verdict, WAIT)
        self.assertTrue(100 < w4 <= 200, w4)

    def test_sender_later_than_pair(self):
        snd, pair = (500000, 1), (100000, 5)
        self.assertEqual(self.a.take("C1", "u1", s=snd, p=pair), (GO, 0))
        verdict, wait = self.a.take("C1", "u1", s=snd, p=pair)
        self.assertEqual(verdict, WAIT)
        self.assertTrue(400 < wait <= 500, wait)

    def test_bulk_takes_a_slot_only_when_due(self):
        """A broadcast's take (a lag): the sender's slot only when it is due; a later one is not
        taken, so a conversational take that comes meanwhile gets the next slot, not one behind
        the broadcast's (a slot taken ahead would be one more interval's wait for it)."""
        lim = (100000, 1)  # 10/s
        # a lag far longer than what may pass between the test's TIME and its take on a loaded
        # machine, and times apart by far more than that: its 4 ms (broadcast lanes' order of
        # magnitude) failed when 1 ms passed between them
        LAG = 400
        self.assertEqual(self.a.take("C1", s=lim, lag=LAG), (GO, 0))
        verdict, wait = self.a.take("C1", s=lim, lag=LAG)
        self.assertEqual(verdict, TOO_LATE)
        self.assertTrue(50 < wait <= 100, wait)
        # nothing was reserved: the conversation's take waits for the next slot only
        verdict, w2 = self.a.take("C1", s=lim)
        self.assertEqual(verdict, WAIT)
        self.assertTrue(50 < w2 <= 100, w2)
        # the broadcast's then comes after it, and is not taken while it is not due, even well
        # within its lag (the old lead took it then)
        verdict, w3 = self.a.take("C1", s=lim, lag=LAG)
        self.assertEqual(verdict, TOO_LATE)
        self.assertTrue(150 < w3 <= 200, w3)
        key = self.a.keys("C1")[0]
        self.s.redis("SET", key, str(self.a.time_us() + 100000))
        self.assertEqual(self.a.take("C1", s=lim, lag=LAG)[0], TOO_LATE)
        # due: taken, the call goes now
        self.s.redis("SET", key, str(self.a.time_us()))
        self.assertEqual(self.a.take("C1", s=lim, lag=LAG), (GO, 0))
        self.assertEqual(self.a.take("C1", s=lim, lag=LAG)[0], TOO_LATE)
        # a slot that passed at most the lag ago is taken at its own time: the next one is an
        # interval after it, not after now (a late ask costs no pace)
        tat = self.a.time_us() - 300000
        self.s.redis("SET", key, str(tat))
        self.assertEqual(self.a.take("C1", s=lim, lag=LAG), (GO, 0))
        self.assertEqual(int(self.s.redis("GET", key)), tat + 100000)
        # one that passed longer ago is gone: the next slot is an interval after now
        tat = self.a.time_us() - 500000
        self.s.redis("SET", key, str(tat))
        self.assertEqual(self.a.take("C1", s=lim, lag=LAG), (GO, 0))
        self.assertGreater(int(self.s.redis("GET", key)), tat + 100000 + LAG * 1000)
        # without a lag (a conversational take), a passed slot is not made up either
        tat = self.a.time_us() - 3000
        self.s.redis("SET", key, str(tat))
        self.assertEqual(self.a.take("C1", s=lim), (GO, 0))
        self.assertGreater(int(self.s.redis("GET", key)), tat + 100000 + 2000)
        # a late slot made up more than an interval ago still leaves a valid expiry
        lim_fast = (1000, 1)
        self.s.redis("SET", self.a.keys("C3")[0], str(self.a.time_us() - 350000))
        self.assertEqual(self.a.take("C3", s=lim_fast, lag=LAG), (GO, 0))
        self.assertEqual(self.a.take("C3", s=lim_fast, lag=LAG), (GO, 0))
        # and the TAT is kept for the lag past it, so that the next take, if late, finds it
        # (at 1,000/s a key kept 1 ms past its TAT was gone for a lane 1.5 ms late: its slot
        # lost, 2 % of them)
        self.assertEqual(self.a.take("C4", s=lim_fast, lag=LAG), (GO, 0))
        self.assertGreater(int(self.s.redis("PTTL", self.a.keys("C4")[0])), LAG - 100)
        # a pair's later slot is taken as without a lag (its retake comes back for the
        # sender's): it does not hold the sender's
        pair = (1000000, 1)
        self.assertEqual(self.a.take("C2", "u1", s=lim, p=pair, lag=LAG), (GO, 0))
        verdict, w5 = self.a.take("C2", "u1", s=lim, p=pair, lag=LAG)
        self.assertEqual(verdict, RETAKE)
        self.assertTrue(900 < w5 <= 1000, w5)
        self.assertEqual(self.a.take("C2", "u1", s=lim, p=pair, lag=LAG, max_wait=500)[0],
                         TOO_LATE)

    def test_pause_holds_even_without_limit(self):
        self.assertEqual(self.a.pause("C1"), 1000)
        verdict, wait = self.a.take("C1", "u1")
        self.assertEqual(verdict, WAIT)
        self.assertTrue(900 < wait <= 1000, wait)
        # too late for a short deadline
        self.assertEqual(self.a.take("C1", max_wait=100)[0], TOO_LATE)
        # the pause of a pair holds only that pair
        self.assertEqual(self.a.take("C2", "u1"), (GO, 0))
        self.assertEqual(self.a.pause("C2", "u1"), 1000)
        self.assertEqual(self.a.take("C2", "u1")[0], WAIT)
        self.assertEqual(self.a.take("C2", "u2"), (GO, 0))
        self.assertEqual(self.a.take("C2", None), (GO, 0))

    def test_pause_queues_behind_it(self):
        lim = (100000, 2)
        pause = self.a.pause("C1")
        waits = [self.a.take("C1", s=lim)[1] for _ in range(4)]
        # after the pause: the burst, then one per interval
        self.assertTrue(all(pause - 10 < w <= pause for w in waits[:2]), waits)
        self.assertTrue(pause + 90 < waits[2] <= pause + 100, waits)
        self.assertTrue(pause + 190 < waits[3] <= pause + 200, waits)

    def _end_pause(self, ch, rcpt=None):
        key = self.a.keys(ch, rcpt)[-1]
        self.s.redis("HSET", key, "until", self.a.time_us() - 1)

    def test_pause_doubles_while_repeated(self):
        seen = []
        for _ in range(9):
            seen.append(self.a.pause("C1"))
            self._end_pause("C1")
        self.assertEqual(seen, [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000])

    def test_refusals_during_a_pause_do_not_double(self):
        self.assertEqual(self.a.pause("C1"), 1000)
        left = self.b.pause("C1")  # a call sent before the pause, refused: another instance
        self.assertTrue(900 < left <= 1000, left)
        self._end_pause("C1")
        self.assertEqual(self.a.pause("C1"), 2000)

    def test_retry_after_is_used_as_given(self):
        self.assertEqual(self.a.pause("C1", retry_after_ms=5000), 5000)
        self.assertTrue(4900 < self.a.take("C1")[1] <= 5000)
        self._end_pause("C1")
        self.assertEqual(self.a.pause("C1"), 1000)  # Retry-After did not double the next one

    def test_retry_after_is_capped_at_the_longest_pause(self):
        # a Slack 429 once said Retry-After: 2147483647 (68 years)
        self.assertEqual(self.a.pause("C1", retry_after_ms=2147483647000), 60000)
        ttl = self.s.redis("PTTL", self.a.keys("C1")[-1])
        self.assertTrue(60000 < ttl <= 61000, ttl)
        self.assertTrue(59900 < self.a.take("C1")[1] <= 60000)

    def test_pause_is_announced_on_the_board(self):
        sub = harness.Redis(self.s.redis_port_of("botgate:ratepauses"))
        try:
            self.assertEqual(sub("SUBSCRIBE", "botgate:ratepauses")[0], "subscribe")
            self.assertEqual(self.a.pause("C1", "u1", retry_after_ms=3000,
                                          board="botgate:ratepauses"), 3000)
            kind, channel, msg = sub._reply()
            self.assertEqual((kind, channel), ("message", "botgate:ratepauses"))
            self.assertEqual(msg, "botgate:ratepause:{C1}:pairm:u1 3000")
        finally:
            sub.close()

    def test_pause_streak_is_forgotten(self):
        self.assertEqual(self.a.pause("C1"), 1000)
        key = self.a.keys("C1")[-1]
        ttl = self.s.redis("PTTL", key)
        self.assertTrue(2900 < ttl <= 3000, ttl)  # the pause, then 2 s to repeat in
        self.s.redis("DEL", key)
        self.assertEqual(self.a.pause("C1"), 1000)

    def test_wait_is_in_microseconds(self):
        """The wait is the slot's distance from Redis's clock to the microsecond (it was whole
        milliseconds, rounded up: 1 ms for a slot 100 us away): exactly between the clock read
        before and after the take, on one connection."""
        lim = (100500, 1)  # one every 100.5 ms
        self.assertEqual(self.a.take_us("C1", s=lim), (GO, 0))
        before = self.a.time_us()
        verdict, wait = self.a.take_us("C1", s=lim)
        after = self.a.time_us()
        slot = int(self.s.redis("GET", "botgate:rate:{C1}:sender")) - 100500
        self.assertEqual(verdict, WAIT)
        self.assertTrue(slot - after <= wait <= slot - before, (slot - after, wait, slot - before))
        # too late: how far, to the microsecond too (max wait in ms)
        verdict, wait = self.a.take_us("C1", s=lim, max_wait=100)
        self.assertEqual(verdict, TOO_LATE)
        self.assertTrue(100500 < wait <= 201000, wait)

    def test_two_instances_share_one_schedule(self):
        lim = (20000, 1)  # 50/s
        waits = []
        for i in range(20):
            lim_client = self.a if i % 2 == 0 else self.b
            verdict, wait = lim_client.take("C1", s=lim)
            waits.append(wait)
        self.assertEqual(waits[0], 0)
        self.assertEqual(sorted(waits), waits)
        self.assertEqual(len(set(waits)), len(waits), waits)  # never the same slot twice
        self.assertTrue(20 * 18 < waits[-1] <= 20 * 19, waits)

    def test_redis_clock_is_the_only_clock(self):
        # the script's arguments carry no time (ARGV[7], a broadcast's lag, is a length of
        # time; an ahead's 7 to 9 are two flags and a length): the schedule is in Redis's TIME
        self.assertNotIn("ARGV[10]", SCRIPT)
        self.assertIn("redis.call('TIME')", SCRIPT)
        before = self.a.time_us()
        self.a.take("C1", s=(1000000, 1))
        after = self.a.time_us()
        tat = int(self.s.redis("GET", "botgate:rate:{C1}:sender"))
        self.assertTrue(before + 1000000 <= tat <= after + 1000000, (before, tat, after))
        ttl = self.s.redis("PTTL", "botgate:rate:{C1}:sender")
        self.assertTrue(900 < ttl <= 1001, ttl)  # kept no longer than it matters

    def test_keys_are_in_the_channel_slot(self):
        # limits of 1/s: the TATs live a second (at 1,000/s they lived 2 ms, and a loaded
        # machine's KEYS came after)
        self.a.take("C9", "u1", s=(1000000, 1), p=(1000000, 1))
        self.a.pause("C9", "u1")
        keys = sorted(self.s.redis("KEYS", "*"))
        self.assertEqual(keys, ["botgate:rate:{C9}:pairm:u1", "botgate:rate:{C9}:sender",
                                "botgate:ratepause:{C9}:pairm:u1"])


class CtlRateLimitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = harness.Stack(start_gateway=False)

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.s.cleanup_dir()

    def put(self, rate_limit):
        ch = harness.cloud_channel("RL1", "A", rateLimit=rate_limit)
        return self.s.ctl("channel", "put", "-", input=json.dumps(ch), check=False)

    def test_valid_override_is_stored(self):
        r = self.put({"perSecond": 50, "burst": 5, "perRecipient": {"everyMs": 6000, "burst": 45}})
        self.assertEqual(r.returncode, 0, r.stderr)
        stored = json.loads(self.s.redis("GET", "botgate:channel:{RL1}"))
        self.assertEqual(stored["rateLimit"]["perSecond"], 50)

    def test_operations_doc_example_is_accepted(self):
        with open(os.path.join(os.path.dirname(__file__), "../../docs/operations.md")) as f:
            doc = f.read()
        section = doc.split("## Platform rate limits", 1)[1].split("\n## ", 1)[0]
        example = re.search(r"```json\n(.*?)```", section, re.S).group(1)
        ch = json.loads(example)
        ch["_id"] = "RLDOC"
        r = self.s.ctl("channel", "put", "-", input=json.dumps(ch), check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        for msg in re.findall(r"`(rateLimit\.[^`]+)`", section):
            bad = {"perSecond": -1} if "perSecond must" in msg else {"persecond": 5}
            self.assertIn(msg, self.put(bad).stderr)

    def test_invalid_override_is_refused(self):
        self.s.redis("DEL", "botgate:channel:{RL1}")
        for bad, msg in [({"perSecond": -1}, "rateLimit.perSecond must be an integer"),
                         ({"perSecond": "80"}, "rateLimit.perSecond must be an integer"),
                         ({"burst": 0}, "rateLimit.burst must be an integer"),
                         ({"perRecipient": {"everyMs": 1.5}}, "rateLimit.perRecipient.everyMs"),
                         ({"perMinute": 3}, "rateLimit.perMinute: unknown field"),
                         ("fast", "rateLimit must be an object")]:
            r = self.put(bad)
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertIn(msg, r.stderr)
            self.assertIsNone(self.s.redis("GET", "botgate:channel:{RL1}"), bad)


if __name__ == "__main__":
    unittest.main()
