"""contract.md sections 9 and 13 on a Redis Cluster: broadcasts by member ids, by recipient ids
and by tag, each member's message delivered once through the outbox's shards spread over the
masters, the counts exact (each shard counts its requests' ends, the status sums them), GET and
DELETE, a cancel half-way (nothing sent after its answer), the status callback (durable: posted
by another instance when the first dies), and an instance SIGKILLed mid-broadcast. Before, every
broadcast route answered 121 on a cluster: its scripts named keys of several slots. The tests
of test_broadcasts.py run here again on the cluster. Cluster only (BOTGATE_TEST_REDIS=cluster,
tests/CMakeLists.txt)."""
import unittest

import test_broadcasts
from harness import CLUSTER, facebook_channel, member, wait_for

APP = test_broadcasts.APP


@unittest.skipUnless(CLUSTER, "a Redis Cluster (BOTGATE_TEST_REDIS=cluster)")
class ClusterBroadcasts(test_broadcasts.Accept, test_broadcasts.Cancel, test_broadcasts.Ctl):
    """test_broadcasts' Accept (by ids, by recipient ids, by tag, checks, GET and its app),
    Cancel (half-way: nothing sent after the answer, every member counted once) and Ctl
    (botgatectl broadcast create, status --watch, cancel on the cluster), and:"""

    def shard_counts(self, bid):
        """{shard: (master port, sent, failed, unknown, cancelled)} of the broadcast's hashes."""
        out = {}
        for k in range(16):
            key = "botgate:outbox:{%d}:bc:%s" % (k, bid)
            h = self.s.redis("HGETALL", key) or []
            f = dict(zip(h[0::2], h[1::2]))
            if f:
                out[k] = (self.s.redis.port_of(key),) + tuple(
                    int(f.get(n, 0)) for n in ("sent", "failed", "unknown", "cancelled"))
        return out

    def test_6_many_members_over_every_master_once_each(self):
        s = self.s
        s.put("channel", facebook_channel("fbw", APP))
        ids = ["w%02d" % i for i in range(48)]
        for i, m in enumerate(ids):
            s.put("member", member(m, "fbw", APP, "psid-" + m, tags=["wide"] if i % 3 == 0 else []))
        a = self.post({"channelId": "fbw", "recipients": {"memberIds": ids},
                       "response": [{"type": "TEXT", "text": "wide {{member._id}}"}]})
        self.assertEqual(a.status, 202, a)
        self.assertEqual(a.json["total"], 48)
        bid = a.json["broadcastId"]
        st = self.wait_state(bid)
        self.assertEqual((st["total"], st["sent"], st["failed"], st["unknown"], st["cancelled"],
                          st["queued"]), (48, 48, 0, 0, 0, 0), st)
        took = sorted(t for t, _, _ in self.took("wide w"))
        self.assertEqual(took, sorted("wide " + m for m in ids), "each member once")
        # the members' requests went to shards of several masters, each counted there
        shards = self.shard_counts(bid)
        self.assertGreater(len({v[0] for v in shards.values()}), 1, shards)
        self.assertEqual(sum(v[1] for v in shards.values()), 48, shards)
        # by tag: the index, in the channel's slot, gives 16
        a = self.post({"channelId": "fbw", "recipients": {"tags": ["wide"]},
                       "response": [{"type": "TEXT", "text": "tagged {{member._id}}"}]})
        self.assertEqual((a.status, a.json["total"]), (202, 16), a)
        st = self.wait_state(a.json["broadcastId"])
        self.assertEqual((st["sent"], st["failed"], st["unknown"], st["queued"]), (16, 0, 0, 0))
        self.assertEqual(sorted(t for t, _, _ in self.took("tagged w")),
                         sorted("tagged " + m for i, m in enumerate(ids) if i % 3 == 0))
        # a done one: DELETE leaves it as it is, GET still tells it
        d = self.status(bid, method="DELETE")
        self.assertEqual((d.status, d.json["state"], d.json["sent"]), (200, "done", 48), d)
        self.assertEqual(self.status(bid).json["sent"], 48)
        # and it left the running ones (its line is dropped by the delivery once it ended)
        wait_for(lambda: not any(bid in line for line in s.redis("SMEMBERS", "botgate:broadcasts")),
                 what="the broadcast dropped from the running ones")


@unittest.skipUnless(CLUSTER, "a Redis Cluster (BOTGATE_TEST_REDIS=cluster)")
class ClusterCallback(test_broadcasts.Callback):
    """The status callback when done and when cancelled, posted once each
    (test_broadcasts.Callback): its entry is queued in shard 0's stream, once, by the delivery
    that finds the broadcast ended."""


@unittest.skipUnless(CLUSTER, "a Redis Cluster (BOTGATE_TEST_REDIS=cluster)")
class ClusterCallbackDurable(test_broadcasts.CallbackDurable):
    """The callback posted by another instance when the first dies
    (test_broadcasts.CallbackDurable). Its own stack: its claim time of 2 s is shorter than a
    cancelled broadcast's callback may wait for the attempts still running, after which another
    worker takes the entry over and posts it too (at least once: the same eventId)."""


@unittest.skipUnless(CLUSTER, "a Redis Cluster (BOTGATE_TEST_REDIS=cluster)")
class ClusterKill(test_broadcasts.Kill):
    """Three instances, one SIGKILLed while it delivers (test_broadcasts.Kill): each member
    gets the message once, or is counted unknown; none is lost, the counts add up."""


if __name__ == "__main__":
    unittest.main(verbosity=2)
