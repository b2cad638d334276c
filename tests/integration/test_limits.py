"""Inbound limits: slowloris clients and idle-connection floods cannot hold the connection
slots; the connection cap pauses accepting and resumes; header and body limits; the cap on
Redis commands in flight answers 119 (the store is busy); hostile bodies never crash the process."""
import socket
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from harness import StackTest, facebook_channel, member, http


class InboundLimits(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_HTTP_TIMEOUT_S": "2",
                                        "BOTGATE_MAX_CONNECTIONS": "40"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s.put("channel", facebook_channel("fl", "A"))
        cls.s.put("member", member("ml", "fl", "A", "psid-1"))
        cls.tok = cls.s.token("A", "bot:sendResponses")
        cls.body = {"channelId": "fl", "memberId": "ml", "response": [{"type": "TEXT", "text": "x"}]}

    def test_slowloris_is_cut_off(self):
        c = socket.create_connection(("127.0.0.1", self.s.port))
        c.sendall(b"POST /sendResponses HTTP/1.1\r\nHost: x\r\n")
        t0, closed = time.time(), False
        try:
            while time.time() - t0 < 8:
                c.sendall(b"X-Slow: a\r\n")  # a header line every 0.3 s: evhttp never times out
                time.sleep(0.3)
                # meanwhile the server answers others
                self.assertEqual(self.s.send(self.body, self.tok, timeout=5).status, 200)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        took = time.time() - t0
        c.close()
        self.assertTrue(closed, "the trickling connection was never closed")
        self.assertLess(took, 2 + 1 + 1.5)  # the HTTP timeout, the sweep period, slack

    def test_idle_flood_does_not_lock_out_clients(self):
        idle = [socket.create_connection(("127.0.0.1", self.s.port)) for _ in range(120)]
        try:
            time.sleep(0.3)
            self.assertLessEqual(self.s.metric("botgate_connections_open"), 40)
            t0 = time.time()
            a = self.s.send(self.body, self.tok, timeout=10)
            self.assertEqual(a.status, 200, a)
            self.assertLess(time.time() - t0, 2 + 1 + 2)
            self.assertGreater(self.s.metric("botgate_accept_pauses_total"), 0)
        finally:
            for c in idle:
                c.close()
        time.sleep(1.5)
        self.assertLessEqual(self.s.metric("botgate_connections_open"), 1)

    def test_oversized_headers(self):
        c = socket.create_connection(("127.0.0.1", self.s.port), timeout=5)
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
        try:
            data = c.recv(65536)
        except ConnectionResetError:
            data = b""
        c.close()
        self.assertFalse(data.startswith(b"HTTP/1.1 200"), data[:100])
        self.assertEqual(http("GET", self.s.url + "/healthz").status, 200)

    def test_bodies_over_the_limits(self):
        a = self.s.send(b'{"channelId":"' + b"a" * (1024 * 1024) + b'"}', self.tok)
        self.assertEqual(a.status, 413)
        self.assertEqual(a.json["err_code"], 118)
        a = self.s.send(b"x" * (9 * 1024 * 1024), self.tok)  # over evhttp's own cap
        self.assertEqual(a.status, 413)
        self.assertEqual(http("GET", self.s.url + "/healthz").status, 200)

    def test_hostile_bodies(self):
        for raw in [b"[" * 100000, b'{"a":' * 50000, b"\x00" * 1000, b'{"channelId":"\\ud800"}',
                    b'{"channelId":"fl","memberId":"ml","response":[' + b'{"type":"TEXT","text":"x"},' * 49
                    + b'{"type":"TEXT","text":"' + "é".encode() * 40000 + b'"}]}']:
            with self.subTest(raw=raw[:20]):
                a = self.s.send(raw, self.tok)
                self.assertEqual(a.status, 500, a)
                self.assertIn(a.json["err_code"], (108, 118))
        self.assertEqual(http("GET", self.s.url + "/healthz").status, 200)


class RedisInFlightCap(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_REDIS_MAX_IN_FLIGHT": "3"}}

    def test_cap_answers_119_and_nothing_breaks(self):
        s = self.s
        s.put("channel", facebook_channel("fc", "A"))
        s.put("member", member("mc", "fc", "A", "psid-slow200"))
        tok = s.token("A", "bot:sendResponses")
        body = {"channelId": "fc", "memberId": "mc", "response": [{"type": "TEXT", "text": "x"}]}
        with ThreadPoolExecutor(max_workers=30) as pool:
            answers = list(pool.map(lambda _: s.send(body, tok), range(30)))
        codes = {(a.status, (a.json or {}).get("err_code")) for a in answers}
        self.assertTrue(codes <= {(200, None), (500, 119)}, codes)
        self.assertIn((500, 119), codes)
        self.assertIn((200, None), codes)
        busy = [a for a in answers if a.status == 500]
        self.assertIn("in flight", busy[0].json["err"])
        self.assertEqual(s.send(body, tok).status, 200)


if __name__ == "__main__":
    unittest.main()
