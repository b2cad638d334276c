"""What a webhook costs Redis before botgate answers it, counted by Redis itself and not timed
(make bench's scenario h, issue 32): the commands (INFO commandstats) and the round trips (INFO
stats total_reads_processed: one read of a client's burst of commands) of Messenger webhooks
sent one at a time, each an inbound text of a member botgate knows.

The channel comes from the worker's cache (Redis keeps it coherent), the member is found by its
sender (one script: the recipient key and the record) and its lastInboundAt written by
compare-and-set against the record that script returned, without reading it again; then the
app's subscriptions are read. With no subscription nothing is queued, so these are the
answer's round trips alone: 3 (they were 5: the channel's GET each time, and the member's
again before the compare-and-set)."""
import hashlib
import hmac
import json
import time
import unittest

import test_order_cost
from harness import StackTest, facebook_channel, http

APP = "app-hookcost"
SECRET = "hook-cost-secret"
N = 20


class WebhookCost(StackTest):
    # the outbox's claims (a burst of XAUTOCLAIMs, one per shard) once an hour, not inside a
    # measure
    stack_args = {"workers": 1, "env": {"BOTGATE_OUTBOX_CLAIM_MS": "3600000"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        fb = facebook_channel("hcost", APP)
        fb["info"].update(appSecret=SECRET, verifyToken="v")
        cls.s.put("channel", fb)
        cls.infos = 0
        cls.sent = 0

    info = test_order_cost.OrderCost.info  # every command's calls and Redis's reads, one INFO

    def send(self, psid):
        """One signed inbound text from psid, a message id of its own, answered 200."""
        self.__class__.sent += 1
        n = self.sent
        raw = json.dumps({"object": "page", "entry": [{"id": "1234567890", "time": 1, "messaging": [
            {"sender": {"id": psid}, "recipient": {"id": "1234567890"},
             "timestamp": int(time.time() * 1000) - 5000 + n,
             "message": {"mid": "m_cost_%d" % n, "text": "hi"}}]}]}).encode()
        sig = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
        a = http("POST", self.s.url + "/webhooks/hcost", raw,
                 {"Content-Type": "application/json", "X-Hub-Signature-256": sig})
        self.assertEqual(a.status, 200, a)

    def test_an_inbound_message_of_a_known_member(self):
        """No GET of the channel, the member read once, in the script that finds it by its
        sender: 2 scripts (find, compare-and-set) and the subscriptions' HGETALL."""
        self.send("psid-cost")  # the member made, the channel in the worker's cache
        for _ in range(10):  # a window without the outbox's background reads
            c0, r0 = self.info()
            infos = self.infos
            for _ in range(N):
                self.send("psid-cost")
            c1, r1 = self.info()
            own = self.infos - infos  # this test's INFO calls, one read each
            # the outbox's blocking stream reads and its gauges (every 5 s) are no webhook's
            # cost: a window with any of them is measured again
            if all(c1.get(k, 0) == c0.get(k, 0) for k in ("xreadgroup", "evalsha", "xlen")):
                break
        per = {k: (c1[k] - c0.get(k, 0)) / N for k in c1
               if k != "info" and c1[k] != c0.get(k, 0)}
        # the find's GETs (recipient, member), the compare-and-set's own GET and its SET
        self.assertEqual(per, {"eval": 2.0, "get": 3.0, "set": 1.0, "hgetall": 1.0})
        self.assertEqual((r1 - r0 - own) / N, 3.0)


if __name__ == "__main__":
    unittest.main()
