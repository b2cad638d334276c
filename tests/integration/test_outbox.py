"""contract.md section 12, the outbox: Prefer: respond-async is checked at once and answered 202,
then delivered from Redis by any instance (the simulator's record is the judge): retried when
the platform failed surely without taking it, never twice, in order per member; GET
/requests/<id> tells its status; signed status callbacks; expiry gives 128."""
import hashlib
import hmac
import json
import os
import subprocess
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import REDIS_CLI, StackTest, facebook_channel, free_port, http, member, wait_for

APP = "app-ob"
ASYNC = {"Prefer": "respond-async"}


class Case(StackTest):
    """The stack, the tenant and the helpers of every class below."""
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_OUTBOX_CLAIM_MS": "2000"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        s.put("channel", facebook_channel("fbq", APP))
        s.put("member", member("mq", "fbq", APP, "psid-q"))
        s.put("member", member("mr", "fbq", APP, "psid-r"))
        s.put("channel", facebook_channel("fbx", "app-other"))
        # one message per 3 s to a member: longer than an attempt may wait (deadline 4 s)
        s.put("channel", facebook_channel("fbp", APP, rateLimit={
            "perSecond": 0, "perRecipient": {"everyMs": 3000, "burst": 1}}))
        s.put("member", member("mp", "fbp", APP, "psid-p"))
        cls.tok = s.token(APP, "bot:sendResponses")
        cls.tok_other = s.token("app-other", "bot:sendResponses")

    def post(self, body, headers=None, tok=None, url=None):
        h = {"Authorization": "Bearer " + (tok or self.tok)}
        h.update(headers if headers is not None else ASYNC)
        return http("POST", (url or self.s.url) + "/sendResponses", body, h)

    def status(self, rid, tok=None, url=None):
        return http("GET", (url or self.s.url) + "/requests/" + rid,
                    headers={"Authorization": "Bearer " + (tok or self.tok)})

    def wait_final(self, rid, timeout=30, url=None):
        got = {}

        def final():
            a = self.status(rid, url=url)
            got["a"] = a
            return a.status == 200 and a.json["status"] in ("done", "failed")
        wait_for(final, timeout=timeout, what="request %s to end" % rid)
        return got["a"].json

    def kill_when_attempting(self, name, rid):
        """SIGKILLs instance name once its log shows request rid's first attempt started."""
        s = self.s

        def attempt_started():
            with open(os.path.join(s.dir, name + ".log"), errors="replace") as f:
                return "outbox: request %s attempt 1" % rid in f.read()
        wait_for(attempt_started, what="the attempt")
        p = s.procs.pop(name)
        p.kill()
        p.wait()

    def check_sync_after_async(self, word):
        """Contract section 12: a member's async and sync messages go out in the order they
        reached Redis. Two queued requests, the first slow on the platform (the second waits in
        the outbox behind it); a sync request sent once both were accepted goes out last."""
        def text(t):
            return {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": t}]}
        rids = [self.post(text(word + "1 slow1500")).json["requestId"],
                self.post(text(word + "2")).json["requestId"]]
        sync = self.post(text(word + "3"), headers={})
        self.assertEqual(sync.status, 200, sync)
        self.assertEqual(sync.json["sendResult"]["ok"], 1, sync)
        self.assertEqual([self.wait_final(r)["status"] for r in rids], ["done", "done"])
        self.assertEqual(self.texts(word), [word + "1 slow1500", word + "2", word + "3"])

    def check_async_after_sync(self, word):
        """The other way round: a sync request holds the member's turn (its call is slow); a
        request queued meanwhile goes out only once that turn passed, not beside it."""
        def text(t):
            return {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": t}]}
        # an earlier request's turn goes after its answer (not awaited): gone before this starts
        wait_for(lambda: not self.s.redis("KEYS", "*turnq*fbq*mq"), what="earlier turns passed")
        out = {}
        t = threading.Thread(target=lambda: out.update(a=self.post(text(word + "1 slow1500"), {})))
        t.start()
        try:
            wait_for(lambda: self.s.redis("KEYS", "*turnq*fbq*mq"), what="the sync request's turn")
            rid = self.post(text(word + "2")).json["requestId"]
        finally:
            t.join()
        self.assertEqual(out["a"].status, 200, out["a"])
        self.assertEqual(self.wait_final(rid)["status"], "done")
        took = [(r["ts_ms"], r["body"]["message"]["text"]) for r in self.s.sim_log()
                if word in (r.get("body") or {}).get("message", {}).get("text", "")]
        self.assertEqual([x for _, x in took], [word + "1 slow1500", word + "2"])
        self.assertGreaterEqual(took[1][0] - took[0][0], 1400, took)  # after the first's answer

    def texts(self, word):
        """The texts containing word the simulator took, in the order it took them."""
        out, since = [], 0
        while True:
            page = self.s.sim("GET", "/_sim/log?since=%d" % since)
            for r in page["requests"]:
                t = (r.get("body") or {}).get("message", {}).get("text", "")
                if word in t:
                    out.append(t)
            if not page["requests"]:
                return out
            since = page["next"]


class Outbox(Case):
    def test_1_accepted_then_delivered(self):
        body = {"channelId": "fbq", "memberId": "mq",
                "response": [{"type": "TEXT", "text": "ob1-a"}, {"type": "TEXT", "text": "ob1-b"}]}
        a = self.post(body)
        self.assertEqual(a.status, 202, a)
        self.assertEqual(set(a.json), {"ok", "requestId", "member", "status"})
        self.assertEqual((a.json["ok"], a.json["member"], a.json["status"]), (1, "mq", "queued"))
        rid = a.json["requestId"]
        self.assertEqual(a.headers.get("Preference-Applied"), "respond-async")
        self.assertEqual(a.headers.get("Location"), "/requests/" + rid)
        st = self.wait_final(rid)
        self.assertEqual(st["status"], "done", st)
        self.assertEqual(st["requestId"], rid)
        self.assertGreaterEqual(st["attempts"], 1)
        self.assertLessEqual(st["createdAt"], st["updatedAt"])
        self.assertEqual(st["sendResult"]["ok"], 1, st)
        self.assertEqual(len(st["sendResult"]["result"]), 2)
        self.assertEqual(self.texts("ob1-"), ["ob1-a", "ob1-b"])

    def test_2_checked_at_once(self):
        base = {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": "ob2"}]}
        self.assert_error(self.post(dict(base, channelId="nope")), 112)
        self.assert_error(self.post(dict(base, memberId="nope")), 114)
        self.assert_error(self.post(dict(base, response=[
            {"type": "LOCATION", "latitude": 1, "longitude": 2}])), 117, mentions="LOCATION")
        self.assert_error(self.post({"channelId": "fbq", "memberId": "mq"}), 108, mentions="response")
        self.assert_error(self.post(dict(base, statusCallback="ftp://x")), 108,
                          mentions="statusCallback")
        self.assert_error(self.post(base, headers={"Prefer": "respond-async=("}), 108,
                          mentions="Prefer")
        self.assert_unauthorized(self.post(base, tok="wrong"))
        # another preference alone, or one that only looks like it: answered synchronously
        a = self.post(base, headers={"Prefer": "wait=5, x=respond-async"})
        self.assertEqual(a.status, 200, a)
        self.assertNotIn("Preference-Applied", a.headers)
        self.assertEqual(self.texts("ob2"), ["ob2"])

    def test_3_status_is_the_apps_own(self):
        body = {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": "ob3"}]}
        rid = self.post(body).json["requestId"]
        self.wait_final(rid)
        self.assert_error(self.status(rid, tok=self.tok_other), 129)
        self.assert_error(self.status("0" * 24), 129)
        self.assert_error(self.status("not-an-id"), 129)
        self.assert_unauthorized(self.status(rid, tok="wrong"))

    def test_4_idempotency_key_same_request_id(self):
        body = {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": "ob4"}]}
        h = dict(ASYNC, **{"Idempotency-Key": "ob4-key"})
        a1, a2 = self.post(body, headers=h), self.post(body, headers=h)
        self.assertEqual(a1.status, 202, a1)
        self.assertEqual(a2.status, 202, a2)
        self.assertEqual(a1.json["requestId"], a2.json["requestId"])
        self.assertEqual(a2.headers.get("Idempotent-Replayed"), "true")
        self.assertEqual(a2.headers.get("Location"), "/requests/" + a1.json["requestId"])
        self.wait_final(a1.json["requestId"])
        self.assertEqual(self.texts("ob4"), ["ob4"])
        self.assert_error(self.post(dict(body, response=[{"type": "TEXT", "text": "ob4x"}]),
                                    headers=h), 124)

    def test_6_waits_for_its_slot_however_long(self):
        rids = []
        for n in range(3):
            body = {"channelId": "fbp", "memberId": "mp",
                    "response": [{"type": "TEXT", "text": "slot%d" % n}]}
            rids.append(self.post(body).json["requestId"])
        finals = [self.wait_final(rid, timeout=60) for rid in rids]
        self.assertEqual([f["status"] for f in finals], ["done"] * 3, finals)
        self.assertEqual(self.texts("slot"), ["slot0", "slot1", "slot2"])
        took = [r["ts_ms"] for r in self.s.sim_log()
                if "slot" in (r.get("body") or {}).get("message", {}).get("text", "")]
        gaps = [b - a for a, b in zip(took, took[1:])]
        self.assertTrue(all(g >= 2900 for g in gaps), gaps)
        self.assertGreaterEqual(
            self.s.metric('botgate_outbox_retries_total{reason="rate_limited"}'), 1)

    def test_7_sync_after_async_goes_after_it(self):
        self.check_sync_after_async("ord-")

    def test_8_async_after_sync_waits_for_its_turn(self):
        self.check_async_after_sync("tu-")

    def test_9_redis_stall_while_accepting(self):
        """Redis stalls (DEBUG SLEEP 1.6 s; the harness's BOTGATE_REDIS_TIMEOUT_MS is 500) while
        requests are being accepted: an accept script may run after botgate stopped waiting for
        it. Each answer is what Redis holds: a 202 is delivered at most once (reported 125 when
        the stall cut its attempt: never lost), any other answer never. Accepting resumes as
        soon as Redis answers again (measured: the first 202 within 5 ms of the stall's end);
        while the worker's connection is down, a request gets its 119 at once, so the clients
        post until told to stop (a fixed number of posts could all be spent on those)."""
        s = self.s
        answers = {}
        stop = threading.Event()

        def accepted_count():
            return len([a for a in list(answers.values()) if a.status == 202])

        def client(k):
            n = 0
            while not stop.is_set():
                t = "stall-%d-%05d" % (k, n)
                n += 1
                a = self.post({"channelId": "fbq", "memberId": "mq" if k % 2 else "mr",
                               "response": [{"type": "TEXT", "text": t}]})
                answers[t] = a
                if a.status != 202:
                    time.sleep(0.01)  # not a busy loop of refusals while the stall lasts
        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: len(answers) >= 30, what="requests flowing")
            s.redis("DEBUG", "SLEEP", "1.6")
            resumed = accepted_count()
            wait_for(lambda: accepted_count() >= resumed + 30, timeout=60,
                     what="requests accepted again")
        finally:
            stop.set()
            for t in threads:
                t.join()
        accepted = {t: a.json["requestId"] for t, a in answers.items() if a.status == 202}
        refused = [a for a in answers.values() if a.status != 202]
        self.assertTrue(refused, "the stall refused nothing: it did not hit the accepts")
        for a in refused:
            self.assertEqual(a.json["err_code"], 119, a)
        finals = {t: self.wait_final(rid, timeout=60) for t, rid in accepted.items()}
        took = self.texts("stall-")
        self.assertEqual(len(took), len(set(took)), "sent twice")
        self.assertEqual(set(took) - set(accepted), set(), "sent, though answered 119")
        for t, st in finals.items():
            if t not in took:  # an attempt the stall cut: reported, never lost
                self.assertEqual(st["sendResult"]["result"][0]["error"]["err_code"], 125, st)

    def test_5_metrics(self):
        body = {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": "ob5"}]}
        before = self.s.metric("botgate_outbox_accepted_total")
        self.wait_final(self.post(body).json["requestId"])
        # counted by the instance that took it (one here): accepted, attempted, ended done
        self.assertEqual(self.s.metric("botgate_outbox_accepted_total"), before + 1)
        self.assertGreaterEqual(self.s.metric("botgate_outbox_attempts_total"), 1)
        self.assertGreaterEqual(self.s.metric('botgate_outbox_ended_total{status="done"}'), 1)
        self.assertGreaterEqual(
            self.s.metric('botgate_requests_total{route="sendResponses",status="202",'
                          'err_code="0"}'), 1)
        wait_for(lambda: 'botgate_outbox_depth{shard="15"}' in http(
            "GET", self.s.url + "/metrics").raw, what="the depth gauges")


class Redirects(Case):
    """redirectMemberToNode with Prefer: respond-async (section 12: either operation): checked
    at once (the target node too), queued, then run once by the outbox as a synchronous one
    runs; a run is never repeated half-way, and one queued past the TTL does not run."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        path = os.path.join(s.dir, "tree-ob.json")
        with open(path, "w") as f:
            json.dump({"_id": "TOB", "app": APP, "name": "outbox tree", "nodes": {"N1": {
                "preAction": [{"type": "set", "path": "member.meta.seen",
                               "value": "{{agendaMeta.k}}"}],
                "response": [{"type": "TEXT", "text": "rd-{{agendaMeta.k}}"}]}}}, f)
        s.ctl("tree", "import", path)
        cls.tok_r = s.token(APP, "bot:redirectMemberToNode")
        main_url = s.url
        cls.ttl_url = "http://127.0.0.1:%d" % free_port()
        s.start_gateway(port=int(cls.ttl_url.rsplit(":", 1)[1]), name="botgate-ttl",
                        extra={"BOTGATE_OUTBOX_TTL_S": "1"})
        s.url = main_url

    def redirect(self, body, headers=None, url=None):
        h = {"Authorization": "Bearer " + self.tok_r}
        h.update(headers if headers is not None else ASYNC)
        return http("POST", (url or self.s.url) + "/redirectMemberToNode", body, h)

    def seen(self):
        return json.loads(self.s.redis("GET", "botgate:member:{fbq}:mq"))["meta"].get("seen")

    @staticmethod
    def body(k, node="N1", **over):
        b = {"channelId": "fbq", "memberId": "mq", "meta": {"k": k},
             "redirect": {"tree": "TOB", "nodeCompositeId": node}}
        b.update(over)
        return b

    def test_queued_then_run(self):
        a = self.redirect(self.body("one"))
        self.assertEqual(a.status, 202, a)
        self.assertEqual(set(a.json), {"ok", "requestId", "member", "status"})
        rid = a.json["requestId"]
        self.assertEqual(a.headers.get("Preference-Applied"), "respond-async")
        self.assertEqual(a.headers.get("Location"), "/requests/" + rid)
        st = self.wait_final(rid)
        self.assertEqual(st["status"], "done", st)
        self.assertEqual(st["sendResult"]["ok"], 1, st)
        self.assertEqual(len(st["sendResult"]["result"]), 1, st)
        self.assertEqual(self.texts("rd-one"), ["rd-one"])
        rec = json.loads(self.s.redis("GET", "botgate:member:{fbq}:mq"))
        self.assertEqual(rec["meta"]["seen"], "one")  # its pre-action was written back

    def test_checked_at_once(self):
        self.assert_error(self.redirect(self.body("x", node="NOPE")), 115)
        self.assert_error(self.redirect(self.body("x", memberId="nope")), 114)
        self.assert_error(self.redirect(self.body("x", statusCallback="ftp://x")), 108,
                          mentions="statusCallback")
        self.assertEqual(self.texts("rd-x"), [])

    def test_expired_is_not_run(self):
        """Accepted with a TTL of 1 s behind a send that takes longer: not run at all (128),
        neither its response nor its pre-action."""
        url = self.ttl_url
        sid = self.post({"channelId": "fbq", "memberId": "mq",
                         "response": [{"type": "TEXT", "text": "rd-e1 slow1800"}]},
                        url=url).json["requestId"]
        rid = self.redirect(self.body("e2"), url=url).json["requestId"]
        self.assertEqual(self.wait_final(sid, url=url)["status"], "done")
        st = self.wait_final(rid, url=url)
        self.assertEqual(st["status"], "failed", st)
        self.assertEqual([e["error"]["err_code"] for e in st["sendResult"]["result"]], [128], st)
        self.assertEqual(self.texts("rd-e2"), [])
        self.assertNotEqual(self.seen(), "e2")

    def test_never_run_twice(self):
        """The instance running a queued redirect dies while its response is on the wire: the
        instance that takes it over reports 125 and runs nothing again."""
        s = self.s
        s.stop_gateway("botgate-ttl")  # the victim alone takes it
        s.stop_gateway("botgate")
        s.start_gateway(port=free_port(), name="botgate-victim")
        try:
            rid = self.redirect(self.body("k1 slow1500")).json["requestId"]
            self.kill_when_attempting("botgate-victim", rid)
        finally:
            s.start_gateway(port=free_port(), name="botgate")
        st = self.wait_final(rid, timeout=60)
        self.assertEqual(st["status"], "failed", st)
        self.assertEqual([e["error"]["err_code"] for e in st["sendResult"]["result"]], [125], st)
        self.assertEqual(st["attempts"], 2, st)
        self.assertLessEqual(len(self.texts("rd-k1")), 1)

    def test_in_order_with_sends(self):
        """A member's queued redirect, queued send and sync send go out in that order."""
        rid = self.redirect(self.body("o1 slow1000")).json["requestId"]
        sid = self.post({"channelId": "fbq", "memberId": "mq",
                         "response": [{"type": "TEXT", "text": "rd-o2"}]}).json["requestId"]
        sync = self.post({"channelId": "fbq", "memberId": "mq",
                          "response": [{"type": "TEXT", "text": "rd-o3"}]}, headers={})
        self.assertEqual(sync.status, 200, sync)
        self.assertEqual([self.wait_final(r)["status"] for r in (rid, sid)], ["done", "done"])
        self.assertEqual(self.texts("rd-o"), ["rd-o1 slow1000", "rd-o2", "rd-o3"])


class Burst(Case):
    """Hundreds queued at once over every shard: each is delivered at once, in its member's
    order, with the default claim time (30 s) so that no take-over timer can hide a stall.
    Entry ids are a stream's own: two shards hold the same ids within one millisecond."""
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None}}

    def test_burst_over_every_shard(self):
        s = self.s
        for i in range(40):
            s.put("member", member("bm%d" % i, "fbq", APP, "psid-bm%d" % i))
        rids = {}

        def send(k):
            for n in range(k, 240, 8):
                body = {"channelId": "fbq", "memberId": "bm%d" % (n % 40),
                        "response": [{"type": "TEXT", "text": "burst%03d" % n}]}
                a = self.post(body)
                self.assertEqual(a.status, 202, a)
                rids[n] = a.json["requestId"]
        threads = [threading.Thread(target=send, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(rids), 240)
        for rid in rids.values():
            self.assertEqual(self.wait_final(rid, timeout=25)["status"], "done")
        took = self.texts("burst")
        self.assertEqual(sorted(took), sorted("burst%03d" % n for n in range(240)))
        # a member's requests were posted one after the other by one thread (n % 40 == i
        # are all n % 8 == i % 8): they reach the platform in that order
        for i in range(40):
            mine = [int(t[5:]) for t in took if int(t[5:]) % 40 == i]
            self.assertEqual(mine, sorted(mine), "member bm%d out of order" % i)


class Drain(Case):
    """A graceful stop while a queued request's call is on the wire: the call finishes, the
    rest is left for another instance, which sends it without a 125 (nothing was cut)."""

    def test_rest_goes_on_elsewhere(self):
        s = self.s
        s.stop_gateway("botgate")  # only the draining instance takes it
        s.start_gateway(port=free_port(), name="botgate-drain",
                        extra={"BOTGATE_DRAIN_TIMEOUT_MS": "300"})
        body = {"channelId": "fbq", "memberId": "mq",
                "response": [{"type": "TEXT", "text": "dr-a slow1500"},
                             {"type": "TEXT", "text": "dr-b"}]}
        a = self.post(body)
        self.assertEqual(a.status, 202, a)
        rid = a.json["requestId"]

        def attempt_started():
            with open(os.path.join(s.dir, "botgate-drain.log"), errors="replace") as f:
                return "outbox: request %s attempt 1" % rid in f.read()
        wait_for(attempt_started, what="the attempt")
        # the drain time (300 ms) is over while the first call (1.5 s) is still out
        self.assertEqual(s.stop_gateway("botgate-drain"), 0)
        s.start_gateway(port=free_port(), name="botgate")
        st = self.wait_final(rid, timeout=60)
        self.assertEqual(st["status"], "done", st)
        self.assertEqual(st["attempts"], 2, st)
        self.assertEqual(self.texts("dr-"), ["dr-a slow1500", "dr-b"])


class Platform:
    """A platform in front of the simulator that misbehaves on cue: the first `fail` calls
    whose text holds `word` get `status` (with Retry-After when given); the rest go to the
    simulator. Started on a port of its own, late when asked (connections refused until then)."""

    def __init__(self, sim_url, port=None):
        self.sim_url = sim_url
        self.port = port or free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.rules = {}   # word -> [calls left to fail, status, retry_after]
        self.calls = []   # (word, time, status)
        self.server = None

    def start(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                try:
                    self.answer()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # botgate gave up on the call (its timeout): nothing to answer

            def answer(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                for word, rule in outer.rules.items():
                    if word.encode() in raw:
                        fail = rule[0] > 0
                        outer.calls.append((word, time.monotonic(), rule[1] if fail else 200))
                        if fail:
                            rule[0] -= 1
                            body = b'{"error":{"message":"down","type":"x","code":1}}'
                            self.send_response(rule[1])
                            if rule[2]:
                                self.send_header("Retry-After", rule[2])
                            self.send_header("Content-Type", "application/json")
                            self.send_header("Content-Length", str(len(body)))
                            self.end_headers()
                            self.wfile.write(body)
                            return
                a = http("POST", outer.sim_url + self.path, raw,
                         {"Content-Type": "application/json"})
                body = a.raw.encode()
                self.send_response(a.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class Retries(Case):
    """The instance's platform is a Platform that misbehaves on cue."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.platform = Platform(s.sim_url)
        cls.platform.start()
        s.stop_gateway("botgate")
        s.start_gateway(port=free_port(), name="botgate",
                        extra={"BOTGATE_FACEBOOK_API_URL": cls.platform.url + "/graph/v19.0"})

    @classmethod
    def tearDownClass(cls):
        cls.platform.stop()
        super().tearDownClass()

    def one(self, word, member="mq"):
        body = {"channelId": "fbq", "memberId": member,
                "response": [{"type": "TEXT", "text": word + "-a"},
                             {"type": "TEXT", "text": word + "-b"}]}
        a = self.post(body)
        self.assertEqual(a.status, 202, a)
        return a.json["requestId"]

    def test_5_5xx_retried_then_delivered_once(self):
        self.platform.rules["down5"] = [3, 503, None]
        rid = self.one("down5")
        st = self.wait_final(rid, timeout=60)
        self.assertEqual(st["status"], "done", st)
        self.assertGreaterEqual(st["attempts"], 4, st)  # three 503s, then delivered
        self.assertEqual(self.texts("down5"), ["down5-a", "down5-b"])
        self.assertGreaterEqual(self.s.metric('botgate_outbox_retries_total{reason="platform"}'),
                                3)
        times = [t for w, t, _ in self.platform.calls if w == "down5"]
        # backoff: 1 s doubling, each between half and all of it
        gaps = [b - a for a, b in zip(times, times[1:])][:3]
        self.assertTrue(all(g >= 0.45 for g in gaps), gaps)

    def test_6_429_retry_after_honoured(self):
        self.platform.rules["ra429"] = [1, 429, "2"]
        rid = self.one("ra429")
        st = self.wait_final(rid, timeout=60)
        self.assertEqual(st["status"], "done", st)
        self.assertEqual(self.texts("ra429"), ["ra429-a", "ra429-b"])
        times = [t for w, t, _ in self.platform.calls if w == "ra429"]
        self.assertGreaterEqual(times[1] - times[0], 1.9, times)

    def test_7_a_failure_that_may_have_delivered_is_not_retried(self):
        rid = self.one("tmo timeout")
        st = self.wait_final(rid, timeout=60)
        self.assertEqual(st["status"], "failed", st)
        self.assertEqual(st["attempts"], 1, st)
        self.assertEqual(st["sendResult"]["result"][0]["error"]["err_code"], 113, st)


class Down(Case):
    """Instances whose platform refuses connections for a while, and one with a short TTL."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.platform = Platform(s.sim_url)   # not started: connections refused
        s.stop_gateway("botgate")
        s.start_gateway(port=free_port(), name="botgate",
                        extra={"BOTGATE_FACEBOOK_API_URL": cls.platform.url + "/graph/v19.0"})
        main_url = s.url
        cls.short = free_port()
        s.start_gateway(port=cls.short, name="botgate-ttl",
                        extra={"BOTGATE_FACEBOOK_API_URL":
                               "http://127.0.0.1:%d/graph/v19.0" % free_port(),
                               "BOTGATE_OUTBOX_TTL_S": "3"})
        s.url = main_url

    @classmethod
    def tearDownClass(cls):
        cls.platform.stop()
        super().tearDownClass()

    def test_8_refused_then_back(self):
        body = {"channelId": "fbq", "memberId": "mr",
                "response": [{"type": "TEXT", "text": "back-a"}, {"type": "TEXT", "text": "back-b"}]}
        a = self.post(body)
        self.assertEqual(a.status, 202, a)
        rid = a.json["requestId"]
        wait_for(lambda: self.status(rid).json["attempts"] >= 2, timeout=30, what="a retry")
        self.assertEqual(self.status(rid).json["status"] in ("queued", "sending"), True)
        self.platform.start()
        st = self.wait_final(rid, timeout=60)
        self.assertEqual(st["status"], "done", st)
        self.assertEqual(self.texts("back-"), ["back-a", "back-b"])

    def test_9_expired_in_the_queue(self):
        self.platform.stop()  # whichever instance takes it, nothing can be sent
        url = "http://127.0.0.1:%d" % self.short
        body = {"channelId": "fbq", "memberId": "mq",
                "response": [{"type": "TEXT", "text": "exp-a"}, {"type": "TEXT", "text": "exp-b"}]}
        a = self.post(body, url=url)
        self.assertEqual(a.status, 202, a)
        st = self.wait_final(a.json["requestId"], timeout=60, url=url)
        self.assertEqual(st["status"], "failed", st)
        self.assertEqual([e["error"]["err_code"] for e in st["sendResult"]["result"]], [128, 128])
        self.assertEqual(self.texts("exp-"), [])


class Takeover(Case):
    """Three instances drain one outbox; one is SIGKILLed while it delivers. Every accepted
    response is delivered exactly once or reported 125, none is lost, and each member's
    requests reach the platform in the order they were accepted (the simulator's record)."""
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_OUTBOX_CLAIM_MS": "1000"}}
    MEMBERS = 6

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        for i in range(cls.MEMBERS):
            s.put("member", member("tm%d" % i, "fbq", APP, "psid-tm%d" % i))
        cls.urls = [s.url]
        for name in ("botgate2", "botgate3"):
            s.start_gateway(port=free_port(), name=name)
            cls.urls.append(s.url)
        s.url = cls.urls[0]

    def test_kill_one_mid_delivery(self):
        s = self.s
        s.sim("POST", "/_sim/config", {"latency_ms": 300})
        sent = []  # (request id, member, n)
        try:
            for n in range(36):
                m = "tm%d" % (n % self.MEMBERS)
                body = {"channelId": "fbq", "memberId": m,
                        "response": [{"type": "TEXT", "text": "tk%02d-a" % n},
                                     {"type": "TEXT", "text": "tk%02d-b" % n}]}
                a = self.post(body, url=self.urls[n % 3])
                self.assertEqual(a.status, 202, a)
                sent.append((a.json["requestId"], m, n))
                time.sleep(0.02)  # new entries find another instance's reader blocked
            # killed while it delivers: its log names the attempts it started
            victim = []

            def delivering():
                for name in ("botgate2", "botgate3"):
                    with open(os.path.join(s.dir, name + ".log"), errors="replace") as f:
                        if f.read().count("outbox: request") >= 1:
                            victim.append(name)
                            return True
                return False
            wait_for(delivering, timeout=60, what="another instance delivering")
            p = s.procs.pop(victim[0])
            p.kill()
            p.wait()
            finals = {rid: self.wait_final(rid, timeout=120) for rid, _, _ in sent}
        finally:
            s.sim("POST", "/_sim/config", {"latency_ms": 0})
        took = self.texts("tk")
        counts = {t: took.count(t) for t in set(took)}
        self.assertEqual([t for t, c in counts.items() if c > 1], [], "sent twice")
        unknown = 0
        for rid, m, n in sent:
            st = finals[rid]
            for i, el in enumerate(st["sendResult"]["result"]):
                text = "tk%02d-%s" % (n, "ab"[i])
                if "error" in el:
                    self.assertEqual(el["error"]["err_code"], 125, st)
                    unknown += 1
                else:
                    self.assertEqual(counts.get(text), 1, "%s lost: %s" % (text, st))
        # the victim's attempt in flight was taken over: tried again, or reported 125
        self.assertTrue(unknown > 0 or max(f["attempts"] for f in finals.values()) > 1,
                        "nothing was taken over")
        # at most one call out per member (their order) on the victim
        self.assertLessEqual(unknown, self.MEMBERS, "more 125s than calls the victim had out")
        # each member's texts in the order of acceptance
        for i in range(self.MEMBERS):
            mine = [t for t in took if int(t[2:4]) % self.MEMBERS == i]
            self.assertEqual(mine, sorted(mine), "member tm%d out of order" % i)


class Consumers(Case):
    """Each worker of each process is a consumer of its own, made by its first read (named
    <process>-<worker>): a stopped instance's go from the group once they hold nothing and have
    been idle for longer than BOTGATE_OUTBOX_CLAIM_MS x 2, 15 s at least (a live but quiet one
    may go too: harmless, its next read makes it again)."""
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_OUTBOX_CLAIM_MS": "1000"}}

    def processes(self):
        """The process part of the names of every shard's consumers, each name checked to be
        <16 hex digits>-<worker>: the same 16 for every worker of a process."""
        out = set()
        for shard in range(16):
            try:
                got = self.s.redis("XINFO", "CONSUMERS", "botgate:outbox:{%d}" % shard, "botgate")
            except RuntimeError:  # the stream and its group are made by the first read
                continue
            for c in got:
                self.assertRegex(c[1], r"^[0-9a-f]{16}-[01]$")
            out |= {c[1].rsplit("-", 1)[0] for c in got}
        return out

    def traffic(self, word):
        rids = [self.post({"channelId": "fbq", "memberId": "cm%d" % i,
                           "response": [{"type": "TEXT", "text": "%s-%d" % (word, i)}]}
                          ).json["requestId"] for i in range(16)]
        for rid in rids:
            self.assertEqual(self.wait_final(rid)["status"], "done")

    def test_a_stopped_instances_consumers_go(self):
        s = self.s
        for i in range(16):
            s.put("member", member("cm%d" % i, "fbq", APP, "psid-cm%d" % i))
        s.stop_gateway("botgate")
        s.start_gateway(port=free_port(), name="botgate-old")
        self.traffic("cons-a")
        old = self.processes()
        self.assertEqual(len(old), 1, old)
        s.start_gateway(port=free_port(), name="botgate")
        p = s.procs.pop("botgate-old")
        p.kill()
        p.wait()
        self.traffic("cons-b")  # the live instance's consumers are made
        wait_for(lambda: not (self.processes() & old), timeout=90,
                 what="the stopped instance's consumers removed")
        self.traffic("cons-c")  # and the live one still delivers


class FullOfWaiters(Case):
    """A worker whose every job slot holds a request waiting for its member's earlier one,
    which a dead instance left pending: it still takes that one over (else nothing moves)."""

    def test_takes_over_though_full(self):
        s = self.s
        s.stop_gateway("botgate")
        s.start_gateway(port=free_port(), name="botgate-victim")
        body = {"channelId": "fbq", "memberId": "mq"}
        head = self.post(dict(body, response=[{"type": "TEXT", "text": "full-0 slow1800"}]))
        rid = head.json["requestId"]
        self.kill_when_attempting("botgate-victim", rid)
        s.start_gateway(port=free_port(), name="botgate",
                        extra={"BOTGATE_WORKERS": "1", "BOTGATE_OUTBOX_JOBS": "2"})
        rids = [self.post(dict(body, response=[{"type": "TEXT", "text": "full-%d" % n}])
                          ).json["requestId"] for n in (1, 2)]
        st = self.wait_final(rid, timeout=30)
        self.assertEqual(st["sendResult"]["result"][0]["error"]["err_code"], 125, st)
        self.assertEqual([self.wait_final(r)["status"] for r in rids], ["done", "done"])
        self.assertEqual(self.texts("full-")[-2:], ["full-1", "full-2"])


class EndWrites(Case):
    """Redis stalls (DEBUG SLEEP, longer than BOTGATE_REDIS_TIMEOUT_MS) while a queued
    request's call is out on the platform (the simulator's slow answer), so that the write
    recording what the call gave fails: the attempt knows the outcome, so it writes it again
    once Redis takes it. The request ends done with the platform's message id, in one attempt,
    the platform called once per response, not reported 125 by a takeover."""
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_OUTBOX_CLAIM_MS": "2000",
                                        "BOTGATE_UPSTREAM_TIMEOUT_MS": "8000",
                                        "BOTGATE_REQUEST_TIMEOUT_MS": "10000"}}

    def stalled_around_the_call(self, word, texts):
        """Queues texts for mq; once the first one's call (answered after 3 s) reached the
        platform, Redis sleeps 6 s: its record is written while Redis sleeps."""
        s = self.s
        a = self.post({"channelId": "fbq", "memberId": "mq",
                       "response": [{"type": "TEXT", "text": t} for t in texts]})
        self.assertEqual(a.status, 202, a)
        arrived = []

        def call_out():
            arrived.extend(r["ts_ms"] for r in s.sim_log()
                           if word in (r.get("body") or {}).get("message", {}).get("text", ""))
            return arrived
        wait_for(call_out, what="the call on the platform")
        slept_ms = time.time() * 1000
        subprocess.run([REDIS_CLI, "-p", str(s.redis_port), "DEBUG", "SLEEP", "6"], check=True,
                       capture_output=True, timeout=30)
        # the stall began before the platform answered, and outlasted a write's timeout
        self.assertLess(slept_ms, arrived[0] + 3000 - 200, "the stall came after the answer")
        return a.json["requestId"]

    def test_end_written_again(self):
        rid = self.stalled_around_the_call("endw", ["endw slow3000"])
        st = self.wait_final(rid, timeout=60)
        self.assertEqual((st["status"], st["attempts"]), ("done", 1), st)
        el = st["sendResult"]["result"][0]
        self.assertNotIn("error", el, st)
        self.assertTrue(el["result"]["messages"][0]["id"], st)
        self.assertEqual(self.texts("endw"), ["endw slow3000"])

    def test_progress_written_again(self):
        """Two responses: the first one's progress record fails; the attempt stops there (the
        second is not sent), writes that record again, and the next attempt sends the second."""
        rid = self.stalled_around_the_call("progw", ["progw-a slow3000", "progw-b"])
        st = self.wait_final(rid, timeout=60)
        self.assertEqual(st["status"], "done", st)
        for el in st["sendResult"]["result"]:
            self.assertNotIn("error", el, st)
            self.assertTrue(el["result"]["messages"][0]["id"], st)
        self.assertEqual(self.texts("progw"), ["progw-a slow3000", "progw-b"])


class AcceptAtDeadline(Case):
    """Redis holds writes (CLIENT PAUSE WRITE) longer than the request's deadline, and botgate
    waits for a command longer than that (BOTGATE_REDIS_TIMEOUT_MS): the accept's script is
    still out when the deadline comes, and Redis runs it later. The 119 names the requestId it
    may be queued as (docs/api.md), and GET /requests/<id> then tells: queued, and sent once."""
    # no taking over meanwhile (XAUTOCLAIM is a write: paused, it would hold up the reads
    # queued behind it on the worker's connection)
    stack_args = {"workers": 1, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_OUTBOX_CLAIM_MS": "600000",
                                        "BOTGATE_REDIS_TIMEOUT_MS": "3000",
                                        "BOTGATE_REQUEST_TIMEOUT_MS": "1500",
                                        "BOTGATE_UPSTREAM_TIMEOUT_MS": "1000"}}

    def test_119_names_the_request_id(self):
        body = {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": "late"}]}
        # the token and channel in the worker's cache, and its delivery over: the request's
        # reads go through the pause, its accept is held
        warm = self.post(dict(body, response=[{"type": "TEXT", "text": "warm"}]))
        self.wait_final(warm.json["requestId"])
        self.s.redis("CLIENT", "PAUSE", "2500", "WRITE")
        a = self.post(body)
        self.assert_error(a, 119, mentions="may have been queued as requestId ")
        rid = a.json["err"].split("requestId ", 1)[1].split(" ", 1)[0]
        self.assertIn("GET /requests/%s tells" % rid, a.json["err"])
        st = self.wait_final(rid)
        self.assertEqual(st["status"], "done", st)
        self.assertEqual(self.texts("late"), ["late"])


class Receiver:
    """An HTTP server that takes status callbacks: the first `refuse` get 500, the rest 200."""

    def __init__(self, refuse=0):
        self.got = []  # (headers, raw body, status answered)
        self.refuse = refuse
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = 500 if outer.refuse > 0 else 200
                outer.refuse -= 1
                outer.got.append((dict(self.headers), raw, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = "http://127.0.0.1:%d/hook" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def verify(secret, header, body, tolerance_s=300):
    """docs/api.md's verification, as a receiver writes it."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    mac = hmac.new(secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, parts["v1"]) and abs(time.time() - int(parts["t"])) <= tolerance_s


class Callbacks(Case):
    # the receiver is on loopback: the SSRF guard lets it through only so
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_ALLOW_PRIVATE_MEDIA": "1"}}

    def test_signed_callback_retried_until_taken(self):
        secret = self.s.ctl("app", "secret", "rotate", "--app", APP).stdout.strip()
        self.assertRegex(secret, r"^bgs_[0-9a-f]{64}$")
        rx = Receiver(refuse=1)
        try:
            body = {"channelId": "fbq", "memberId": "mq", "statusCallback": rx.url,
                    "response": [{"type": "TEXT", "text": "cb1"}]}
            a = self.post(body)
            self.assertEqual(a.status, 202, a)
            rid = a.json["requestId"]
            wait_for(lambda: [g for g in rx.got if g[2] == 200], timeout=30,
                     what="the callback taken")
        finally:
            rx.stop()
        self.assertEqual([g[2] for g in rx.got], [500, 200])  # retried once, then no more
        events = []
        for headers, raw, _ in rx.got:
            self.assertTrue(verify(secret, headers["Botgate-Signature"], raw), headers)
            self.assertFalse(verify("bgs_" + "0" * 64, headers["Botgate-Signature"], raw))
            st = json.loads(raw)
            events.append(st["eventId"])
            self.assertEqual((st["requestId"], st["status"]), (rid, "done"))
            self.assertEqual(st["sendResult"]["ok"], 1)
            self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(events[0], events[1], "a retry carries the same eventId")
        # the status callback is what GET /requests/<id> answers, plus its eventId
        st.pop("eventId")
        self.assertEqual(st, self.status(rid).json)
        self.assertEqual(self.texts("cb1"), ["cb1"])

    def test_callbacks_in_order_per_member(self):
        """Section 12: callbacks in order per member. The first is refused once: the member's
        later ones wait for its retry to be taken."""
        rx = Receiver(refuse=1)
        try:
            rids = [self.post({"channelId": "fbq", "memberId": "mq", "statusCallback": rx.url,
                               "response": [{"type": "TEXT", "text": "cbo%d" % i}]}
                              ).json["requestId"] for i in range(3)]
            wait_for(lambda: len([g for g in rx.got if g[2] == 200]) == 3, timeout=30,
                     what="three callbacks taken")
        finally:
            rx.stop()
        got = [(json.loads(raw)["requestId"], status) for _, raw, status in rx.got]
        self.assertEqual(got, [(rids[0], 500), (rids[0], 200), (rids[1], 200), (rids[2], 200)])

    def test_status_callback_must_be_a_url(self):
        body = {"channelId": "fbq", "memberId": "mq", "statusCallback": "javascript:alert(1)",
                "response": [{"type": "TEXT", "text": "cb2"}]}
        self.assert_error(self.post(body), 108, mentions="statusCallback")
        self.assertEqual(self.texts("cb2"), [])



class KeptWhileAlive(Case):
    """An entry whose job is alive stays its worker's however long the job waits: a status
    callback retried for longer than BOTGATE_OUTBOX_CLAIM_MS is not taken over by the other
    worker (which would post it a second time beside the first)."""
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_OUTBOX_CLAIM_MS": "1000",
                                        "BOTGATE_ALLOW_PRIVATE_MEDIA": "1"}}

    def test_callback_retried_past_the_claim_time(self):
        claimed = self.s.metric("botgate_outbox_claimed_total")
        rx = Receiver(refuse=4)  # tries 1 s, 2 s, 4 s, 8 s apart (halves at least)
        try:
            a = self.post({"channelId": "fbq", "memberId": "mq", "statusCallback": rx.url,
                           "response": [{"type": "TEXT", "text": "kept"}]})
            self.assertEqual(a.status, 202, a)
            wait_for(lambda: [g for g in rx.got if g[2] == 200], timeout=60,
                     what="the callback taken")
        finally:
            rx.stop()
        self.assertEqual([g[2] for g in rx.got], [500] * 4 + [200])
        self.assertEqual(len({json.loads(raw)["eventId"] for _, raw, _ in rx.got}), 1)
        self.assertEqual(self.s.metric("botgate_outbox_claimed_total"), claimed,
                         "the entry was taken over while its job was alive")

if __name__ == "__main__":
    unittest.main(verbosity=2)
