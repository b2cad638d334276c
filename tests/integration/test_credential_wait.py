"""Many requests waiting for one slow login: the waiters of a worker share one wait (one
subscription to the release of the channel's credential lock, one re-read at a time, one slow
fallback timer), so a thousand of them cost Redis a handful of commands instead of a poll each
(SET NX + GET every 50 ms: some 40,000 commands a second), and all go on when the login ends."""
import asyncio
import json
import os
import sys
import threading
import time
import unittest

from harness import StackTest, wait_for

APP = "app-credwait"
N = 1000
LOGIN_MS = 5000  # the simulator answers the token call this late (slow<N> in the app id)
WINDOW_S = 1.5   # how long the commands are counted while every request waits


async def post_all(port, path, bodies, token):
    """Every body POSTed at once, each on a connection of its own: [(status, body)]."""
    async def one(body):
        data = json.dumps(body).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST %s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s"
                     % (path.encode(), token.encode(), len(data), data))
        await writer.drain()
        raw = await reader.read()
        writer.close()
        head, _, text = raw.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), text
    return await asyncio.gather(*(one(b) for b in bodies))


class WaitersShareOneWait(StackTest):
    stack_args = {"workers": 2, "env": {"BOTGATE_REQUEST_TIMEOUT_MS": "20000",
                                        "BOTGATE_UPSTREAM_TIMEOUT_MS": "10000"}}

    def info(self, section):
        """INFO section as {field: value} (one command)."""
        out = {}
        for line in self.s.redis("INFO", section).splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def evals(self):
        v = self.info("commandstats").get("cmdstat_eval", "calls=0")
        return int(v.split(",")[0].split("=")[1])

    def token_calls(self, appid):
        return self.s.sim("GET", "/_sim/stats")["token_calls"].get(appid, 0)

    def test_thousand_waiters_of_one_slow_login(self):
        cid, appid = "wx-wait", "app-wait-slow%d" % LOGIN_MS
        tok = self.s.token(APP, "bot:sendResponses")
        self.s.put("channel", {"_id": cid, "app": APP, "type": "wechat", "on": True,
                               "info": {"appId": appid, "appsecret": "s", "botOpenId": "gh",
                                        "accessToken": "expired", "accessTokenExpiry": 1000}})
        lock = "botgate:lock:{%s}:credential" % cid
        self.s.sim_reset()
        bodies = [{"channelId": cid, "recipientId": "openid-%d" % i,
                   "response": [{"type": "TEXT", "text": "t%d" % i}]} for i in range(N)]
        evals0 = self.evals()
        answers = []
        client = threading.Thread(target=lambda: answers.extend(
            asyncio.run(post_all(self.s.port, "/sendResponses", bodies, tok))))
        client.start()
        try:
            # the login is out; every request has resolved its member (one EVAL each) and waits
            wait_for(lambda: self.token_calls(appid) == 1, what="the token call")
            login_at = time.time()
            wait_for(lambda: self.evals() >= evals0 + N, timeout=LOGIN_MS / 1000.0,
                     what="every request resolved")
            time.sleep(0.2)
            before = int(self.info("stats")["total_commands_processed"])
            time.sleep(WINDOW_S)
            after = int(self.info("stats")["total_commands_processed"])
            in_wait = time.time() - login_at < LOGIN_MS / 1000.0
            # each worker waits on one subscription to the lock's release
            listeners = self.s.redis("PUBSUB", "NUMSUB", lock)[1]
        finally:
            client.join()
        commands = after - before - 1  # less our own INFO
        sys.stderr.write("\n%d commands in %.1f s while %d requests waited (%.0f/s)\n"
                         % (commands, WINDOW_S, N, commands / WINDOW_S))
        self.assertTrue(in_wait, "the requests came too slowly to count during the login")
        self.assertLess(commands, 300)
        self.assertEqual(listeners, 2)
        self.assertEqual(len(answers), N)
        bad = [a for a in answers if a[0] != 200]
        self.assertEqual(bad, [], bad[:3])
        self.assertEqual(self.token_calls(appid), 1)
        sends = [r for r in self.s.sim_log() if r["kind"] == "send"]
        info = json.loads(self.s.redis("GET", "botgate:channel:{%s}" % cid))["info"]
        self.assertEqual(len(sends), N)
        for r in sends:
            self.assertIn("access_token=" + info["accessToken"], r["query"])
        self.assertIsNone(self.s.redis("GET", lock))
        self.assertEqual(self.s.redis("PUBSUB", "NUMSUB", lock)[1], 0)  # the waits are gone


