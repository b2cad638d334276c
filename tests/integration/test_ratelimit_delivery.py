#!/usr/bin/env python3
"""The shared rate limits wired into delivery (contract.md section 8): three botgate processes
on one Redis against the simulator, which enforces the platform's limits and records the
arrival time of every send (ts_us, its own clock).

- A whatsapp-cloud number limited to 50/s: 1,500 sends to 300 members from 64 client
  connections spread over the three instances all succeed, the simulator refuses none, and
  they arrive at 95-100 % of 50/s with no one-second window above 50 + burst.
- One member sent 60 messages at once: 45 go at once (the pair's burst), the next 6 s later,
  the rest fail at once with 120 and retryAfterMs (their slot is past the deadline).
- The limiter off for a number the simulator limits: its first 130429 pauses the number for
  all three instances within 100 ms, and nothing more reaches the platform until the pause ends.
"""
import collections
import http.client
import json
import os
import queue
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import StackTest, cloud_channel, free_port, http as http_call  # noqa: E402
from test_sim_limits import max_in_window  # noqa: E402

APP = "RL"
REQUEST_TIMEOUT_MS = 8000
UPSTREAM_TIMEOUT_MS = 1000  # a slot may be waited for up to about 7 s
# botgate sends at burst 1; the simulator allows 200 ms of jitter (a loaded 2-core machine can
# hold a worker off its CPU that long, and it then sends what queued meanwhile at once)
RATE, SIM_BURST = 50, 10
N_SENDS, N_MEMBERS, N_CLIENTS = 1500, 300, 64
PAIR_BURST, PAIR_EVERY_MS = 45, 6000

NUM_RATE, NUM_PAIR, NUM_OFF, NUM_131056 = "1055550050", "1055550045", "1055550099", "1055550056"


def body(cid, rcpt, text):
    return {"channelId": cid, "recipientId": rcpt, "response": [{"type": "TEXT", "text": text}]}


