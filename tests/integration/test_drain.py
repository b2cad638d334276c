"""SIGTERM under load: every request botgate accepted is answered, new ones are not accepted,
/readyz turns 503 while draining, and the process exits 0."""
import http.client
import json
import os
import socket
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from harness import Stack, facebook_channel, member, wait_for, http as http_call


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

    def test_call_on_the_wire_completes_after_the_drain_time(self):
        """A message call already on the wire is not cut by the drain time: it completes and its
        request is answered as usual; the process still exits within drain + upstream timeout."""
        s = Stack(workers=1, env={"BOTGATE_DRAIN_TIMEOUT_MS": "300",
                                  "BOTGATE_REQUEST_TIMEOUT_MS": "8000",
                                  "BOTGATE_UPSTREAM_TIMEOUT_MS": "4000"})
        try:
            s.put("channel", facebook_channel("fe", "A"))
            s.put("member", member("me", "fe", "A", "psid-slow1500"))
            tok = s.token("A", "bot:sendResponses")
            body = {"channelId": "fe", "memberId": "me", "response": [{"type": "TEXT", "text": "x"}]}
            with ThreadPoolExecutor(max_workers=5) as pool:
                futures = [pool.submit(s.send, body, tok) for _ in range(5)]
                time.sleep(0.3)
                t0 = time.time()
                p = s.procs["botgate"]
                p.send_signal(15)
                answers = [f.result() for f in futures]
                self.assertEqual(p.wait(10), 0)
                took = time.time() - t0
            s.procs.pop("botgate")
            for a in answers:
                self.assertEqual(a.status, 200, a)
                self.assertEqual(a.json["sendResult"]["ok"], 1, a)
            self.assertEqual(len(s.sim_log()), 5)
            # the calls ended 1.2 s after the signal; the bound is 0.3 + 4 s (+ the flush)
            self.assertGreater(took, 1.0)
            self.assertLess(took, 4.3 + 0.5)
        finally:
            s.close()
            s.cleanup_dir()


def texts_seen(s):
    """The message texts the simulator received, in order of arrival."""
    return [(r.get("body") or {}).get("message", {}).get("text") for r in s.sim_log()]


