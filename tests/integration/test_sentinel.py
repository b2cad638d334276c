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


def start_sentinels(s, n, conf):
    """n sentinels on free ports, each configured with conf % (port, dir) plus the lines after;
    returns their ports once each knows the master."""
    ports = []
    for i in range(n):
        port = free_port()
        path = os.path.join(s.dir, "sentinel%d.conf" % i)
        with open(path, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\n" % (port, s.dir) + conf)
        with open(os.path.join(s.dir, "sentinel%d.log" % i), "ab") as log:
            s.procs["sentinel%d" % i] = subprocess.Popen(sentinel_binary() + [path],
                                                         stdout=log, stderr=log)
        ports.append(port)
    for port in ports:
        q = Redis(port)
        wait_for(lambda: q("SENTINEL", "get-master-addr-by-name", MASTER) is not None,
                 what="sentinel %d" % port)
        q.close()
    return ports


class SentinelTest(unittest.TestCase):
    """A Stack whose botgate finds its master through sentinels that start() sets up."""

    def setUp(self):
        self.extra = []  # more Redis connections to close
        try:
            self.start()
        except BaseException:
            if hasattr(self, "s"):  # Stack() cleans up after itself when it fails
                self.s.close()
            raise

    def tearDown(self):
        codes = self.s.close()
        for r in self.extra:
            r.close()
        self.assertEqual(codes.get("botgate"), 0, self.s.all_output()[-5000:])
        self.s.cleanup_dir()

    def start_gateway(self, sentinels, **env):
        s = self.s
        s.extra_env["BOTGATE_REDIS_SENTINELS"] = ",".join(sentinels)
        s.extra_env["BOTGATE_REDIS_MASTER"] = MASTER
        # the URL points nowhere useful: the master must come from the sentinels
        s.extra_env["BOTGATE_REDIS_URL"] = "redis://127.0.0.1:1/0"
        s.extra_env.update(env)
        s.start_gateway()

    def member_and_body(self, cid, mid):
        """A channel, a member and a token: the token and a body that sends to the member."""
        s = self.s
        s.put("channel", facebook_channel(cid, "A"))
        s.put("member", member(mid, cid, "A", "psid-" + mid))
        body = {"channelId": cid, "memberId": mid, "response": [{"type": "TEXT", "text": "x"}]}
        return s.token("A", "bot:sendResponses"), body


class SentinelFailover(SentinelTest):
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
        self.extra.append(self.replica)
        wait_for(lambda: "master_link_status:up" in self.replica("INFO", "replication"),
                 what="replication")
        ports = start_sentinels(s, 3, "sentinel monitor %s 127.0.0.1 %d 2\n"
                                      "sentinel down-after-milliseconds %s 600\n"
                                      "sentinel failover-timeout %s 3000\n"
                                      "sentinel parallel-syncs %s 1\n"
                                % (MASTER, self.master_port, MASTER, MASTER, MASTER))
        self.sentinel_ports = ports
        self.start_gateway(["127.0.0.1:%d" % p for p in ports])

    def test_finds_the_master_and_follows_a_failover(self):
        s = self.s
        tok, body = self.member_and_body("fs", "ms")
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


# A resolver that takes 2 s to look "localhost" up, off the main thread only: botgate's start-up
# (the main thread) may block, a worker's event loop must not. Loaded with LD_PRELOAD; it
# changes nothing of botgate itself.
SLOW_DNS_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **) =
        (int (*)(const char *, const char *, const struct addrinfo *, struct addrinfo **))
            dlsym(RTLD_NEXT, "getaddrinfo");

    if (node != NULL && strcmp(node, "localhost") == 0 && syscall(SYS_gettid) != getpid())
        usleep(2000000);
    return real(node, service, hints, res);
}
"""


class SentinelByName(SentinelTest):
    """Sentinels given as localhost:PORT, announcing the master by name too (announce-hostnames).
    The names are looked up at start-up (before the loops run) and then on each worker's loop
    with libevent's evdns (hosts file, then DNS over a non-blocking socket): no getaddrinfo()
    on a worker thread, where it would stop every request of that worker while it waits. The
    slow resolver below makes such a call visible: a reconnect that looked a name up with it
    would hold /healthz for 2 s."""

    def start(self):
        cc = shutil.which("cc")
        if cc is None:
            self.skipTest("no C compiler for the slow resolver")
        self.s = s = Stack(workers=1, start_gateway=False,
                           env={"BOTGATE_REDIS_CONNECT_TIMEOUT_MS": "300"})
        shim, src = os.path.join(s.dir, "slowdns.so"), os.path.join(s.dir, "slowdns.c")
        with open(src, "w") as f:
            f.write(SLOW_DNS_C)
        subprocess.run([cc, "-shared", "-fPIC", "-o", shim, src, "-ldl"], check=True)
        ports = start_sentinels(s, 2, "sentinel resolve-hostnames yes\n"
                                      "sentinel announce-hostnames yes\n"
                                      "sentinel monitor %s localhost %d 1\n"
                                % (MASTER, s.redis_port))
        q = Redis(ports[0])
        self.assertEqual(q("SENTINEL", "get-master-addr-by-name", MASTER),
                         ["localhost", str(s.redis_port)])
        q.close()
        self.start_gateway(["localhost:%d" % p for p in ports], LD_PRELOAD=shim,
                           # the sanitizers' runtime wants to be first; the shim only wraps
                           # getaddrinfo
                           ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "")
                           + ":verify_asan_link_order=0")

    def test_names_are_looked_up_without_blocking_the_loop(self):
        s = self.s
        tok, body = self.member_and_body("fn", "mn")
        self.assertEqual(s.send(body, tok).status, 200)
        # botgate loses its connection: it asks the sentinels again, who name the master
        # "localhost"; meanwhile the one worker keeps answering
        self.assertGreaterEqual(s.redis("CLIENT", "KILL", "TYPE", "normal"), 1)
        slowest, t_end = 0.0, time.time() + 2.5
        while time.time() < t_end:
            t0 = time.time()
            self.assertEqual(http("GET", s.url + "/healthz", timeout=10).status, 200)
            slowest = max(slowest, time.time() - t0)
            time.sleep(0.05)
        self.assertLess(slowest, 1.0, "a worker's loop waited for a name lookup")
        wait_for(lambda: s.send(body, tok).status == 200, timeout=10, what="botgate reconnected")


if __name__ == "__main__":
    unittest.main()
