"""contract.md sections 9, 12 and 14 on a Redis Cluster: the outbox's shards spread over the
masters, each read by a blocking connection to its slot's master; 202 then delivered, in order
per member, across three instances with one killed, and against the member's sync requests;
webhook events through the outbox; and a shard's slot moved while its requests are queued (none
lost, none twice, still in order)
(broadcasts: test_cluster_broadcasts.py). Cluster only (BOTGATE_TEST_REDIS=cluster, tests/CMakeLists.txt)."""
import time
import unittest

import test_outbox
import test_webhooks
from harness import CLUSTER, Redis, keyslot, member, wait_for

APP = test_outbox.APP


@unittest.skipUnless(CLUSTER, "a Redis Cluster (BOTGATE_TEST_REDIS=cluster)")
class ClusterOutbox(test_outbox.Case):
    MEMBERS = 12

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for i in range(cls.MEMBERS):
            cls.s.put("member", member("cm%d" % i, "fbq", APP, "psid-cm%d" % i))

    def stream_master(self, shard):
        return self.s.redis.port_of("botgate:outbox:{%d}" % shard)

    def test_1_every_shard_delivered_in_order(self):
        sent = []
        for n in range(3 * self.MEMBERS):
            m = "cm%d" % (n % self.MEMBERS)
            a = self.post({"channelId": "fbq", "memberId": m,
                           "response": [{"type": "TEXT", "text": "cs%02d" % n}]})
            self.assertEqual(a.status, 202, a)
            sent.append((a.json["requestId"], m))
        shards = {int(rid[:2], 16) for rid, _ in sent}
        masters = {self.stream_master(sh) for sh in shards}
        self.assertGreater(len(masters), 1, "every member's shard on one master: %s" % shards)
        for rid, _ in sent:
            self.assertEqual(self.wait_final(rid)["status"], "done", rid)
        took = self.texts("cs")
        self.assertEqual(sorted(took), ["cs%02d" % n for n in range(3 * self.MEMBERS)])
        for i in range(self.MEMBERS):
            mine = [t for t in took if int(t[2:]) % self.MEMBERS == i]
            self.assertEqual(mine, sorted(mine), "member cm%d out of order" % i)

    def test_4_sync_after_async_goes_after_it(self):
        """As on one server (test_outbox, test_7), though the member's outbox shard and its
        channel are in other slots: its turn queue is in the shard's."""
        self.check_sync_after_async("cko-")

    def test_5_async_after_sync_waits_for_its_turn(self):
        """The other way round (test_outbox, test_8)."""
        self.check_async_after_sync("ckt-")

    def test_3_shard_slot_moved_while_queued(self):
        """The slot of the member's shard moves to another master, key by key as redis-cli
        does, while its requests wait in the stream (the platform takes 300 ms a call): the
        reader follows the MOVED to the new master; every request is delivered once, in
        order."""
        s = self.s
        s.sim("POST", "/_sim/config", {"latency_ms": 300})
        try:
            rids = []
            for n in range(24):
                a = self.post({"channelId": "fbq", "memberId": "cm0",
                               "response": [{"type": "TEXT", "text": "mv%02d" % n}]})
                self.assertEqual(a.status, 202, a)
                rids.append(a.json["requestId"])
            shard = int(rids[0][:2], 16)
            slot = keyslot("{%d}" % shard)
            src = self.stream_master(shard)
            dst = next(p for p in s.redis.masters() if p != src)
            wait_for(lambda: len(self.texts("mv")) >= 2, what="delivery under way")
            src_c, dst_c = Redis(src), Redis(dst)
            try:
                src_id, dst_id = src_c("CLUSTER", "MYID"), dst_c("CLUSTER", "MYID")
                dst_c("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
                src_c("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
                keys = src_c("CLUSTER", "GETKEYSINSLOT", slot, 1000)
                self.assertTrue(any(k.endswith("outbox:{%d}" % shard) for k in keys), keys)
                for key in keys:  # the stream among them: its group and pending entries go too
                    src_c("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", key)
                    time.sleep(0.05)
                for port in [dst, src] + [p for p in s.redis.masters() if p not in (src, dst)]:
                    conn = Redis(port)
                    conn("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
                    conn.close()
            finally:
                src_c.close()
                dst_c.close()
            s.redis.refresh()
            self.assertEqual(self.stream_master(shard), dst)
            finals = [self.wait_final(rid, timeout=90) for rid in rids]
            # and new ones, accepted after the move, are read from the new master
            a = self.post({"channelId": "fbq", "memberId": "cm0",
                           "response": [{"type": "TEXT", "text": "mv-after"}]})
            self.assertEqual(a.status, 202, a)
            self.assertEqual(self.wait_final(a.json["requestId"], timeout=60)["status"], "done")
        finally:
            s.sim("POST", "/_sim/config", {"latency_ms": 0})
        took = self.texts("mv")
        counts = {t: took.count(t) for t in set(took)}
        self.assertEqual([t for t, c in counts.items() if c > 1], [], "sent twice")
        for n, st in enumerate(finals):
            el = st["sendResult"]["result"][0]
            if "error" in el:  # an attempt the move cut: reported, never lost
                self.assertEqual(el["error"]["err_code"], 125, st)
            else:
                self.assertEqual(counts.get("mv%02d" % n), 1, st)
        mine = [t for t in took if t != "mv-after"]
        self.assertEqual(mine, sorted(mine), "out of order")


@unittest.skipUnless(CLUSTER, "a Redis Cluster (BOTGATE_TEST_REDIS=cluster)")
class Takeover(test_outbox.Takeover):
    """Three instances, one SIGKILLed mid-delivery, on a cluster (test_outbox.Takeover)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        # every worker of the three reads every shard (a blocking read each) before the first
        # request: the early ones all to one instance would leave the others nothing to do
        want = 3 * s.workers * 16

        seen = []

        def reading():
            seen[:] = [len([c for c in s.redis.node(p)("CLIENT", "LIST").split("\n")
                            if "cmd=xreadgroup" in c]) for p in s.redis.masters()]
            return sum(seen) >= want
        try:
            wait_for(reading, what="%d blocking reads" % want)
        except AssertionError:
            raise AssertionError("blocking reads per master: %s, not %d in all" % (seen, want))


@unittest.skipUnless(CLUSTER, "a Redis Cluster (BOTGATE_TEST_REDIS=cluster)")
class EndToEnd(test_webhooks.EndToEnd):
    """Platform -> botgate -> subscriber through the outbox, on a cluster
    (test_webhooks.EndToEnd)."""


if __name__ == "__main__":
    unittest.main(verbosity=2)