class DrainCut(unittest.TestCase):
    """The drain time runs out in the middle of a request of three responses whose second call
    the simulator holds for 1.5 s."""

    def setUp(self):
        self.s = Stack(workers=1, env={"BOTGATE_DRAIN_TIMEOUT_MS": "300",
                                       "BOTGATE_REQUEST_TIMEOUT_MS": "8000",
                                       "BOTGATE_UPSTREAM_TIMEOUT_MS": "4000"})
        self.s.put("channel", facebook_channel("fc", "A"))
        self.s.put("member", member("mc", "fc", "A", "psid-7"))
        self.tok = self.s.token("A", "bot:sendResponses")
        self.body = {"channelId": "fc", "memberId": "mc", "response": [
            {"type": "TEXT", "text": "one"}, {"type": "TEXT", "text": "two slow1500"},
            {"type": "TEXT", "text": "three"}]}

    def tearDown(self):
        self.s.close()
        self.s.cleanup_dir()

    def start(self):
        """Sends the request and returns its future once the second call is held."""
        pool = ThreadPoolExecutor(max_workers=1)
        self.addCleanup(pool.shutdown)
        future = pool.submit(self.s.send, self.body, self.tok)
        wait_for(lambda: len(self.s.sim_log()) == 2, timeout=5, what="the second call")
        return future

    def assert_truthful_121(self, a, delivered):
        """A 121 answer: the failure body plus the normal sendResult; its message never says
        that nothing was delivered when something was."""
        self.assertEqual(a.status, 500, a)
        self.assertEqual((a.json["ok"], a.json["err_code"]), (0, 121), a)
        self.assertEqual(a.json["err"], a.json["error"])
        self.assertIn("%d of 3 responses delivered" % delivered, a.json["err"])
        self.assertNotIn("nothing", a.json["err"].lower())
        self.assertEqual(a.json["member"], "mc")
        res = a.json["sendResult"]
        self.assertEqual((res["ok"], res["member"]), (0, "mc"))
        self.assertEqual(len(res["result"]), 3)
        got = [el for el in res["result"] if "error" not in el]
        self.assertEqual(len(got), delivered, res)
        return res["result"]

    def assert_delivered(self, el, text):
        self.assertNotIn("error", el)
        self.assertTrue(el["result"]["messages"][0]["id"].startswith("m_"), el)
        self.assertEqual(el["messageEvent"]["data"], {"text": text})
        self.assertEqual(el["messageEvent"]["type"], "TEXT")
        self.assertEqual(el["messageEvent"]["messageId"], el["result"]["messages"][0]["id"])
        self.assertEqual(el["chatId"], "psid-7")

    def test_call_on_the_wire_finishes_the_rest_is_not_sent(self):
        future = self.start()
        p = self.s.procs["botgate"]
        t0 = time.time()
        p.send_signal(15)
        a = future.result()
        took = time.time() - t0
        self.assertEqual(p.wait(10), 0)
        self.s.procs.pop("botgate")
        # answered when the held call came back (1.5 s after it went out), not at the cut
        self.assertGreater(took, 0.9)
        els = self.assert_truthful_121(a, 2)
        self.assert_delivered(els[0], "one")
        self.assert_delivered(els[1], "two slow1500")
        self.assertEqual(els[2]["error"]["err_code"], 121, els[2])
        self.assertIn("not sent", els[2]["error"]["err"])
        self.assertEqual(els[2]["messageEvent"]["data"], {"text": "three"})
        self.assertNotIn("messageId", els[2]["messageEvent"])
        self.assertEqual(texts_seen(self.s), ["one", "two slow1500"])

    def test_stop_now_reports_the_call_cut_on_the_wire(self):
        # a second signal stops at once: the held call is cut, its outcome is unknown (113,
        # "may have been delivered"), the third is not sent (121); one delivered is said
        future = self.start()
        p = self.s.procs["botgate"]
        p.send_signal(15)
        time.sleep(0.5)  # past the drain time: the held call is still out
        p.send_signal(15)
        a = future.result()
        self.assertEqual(p.wait(10), 0)
        self.s.procs.pop("botgate")
        els = self.assert_truthful_121(a, 1)
        self.assert_delivered(els[0], "one")
        self.assertEqual(els[1]["error"]["err_code"], 113, els[1])
        self.assertIn("may have been delivered", els[1]["error"]["err"])
        self.assertEqual(els[1]["messageEvent"]["data"], {"text": "two slow1500"})
        self.assertEqual(els[2]["error"]["err_code"], 121, els[2])
        self.assertEqual(texts_seen(self.s), ["one", "two slow1500"])

    def test_redirect_run_cut_reports_what_ran(self):
        # the same three responses as a node's: the run stops after the call on the wire
        t = {"_id": "T1", "app": "A", "name": "t", "nodes": {"N1": {"name": "n", "response": [
            {"type": "TEXT", "text": "one"}, {"type": "TEXT", "text": "two slow1500"},
            {"type": "TEXT", "text": "three"}]}}}
        path = os.path.join(self.s.dir, "tree.json")
        with open(path, "w") as f:
            json.dump(t, f)
        self.s.ctl("tree", "import", path)
        tok = self.s.token("A", "bot:redirectMemberToNode")
        body = {"channelId": "fc", "memberId": "mc",
                "redirect": {"tree": "T1", "nodeCompositeId": "N1"}}
        pool = ThreadPoolExecutor(max_workers=1)
        self.addCleanup(pool.shutdown)
        future = pool.submit(self.s.post, "/redirectMemberToNode", body, tok)
        wait_for(lambda: len(self.s.sim_log()) == 2, timeout=5, what="the second call")
        p = self.s.procs["botgate"]
        p.send_signal(15)
        a = future.result()
        self.assertEqual(p.wait(10), 0)
        self.s.procs.pop("botgate")
        self.assertEqual(a.status, 500, a)
        self.assertEqual((a.json["ok"], a.json["err_code"]), (0, 121), a)
        self.assertIn("2 responses delivered", a.json["err"])
        self.assertNotIn("nothing", a.json["err"].lower())
        els = a.json["sendResult"]["result"]
        self.assertEqual(a.json["sendResult"]["ok"], 0)
        self.assertEqual([el["ok"] for el in els], [1, 1, 0], els)
        self.assertEqual([el["messageEvent"]["data"]["text"] for el in els[:2]],
                         ["one", "two slow1500"])
        self.assertEqual(els[2]["error"]["err_code"], 121)
        self.assertEqual(texts_seen(self.s), ["one", "two slow1500"])
        # the run did not finish: the member was not moved
        rec = json.loads(self.s.redis("GET", "botgate:member:{fc}:mc"))
        self.assertIsNone(rec["botMeta"]["nodeCompositeId"])


if __name__ == "__main__":
    unittest.main()
