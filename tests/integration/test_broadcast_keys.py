"""Redis's scripting rules on a broadcast's delivery (store/broadcast.c): every script touches
only the keys among its KEYS, which a Redis Cluster checks (it refuses the others, or runs a
script half-way, while their slot migrates). The take, the enqueue of each shard, the shards'
counts and their sum, the cancel and the status callback, seen by MONITOR of the one server, or
of every master of a Redis Cluster (BOTGATE_TEST_REDIS=cluster: the shards spread over 3
masters); the members' records are read by a command that names them (MGET). A member deleted
before its record is read ends failed, counted once, and the others are sent."""
import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import CLUSTER, facebook_channel, free_port, member, wait_for
from test_broadcasts import APP, Case
from test_webhooks import Monitor


class DeclaredKeys(Case):
    stack_args = {"workers": 2, "env": {"BOTGATE_ALLOW_PRIVATE_MEDIA": "1"}}

    def setUp(self):
        got = self.callbacks = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
        self.srv = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/hook" % self.srv.server_address[1]
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)

    def members(self, cid, per_second, word, n):
        self.s.put("channel", facebook_channel(cid, APP, rateLimit={"perSecond": per_second}))
        ids = ["%s%02d" % (word, i) for i in range(n)]
        for m in ids:
            self.s.put("member", member(m, cid, APP, "psid-" + m))
        return ids

    def delete_one_not_taken(self, cid, bid, ids):
        """Deletes the record of a member still in the broadcast's set of members not taken (a
        script of the test's own, its keys named): its id."""
        keys = ["botgate:broadcast:{%s}:%s:todo" % (cid, bid)]
        keys += ["botgate:member:{%s}:%s" % (cid, m) for m in ids]
        gone = self.s.redis("EVAL", "for i = 2, #KEYS do "
                            "if redis.call('SISMEMBER', KEYS[1], ARGV[i - 1]) == 1 then "
                            "redis.call('DEL', KEYS[i]) return ARGV[i - 1] end end return false",
                            len(keys), *keys, *ids)
        self.assertTrue(gone, "every member taken at once")
        return gone.decode() if isinstance(gone, bytes) else gone

    def test_delivery_scripts_touch_only_their_keys(self):
        s = self.s
        # ten a second: the window (16 members) leaves most of the 30 not taken for seconds
        ids = self.members("fbkd", 10, "kd", 30)
        slow = self.members("fbkc", 2, "kc", 12)
        mons = [Monitor(p) for p in (s.redis.masters() if CLUSTER else [s.redis_port])]
        try:
            a = self.post({"channelId": "fbkd", "recipients": {"memberIds": ids},
                           "response": [{"type": "TEXT", "text": "keys {{member._id}}"}],
                           "statusCallback": self.url})
            self.assertEqual(a.status, 202, a)
            bid = a.json["broadcastId"]
            gone = self.delete_one_not_taken("fbkd", bid, ids)
            c = self.post({"channelId": "fbkc", "recipients": {"memberIds": slow},
                           "response": [{"type": "TEXT", "text": "kcancel {{member._id}}"}],
                           "statusCallback": self.url})
            self.assertEqual(c.status, 202, c)
            cid = c.json["broadcastId"]
            wait_for(lambda: self.status(cid).json["sent"] >= 2, timeout=60, what="2 sent")
            self.assertEqual(self.status(cid, method="DELETE").json["state"], "cancelled")
            st = self.wait_state(bid, timeout=90)
            wait_for(lambda: len(self.callbacks) >= 2, timeout=60, what="both callbacks")
        finally:
            scripts = [sc for mon in mons for sc in mon.stop()]
        # the member deleted before its record was read: failed (its send finds no member),
        # the others sent, each once
        self.assertEqual((st["total"], st["sent"], st["failed"], st["unknown"], st["queued"]),
                         (30, 29, 1, 0, 0), st)
        took = [t for t, _, _ in self.took("keys kd")]
        self.assertEqual(sorted(took), sorted("keys " + m for m in ids if m != gone))
        self.assertEqual({(b["broadcastId"], b["state"]) for b in self.callbacks},
                         {(bid, "done"), (cid, "cancelled")})

        # the broadcasts' scripts: those that name a broadcast's record or set, or its hash of
        # an outbox shard (the outbox's own scripts, store/outbox.c, name the requests' keys)
        def ours(keys):
            return any(":broadcast:{fbk" in k or k.endswith(":bc:" + bid) or
                       k.endswith(":bc:" + cid) for k in keys)
        mine = [sc for sc in scripts if ours(sc[0])]
        for keys, touched in mine:
            self.assertLessEqual({k for _, k in touched}, set(keys), keys)
        # each kind ran: the takes (their KEYS end with the channel's), the enqueues (a
        # shard's stream, the broadcast's hash there, then each request's record and its
        # member's order), the callbacks (shard 0's stream and hash), the shards' counts
        takes = [sc for sc in mine if sc[0][-1].startswith("botgate:channel:")]
        enqueues = [sc for sc in mine if len(sc[0]) > 2 and ":req:" in sc[0][2]]
        callbacks = [sc for sc in mine if len(sc[0]) == 2 and sc[0][0] == "botgate:outbox:{0}"
                     and any(c == "xadd" for c, _ in sc[1])]
        shards = [sc for sc in mine if len(sc[0]) == 1 and ":bc:" in sc[0][0]]
        self.assertGreater(len(takes), 1, mine)
        self.assertGreater(len(enqueues), 1, mine)
        self.assertEqual(len(callbacks), 2, mine)
        self.assertGreater(len(shards), 16, mine)
        # the take reads no member: their records come by a command that names them
        self.assertFalse([k for sc in takes for _, k in sc[1] if ":member:" in k], takes)
        # every member of the first queued, once (a request's record each)
        queued = {k for sc in enqueues if sc[0][1].endswith(":bc:" + bid) for k in sc[0][2::2]}
        self.assertEqual(len(queued), 30, queued)

if __name__ == "__main__":
    unittest.main()
