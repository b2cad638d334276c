"""What per-member order (on by default) costs Redis per request that does not wait, counted by
Redis itself and not timed (issue 30): the commands (INFO commandstats) and the round trips
(INFO stats total_reads_processed: one read of a client's burst of commands) of requests sent
one at a time, each to a member of its own, to a botgate with order on and to its twin with
order off, on one Redis.

A request alone on its member takes its turn with the member's read (GET, RPUSH, PEXPIRE NX: one
round trip before the platform call) and gives it back with LREM and LINDEX after the answer
(one more): 4 plain commands and 1 round trip over order off, no script. A channel's shared rate
limit adds its script to both, in the member's read's round trip: the first message's slot is
taken ahead, when the member exists and nobody holds its turn."""
import json
import threading
import unittest

from harness import StackTest, facebook_channel, free_port, http, member, wait_for

APP = "app-cost"
N = 20
MEMBERS = 4000  # each measure's requests go to members no request went to before
# what each instance does in the background, now and then, whatever the requests: the outbox's
# depth gauges and consumers' upkeep (every 5 s: XLEN, XRANGE, XINFO in scripts, per shard),
# the broadcasts' idle look (SMEMBERS). A measure that saw any of it is made again.
BACKGROUND = ("xinfo", "xlen", "xrange", "xautoclaim", "smembers")
TRIES = 12  # windows, at most, until one without it


def background_came(c0, c1):
    """Whether the instances' background work ran between two INFO commandstats."""
    return any(c1.get(k, 0) != c0.get(k, 0) for k in BACKGROUND)


def in_quiet_window(test, once, what):
    """once()'s result, made again (TRIES times at most) while it is None: its window met the
    instances' background work (on a busy machine a window lasts long enough to)."""
    for _ in range(TRIES):
        result = once()
        if result is not None:
            return result
    test.fail("every %s met the instances' background work" % what)
TURN_COMMANDS = {"rpush": 1, "pexpire": 1, "lrem": 1, "lindex": 1}


