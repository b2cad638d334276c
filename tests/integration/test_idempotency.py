"""contract.md section 7 across three botgate processes on one Redis: an Idempotency-Key runs
its request once (concurrent duplicates wait for its answer, later ones get it replayed byte
for byte), another request under the key is refused (124), another app's key is its own; and
the requests for one member run one at a time, in the order they reached Redis."""
import hashlib
import json
import os
import re
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection
import socket

from harness import (Answer, StackTest, facebook_channel, free_port, http, member, turn_queue,
                     wait_for)

APP = "app-idem"


def idem_record(app, route, key):
    """An Idempotency-Key's record: docs/operations.md, botgate's own keys."""
    return "botgate:idem:{%d:%s:%s:%s}" % (len(app.encode()), app, route, key)


class Guarantees(StackTest):
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None}}  # the default: on

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.urls = [s.url]
        for name in ("botgate2", "botgate3"):
            s.start_gateway(port=free_port(), name=name)
            cls.urls.append(s.url)
        # a fourth with a longer deadline: its request outlives a waiter's
        s.start_gateway(port=free_port(), name="botgate-long",
                        extra={"BOTGATE_REQUEST_TIMEOUT_MS": "9000",
                               "BOTGATE_UPSTREAM_TIMEOUT_MS": "8000"})
        cls.long_url = s.url
        s.url = cls.urls[0]
        s.put("channel", facebook_channel("fbi", APP))
        s.put("member", member("mi", "fbi", APP, "psid-idem"))
        s.put("member", member("mo", "fbi", APP, "psid-order"))
        s.put("channel", facebook_channel("fbo", "app-other"))
        s.put("member", member("mx", "fbo", "app-other", "psid-other"))
        cls.tok = s.token(APP, "bot:sendResponses", "bot:redirectMemberToNode")
        cls.tok_other = s.token("app-other", "bot:sendResponses")

    def post(self, url, body, key=None, tok=None, timeout=30):
        hdrs = {"Authorization": "Bearer " + (tok or self.tok)}
        if key is not None:
            hdrs["Idempotency-Key"] = key
        return http("POST", url + "/sendResponses", body, hdrs, timeout)

    def texts(self, word):
        return [r["body"]["message"]["text"] for r in self.s.sim_log()
                if word in r["body"].get("message", {}).get("text", "")]

    def test_1_key_must_be_printable_ascii(self):
        body = {"channelId": "fbi", "memberId": "mi", "response": [{"type": "TEXT", "text": "k"}]}
        a = self.post(self.urls[0], body, key="k" * 256)
        self.assert_error(a, 108, mentions="Idempotency-Key")
        a = self.post(self.urls[0], body, key="caf\u00e9".encode().decode("latin-1"))
        self.assert_error(a, 108, mentions="Idempotency-Key")
        self.assertEqual(self.texts("k"), [])

    def test_2_fifty_duplicates_over_three_instances_run_once(self):
        body = {"channelId": "fbi", "memberId": "mi",
                "response": [{"type": "TEXT", "text": "once-a slow300"},
                             {"type": "TEXT", "text": "once-b"}]}

        def one(i):
            return self.post(self.urls[i % 3], body, key="order-4711")

        with ThreadPoolExecutor(max_workers=50) as pool:
            answers = list(pool.map(one, range(50)))
        for a in answers:
            self.assertEqual(a.status, 200, a)
        self.assertEqual(len({a.raw for a in answers}), 1, "50 answers not identical")
        self.assertEqual(sorted(self.texts("once-")), ["once-a slow300", "once-b"])
        self.assertEqual(len(answers[0].json["sendResult"]["result"]), 2, answers[0])
        # the first one's answer carries no replay mark; every waiter's does
        self.assertEqual(sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers),
                         49)
        later = self.post(self.urls[1], body, key="order-4711")
        self.assertEqual((later.status, later.raw), (200, answers[0].raw))
        self.assertEqual(later.headers.get("Idempotent-Replayed"), "true")
        self.assertEqual(len(self.texts("once-")), 2, "the replay sent again")

    def test_3_same_key_other_body_is_124_and_nothing_runs(self):
        body = {"channelId": "fbi", "memberId": "mi", "response": [{"type": "TEXT", "text": "k3"}]}
        self.assertEqual(self.post(self.urls[0], body, key="key-3").status, 200)
        other = {"channelId": "fbi", "memberId": "mi",
                 "response": [{"type": "TEXT", "text": "k3-other"}]}
        a = self.post(self.urls[2], other, key="key-3")
        self.assert_error(a, 124, mentions="Idempotency-Key")
        self.assertEqual(self.texts("k3"), ["k3"])
        # the same key on the other route is another scope
        a = http("POST", self.urls[1] + "/redirectMemberToNode",
                 {"channelId": "fbi", "memberId": "mi", "redirect": {"tree": "nope", "node": "x"}},
                 {"Authorization": "Bearer " + self.tok, "Idempotency-Key": "key-3"})
        self.assertNotEqual(a.json.get("err_code"), 124, a)

    def test_4_another_app_key_is_independent(self):
        body = {"channelId": "fbi", "memberId": "mi", "response": [{"type": "TEXT", "text": "k4"}]}
        self.assertEqual(self.post(self.urls[0], body, key="shared-key").status, 200)
        body2 = {"channelId": "fbo", "memberId": "mx", "response": [{"type": "TEXT", "text": "k4"}]}
        a = self.post(self.urls[1], body2, key="shared-key", tok=self.tok_other)
        self.assertEqual(a.status, 200, a)
        self.assertNotIn("Idempotent-Replayed", a.headers)
        self.assertEqual(self.texts("k4"), ["k4", "k4"])

    def test_5_waiter_whose_deadline_passes_first_gets_123(self):
        body = {"channelId": "fbi", "memberId": "mi",
                "response": [{"type": "TEXT", "text": "k5 slow6000"}]}
        first = {}
        t = threading.Thread(target=lambda: first.update(
            a=self.post(self.long_url, body, key="key-5")))
        t.start()
        time.sleep(0.5)
        t0 = time.time()
        a = self.post(self.urls[0], body, key="key-5")
        took = time.time() - t0
        self.assert_error(a, 123, mentions="still running")
        self.assertLess(took, 4.0 + 1.0)
        t.join()
        self.assertEqual(first["a"].status, 200, first["a"])
        self.assertEqual(self.texts("k5"), ["k5 slow6000"])
        again = self.post(self.urls[2], body, key="key-5")
        self.assertEqual(again.raw, first["a"].raw)

    def test_5a_waiter_is_told_of_the_answer_at_once(self):
        """A duplicate told to wait marks the record, and the answer's script publishes for it
        (it publishes only then: a request alone has nobody to tell): the duplicate replays the
        answer as soon as it is stored, not at the first one's lease end (9 s + 2 s away)."""
        body = {"channelId": "fbi", "memberId": "mi",
                "response": [{"type": "TEXT", "text": "k5a slow1500"}]}
        record = idem_record(APP, "sendResponses", "key-5a")
        first = {}

        def run_first():
            first["a"] = self.post(self.long_url, body, key="key-5a")
            first["at"] = time.monotonic()
        t = threading.Thread(target=run_first)
        t.start()
        wait_for(lambda: self.redis_at(record, "EXISTS", record) == 1, timeout=10,
                 what="the key's record")
        a = self.post(self.urls[0], body, key="key-5a")
        done = time.monotonic()
        t.join()
        self.assertEqual((a.status, a.raw), (200, first["a"].raw))
        self.assertEqual(a.headers.get("Idempotent-Replayed"), "true")
        self.assertEqual(self.redis_at(record, "HGET", record, "w"), "1")
        self.assertLess(done - first["at"], 2.0)
        self.assertEqual(self.texts("k5a"), ["k5a slow1500"])

    def monitor(self, key):
        """Starts MONITOR on the server of key; returns (lines, stop): the commands it saw."""
        sock = socket.create_connection(("127.0.0.1", self.s.redis_port_of(key)), timeout=60)
        sock.sendall(b"MONITOR\r\n")
        lines = []

        def read():
            buf = b""
            while True:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                *done, buf = buf.split(b"\r\n")
                lines.extend(x.decode("utf-8", "replace") for x in done)
        t = threading.Thread(target=read, daemon=True)
        t.start()
        return lines, sock.close

    def test_6_one_member_in_the_order_it_reached_redis_across_instances(self):
        """20 clients, each 10 numbered requests of 3 responses, all to one member, spread
        over 3 instances: every message arrives, each request's three together, requests in
        the order in which their turns reached Redis (their RPUSH, seen by MONITOR), each
        client's in its own order."""
        queue = turn_queue("fbi", "mo")
        seen, stop = self.monitor(queue)
        time.sleep(0.2)  # MONITOR is on once its +OK came; what it misses fails the count below

        def client(c):
            out = []
            for n in range(10):
                rid = "ord-c%02d-n%02d" % (c, n)
                body = {"channelId": "fbi", "memberId": "mo",
                        "response": [{"type": "TEXT", "text": "%s-r%d" % (rid, k)}
                                     for k in range(3)]}
                a = http("POST", self.urls[(c + n) % 3] + "/sendResponses", body,
                         {"Authorization": "Bearer " + self.tok, "X-Request-Id": rid})
                out.append(a)
            return out

        with ThreadPoolExecutor(max_workers=20) as pool:
            answers = [a for out in pool.map(client, range(20)) for a in out]
        stop()
        for a in answers:
            self.assertEqual(a.status, 200, a)
        got = [r["body"]["message"]["text"] for r in self.s.sim_log()
               if r["recipient"] == "psid-order"]
        self.assertEqual(len(got), 600)
        self.assertEqual(len(set(got)), 600)
        requests = []
        for i in range(0, 600, 3):
            trio = got[i:i + 3]
            rid = trio[0][:-3]
            self.assertEqual(trio, ["%s-r%d" % (rid, k) for k in range(3)], "interleaved")
            requests.append(rid)
        ids = {}
        for m in re.finditer(r"request (ord-c\d\d-n\d\d): the member's turn, id ([0-9a-f]+)",
                             self.s.all_output()):
            ids[m.group(1)] = m.group(2)
        self.assertEqual(len(ids), 200)
        pushed = re.findall(r'"RPUSH" "%s" "([0-9a-f]+)"' % re.escape(queue), "\n".join(seen))
        arrived = {turn: i for i, turn in enumerate(pushed)}
        self.assertEqual(len(arrived), 200, "MONITOR saw every turn taken")
        self.assertEqual(requests, sorted(requests, key=lambda r: arrived[ids[r]]),
                         "not in the order the turns reached Redis")
        for c in range(20):
            mine = [r for r in requests if r.startswith("ord-c%02d-" % c)]
            self.assertEqual(mine, ["ord-c%02d-n%02d" % (c, n) for n in range(10)])

    def test_7_resume_after_kill_sends_only_the_rest(self):
        """An instance killed while the simulator holds the third of five responses: the retry
        with the key on another instance (once the lease ran out) reuses 1 and 2, reports 3 as
        125, sends 4 and 5; the simulator saw each at most once."""
        s = self.s
        s.start_gateway(port=free_port(), name="botgate-victim")
        victim = s.url
        s.url = self.urls[0]
        body = {"channelId": "fbi", "memberId": "mi",
                "response": [{"type": "TEXT", "text": "res-%d%s" % (k, " slow4000" if k == 3 else "")}
                             for k in range(1, 6)]}
        t = threading.Thread(target=lambda: self.post(victim, body, key="key-7", timeout=10))
        t.daemon = True
        t.start()
        wait_for(lambda: any(x.startswith("res-3") for x in self.texts("res-")), timeout=10,
                 what="the third response at the simulator")
        s.procs.pop("botgate-victim").kill()
        # the retry before the lease ran out waits, and gets 123 at its deadline
        a = self.post(self.urls[1], body, key="key-7")
        self.assert_error(a, 123)
        time.sleep(2.5)  # the victim's lease: its deadline (4 s) + 2 s from its begin
        a = self.post(self.urls[2], body, key="key-7")
        self.assertEqual(a.status, 200, a)
        elements = a.json["sendResult"]["result"]
        self.assertEqual(len(elements), 5, a)
        self.assertEqual([e["messageEvent"]["data"]["text"] for e in elements],
                         [b["text"] for b in body["response"]])
        self.assertNotIn("error", elements[0])
        self.assertNotIn("error", elements[1])
        self.assertEqual(elements[2]["error"]["err_code"], 125, elements[2])
        self.assertNotIn("error", elements[3])
        self.assertNotIn("error", elements[4])
        self.assertEqual(a.json["sendResult"]["ok"], 0)
        sent = self.texts("res-")
        self.assertEqual(sorted(sent), ["res-1", "res-2", "res-3 slow4000", "res-4", "res-5"])
        again = self.post(self.urls[0], body, key="key-7")
        self.assertEqual(again.raw, a.raw)
        self.assertEqual(len(self.texts("res-")), 5)

    def test_8_redirect_resumed_runs_nothing_again(self):
        """A redirect killed mid-run: the retry with the key sends nothing again and does not
        write the member back a second time; its answer says outcome unknown (125)."""
        s = self.s
        path = os.path.join(s.dir, "tree-idem.json")
        with open(path, "w") as f:
            json.dump({"_id": "TI", "app": APP, "name": "idem", "nodes": {"N": {
                "response": [{"type": "TEXT", "text": "node-1 slow4000"},
                             {"type": "TEXT", "text": "node-2"}],
                "postAction": [{"type": "addTags", "tags": ["visited"]}]}}}, f)
        s.ctl("tree", "import", path)
        s.put("member", member("mr", "fbi", APP, "psid-redirect"))
        s.start_gateway(port=free_port(), name="botgate-victim2")
        victim = s.url
        s.url = self.urls[0]
        body = {"channelId": "fbi", "memberId": "mr",
                "redirect": {"tree": "TI", "nodeCompositeId": "N"}}
        hdrs = {"Authorization": "Bearer " + self.tok, "Idempotency-Key": "key-8"}
        first = {}
        t = threading.Thread(target=lambda: first.update(a=http(
            "POST", victim + "/redirectMemberToNode", body, hdrs, timeout=10)))
        t.daemon = True
        t.start()
        wait_for(lambda: self.texts("node-1") or "a" in first, timeout=10,
                 what="the node's first response")
        self.assertNotIn("a", first)
        s.procs.pop("botgate-victim2").kill()
        time.sleep(6.5)  # the victim's lease: its deadline (4 s) + 2 s
        a = http("POST", self.urls[1] + "/redirectMemberToNode", body, hdrs)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["result"][0]["error"]["err_code"], 125, a)
        self.assertEqual(self.texts("node-"), ["node-1 slow4000"])
        rec = json.loads(s.redis("GET", "botgate:member:{fbi}:mr"))
        self.assertEqual(rec["tags"], [])
        again = http("POST", self.urls[2] + "/redirectMemberToNode", body, hdrs)
        self.assertEqual(again.raw, a.raw)
        self.assertEqual(again.headers.get("Idempotent-Replayed"), "true")

    def test_9_scripts_lost_by_redis_go_again_and_records_spread(self):
        """A Redis that lost its scripts (a restart, a failover, SCRIPT FLUSH) answers EVALSHA
        with NOSCRIPT: each script goes once more in full, and the key and the member's turn
        work as before. Each record's hash tag is its whole scope: one app's records spread over
        the cluster's masters."""
        s = self.s
        nodes = [s.redis.node(p) for p in s.redis.masters()] if hasattr(s.redis, "masters") \
            else [s.redis]

        def noscript():
            n = 0
            for node in nodes:
                for line in node("INFO", "errorstats").splitlines():
                    if line.startswith("errorstat_NOSCRIPT:"):
                        n += int(line.split("count=")[1].split(",")[0])
            return n

        before = noscript()
        s.redis("SCRIPT", "FLUSH")
        body = {"channelId": "fbi", "memberId": "mo", "response": [{"type": "TEXT", "text": "k9"}]}
        a = self.post(self.urls[0], body, key="k9-0")
        self.assertEqual(a.status, 200, a)
        record = idem_record(APP, "sendResponses", "k9-0")
        # the answer stored (a script nobody waits for) and the turn passed (another)
        wait_for(lambda: s.redis("HGET", record, "status") == "200", timeout=5,
                 what="the answer stored after NOSCRIPT")
        wait_for(lambda: s.redis("LLEN", turn_queue("fbi", "mo")) == 0, timeout=5,
                 what="the member's turn passed after NOSCRIPT")
        # begin and answer: each refused once by hash, then run in full (the member's turn
        # takes no script when nobody is ahead)
        self.assertGreaterEqual(noscript() - before, 2)
        again = self.post(self.urls[1], body, key="k9-0")
        self.assertEqual((again.status, again.raw), (200, a.raw))
        self.assertEqual(again.headers.get("Idempotent-Replayed"), "true")
        self.assertEqual(self.texts("k9"), ["k9"])
        for i in range(1, 12):
            self.assertEqual(self.post(self.urls[i % 3], body, key="k9-%d" % i).status, 200)
        pattern = "botgate:idem:{%d:%s:*k9-*" % (len(APP), APP)
        holders = [node for node in nodes if node("KEYS", pattern)]
        self.assertEqual(sum(len(node("KEYS", pattern)) for node in nodes), 12)
        if len(nodes) > 1:
            self.assertGreater(len(holders), 1, "one app's records on one master")

    def redis_at(self, key, *args):
        """A command about key sent to the node that holds it (MEMORY USAGE names it second)."""
        s = self.s
        return s.redis.node(s.redis_port_of(key))(*args) if hasattr(s.redis, "node") \
            else s.redis(*args)

    def test_9a_app_ids_with_colons_share_no_record(self):
        """Issue 27: app "A" with key "B:sendResponses:Z" and app "A:sendResponses:B" with key
        "Z" shared one record: the second got 124 on its first use. botgatectl now refuses that
        app id; a token record written with it by another system is not authorized; and the
        first app's record has a name of its own."""
        s = self.s
        app_a, app_ab = "A", "A:sendResponses:B"
        s.put("channel", facebook_channel("fb-a", app_a))
        s.put("member", member("ma", "fb-a", app_a, "psid-a"))
        tok_a = s.token(app_a, "bot:sendResponses")
        # what botgatectl wrote before, and another system still could: a token record and a
        # channel of that app
        tok_ab = "bgt_colon-app-token"
        s.redis("SET", "botgate:token:" + hashlib.sha256(tok_ab.encode()).hexdigest(),
                json.dumps({"app": app_ab, "scopes": ["bot:sendResponses"], "channels": None}))
        s.redis("SET", "botgate:channel:{fb-ab}", json.dumps(facebook_channel("fb-ab", app_ab)))
        s.redis("SET", "botgate:member:{fb-ab}:mab",
                json.dumps(member("mab", "fb-ab", app_ab, "psid-ab")))
        a = self.post(self.urls[0], {"channelId": "fb-a", "memberId": "ma",
                                     "response": [{"type": "TEXT", "text": "k10-a"}]},
                      key="B:sendResponses:Z", tok=tok_a)
        self.assertEqual(a.status, 200, a)
        b = self.post(self.urls[1], {"channelId": "fb-ab", "memberId": "mab",
                                     "response": [{"type": "TEXT", "text": "k10-ab"}]},
                      key="Z", tok=tok_ab)
        self.assertNotEqual(b.json.get("err_code"), 124, b)
        self.assert_unauthorized(b)
        self.assertEqual(self.texts("k10-"), ["k10-a"])
        self.assertEqual(s.redis("HGET", idem_record(app_a, "sendResponses", "B:sendResponses:Z"),
                                 "status"), "200")
        self.assertEqual(s.redis("EXISTS", idem_record(app_ab, "sendResponses", "Z")), 0)
        r = s.ctl("token", "create", "--app", app_ab, "--scope", "bot:sendResponses",
                  check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--app must be", r.stderr)

    def test_9b_two_idempotency_key_headers_are_108(self):
        """Which of two keys the client meant is unknown: neither is used, 108 names the
        header, nothing is sent."""
        body = json.dumps({"channelId": "fbi", "memberId": "mi",
                           "response": [{"type": "TEXT", "text": "k11"}]})
        port = int(self.urls[0].rsplit(":", 1)[1])
        for keys in (["k11-a", "k11-b"], ["k11-a", "k11-a"]):
            with self.subTest(keys=keys):
                c = HTTPConnection("127.0.0.1", port, timeout=30)
                c.putrequest("POST", "/sendResponses")
                c.putheader("Authorization", "Bearer " + self.tok)
                c.putheader("Content-Type", "application/json")
                for k in keys:
                    c.putheader("Idempotency-Key", k)
                c.putheader("Content-Length", str(len(body)))
                c.endheaders(body.encode())
                r = c.getresponse()
                a = Answer(r.status, r.read().decode(), dict(r.getheaders()), r.getheaders())
                c.close()
                self.assert_error(a, 108, mentions="Idempotency-Key")
                self.assertIn("once", a.json["err"])
        self.assertEqual(self.texts("k11"), [])
        self.assertEqual(self.s.redis("EXISTS", idem_record(APP, "sendResponses", "k11-a")), 0)
        # one header with either key works
        a = self.post(self.urls[0], json.loads(body), key="k11-a")
        self.assertEqual(a.status, 200, a)

    def test_9c_answered_record_keeps_the_answer_alone(self):
        """A keyed request with a 1 MB body: once answered, its record holds no progress (no
        'at', no e<i>: 2.4 MB for a day before) and takes little more than its answer."""
        s = self.s
        body = {"channelId": "fbi", "memberId": "mi",
                "response": [{"type": "TEXT", "text": "k12-%02d " % i + "x" * 65000}
                             for i in range(15)]}
        self.assertGreater(len(json.dumps(body)), 950000)
        a = self.post(self.urls[0], body, key="key-12")
        self.assertEqual(a.status, 200, a)
        record = idem_record(APP, "sendResponses", "key-12")
        wait_for(lambda: s.redis("HGET", record, "status") == "200", timeout=5,
                 what="the answer stored")
        fields = s.redis("HGETALL", record)
        names = sorted(fields[0::2])
        self.assertEqual(names, ["body", "code", "fp", "held", "owner", "status"])
        # the answer once, in an allocation that jemalloc rounds up to its size class (at most
        # a quarter more: 980 KB takes 1 MiB); with the progress kept, twice the answer
        used = self.redis_at(record, "MEMORY", "USAGE", record, "SAMPLES", "0")
        self.assertLess(used, 1.3 * len(a.raw.encode()), "record of %d bytes" % used)
        again = self.post(self.urls[1], body, key="key-12")
        self.assertEqual((again.status, again.raw), (200, a.raw))
        self.assertEqual(len(self.texts("k12-")), 15)

    def test_9d_answer_over_the_cap_replays_as_118(self):
        """An answer longer than a record keeps (1 MiB + 64 KiB: a redirect whose node sends
        25 texts of 50 KB): the first caller gets it whole; a replay gets 118 saying the
        request ran once and how it ended; nothing is sent again; the record stays small."""
        s = self.s
        path = os.path.join(s.dir, "tree-big.json")
        with open(path, "w") as f:
            json.dump({"_id": "TB", "app": APP, "name": "big", "nodes": {"N": {
                "response": [{"type": "TEXT", "text": "big-%02d " % i + "y" * 50000}
                             for i in range(25)]}}}, f)
        s.ctl("tree", "import", path)
        s.put("member", member("mb", "fbi", APP, "psid-big"))
        body = {"channelId": "fbi", "memberId": "mb",
                "redirect": {"tree": "TB", "nodeCompositeId": "N"}}
        hdrs = {"Authorization": "Bearer " + self.tok, "Idempotency-Key": "key-13"}
        first = http("POST", self.urls[0] + "/redirectMemberToNode", body, hdrs)
        self.assertEqual(first.status, 200, first.raw[:300])
        self.assertGreater(len(first.raw.encode()), 1024 * 1024 + 64 * 1024)
        record = idem_record(APP, "redirectMemberToNode", "key-13")
        wait_for(lambda: s.redis("HGET", record, "status") is not None, timeout=5,
                 what="the answer stored")
        again = http("POST", self.urls[1] + "/redirectMemberToNode", body, hdrs)
        self.assert_error(again, 118, mentions="ran once")
        self.assertIn("HTTP 200", again.json["err"])
        self.assertEqual(again.headers.get("Idempotent-Replayed"), "true")
        self.assertEqual(len(self.texts("big-")), 25)
        self.assertLess(self.redis_at(record, "MEMORY", "USAGE", record, "SAMPLES", "0"), 4096)

    def test_9e_dead_holder_turn_passes_at_its_deadline(self):
        """An instance killed while it holds a member's turn (its platform call hangs): the
        turn passes at the holder's deadline (4 s from its start), not 2 s later, so a request
        sent 1.5 s after the holder's start (deadline 5.5 s) is served, not 121."""
        s = self.s
        s.put("member", member("mk", "fbi", APP, "psid-kill"))
        s.start_gateway(port=free_port(), name="botgate-victim3")
        victim = s.url
        s.url = self.urls[0]
        hold = {"channelId": "fbi", "memberId": "mk",
                "response": [{"type": "TEXT", "text": "k14-hold slow6000"}]}
        t0 = time.time()
        t = threading.Thread(target=lambda: self.post(victim, hold, timeout=10))
        t.daemon = True
        t.start()
        wait_for(lambda: self.texts("k14-hold"), timeout=3, what="the holder's call")
        s.procs.pop("botgate-victim3").kill()
        self.assertLess(time.time() - t0, 1.5, "the holder took too long to start")
        # 1.5 s after the holder's start: its deadline is 1.5 s before this one's; 2 s past it
        # (the old lease) is 0.5 s after this one's
        time.sleep(1.5 - (time.time() - t0))
        sent = time.time()
        a = self.post(self.urls[1], {"channelId": "fbi", "memberId": "mk",
                                     "response": [{"type": "TEXT", "text": "k14-next"}]})
        self.assertEqual(a.status, 200, a)
        self.assertNotIn("error", a.json["sendResult"]["result"][0], a)
        self.assertGreater(time.time() - t0, 4.0 - 0.5, "served before the holder's deadline")
        self.assertLess(time.time() - sent, 4.0)
        self.assertEqual(self.texts("k14-"), ["k14-hold slow6000", "k14-next"])


if __name__ == "__main__":
    unittest.main()
