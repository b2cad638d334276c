"""What a webhook costs Redis before botgate answers it, counted by Redis itself and not timed
(make bench's scenario h, issue 32): the commands (INFO commandstats) and the round trips (INFO
stats total_reads_processed: one read of a client's burst of commands) of Messenger webhooks
sent one at a time, each an inbound text of a member botgate knows.

The channel comes from the worker's cache (Redis keeps it coherent). The member is found by its
sender and its lastInboundAt written in one script, sent in the same write as the read of the
app's subscriptions; then the event is queued for its subscription in one script: 2 round trips
(they were 4: the member's script, its compare-and-set, the subscriptions, the event; and 5
before that, with the channel's GET). Without a subscription that matches, the event is not
queued: 1.

The posts to the subscription would add the outbox's own commands to the count: the worker's
one consumer job (BOTGATE_OUTBOX_JOBS=1) is held by the first event's post to a subscriber that
takes the connection and never answers, so the outbox reads nothing more while the webhooks are
counted."""
import hashlib
import hmac
import json
import socket
import threading
import time
import unittest

import test_order_cost
from harness import StackTest, facebook_channel, http, wait_for

APP = "app-hookcost"
SECRET = "hook-cost-secret"
N = 20


class Silent:
    """A subscriber that takes connections and never answers them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "http://127.0.0.1:%d/events" % self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                return

    def stop(self):
        self.sock.close()
        for c in self.conns:
            c.close()


class WebhookCost(StackTest):
    # the outbox's claims (a burst of XAUTOCLAIMs, one per shard) once an hour, not inside a
    # measure; one job, held by a post that is never answered (its 5 minutes outlast the test)
    stack_args = {"workers": 1, "env": {"BOTGATE_OUTBOX_CLAIM_MS": "3600000",
                                        "BOTGATE_OUTBOX_JOBS": "1",
                                        "BOTGATE_UPSTREAM_TIMEOUT_MS": "300000",
                                        "BOTGATE_ALLOW_PRIVATE_MEDIA": "1"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for cid in ("hcost", "hcost2"):
            fb = facebook_channel(cid, APP)
            fb["info"].update(appSecret=SECRET, verifyToken="v")
            cls.s.put("channel", fb)
        cls.rx = Silent()
        # hcost's events go to rx; hcost2's to nobody
        cls.s.ctl("subscription", "add", "--app", APP, "--url", cls.rx.url, "--channel", "hcost")
        cls.infos = 0
        cls.sent = 0

    @classmethod
    def tearDownClass(cls):
        cls.rx.stop()  # the post held fails now: the drain is not kept waiting for it
        super().tearDownClass()

    info = test_order_cost.OrderCost.info  # every command's calls and Redis's reads, one INFO

    def send(self, cid, psid):
        """One signed inbound text from psid, a message id of its own, answered 200."""
        self.__class__.sent += 1
        n = self.sent
        raw = json.dumps({"object": "page", "entry": [{"id": "1234567890", "time": 1, "messaging": [
            {"sender": {"id": psid}, "recipient": {"id": "1234567890"},
             "timestamp": int(time.time() * 1000) - 5000 + n,
             "message": {"mid": "m_cost_%d" % n, "text": "hi"}}]}]}).encode()
        sig = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
        a = http("POST", self.s.url + "/webhooks/" + cid, raw,
                 {"Content-Type": "application/json", "X-Hub-Signature-256": sig})
        self.assertEqual(a.status, 200, a)

    def measure(self, cid, psid):
        """Commands per webhook and round trips per webhook of N webhooks from psid."""
        for _ in range(10):  # a window without the outbox's background reads
            c0, r0 = self.info()
            infos = self.infos
            for _ in range(N):
                self.send(cid, psid)
            c1, r1 = self.info()
            own = self.infos - infos  # this test's INFO calls, one read each
            # the outbox's blocking stream reads, its gauges and its group's upkeep (every 5 s)
            # are no webhook's cost: a window with any of them is measured again
            if all(c1.get(k, 0) == c0.get(k, 0) for k in ("xreadgroup", "xlen", "xinfo")):
                break
        per = {k: (c1[k] - c0.get(k, 0)) / N for k in c1
               if k != "info" and c1[k] != c0.get(k, 0)}
        return per, (r1 - r0 - own) / N

    def hold_the_outbox(self):
        """The first event's post holds the worker's one outbox job: no more outbox reads."""
        self.send("hcost", "psid-hold")
        wait_for(lambda: self.rx.conns, what="the outbox's post to the silent subscriber")

    def test_an_inbound_message_of_a_known_member(self):
        """No GET of the channel; the member's script (the recipient's GET, the member's GET
        and SET) beside the subscriptions' HGETALL; the event's script (its id seen, the
        member's order, the entry, the id remembered)."""
        self.hold_the_outbox()
        self.send("hcost", "psid-cost")  # the member made, its id remembered by the worker
        per, trips = self.measure("hcost", "psid-cost")
        self.assertEqual(trips, 2.0)
        self.assertEqual(per, {"evalsha": 2.0, "get": 2.0, "set": 2.0, "hgetall": 1.0,
                               "exists": 1.0, "hincrby": 1.0, "pexpire": 1.0, "xadd": 1.0})

    def test_no_subscription_takes_it(self):
        """An event no subscription matches is not queued: the member's script and the
        subscriptions' read, in one round trip."""
        self.hold_the_outbox()
        self.send("hcost2", "psid-cost2")
        per, trips = self.measure("hcost2", "psid-cost2")
        self.assertEqual(trips, 1.0)
        self.assertEqual(per, {"evalsha": 1.0, "get": 2.0, "set": 1.0, "hgetall": 1.0})

    def test_a_sender_is_a_known_recipient(self):
        """A send by recipientId to a sender the worker took a webhook from: the member's
        get-or-create script runs once, its guess of the member's id learnt from the webhook
        (one table of the ids of senders and recipients; with two it ran twice, the first
        run told it the id)."""
        tok = self.s.token(APP, "bot:sendResponses")

        def reply(psid):
            a = http("POST", self.s.url + "/sendResponses",
                     {"channelId": "hcost2", "recipientId": psid,
                      "response": [{"type": "TEXT", "text": "back"}]},
                     {"Authorization": "Bearer " + tok}, 30)
            self.assertEqual(a.status, 200, a)
            self.assertNotIn("error", a.json["sendResult"]["result"][0])
        self.send("hcost2", "psid-warm")
        self.send("hcost2", "psid-back")
        reply("psid-warm")  # the token, and every script the send runs, loaded (EVAL once)
        c0, _ = self.info()
        reply("psid-back")
        c1, _ = self.info()
        self.assertEqual(c1.get("eval", 0) - c0.get("eval", 0), 1)


if __name__ == "__main__":
    unittest.main()