class OrderCost(StackTest):
    # the default, order on; the outbox's claims (a burst of XAUTOCLAIMs, one per shard) made
    # once an hour, not inside a measure
    stack_args = {"workers": 1, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_OUTBOX_CLAIM_MS": "3600000"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.on = s.url
        s.start_gateway(port=free_port(), name="botgate-off", extra={"BOTGATE_MEMBER_ORDER": "0"})
        cls.off = s.url
        # fbc: no rate limit (0 turns facebook's default off), so no limiter's round trip
        s.put("channel", facebook_channel("fbc", APP, rateLimit={"perSecond": 0}))
        s.put("channel", facebook_channel("fbr", APP, rateLimit={"perSecond": 100000,
                                                                  "burst": 10000}))
        for cid in ("fbc", "fbr"):  # read by memberId: the record alone (no recipient key)
            for first in range(0, MEMBERS, 500):
                words = []
                for i in range(first, min(first + 500, MEMBERS)):
                    words += ["botgate:member:{%s}:m%d" % (cid, i),
                              json.dumps(member("m%d" % i, cid, APP, "2456%012d" % i))]
                s.redis("MSET", *words)
        cls.tok = s.token(APP, "bot:sendResponses")
        cls.next_member = 0
        cls.infos = 0

    def info(self):
        """Every command's calls and the reads Redis processed, in one INFO (one read)."""
        self.__class__.infos += 1
        calls, reads = {}, 0
        for line in self.s.redis("INFO", "stats", "commandstats").splitlines():
            if line.startswith("cmdstat_"):
                name, rest = line[len("cmdstat_"):].split(":", 1)
                calls[name] = int(rest.split("calls=")[1].split(",")[0])
            elif line.startswith("total_reads_processed:"):
                reads = int(line.split(":")[1])
        return calls, reads

    def send(self, url, cid, keyed=False, by_recipient=False):
        """One request to a member no request went to before (with a new Idempotency-Key when
        keyed; by its number when by_recipient: a member the send makes), answered 200."""
        i = self.__class__.next_member
        self.__class__.next_member += 1
        headers = {"Authorization": "Bearer " + self.tok}
        if keyed:
            headers["Idempotency-Key"] = "cost-%d" % i
        to = {"recipientId": "3456%012d" % i} if by_recipient else {"memberId": "m%d" % i}
        a = http("POST", url + "/sendResponses",
                 dict(to, channelId=cid, response=[{"type": "TEXT", "text": "cost"}]), headers)
        self.assertEqual(a.status, 200, a)

    def send_keyed(self, url, cid):
        """send() with a new Idempotency-Key, returning once the key's answer is stored (its
        script's HMGET counted): it is stored after the answer, and on a busy machine it could
        otherwise land in the window that follows and count as a measured request's."""
        c0 = self.info()[0].get("hmget", 0)
        self.send(url, cid, keyed=True)
        wait_for(lambda: self.info()[0].get("hmget", 0) > c0, timeout=10,
                 what="the key's answer stored")

    def warm(self, url):
        """Until the worker answers from its cache (the token and both channels): a request on
        fbc then reads Redis for its member alone."""
        # the key's scripts loaded (a first EVALSHA fails)
        self.send_keyed(url, "fbc")
        for _ in range(50):
            c0, _ = self.info()
            self.send(url, "fbc")
            c1, _ = self.info()
            if c1.get("get", 0) - c0.get("get", 0) == 1:
                break
        self.send(url, "fbr")  # its channel into the cache, now that the cache is on
        self.send_keyed(url, "fbr")  # the slot's script with a key's begin loaded

    def measure(self, url, cid, order, keyed=False, by_recipient=False):
        """(commands by name, round trips) per request over N requests sent one at a time, in a
        window without the instances' background work (made again until one is: on a busy
        machine a window lasts long enough to meet it)."""
        return in_quiet_window(
            self, lambda: self.measure_once(url, cid, order, keyed, by_recipient), "measure")

    def measure_once(self, url, cid, order, keyed, by_recipient):
        """measure's window, or None when the instances' background work came in it."""
        self.warm(url)
        if by_recipient:  # its script loaded
            self.send(url, cid, by_recipient=True)

        def settled():  # every turn taken so far given back (the warm-up's last one)
            c = self.info()[0]
            return c.get("lrem", 0) >= c.get("rpush", 0)
        wait_for(settled, timeout=10, what="the warm-up's turns given back")
        c0, r0 = self.info()
        infos = self.infos
        for n in range(1, N + 1):
            self.send(url, cid, keyed, by_recipient)
            if order:
                # the turn is given back after the answer: the next request waits for that
                # LREM, or the two could share a write (fewer round trips, by luck)
                wait_for(lambda: self.info()[0].get("lrem", 0) - c0.get("lrem", 0) >= n,
                         timeout=10, what="the turn given back")
            if keyed:  # likewise the key's answer (an HSET, the begin's another)
                wait_for(lambda: self.info()[0].get("hset", 0) - c0.get("hset", 0) >= 2 * n,
                         timeout=10, what="the key's answer stored")
        c1, r1 = self.info()
        if background_came(c0, c1):
            return None
        own = self.infos - infos  # this test's INFO calls, one read each
        # the outbox's blocking stream reads (each worker's, in the background, every 5 s, each
        # a read of its own) are no request's cost
        background = c1.get("xreadgroup", 0) - c0.get("xreadgroup", 0)
        per = {k: (c1[k] - c0.get(k, 0)) / N for k in c1
               if k != "info" and not k.startswith("x") and c1[k] != c0.get(k, 0)}
        return per, (r1 - r0 - own - background) / N

    def test_1_order_costs_four_commands_and_one_round_trip(self):
        """Without a rate limit: order off, the member's GET alone (1 command, 1 round trip);
        on, that GET with the turn's RPUSH and PEXPIRE, then LREM and LINDEX: 5 commands, 2
        round trips, no script."""
        off, off_trips = self.measure(self.off, "fbc", order=False)
        on, on_trips = self.measure(self.on, "fbc", order=True)
        self.assertEqual(off, {"get": 1.0}, "order off")
        self.assertEqual(on, dict(TURN_COMMANDS, get=1.0), "order on")
        self.assertEqual(off_trips, 1.0)
        self.assertEqual(on_trips, 2.0)

    def test_2_with_a_rate_limit_the_same_difference(self):
        """The channel's shared rate limit is one script more for both (and its own commands);
        order still adds the four plain commands and one round trip. The script, taking the
        slot with the member's read, sees that nobody holds the turn in the EXISTS that finds
        the member and no pause (it took an LLEN and an HGET more): TIME, EXISTS, the TAT's GET
        and SET, whether order is on or off."""
        off, off_trips = self.measure(self.off, "fbr", order=False)
        on, on_trips = self.measure(self.on, "fbr", order=True)
        self.assertEqual(off, {"get": 2.0, "evalsha": 1.0, "time": 1.0, "exists": 1.0,
                               "set": 1.0}, off)
        diff = {k: on.get(k, 0) - off.get(k, 0) for k in set(on) | set(off)}
        self.assertEqual({k: v for k, v in diff.items() if v}, TURN_COMMANDS)
        self.assertEqual(on_trips - off_trips, 1.0)
        self.assertLessEqual(on_trips, 2.0)

    def test_3_idempotency_key_in_the_same_round_trips(self):
        """Issue 30: with an Idempotency-Key the key's begin goes with the member's read and the
        turn (one round trip before the platform call), its answer with the turn given back
        (one after): two round trips, as without a key; two scripts (begin, answer) more. It
        took four: the member, the begin, the turn, then the answer."""
        plain, plain_trips = self.measure(self.on, "fbc", order=True)
        keyed, keyed_trips = self.measure(self.on, "fbc", order=True, keyed=True)
        self.assertEqual(keyed_trips, 2.0)
        self.assertEqual(keyed_trips, plain_trips)
        self.assertEqual(keyed.get("evalsha", 0) - plain.get("evalsha", 0), 2.0, keyed)
        # the begin (EXISTS, HSET, PEXPIRE: a new key is not read whole; it called TIME for
        # the lease's end, which is now the record's TTL) and the answer (HMGET, HSET; it also
        # set the TTL again and always published, for waiters that a request alone never has:
        # 8 calls in all, now 5)
        diff = {k: keyed.get(k, 0) - plain.get(k, 0) for k in set(keyed) | set(plain)}
        self.assertEqual({k: v for k, v in diff.items() if v},
                         {"evalsha": 2.0, "exists": 1.0, "hmget": 1.0, "hset": 2.0,
                          "pexpire": 1.0}, keyed)

    def test_5_a_rate_limit_in_the_same_round_trips(self):
        """Issue 30: the channel's shared rate limit costs no round trip of its own: the first
        response's slot is taken with the member's read (and its turn, and a key's begin),
        order on or off. It took one more round trip before the platform call."""
        for url, order, keyed in ((self.on, True, False), (self.off, False, False),
                                  (self.on, True, True), (self.off, False, True)):
            with self.subTest(order=order, keyed=keyed):
                per, trips = self.measure(url, "fbr", order=order, keyed=keyed)
                # order on, the key's begin rides in the slot's script (test_6)
                self.assertEqual(per.get("evalsha", 0) - keyed * (1 if order else 2), 1.0, per)
                self.assertLessEqual(trips, 2.0, per)

    def test_6_the_key_begins_in_the_slots_script(self):
        """Issue 30: order on, on one server, an Idempotency-Key's begin rides in the script
        call that takes the first message's slot ahead, which runs it first: a keyed request
        costs one script more than a plain one (the answer's), not two, and no round trip
        more. The begin's commands (EXISTS, HSET, PEXPIRE) run in it as in a script of its
        own; the answer's (HMGET, HSET) after the call, as before."""
        plain, plain_trips = self.measure(self.on, "fbr", order=True)
        keyed, keyed_trips = self.measure(self.on, "fbr", order=True, keyed=True)
        self.assertEqual(keyed_trips, plain_trips)
        self.assertLessEqual(keyed_trips, 2.0)
        diff = {k: keyed.get(k, 0) - plain.get(k, 0) for k in set(keyed) | set(plain)}
        self.assertEqual({k: v for k, v in diff.items() if v},
                         {"evalsha": 1.0, "exists": 1.0, "hmget": 1.0, "hset": 2.0,
                          "pexpire": 1.0}, keyed)

    def test_8_by_recipient_the_slot_goes_with_the_turn(self):
        """A send by recipientId finds (here makes) its member first, one round trip; then the
        first message's slot is taken in the turn's round trip, before its RPUSH, as a send by
        memberId takes it with the member's read: three round trips with order on, the turn
        given back included. The slot took a round trip of its own before the platform call:
        four. Order off: the member's, then the slot's (nothing to go with), two."""
        on, on_trips = self.measure(self.on, "fbr", order=True, by_recipient=True)
        off, off_trips = self.measure(self.off, "fbr", order=False, by_recipient=True)
        self.assertEqual(on_trips, 3.0, on)
        self.assertEqual(off_trips, 2.0, off)
        self.assertEqual((on.get("rpush"), on.get("lrem")), (1.0, 1.0), on)
        self.assertNotIn("rpush", off)
        # the same scripts and the limiter's commands either way: the slot taken once
        self.assertEqual(on.get("evalsha"), off.get("evalsha"), (on, off))
        self.assertEqual(on.get("set"), off.get("set"), (on, off))

    def test_4_a_duplicate_gives_its_turn_back_while_it_waits(self):
        """A duplicate of a running keyed request took the member's turn with its begin; told to
        wait for the key's answer it gives the turn back (the member's queue holds the running
        request alone) and then replays the answer; the message went out once. With a rate
        limit (fbr) its begin rode in the slot's script, which took no slot for it."""
        for cid in ("fbc", "fbr"):
            with self.subTest(channel=cid):
                self.duplicate_waits(cid)

    def duplicate_waits(self, cid):
        s = self.s
        i = self.__class__.next_member
        self.__class__.next_member += 1
        body = {"channelId": cid, "memberId": "m%d" % i,
                "response": [{"type": "TEXT", "text": "dup-%d" % i}]}
        headers = {"Authorization": "Bearer " + self.tok, "Idempotency-Key": "dup-%d" % i}
        record = "botgate:idem:{%d:%s:sendResponses:dup-%d}" % (len(APP), APP, i)
        queue = "botgate:turnq:{%s}:m%d" % (cid, i)
        s.sim("POST", "/_sim/config", {"latency_ms": 1500})
        answers = {}
        try:
            first = threading.Thread(target=lambda: answers.update(
                first=http("POST", self.on + "/sendResponses", body, headers)))
            first.start()
            wait_for(lambda: s.redis("EXISTS", record) == 1, timeout=10, what="the key's record")
            tat = s.redis("GET", "botgate:rate:{fbr}")
            dup = threading.Thread(target=lambda: answers.update(
                dup=http("POST", self.on + "/sendResponses", body, headers)))
            dup.start()
            # it listens on the record's channel once it has given the turn back
            wait_for(lambda: s.redis("PUBSUB", "NUMSUB", record)[1] == 1, timeout=10,
                     what="the duplicate waiting for the key's answer")
            self.assertEqual(s.redis("LLEN", queue), 1)
            if cid == "fbr":  # the slot's TAT is still the first request's
                self.assertEqual(s.redis("GET", "botgate:rate:{fbr}"), tat)
            first.join(30)
            dup.join(30)
        finally:
            s.sim("POST", "/_sim/config", {"latency_ms": 0})
        self.assertEqual(answers["first"].status, 200, answers["first"])
        self.assertEqual((answers["dup"].status, answers["dup"].raw),
                         (200, answers["first"].raw))
        self.assertEqual(answers["dup"].headers.get("Idempotent-Replayed"), "true")
        wait_for(lambda: s.redis("LLEN", queue) == 0, timeout=10, what="the turn given back")
        texts = [e for e in s.sim_log() if "dup-%d" % i in json.dumps(e)]
        self.assertEqual(len(texts), 1, texts)


    def test_7_a_replay_takes_no_slot(self):
        """A keyed request whose answer is stored is replayed by the script that would take its
        slot: one script call, which takes none (no TAT written, none given back: the old
        begin and slot scripts took one and gave it back, three calls)."""
        in_quiet_window(self, self.replay_once, "replay")

    def replay_once(self):
        """test_7 once: None when the instances' background work came in its window."""
        s = self.s
        self.warm(self.on)
        i = self.__class__.next_member
        self.__class__.next_member += 1
        body = {"channelId": "fbr", "memberId": "m%d" % i,
                "response": [{"type": "TEXT", "text": "replay-%d" % i}]}
        headers = {"Authorization": "Bearer " + self.tok, "Idempotency-Key": "replay-%d" % i}
        record = "botgate:idem:{%d:%s:sendResponses:replay-%d}" % (len(APP), APP, i)
        first = http("POST", self.on + "/sendResponses", body, headers)
        self.assertEqual(first.status, 200, first)
        wait_for(lambda: s.redis("HEXISTS", record, "status") == 1, timeout=10,
                 what="the key's answer stored")
        wait_for(lambda: self.info()[0].get("lrem", 0) >= self.info()[0].get("rpush", 0),
                 timeout=10, what="the turn given back")
        c0, _ = self.info()
        again = http("POST", self.on + "/sendResponses", body, headers)
        self.assertEqual((again.status, again.raw), (200, first.raw))
        self.assertEqual(again.headers.get("Idempotent-Replayed"), "true")
        wait_for(lambda: self.info()[0].get("lrem", 0) - c0.get("lrem", 0) >= 1, timeout=10,
                 what="the replay's turn given back")
        c1, _ = self.info()
        texts = [e for e in s.sim_log() if "replay-%d" % i in json.dumps(e)]
        self.assertEqual(len(texts), 1, texts)
        if background_came(c0, c1):
            return None
        diff = {k: c1[k] - c0.get(k, 0) for k in c1 if k != "info" and not k.startswith("x")
                and c1[k] != c0.get(k, 0)}
        self.assertEqual(diff.get("evalsha"), 1, diff)
        self.assertNotIn("set", diff)
        return True


if __name__ == "__main__":
    unittest.main()
