"""The worker cache of tokens and channels: hits save Redis round trips; a revoked token, a
channel switched off or moved to another app take effect within BOTGATE_CACHE_TTL_MS; with 0
they take effect at once. Token and channel reads in flight at once share one GET (only while
the cache is on)."""
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from harness import StackTest, facebook_channel, tenant


def burst(s, body, tok, n, redis_sleep="1"):
    """The answers to n sends that arrive while Redis is busy (DEBUG SLEEP redis_sleep), so
    that all their reads are in flight at once."""
    sleeper = threading.Thread(target=lambda: s.redis("DEBUG", "SLEEP", redis_sleep))
    sleeper.start()
    time.sleep(0.1)
    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(lambda _: s.send(body, tok, timeout=20), range(n)))
    sleeper.join()
    return answers


def burst_commands(s, body, tok, n=20):
    """Redis commands botgate sends for a burst (above) of n sends; every answer must be a
    success."""
    before = s.metric("botgate_redis_commands_total")
    for a in burst(s, body, tok, n):
        assert a.status == 200 and a.json["sendResult"]["ok"] == 1, a
    return s.metric("botgate_redis_commands_total") - before


class Cached(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_CACHE_TTL_MS": "700",
                                        "BOTGATE_REDIS_TIMEOUT_MS": "3000"}}

    def test_reads_in_flight_at_once_share_one_get(self):
        s = self.s
        tok, body = tenant(s, "fb-burst", "m-burst", "psid-3")
        self.assertEqual(s.send(body, tok).status, 200)
        time.sleep(0.8)  # the cache is cold again
        # a GET of the member each (never shared: a send must see the member as written),
        # one of the token and one of the channel for all twenty; and each send's slot of the
        # shared rate limits (facebook: 250/s per page), which no cache can answer
        self.assertEqual(burst_commands(s, body, tok), 20 + 2 + 20)

    def test_hits_save_round_trips_and_changes_arrive_within_the_ttl(self):
        s = self.s
        tok, body = tenant(s, "fk", "mk", "psid-1")
        self.assertEqual(s.send(body, tok).status, 200)
        before = s.metric("botgate_redis_commands_total")
        for _ in range(10):
            self.assertEqual(s.send(body, tok).status, 200)
        # only the member, every time, and the send's rate-limit slot
        self.assertEqual(s.metric("botgate_redis_commands_total") - before, 10 + 10)
        # the channel is switched off and the token revoked: within the TTL, then refused
        s.put("channel", facebook_channel("fk", "A", on=False))
        time.sleep(0.8)
        a = s.send(body, tok)
        self.assertEqual((a.status, a.json.get("err_code")), (500, 116), a)
        s.ctl("token", "revoke", tok)
        time.sleep(0.8)
        a = s.send(body, tok)
        self.assertEqual(a.json, {"ok": 0, "err": "User is not authorized",
                                  "error": "User is not authorized"})

    def test_channel_moved_to_another_app(self):
        s = self.s
        tok, body = tenant(s, "fm2", "mm2", "psid-2")
        self.assertEqual(s.send(body, tok).status, 200)
        s.put("channel", facebook_channel("fm2", "B"))
        time.sleep(0.8)
        a = s.send(body, tok)
        self.assertEqual((a.status, a.json.get("err_code")), (500, 112), a)

    def test_rate_limit_change_arrives(self):
        # A worker reads a channel's rate limits once per cached record: a changed record (a
        # new object in the cache) brings its new limits.
        s = self.s
        tok, body = tenant(s, "fr", "mr", "psid-5")
        s.put("channel", facebook_channel("fr", "A", rateLimit={
            "perRecipient": {"everyMs": 86400000, "burst": 1}}))
        time.sleep(0.8)
        self.assertEqual(s.send(body, tok).json["sendResult"]["ok"], 1)
        a = s.send(body, tok)  # the member's next slot is a day away
        self.assertEqual(a.json["sendResult"]["result"][0]["error"]["err_code"], 120, a)
        s.put("channel", facebook_channel("fr", "A", rateLimit={"perRecipient": {"everyMs": 0}}))
        time.sleep(0.8)
        self.assertEqual(s.send(body, tok).json["sendResult"]["ok"], 1)


class DeadlineWhileShared(StackTest):
    """Requests whose deadline passes while they wait on one shared read: each is answered,
    the read finishes without them, and nothing is left behind (ASan watches in make test)."""
    stack_args = {"workers": 1, "env": {"BOTGATE_CACHE_TTL_MS": "700",
                                        "BOTGATE_REDIS_TIMEOUT_MS": "3000",
                                        "BOTGATE_REQUEST_TIMEOUT_MS": "800"}}

    def test_cancelled_readers_and_their_leader(self):
        s = self.s
        tok, body = tenant(s, "fd-burst", "md-burst", "psid-5")
        for a in burst(s, body, tok, 10, redis_sleep="1.6"):  # the store did not answer in time
            self.assertEqual((a.status, a.json.get("err_code")), (500, 119), a)
        time.sleep(0.3)
        a = s.send(body, tok)
        self.assertEqual((a.status, a.json["sendResult"]["ok"]), (200, 1), a)


class Uncached(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_CACHE_TTL_MS": "0",
                                        "BOTGATE_REDIS_TIMEOUT_MS": "3000"}}

    def test_changes_take_effect_at_once(self):
        s = self.s
        tok, body = tenant(s, "fu", "mu", "psid-1")
        self.assertEqual(s.send(body, tok).status, 200)
        before = s.metric("botgate_redis_commands_total")
        self.assertEqual(s.send(body, tok).status, 200)
        # token, channel, member, and the rate-limit slot
        self.assertEqual(s.metric("botgate_redis_commands_total") - before, 3 + 1)
        s.ctl("token", "revoke", tok)
        a = s.send(body, tok)
        self.assertEqual(a.json["err"], "User is not authorized")

    def test_reads_in_flight_at_once_each_send_their_own(self):
        s = self.s
        tok, body = tenant(s, "fu-burst", "mu-burst", "psid-4")
        self.assertEqual(burst_commands(s, body, tok), 20 * 3 + 20)  # + the rate-limit slots


if __name__ == "__main__":
    unittest.main()