class HolderGone(StackTest):
    """The lock's holder died (its lock expires, nobody PUBLISHes) or never lets go."""
    stack_args = {"workers": 2, "env": {"BOTGATE_REQUEST_TIMEOUT_MS": "3000"}}

    def wechat(self, cid):
        self.s.put("channel", {"_id": cid, "app": APP, "type": "wechat", "on": True,
                               "info": {"appId": "app-" + cid, "appsecret": "s",
                                        "botOpenId": "gh", "accessToken": "expired",
                                        "accessTokenExpiry": 1000}})
        return "botgate:lock:{%s}:credential" % cid

    def commands(self):
        """Commands Redis ran, but the outbox's stream reads and claims, which every worker
        makes in the background whatever the requests do."""
        n = 0
        for line in self.s.redis("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_") and not line.startswith("cmdstat_x"):
                n += int(line.split("calls=")[1].split(",")[0])
        return n

    def burst(self, cid, n):
        tok = self.s.token(APP, "bot:sendResponses")
        bodies = [{"channelId": cid, "recipientId": "openid-%d" % i,
                   "response": [{"type": "TEXT", "text": "t%d" % i}]} for i in range(n)]
        return asyncio.run(post_all(self.s.port, "/sendResponses", bodies, tok))

    def test_expired_lock_of_a_dead_refresher_is_taken_by_the_fallback(self):
        lock = self.wechat("wx-dead")
        self.s.redis("SET", lock, "a-dead-refresher", "PX", "800")
        self.s.sim_reset()
        t0, c0 = time.time(), self.commands()
        answers = self.burst("wx-dead", 20)
        self.assertEqual([a[0] for a in answers], [200] * 20, answers[:2])
        self.assertGreater(time.time() - t0, 0.7)  # they did wait for the lock
        # 20 requests cost about 7 each; a poll each would add 40 a second (over 600)
        n = self.commands() - c0
        sys.stderr.write("\n%d commands for 20 requests waiting for an expiring lock\n" % n)
        self.assertLess(n, 250)
        stats = self.s.sim("GET", "/_sim/stats")
        self.assertEqual(stats["token_calls"].get("app-wx-dead"), 1)

    def test_waiters_at_their_deadline_leave_the_wait(self):
        lock = self.wechat("wx-stuck")
        self.s.redis("SET", lock, "a-stuck-refresher", "PX", "60000")
        try:
            c0 = self.commands()
            answers = self.burst("wx-stuck", 10)
            # 3 s of waiting: a few per worker a second, not 40 per request a second (1,200)
            n = self.commands() - c0
            sys.stderr.write("\n%d commands for 10 requests waiting 3 s\n" % n)
            self.assertLess(n, 150)
            # the first response's element fails with 113 at the deadline
            self.assertEqual([a[0] for a in answers], [200] * 10, answers[:1])
            for _, text in answers:
                element = json.loads(text)["sendResult"]["result"][0]
                self.assertEqual(element["error"]["err_code"], 113, text)
            # the group unsubscribes as its last waiter is freed, just after that waiter's
            # answer was written: the UNSUBSCRIBE can reach Redis a moment after the answer
            # reached the client, so look again for a bounded while
            deadline = time.time() + 2.0
            while self.s.redis("PUBSUB", "NUMSUB", lock)[1] != 0 and time.time() < deadline:
                time.sleep(0.02)
            self.assertEqual(self.s.redis("PUBSUB", "NUMSUB", lock)[1], 0)
        finally:
            self.s.redis("DEL", lock)

    def test_a_lone_waiter_waits_quietly(self):
        # One waiter in its worker: each time it tries the stuck lock and finds it held, it
        # goes back to a wait that still stands, not to a new subscription whose confirmation
        # would send it to look again at once (a loop of GET, SET NX, UNSUBSCRIBE, SUBSCRIBE
        # until its deadline: tens of thousands of commands).
        lock = self.wechat("wx-lone")
        self.s.redis("SET", lock, "a-stuck-refresher", "PX", "60000")
        try:
            c0 = self.commands()
            answers = self.burst("wx-lone", 1)
            n = self.commands() - c0
            sys.stderr.write("\n%d commands for 1 request waiting 3 s\n" % n)
            # the member, the channel, the lock, then a look and a try per fallback second
            self.assertLess(n, 30)
            self.assertEqual(answers[0][0], 200, answers)
            element = json.loads(answers[0][1])["sendResult"]["result"][0]
            self.assertEqual(element["error"]["err_code"], 113, answers)
        finally:
            self.s.redis("DEL", lock)


if __name__ == "__main__":
    unittest.main()
