"""Redis Cluster: botgatectl and botgate on 3 masters + 3 replicas; a slot migrated under load,
by hand and with `redis-cli --cluster reshard` (ASK redirections, no error answer); a master
killed under load (200 or a clean 119 until its replica is promoted, then 200 only, /readyz 200
throughout, botgate never restarted, the cache tracking on the promoted master); the node of
the pub/sub subscriber killed (waiters still woken by notifications); a master lost for good
(instances, new ones too, ready and serving the other masters); every node killed (/readyz
503).

One cluster for the file: the tests run in the order of their names, each kill after the ones
that need the whole cluster."""
import hashlib
import json
import itertools
import os
import subprocess
import threading
import time
import unittest

os.environ["BOTGATE_TEST_REDIS"] = "cluster"  # before harness reads it

from harness import (BIN, REDIS_CLI, Redis, StackTest, facebook_channel,  # noqa: E402
                     free_port, http, keyslot, member, wait_for)

TENANTS = ["cl%d" % i for i in range(9)]


class Load:
    """Threads sending to every tenant in turn until stopped; each answer kept with its time."""

    def __init__(self, s, bodies, tok, threads=4):
        self.s, self.bodies, self.tok = s, bodies, tok
        self.answers = []  # (time, channel, status, err_code)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, i):
        n = i
        while not self.stopping.is_set():
            body = self.bodies[n % len(self.bodies)]
            n += 1
            try:
                a = self.s.send(body, self.tok, timeout=10)
                answer = (a.status, (a.json or {}).get("err_code"))
            except OSError as e:  # counted: botgate must answer every request
                answer = (0, repr(e))
            with self.lock:
                self.answers.append((time.time(), body["channelId"]) + answer)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join()
        return self.answers


class Probe:
    """A thread asking GET path every 50 ms until stopped; each status kept with its time."""

    def __init__(self, url):
        self.url, self.answers = url, []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stopping.wait(0.05):
            try:
                status = http("GET", self.url, timeout=5).status
            except OSError:
                status = 0
            self.answers.append((time.time(), status))

    def stop(self):
        self.stopping.set()
        self.thread.join()
        return self.answers


def node_call(port, *args):
    conn = Redis(port)
    try:
        return conn(*args)
    finally:
        conn.close()


def pubsub_subscribers(port):
    """Subscribers on a node that are not the cache's: every botgate subscriber is subscribed
    to its anchor channel; the cache's (one per worker on each master) to the invalidations
    as well."""
    counts = node_call(port, "PUBSUB", "NUMSUB", "botgate:subscriber", "__redis__:invalidate")
    return counts[1] - counts[3]


