"""Redis high availability through Sentinel: one master, one replica and three sentinels on
loopback. botgate finds the master through the sentinels, and when the master dies under load
it follows the failover without a restart; requests during the switch get clean 119 answers."""
import os
import shutil
import subprocess
import threading
import time
import unittest

from harness import (Redis, Stack, REDIS_SERVER, facebook_channel, free_port, http, member,
                     wait_for)

MASTER = "botgate-master"


def sentinel_binary():
    found = shutil.which("redis-sentinel")
    return [found] if found else [REDIS_SERVER, "--sentinel"]


class SentinelFailover(unittest.TestCase):
    def setUp(self):
        try:
            self.start()
        except BaseException:
            if hasattr(self, "s"):  # Stack() cleans up after itself when it fails
                self.s.close()
            raise

    def start(self):
        self.s = Stack(workers=2, start_gateway=False,
                       env={"BOTGATE_REQUEST_TIMEOUT_MS": "3000",
                            "BOTGATE_REDIS_TIMEOUT_MS": "500",
                            "BOTGATE_REDIS_CONNECT_TIMEOUT_MS": "300"})
        s = self.s
        self.master_port = s.redis_port
        # the replica
        self.replica_port = free_port()
        with open(os.path.join(s.dir, "replica.log"), "ab") as log:
            s.procs["replica"] = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.replica_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", s.dir,
                 "--replicaof", "127.0.0.1", str(self.master_port)], stdout=log, stderr=log)
        self.replica = Redis(self.replica_port)
        wait_for(lambda: "master_link_status:up" in self.replica("INFO", "replication"),
                 what="replication")
        # three sentinels
        self.sentinel_ports = []
        for i in range(3):
            port = free_port()
            conf = os.path.join(s.dir, "sentinel%d.conf" % i)
            with open(conf, "w") as f:
                f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                        "sentinel monitor %s 127.0.0.1 %d 2\n"
                        "sentinel down-after-milliseconds %s 600\n"
                        "sentinel failover-timeout %s 3000\n"
                        "sentinel parallel-syncs %s 1\n"
                        % (port, s.dir, MASTER, self.master_port, MASTER, MASTER, MASTER))
            with open(os.path.join(s.dir, "sentinel%d.log" % i), "ab") as log:
                s.procs["sentinel%d" % i] = subprocess.Popen(sentinel_binary() + [conf],
                                                             stdout=log, stderr=log)
            self.sentinel_ports.append(port)
        for port in self.sentinel_ports:
            q = Redis(port)
            wait_for(lambda: q("SENTINEL", "get-master-addr-by-name", MASTER) is not None,
                     what="sentinel %d" % port)
            q.close()
        s.extra_env["BOTGATE_REDIS_SENTINELS"] = ",".join(
            "127.0.0.1:%d" % p for p in self.sentinel_ports)
        s.extra_env["BOTGATE_REDIS_MASTER"] = MASTER
        # the URL points nowhere useful: the master must come from the sentinels
        s.extra_env["BOTGATE_REDIS_URL"] = "redis://127.0.0.1:1/0"
        s.start_gateway()

    def tearDown(self):
        codes = self.s.close()
        self.replica.close()
        self.assertEqual(codes.get("botgate"), 0, self.s.all_output()[-5000:])
        self.s.cleanup_dir()

    def test_finds_the_master_and_follows_a_failover(self):
        s = self.s
        s.put("channel", facebook_channel("fs", "A"))
        s.put("member", member("ms", "fs", "A", "psid-1"))
        tok = s.token("A", "bot:sendResponses")
        body = {"channelId": "fs", "memberId": "ms", "response": [{"type": "TEXT", "text": "x"}]}
        self.assertEqual(s.send(body, tok).status, 200)
        wait_for(lambda: self.replica("GET", "botgate:channel:{fs}") is not None,
                 what="data on the replica")

        results, stop = [], threading.Event()

        def load():
            while not stop.is_set():
                t0 = time.time()
                a = s.send(body, tok, timeout=10)
                results.append((time.time(), a.status, (a.json or {}).get("err_code"),
                                time.time() - t0))

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        killed_at = time.time()
        s.procs.pop("redis").kill()   # the master dies
        s.redis.close()
        # the sentinels promote the replica; botgate must follow without a restart
        q = Redis(self.sentinel_ports[0])
        wait_for(lambda: q("SENTINEL", "get-master-addr-by-name", MASTER)[1]
                 == str(self.replica_port), timeout=20, what="failover")
        q.close()
        wait_for(lambda: s.send(body, tok).status == 200, timeout=15,
                 what="botgate on the new master")
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        statuses = {(st, code) for _, st, code, _ in results}
        self.assertTrue(statuses <= {(200, None), (500, 119)}, statuses)
        self.assertGreater(sum(1 for r in results if r[0] > killed_at and r[1] == 200), 0)
        self.assertLess(max(r[3] for r in results), 3.5)  # every answer within the deadline
        self.assertEqual(http("GET", s.url + "/readyz").status, 200)
        # it writes to the new master
        self.assertEqual(self.replica("ROLE")[0], "master")
        a = s.send({"channelId": "fs", "recipientId": "psid-after-failover",
                    "response": [{"type": "TEXT", "text": "y"}]}, tok)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(self.replica("GET", "botgate:recipient:{fs}:psid-after-failover"),
                         a.json["member"])


if __name__ == "__main__":
    unittest.main()
