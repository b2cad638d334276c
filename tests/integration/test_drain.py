"""SIGTERM under load: every request botgate accepted is answered, new ones are not accepted,
/readyz turns 503 while draining, and the process exits 0."""
import http.client
import socket
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from harness import Stack, facebook_channel, member, http as http_call


def http_get(url, timeout):
    return http_call("GET", url, timeout=timeout)


class Drain(unittest.TestCase):
    def test_sigterm_under_load_answers_everything(self):
        s = Stack(workers=2, env={"BOTGATE_DRAIN_TIMEOUT_MS": "8000"})
        try:
            s.put("channel", facebook_channel("fd", "A"))
            s.put("member", member("md", "fd", "A", "psid-slow600"))  # the simulator waits 600 ms
            tok = s.token("A", "bot:sendResponses")
            body = {"channelId": "fd", "memberId": "md", "response": [{"type": "TEXT", "text": "x"}]}
            # a keep-alive connection opened before the signal: a load balancer's view
            probe = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
            probe.request("GET", "/readyz")
            self.assertEqual(probe.getresponse().read(), b'{"ok":1}')
            with ThreadPoolExecutor(max_workers=40) as pool:
                futures = [pool.submit(s.send, body, tok) for _ in range(40)]
                time.sleep(0.3)  # all 40 are in flight, waiting for the simulator
                p = s.procs["botgate"]
                p.send_signal(15)
                time.sleep(0.1)
                probe.request("GET", "/readyz")
                r = probe.getresponse()
                self.assertEqual(r.status, 503)
                r.read()
                # the listening socket is closed: a new connection is refused at once (which a
                # load balancer retries elsewhere), not left waiting in an accept queue
                t0 = time.time()
                with self.assertRaises(ConnectionRefusedError):
                    socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
                self.assertLess(time.time() - t0, 0.5)
                answers = [f.result() for f in futures]
            self.assertEqual([a.status for a in answers], [200] * 40)
            self.assertEqual(p.wait(15), 0)
            s.procs.pop("botgate")
            # nobody listens any more
            with self.assertRaises(OSError):
                http_get(s.url + "/healthz", timeout=1)
            self.assertEqual(len(s.sim_log()), 40)
        finally:
            s.close()
            s.cleanup_dir()

    def test_drain_delay_keeps_accepting_while_readyz_says_no(self):
        s = Stack(workers=1, env={"BOTGATE_DRAIN_DELAY_MS": "1500"})
        try:
            s.put("channel", facebook_channel("fg", "A"))
            s.put("member", member("mg", "fg", "A", "psid-1"))
            tok = s.token("A", "bot:sendResponses")
            body = {"channelId": "fg", "memberId": "mg", "response": [{"type": "TEXT", "text": "x"}]}
            p = s.procs["botgate"]
            p.send_signal(15)
            time.sleep(0.2)
            # new connections are still served during the delay, and readiness says no
            a = http_get(s.url + "/readyz", timeout=2)
            self.assertEqual((a.status, a.json["err_code"]), (503, 121))
            a = s.send(body, tok)
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.headers.get("Connection"), "close")
            time.sleep(1.6)
            with self.assertRaises(OSError):
                http_get(s.url + "/healthz", timeout=1)
            self.assertEqual(p.wait(10), 0)
            s.procs.pop("botgate")
        finally:
            s.close()
            s.cleanup_dir()

    def test_drain_time_over_answers_with_an_error(self):
        s = Stack(workers=1, env={"BOTGATE_DRAIN_TIMEOUT_MS": "300",
                                  "BOTGATE_REQUEST_TIMEOUT_MS": "8000",
                                  "BOTGATE_UPSTREAM_TIMEOUT_MS": "7000"})
        try:
            s.put("channel", facebook_channel("fe", "A"))
            s.put("member", member("me", "fe", "A", "psid-slow3000"))
            tok = s.token("A", "bot:sendResponses")
            body = {"channelId": "fe", "memberId": "me", "response": [{"type": "TEXT", "text": "x"}]}
            with ThreadPoolExecutor(max_workers=5) as pool:
                futures = [pool.submit(s.send, body, tok) for _ in range(5)]
                time.sleep(0.3)
                t0 = time.time()
                s.procs["botgate"].send_signal(15)
                answers = [f.result() for f in futures]
                took = time.time() - t0
            self.assertLess(took, 2.0)
            for a in answers:
                self.assertEqual(a.status, 500, a)
                self.assertEqual(a.json["ok"], 0)
                self.assertEqual(a.json["err_code"], 121)
                self.assertIn("shutting down", a.json["err"])
            self.assertEqual(s.procs["botgate"].wait(10), 0)
            s.procs.pop("botgate")
        finally:
            s.close()
            s.cleanup_dir()


if __name__ == "__main__":
    unittest.main()