class Cluster(StackTest):
    stack_args = {"workers": 2}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.bodies = []
        for i, cid in enumerate(TENANTS):
            s.put("channel", facebook_channel(cid, "A"))
            s.put("member", member("m%d" % i, cid, "A", "psid-cl-%d" % i))
            cls.bodies.append({"channelId": cid, "memberId": "m%d" % i,
                               "response": [{"type": "TEXT", "text": "hi"}]})
        cls.tok = s.token("A", "bot:sendResponses")
        cls.pid = s.procs["botgate"].pid

    def kill_node(self, port):
        p = self.s.procs.pop("redis-%d" % port)
        p.kill()
        p.wait()

    def master_of(self, cid):
        return self.s.redis.port_of("botgate:channel:{%s}" % cid)

    def node_keys(self, port, pattern):
        conn = Redis(port)
        try:
            return conn("KEYS", pattern)
        finally:
            conn.close()

    def test_0_bad_cluster_settings_stop_botgate_at_start(self):
        seeds = self.s.redis_env()["BOTGATE_REDIS_CLUSTER"]
        cases = [
            ({"BOTGATE_REDIS_CLUSTER": "127.0.0.1"}, "expected host:port"),
            ({"BOTGATE_REDIS_CLUSTER": "nohost.invalid:7000"}, "cannot resolve"),
            ({"BOTGATE_REDIS_PREFIX": "bg{x}:"}, "must not contain { or }"),
            ({"BOTGATE_REDIS_URL": "redis://127.0.0.1:6379/3"}, "database 0 only"),
            ({"BOTGATE_REDIS_SENTINELS": "127.0.0.1:26379"}, "exclude each other"),
        ]
        for extra, message in cases:
            with self.subTest(extra=extra):
                env = self.s.gateway_env()
                env.update({"BOTGATE_REDIS_CLUSTER": seeds, "BOTGATE_LISTEN": "127.0.0.1:0"})
                env.update(extra)
                r = subprocess.run([os.path.join(BIN, "botgate")], env=env, capture_output=True,
                                   text=True, timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)

    def test_0_a_dead_first_seed_is_skipped(self):
        s = self.s
        saved = (s.port, s.url, s.log_path)
        seeds = "127.0.0.1:%d,%s" % (free_port(), s.redis_env()["BOTGATE_REDIS_CLUSTER"])
        try:
            started = time.time()
            s.start_gateway(port=free_port(), name="botgate-seeds",
                            extra={"BOTGATE_REDIS_CLUSTER": seeds})
            self.assertLess(time.time() - started, 10)
            a = s.send(self.bodies[0], self.tok)
            self.assertEqual(a.status, 200, a)
            self.assertEqual(s.stop_gateway("botgate-seeds"), 0)
        finally:
            s.port, s.url, s.log_path = saved

    def test_1_records_spread_and_botgatectl_follows_the_slots(self):
        s = self.s
        masters = {self.master_of(cid) for cid in TENANTS}
        self.assertEqual(len(masters), 3, "9 channels should land on all 3 masters")
        for cid in TENANTS:
            port = self.master_of(cid)
            # every key of the channel is on its master (one hash tag, one slot) ...
            keys = self.node_keys(port, "botgate:*{%s}*" % cid)
            self.assertIn("botgate:channel:{%s}" % cid, keys)
            self.assertEqual(len(keys), 3, keys)  # channel, member, recipient
            # ... and botgatectl reads it back through whichever seed it asked first
            self.assertIn('"_id": "%s"' % cid, s.ctl("get", "channel", cid).stdout)
        for body in self.bodies:
            a = s.send(body, self.tok)
            self.assertEqual(a.status, 200, a)
        # a tree imported through its temporary key, renamed in the same slot
        tree = {"_id": "TCL", "app": "A", "name": "t",
                "nodes": {"N1": {"name": "n", "response": [{"type": "TEXT", "text": "x"}]}}}
        path = os.path.join(s.dir, "tree.json")
        with open(path, "w") as f:
            json.dump(tree, f)
        s.ctl("tree", "import", path)
        self.assertIn('"N1"', s.ctl("get", "tree", "TCL").stdout)
        self.assertEqual(s.redis("KEYS", "*import*"), [])
        # a token revoked with botgatectl is refused at once
        tok = s.token("A", "bot:sendResponses")
        self.assertEqual(s.send(self.bodies[0], tok).status, 200)
        s.ctl("token", "revoke", tok)
        self.assert_unauthorized(s.send(self.bodies[0], tok))

    def test_2_slot_migrated_under_load(self):
        s = self.s
        cid = TENANTS[0]
        slot = keyslot(cid)
        src = self.master_of(cid)
        dst = next(p for p in s.redis.masters() if p != src)
        src_c, dst_c = Redis(src), Redis(dst)
        try:
            src_id, dst_id = src_c("CLUSTER", "MYID"), dst_c("CLUSTER", "MYID")
            asking_before = self.asking_calls(dst_c)
            load = Load(s, [b for b in self.bodies if b["channelId"] == cid], self.tok)
            time.sleep(0.5)
            dst_c("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src_c("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            keys = src_c("CLUSTER", "GETKEYSINSLOT", slot, 100)
            # the channel, its member and recipient, and whatever else is kept under the
            # channel's tag (the rate limiter's keys): all of them move
            self.assertGreaterEqual(len(keys), 3, keys)
            self.assertTrue(all(("{%s}" % cid) in k for k in keys), keys)
            for key in keys:  # one by one, requests meanwhile find some moved, some not
                src_c("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", key)
                time.sleep(0.4)
            # the end told to the target first, then the source, as redis-cli does
            for port in [dst, src] + [p for p in s.redis.masters() if p not in (src, dst)]:
                conn = Redis(port)
                conn("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
                conn.close()
            time.sleep(1.0)  # MOVED from now on: botgate reads the map again
            answers = load.stop()
            asking_after = self.asking_calls(dst_c)
        finally:
            src_c.close()
            dst_c.close()
        s.redis.refresh()
        self.assertEqual(s.redis.port_of("botgate:channel:{%s}" % cid), dst)
        bad = [a for a in answers if a[2] != 200]
        self.assertGreater(len(answers), 50)
        self.assertEqual(bad, [], "error answers while the slot moved")
        self.assertGreater(asking_after, asking_before, "no ASK redirection was followed")
        a = s.send(self.bodies[0], self.tok)
        self.assertEqual(a.status, 200, a)

    def test_3_slots_resharded_with_redis_cli_under_load(self):
        s = self.s
        s.redis.refresh()
        src, dst = s.redis.masters()[:2]
        ids = {p: node_call(p, "CLUSTER", "MYID") for p in (src, dst)}
        # redis-cli moves a source's slots lowest first: the load's channels are made in them
        moving = sorted(i for i, p in enumerate(s.redis.slots) if p == src)[:4]
        cids = []
        for i in itertools.count():
            if keyslot("rs%d" % i) in moving:
                cids.append("rs%d" % i)
                if len(cids) == 3:
                    break
        bodies = []
        for i, cid in enumerate(cids):
            s.put("channel", facebook_channel(cid, "A"))
            s.put("member", member("mr%d" % i, cid, "A", "psid-rs-%d" % i))
            bodies.append({"channelId": cid, "memberId": "mr%d" % i,
                           "response": [{"type": "TEXT", "text": "hi"}]})
            # more keys in the channels' slots: the migration lasts long enough for requests
            # to find some of the load's keys moved and some not (ASK)
            pairs = [x for n in range(1500) for x in ("fill:{%s}:%d" % (cid, n), "x")]
            s.redis("MSET", *pairs)
        for b in bodies:
            self.assertEqual(s.send(b, self.tok).status, 200)
        # redis-cli refuses to reshard until every node agrees on the slots (test_2's move)
        wait_for(lambda: subprocess.run([REDIS_CLI, "--cluster", "check", "127.0.0.1:%d" % src],
                                        capture_output=True).returncode == 0,
                 what="redis-cli --cluster check")
        dst_c = Redis(dst)
        try:
            asking_before = self.asking_calls(dst_c)
            load = Load(s, bodies, self.tok)
            time.sleep(0.5)
            r = subprocess.run([REDIS_CLI, "--cluster", "reshard", "127.0.0.1:%d" % src,
                                "--cluster-from", ids[src], "--cluster-to", ids[dst],
                                "--cluster-slots", str(len(moving)), "--cluster-pipeline", "1",
                                "--cluster-yes"], capture_output=True, text=True, timeout=120)
            time.sleep(1.0)  # MOVED from now on: botgate reads the map again
            answers = load.stop()
            asking_after = self.asking_calls(dst_c)
        finally:
            dst_c.close()
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr)
        s.redis.refresh()
        for cid in cids:
            self.assertEqual(s.redis.port_of("botgate:channel:{%s}" % cid), dst, cid)
            self.assertEqual(self.node_keys(src, "*{%s}*" % cid), [])
            self.assertIn("botgate:channel:{%s}" % cid, self.node_keys(dst, "*{%s}*" % cid))
        bad = [a for a in answers if a[2] != 200]
        self.assertGreater(len(answers), 50)
        self.assertEqual(bad, [], "error answers while redis-cli moved the slots")
        # Whether a request meets a half-moved slot here is up to redis-cli's pace and the
        # machine's load (it failed under make test -j2 on a busy machine): test_2 moves the
        # keys one by one with pauses and asserts the ASK redirection; here it is only shown.
        if asking_after == asking_before:
            print("test_3: no request met a half-moved slot in this run (no ASK)")
        for b in bodies:
            self.assertEqual(s.send(b, self.tok).status, 200)

    @staticmethod
    def asking_calls(conn):
        for line in conn("INFO", "commandstats").split("\r\n"):
            if line.startswith("cmdstat_asking:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def test_4_master_killed_under_load(self):
        s = self.s
        # a master that does not hold the token: the other channels' sends must go on
        token_key = "botgate:token:" + hashlib.sha256(self.tok.encode()).hexdigest()
        self.assertIsNotNone(s.redis("GET", token_key))
        cid = next(c for c in TENANTS if self.master_of(c) != s.redis.port_of(token_key))
        victim = self.master_of(cid)
        victims = {c for c in TENANTS if self.master_of(c) == victim}
        load = Load(s, self.bodies, self.tok)
        ready = Probe(s.url + "/readyz")
        time.sleep(0.5)
        self.kill_node(victim)
        killed = time.time()
        s.wait_failover(victim)  # a replica took the slots over
        promoted = time.time()
        body = next(b for b in self.bodies if b["channelId"] == cid)
        wait_for(lambda: s.send(body, self.tok).status == 200, timeout=10,
                 what="sends to the promoted master")
        time.sleep(2.0)
        answers = load.stop()
        readiness = ready.stop()
        self.assertEqual(s.procs["botgate"].pid, self.pid)
        self.assertIsNone(s.procs["botgate"].poll(), "botgate died")
        self.assertEqual(http("GET", s.url + "/readyz").status, 200)
        kinds = {(a[2], a[3]) for a in answers}
        self.assertTrue(kinds <= {(200, None), (500, 119)}, kinds)
        # the others' masters were never down: only the victim's channels may have failed
        failed = {a[1] for a in answers if a[2] != 200}
        self.assertTrue(failed <= victims, (failed, victims))
        # once the replica is promoted and botgate saw it (a map read each 500 ms), 200 only
        late = [a for a in answers if a[0] > promoted + 1.5 and a[2] != 200]
        self.assertEqual(late, [], "errors after the failover (killed %.2f s before promotion)"
                         % (promoted - killed))
        self.assertGreater(len([a for a in answers if a[0] > promoted + 1.5]), 20)
        # the other masters served throughout: no reason to take the instance out of a load
        # balancer (every instance sees the same failover at the same time)
        self.assertGreater(len([r for r in readiness if killed < r[0] < promoted]), 5)
        self.assertEqual({r[1] for r in readiness}, {200}, "/readyz during the failover")
        self.assertEqual(http("GET", s.url + "/healthz").status, 200)
        self.cache_tracks_on_promoted_master(cid)

    def cache_tracks_on_promoted_master(self, cid):
        """The promoted master got its own pair of connections with tracking: the cache serves
        again (which it does only while every master's pair tracks), and a token on that
        master revoked is refused at once."""
        s = self.s
        promoted = self.master_of(cid)
        wait_for(lambda: sum(" flags=" in c and "t" in c.split(" flags=")[1].split(" ")[0]
                             for c in node_call(promoted, "CLIENT", "LIST").splitlines()) >= 2,
                 what="a tracking command connection per worker on the promoted master")
        for _ in range(30):
            tok = s.token("A", "bot:sendResponses")
            key = "botgate:token:" + hashlib.sha256(tok.encode()).hexdigest()
            if s.redis.port_of(key) == promoted:
                break
        self.assertEqual(s.redis.port_of(key), promoted)
        body = next(b for b in self.bodies if b["channelId"] == cid)

        def cached():  # member GET and the rate limit only: token and channel from the cache
            before = s.metric("botgate_redis_commands_total")
            for _ in range(24):
                self.assertEqual(s.send(body, tok).status, 200)
            return s.metric("botgate_redis_commands_total") - before == 24 * 2
        wait_for(cached, timeout=20, what="the cache serving again")
        s.ctl("token", "revoke", tok)
        for _ in range(24):
            self.assert_unauthorized(s.send(body, tok))

    def test_5_waiters_woken_after_the_subscribers_node_dies(self):
        """An Idempotency-Key duplicate waits for the first request's answer on the worker's
        subscriber. The subscriber's node is killed while it waits: the subscriber moves to
        another node and subscribes again, and the duplicate is answered by the notification
        as the first request ends, not by its fallback (the first's lease end, or its own
        deadline: 20 s here). The subscriber starts at the first seed, a replica, so that the
        kill leaves every slot served."""
        s = self.s
        s.redis.refresh()
        alive = [p for p in s.cluster_ports if "redis-%d" % p in s.procs]
        replica = next(p for p in alive if p not in s.redis.masters())
        seeds = [replica] + [p for p in alive if p != replica]
        saved = (s.port, s.url, s.log_path)
        try:
            s.start_gateway(port=free_port(), name="botgate-sub", extra={
                "BOTGATE_WORKERS": "1", "BOTGATE_REQUEST_TIMEOUT_MS": "20000",
                "BOTGATE_UPSTREAM_TIMEOUT_MS": "15000",
                "BOTGATE_REDIS_CLUSTER": ",".join("127.0.0.1:%d" % p for p in seeds)})
            url = s.url
        finally:
            s.port, s.url, s.log_path = saved
        cid = TENANTS[1]

        def post(text, key, into):
            body = {"channelId": cid, "memberId": "m1",
                    "response": [{"type": "TEXT", "text": text}]}
            a = http("POST", url + "/sendResponses", body,
                     {"Authorization": "Bearer " + self.tok, "Idempotency-Key": key}, 30)
            into.append((time.time(), a))

        def first_and_duplicate(text, key, between=None):
            first, dup = [], []
            t1 = threading.Thread(target=post, args=(text, key, first))
            t1.start()
            time.sleep(0.5)
            t2 = threading.Thread(target=post, args=(text, key, dup))
            t2.start()
            if between:
                between()
            t1.join()
            t2.join()
            (t_first, a), (t_dup, d) = first[0], dup[0]
            self.assertEqual(a.status, 200, a)
            self.assertEqual((d.status, d.raw), (200, a.raw))
            self.assertEqual(d.headers.get("Idempotent-Replayed"), "true")
            # woken by the notification, not 15 s later by the fallback
            self.assertLess(t_dup - t_first, 5.0)

        before = []

        def kill_the_subscribers_node():
            wait_for(lambda: pubsub_subscribers(replica) >= 1, timeout=5,
                     what="the duplicate's subscriber on the first seed")
            # every worker's subscriber counts here (the waiters' and the rate-pause board's,
            # which the other instance's workers hold too): none may be lost or doubled
            before.append(sum(pubsub_subscribers(p) for p in alive))
            self.kill_node(replica)

        first_and_duplicate("sub-1 slow3000", "sub-key-1", kill_the_subscribers_node)
        wait_for(lambda: sum(pubsub_subscribers(p) for p in alive if p != replica) >= before[0],
                 timeout=10, what="every subscriber back on a live node")
        self.assertEqual(sum(pubsub_subscribers(p) for p in alive if p != replica), before[0])
        # and a wait that starts after the move
        first_and_duplicate("sub-2 slow1500", "sub-key-2")
        self.assertEqual(s.stop_gateway("botgate-sub"), 0)

    def test_6_master_lost_for_good_instances_stay_ready(self):
        """A master with no replica left is killed: its slots have no master from then on.
        Running instances stay ready and serve the other masters' channels; a new instance
        becomes ready too (a connect timeout after its first map), and does the same."""
        s = self.s
        token_master = s.redis.port_of(
            "botgate:token:" + hashlib.sha256(self.tok.encode()).hexdigest())
        lone = next(p for p in s.redis.masters() if p != token_master and
                    "connected_slaves:0" in node_call(p, "INFO", "replication"))
        lost = [b for b in self.bodies if self.master_of(b["channelId"]) == lone]
        served = [b for b in self.bodies if self.master_of(b["channelId"]) != lone]
        self.assertTrue(lost and served)
        self.kill_node(lone)

        def answers(url):
            for b in lost:
                a = http("POST", url + "/sendResponses", b,
                         {"Authorization": "Bearer " + self.tok})
                self.assert_error(a, 119)
            for b in served:
                a = http("POST", url + "/sendResponses", b,
                         {"Authorization": "Bearer " + self.tok})
                self.assertEqual(a.status, 200, a)

        wait_for(lambda: s.send(lost[0], self.tok).status == 500, timeout=5,
                 what="the lost master's channels refused")
        answers(s.url)
        self.assertTrue(all(http("GET", s.url + "/readyz").status == 200 for _ in range(8)))
        saved = (s.port, s.url, s.log_path)
        try:
            s.start_gateway(port=free_port(), name="botgate-late")  # waits for /readyz 200
            answers(s.url)
            self.assertEqual(s.stop_gateway("botgate-late"), 0)
        finally:
            s.port, s.url, s.log_path = saved

    def test_7_every_node_killed_readyz_503(self):
        s = self.s
        self.assertEqual(http("GET", s.url + "/readyz").status, 200)
        for port in s.cluster_ports:
            if "redis-%d" % port in s.procs:
                self.kill_node(port)
        wait_for(lambda: all(http("GET", s.url + "/readyz").status == 503 for _ in range(8)),
                 timeout=10, what="/readyz 503 on every worker with no node reachable")
        a = http("GET", s.url + "/readyz")
        self.assertEqual(a.json.get("err_code"), 119, a)
        self.assertEqual(http("GET", s.url + "/healthz").status, 200)
        self.assert_error(s.send(self.bodies[0], self.tok), 119)


if __name__ == "__main__":
    unittest.main()