class Client:
    """One kept-alive client connection to one instance."""

    def __init__(self, url, tok):
        host, port = url.rsplit("/", 1)[1].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.tok = tok

    def send(self, b):
        self.conn.request("POST", "/sendResponses", json.dumps(b),
                          {"Authorization": "Bearer " + self.tok,
                           "Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, json.loads(r.read())

    def close(self):
        self.conn.close()


class RateLimitDelivery(StackTest):
    stack_args = {"workers": 2, "env": {"BOTGATE_REQUEST_TIMEOUT_MS": str(REQUEST_TIMEOUT_MS),
                                        "BOTGATE_UPSTREAM_TIMEOUT_MS": str(UPSTREAM_TIMEOUT_MS),
                                        "BOTGATE_LOG_LEVEL": "info"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.urls = [s.url]
        url, log = s.url, s.log_path
        for name in ("botgate2", "botgate3"):
            s.start_gateway(port=free_port(), name=name)
            cls.urls.append(s.url)
        s.url, s.log_path = url, log
        s.put("channel", cloud_channel("wc-rate", APP, rateLimit={"perSecond": RATE},
                                       info={"accessToken": "cloud-token-rate",
                                             "phoneNumberId": NUM_RATE, "wabaId": "2000"}))
        s.put("channel", cloud_channel("wc-pair", APP,
                                       info={"accessToken": "cloud-token-pair",
                                             "phoneNumberId": NUM_PAIR, "wabaId": "2000"}))
        # the limiter off for the number (the pair's default stays): only pauses hold it back
        s.put("channel", cloud_channel("wc-off", APP, rateLimit={"perSecond": 0},
                                       info={"accessToken": "cloud-token-off",
                                             "phoneNumberId": NUM_OFF, "wabaId": "2000"}))
        # no limits of its own: a pair refusal (131056) pauses that pair, not the number
        s.put("channel", cloud_channel("wc-131056", APP,
                                       rateLimit={"perSecond": 0, "perRecipient": {"everyMs": 0}},
                                       info={"accessToken": "cloud-token-131056",
                                             "phoneNumberId": NUM_131056, "wabaId": "2000"}))
        cls.tok = s.token(APP, "bot:sendResponses")
        pair = {"everyMs": PAIR_EVERY_MS - 100, "burst": PAIR_BURST}
        r = http_call("POST", s.sim_url + "/_sim/limits", {"rules": [
            {"platform": "whatsapp-cloud", "sender": NUM_RATE, "perSecond": RATE,
             "burst": SIM_BURST, "perRecipient": pair},
            {"platform": "whatsapp-cloud", "sender": NUM_PAIR, "perRecipient": pair},
            {"platform": "whatsapp-cloud", "sender": NUM_OFF, "perSecond": 5, "burst": 1},
            {"platform": "whatsapp-cloud", "sender": NUM_131056,
             "perRecipient": {"everyMs": 60000, "burst": 1}}]})
        assert r.status == 200, r

    def arrivals(self, number):
        """The simulator's record of the message calls from number, in arrival order."""
        out, since = [], 0
        while True:
            page = self.s.sim("GET", "/_sim/log?since=%d" % since)
            out += [e for e in page["requests"]
                    if e["kind"] == "messages" and "/%s/" % number in (e["path"] or "")]
            if not page["requests"]:
                return sorted(out, key=lambda e: e["ts_us"])
            since = page["next"]

    def metric(self, url, series):
        for line in http_call("GET", url + "/metrics").raw.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[1])
        return 0.0

    def pair_burst(self, out):
        """60 messages at once to one member, 20 through each instance."""
        answers = [None] * 60

        def one(i):
            c = Client(self.urls[i % 3], self.tok)
            t0 = time.monotonic()
            answers[i] = c.send(body("wc-pair", "u-burst", "burst %d" % i)) + (
                time.monotonic() - t0,)
            c.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(60)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.extend(answers)

    def test_1_three_instances_hold_one_limit(self):
        work = queue.Queue()
        for i in range(N_SENDS):
            work.put(body("wc-rate", "m%03d" % (i % N_MEMBERS), "send %d" % i))
        answers, lock = [], threading.Lock()

        def client(n):
            c = Client(self.urls[n % 3], self.tok)
            try:
                while True:
                    try:
                        b = work.get_nowait()
                    except queue.Empty:
                        return
                    got = c.send(b)
                    with lock:
                        answers.append(got)
            finally:
                c.close()

        # the pair test runs meanwhile, on its own number: it needs 6 s of the 30
        burst = []
        pair = threading.Thread(target=self.pair_burst, args=(burst,))
        threads = [threading.Thread(target=client, args=(n,)) for n in range(N_CLIENTS)]
        for t in threads:
            t.start()
        pair.start()
        for t in threads + [pair]:
            t.join()

        # every send succeeded, the simulator refused none
        self.assertEqual(len(answers), N_SENDS)
        bad = [a for a in answers if a[0] != 200 or a[1]["sendResult"]["ok"] != 1]
        self.assertEqual(bad[:3], [])
        calls = self.arrivals(NUM_RATE)
        # A message the simulator refused for its limit was not accepted: botgate pauses the
        # number and sends it once more (deliver.c, rate_pause), so it arrives twice, the first
        # time refused. The guarantee is on what the platform accepted: each send exactly once.
        # The one cluster run that counted 1,515 calls for 1,500 sends was such refusals, not a
        # message delivered twice (an instance stopped 3 x 1.5 s: 1,597 calls, 97 refused, none
        # accepted twice).
        got = [e for e in calls if e["limit"] is None]
        refused = [e for e in calls if e["limit"] is not None]
        texts = collections.Counter(json.dumps(e.get("body"), sort_keys=True) for e in got)
        dups = [(t, n) for t, n in texts.items() if n > 1]
        if dups or len(got) != N_SENDS:  # what botgate said
            sys.stderr.write("\n%d messages accepted more than once: %r\n" % (len(dups), dups[:5]))
            with open(self.s.log_path) as f:
                sys.stderr.write("".join(l for l in f if '"warn"' in l or '"error"' in l)[-3000:])
        self.assertEqual(dups[:3], [])
        self.assertEqual(len(got), N_SENDS)
        # botgate holds the limit: the platform refuses nothing, but for a worker held off its
        # CPU longer than the simulator's 200 ms of jitter, which sends the slots that came due
        # meanwhile at once (a loaded 2-core machine: 1 % at most)
        if refused:
            sys.stderr.write("\n%d calls refused by the simulator's limit, sent again after "
                             "the pause\n" % len(refused))
        self.assertLessEqual(len(refused), N_SENDS // 100, refused[:3])
        # at 95-100 % of the limit, measured by the simulator's clock
        ts = [e["ts_us"] for e in got]
        rate = (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e6)
        sys.stderr.write("\n%d sends at %.2f/s (limit %d/s), busiest second %d\n"
                         % (len(ts), rate, RATE, max_in_window(ts)))
        self.assertGreaterEqual(rate, 0.95 * RATE)
        self.assertLessEqual(rate, RATE * 1.005)  # 0.5 %: the arrival times' own jitter
        self.assertLessEqual(max_in_window(ts), RATE + SIM_BURST)
        # every instance took part, and waited for its slots
        for url in self.urls:
            self.assertGreater(self.metric(
                url, 'botgate_rate_limit_wait_seconds_sum{platform="whatsapp-cloud"}'), 1.0, url)

        self.check_pair_burst(burst)

    def check_pair_burst(self, answers):
        ok = [a for a in answers if a[0] == 200 and a[1]["sendResult"]["ok"] == 1]
        refused = [a for a in answers if a not in ok]
        # 45 at once, one 6 s later; the next would be 12 s away, past the deadline
        self.assertEqual(len(ok), PAIR_BURST + 1, answers[:2])
        for status, ans, took in refused:
            self.assertEqual(status, 200, ans)
            err = ans["sendResult"]["result"][0]["error"]
            self.assertEqual(err["err_code"], 120, ans)
            self.assertGreater(err["retryAfterMs"], PAIR_EVERY_MS, ans)
            self.assertLessEqual(err["retryAfterMs"], 2 * PAIR_EVERY_MS, ans)
            self.assertLess(took, 3.0, ans)  # refused at once, not at the deadline
        got = self.arrivals(NUM_PAIR)
        self.assertEqual(len(got), PAIR_BURST + 1)
        self.assertEqual([e for e in got if e["limit"] is not None], [])
        ts = [e["ts_us"] for e in got]
        self.assertLess(ts[PAIR_BURST - 1] - ts[0], 1000000)  # the burst: at once
        gap = ts[PAIR_BURST] - ts[0]
        self.assertGreaterEqual(gap, (PAIR_EVERY_MS - 100) * 1000)
        self.assertLess(gap, (PAIR_EVERY_MS + 1000) * 1000)
        refused_total = sum(self.metric(u, 'botgate_rate_limit_refused_total'
                                           '{platform="whatsapp-cloud"}') for u in self.urls)
        self.assertEqual(refused_total, len(refused))

    def test_2_a_platform_refusal_pauses_every_instance(self):
        waited = 'botgate_rate_limit_wait_seconds_sum{platform="whatsapp-cloud"}'
        limited = 'botgate_platform_rate_limited_total{platform="whatsapp-cloud"}'
        before = [self.metric(u, waited) for u in self.urls]
        answered_before = sum(self.metric(u, limited) for u in self.urls)
        stop = time.monotonic() + 2.5
        answers, lock = [], threading.Lock()

        def client(n):
            c = Client(self.urls[n % 3], self.tok)
            i = 0
            try:
                while time.monotonic() < stop:
                    got = c.send(body("wc-off", "o%d-%d" % (n, i), "off %d" % i))
                    i += 1
                    with lock:
                        answers.append(got)
            finally:
                c.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        got = self.arrivals(NUM_OFF)
        refusals = [e for e in got if e["limit"] is not None]
        self.assertTrue(refusals, "the simulator's limit must refuse the unlimited sends")
        first = refusals[0]["ts_us"]
        # 100 ms after the first refusal every instance holds back until the 1 s pause ends
        during = [e for e in got if first + 100000 < e["ts_us"] < first + 950000]
        self.assertEqual(during, [])
        sys.stderr.write("\n%d sends, %d refused by the simulator, %d answers\n"
                         % (len(got), len(refusals), len(answers)))
        # the refusals stop: at most the calls already out when the first came (one a client),
        # where without the pause each client would be refused at every send
        self.assertLessEqual(len([e for e in refusals if e["ts_us"] <= first + 100000]), 6)
        for url, b in zip(self.urls, before):  # each instance waited for the pause
            self.assertGreater(self.metric(url, waited) - b, 0.5, url)
        answered = sum(self.metric(u, limited) for u in self.urls) - answered_before
        self.assertEqual(answered, len(refusals))
        # what could not wait says so, with when to try again
        for status, ans in answers:
            self.assertEqual(status, 200, ans)
            el = ans["sendResult"]["result"][0]
            if "error" in el:
                self.assertEqual(el["error"]["err_code"], 120, ans)
                self.assertGreater(el["error"]["retryAfterMs"], 0, ans)

    def test_3_a_pair_refusal_pauses_the_pair_only(self):
        c = Client(self.urls[0], self.tok)
        try:
            self.assertEqual(c.send(body("wc-131056", "p1", "first"))[1]["sendResult"]["ok"], 1)
            t0 = time.monotonic()
            status, ans = c.send(body("wc-131056", "p1", "second"))  # 131056, 1 s, again
            took = time.monotonic() - t0
            t0 = time.monotonic()
            other = c.send(body("wc-131056", "p2", "another member"))
            other_took = time.monotonic() - t0
        finally:
            c.close()
        err = ans["sendResult"]["result"][0]["error"]
        self.assertEqual((status, err["err_code"]), (200, 120), ans)
        self.assertIn("131056", err["err"])
        self.assertGreater(err["retryAfterMs"], 0, ans)
        self.assertGreater(took, 0.9)  # it waited for the pair's pause before its one retry
        got = [e for e in self.arrivals(NUM_131056) if e["recipient"] == "p1"]
        self.assertEqual([e["limit"] for e in got], [None, "pair", "pair"])
        self.assertGreaterEqual(got[2]["ts_us"] - got[1]["ts_us"], 950000)
        # the number is not paused: another member's message goes at once
        self.assertEqual(other[1]["sendResult"]["ok"], 1, other)
        self.assertLess(other_took, 0.5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
