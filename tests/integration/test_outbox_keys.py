"""Redis's scripting rules on the outbox's delivery (store/outbox.c): every script touches only
the keys among its KEYS, which a Redis Cluster checks (it refuses the others, or runs a script
half-way, while their slot migrates). A queued request of two responses (its first's progress
record and its end index the platform's message ids) and a broadcast's requests (their start
and end write the broadcast's hash of their shard), seen by MONITOR of the one server, or of
every master of a Redis Cluster (BOTGATE_TEST_REDIS=cluster)."""
import time
import unittest

from harness import CLUSTER, cloud_channel, http, member, wait_for
from test_broadcasts import APP, Case
from test_webhooks import Monitor


class DeclaredKeys(Case):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s.put("channel", cloud_channel("okc", APP))
        now = int(time.time() * 1000)  # their windows open: a text may go out
        for i in range(4):
            cls.s.put("member", member("ok%d" % i, "okc", APP, "8529111300%d" % i,
                                       platform="whatsapp-cloud", lastInboundAt=now))

    def request(self, rid):
        return http("GET", self.s.url + "/requests/" + rid,
                    headers={"Authorization": "Bearer " + self.tok_send})

    def test_delivery_scripts_touch_only_their_keys(self):
        s = self.s
        mons = [Monitor(p) for p in (s.redis.masters() if CLUSTER else [s.redis_port])]
        try:
            r = s.post("/sendResponses", {"channelId": "okc", "memberId": "ok0",
                                          "response": [{"type": "TEXT", "text": "okeys one"},
                                                       {"type": "TEXT", "text": "okeys two"}]},
                       token=self.tok_send, headers={"Prefer": "respond-async"})
            self.assertEqual(r.status, 202, r)
            rid = r.json["requestId"]
            # the most responses a request may have (50): its end names 50 index keys
            r = s.post("/sendResponses", {"channelId": "okc", "memberId": "ok0",
                                          "response": [{"type": "TEXT", "text": "okeys %d" % i}
                                                       for i in range(50)]},
                       token=self.tok_send, headers={"Prefer": "respond-async"})
            self.assertEqual(r.status, 202, r)
            rid50 = r.json["requestId"]
            a = self.post({"channelId": "okc", "recipients": {"memberIds": ["ok1", "ok2", "ok3"]},
                           "response": [{"type": "TEXT", "text": "okeys {{member._id}}"}]})
            self.assertEqual(a.status, 202, a)
            bid = a.json["broadcastId"]
            st = self.wait_state(bid)
            for q in (rid, rid50):
                wait_for(lambda: self.request(q).json["status"] == "done", timeout=60,
                         what="the queued request done")
        finally:
            scripts = [sc for mon in mons for sc in mon.stop()]
        self.assertEqual((st["total"], st["sent"], st["failed"]), (3, 3, 0), st)
        els = self.request(rid).json["sendResult"]["result"]
        mids = [el["result"]["messages"][0]["id"] for el in els]
        self.assertEqual(len(mids), 2, els)
        els = self.request(rid50).json["sendResult"]["result"]
        mids50 = [el["result"]["messages"][0]["id"] for el in els]
        self.assertEqual(len(set(mids50)), 50, els)

        # the scripts that touch a request's record, the message index or a broadcast's hash
        def ours(touched):
            return any(":req:" in k or ":msg:" in k or ":bc:" in k for _, k in touched)
        mine = [sc for sc in scripts if ours(sc[1])]
        for keys, touched in mine:
            self.assertLessEqual({k for _, k in touched}, set(keys), keys)
        # each kind ran: the starts and ends of the broadcast's requests (the hash's lease and
        # counts), the progress record and the ends that index message ids
        hash_key = ":bc:" + bid
        starts = [sc for sc in mine if any(c == "hexists" and k.endswith(hash_key)
                                           for c, k in sc[1])]
        ends = [sc for sc in mine if any(c == "hincrby" and k.endswith(hash_key)
                                         for c, k in sc[1])]
        self.assertGreaterEqual(len(starts), 3, mine)
        self.assertGreaterEqual(len(ends), 3, mine)
        indexed = {k for _, touched in mine for c, k in touched if c == "set" and ":msg:" in k}
        for mid in mids + mids50:  # each of the requests' messages, under its channel
            self.assertIn(mid, {k.rsplit(":msg:3:okc:", 1)[-1] for k in indexed}, indexed)
        # the broadcast's messages too (3)
        self.assertGreaterEqual(len(indexed), 55, indexed)
        # the end of the request of 50 responses names them all
        self.assertTrue([sc for sc in mine if len([k for k in sc[0] if ":msg:" in k]) == 50],
                        mine)
        # the progress records (each response's but the last) index theirs too
        progress = [sc for sc in mine if any(c == "set" and ":msg:" in k for c, k in sc[1]) and
                    not any(c == "xack" for c, _ in sc[1])]
        self.assertGreaterEqual(len(progress), 50, mine)


if __name__ == "__main__":
    unittest.main()
