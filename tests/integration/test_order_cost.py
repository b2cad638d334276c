"""What per-member order (on by default) costs Redis per request that does not wait, counted by
Redis itself and not timed (issue 30): the commands (INFO commandstats) and the round trips
(INFO stats total_reads_processed: one read of a client's burst of commands) of requests sent
one at a time, each to a member of its own, to a botgate with order on and to its twin with
order off, on one Redis.

A request alone on its member takes its turn with the member's read (GET, RPUSH, PEXPIRE NX: one
round trip before the platform call) and gives it back with LREM and LINDEX after the answer
(one more): 4 plain commands and 1 round trip over order off, no script. A channel's shared rate
limit adds its script (one more round trip before the call) to both."""
import json
import unittest

from harness import StackTest, facebook_channel, free_port, http, member, wait_for

APP = "app-cost"
N = 20
TURN_COMMANDS = {"rpush": 1, "pexpire": 1, "lrem": 1, "lindex": 1}


class OrderCost(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_MEMBER_ORDER": None}}  # the default: on

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
            for i in range(4 * N + 200):
                s.redis("SET", "botgate:member:{%s}:m%d" % (cid, i),
                        json.dumps(member("m%d" % i, cid, APP, "2456%012d" % i)))
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

    def send(self, url, cid):
        """One request to a member no request went to before, answered 200."""
        i = self.__class__.next_member
        self.__class__.next_member += 1
        a = http("POST", url + "/sendResponses",
                 {"channelId": cid, "memberId": "m%d" % i,
                  "response": [{"type": "TEXT", "text": "cost"}]},
                 {"Authorization": "Bearer " + self.tok})
        self.assertEqual(a.status, 200, a)

    def warm(self, url):
        """Until the worker answers from its cache (the token and both channels): a request on
        fbc then reads Redis for its member alone."""
        for _ in range(50):
            c0, _ = self.info()
            self.send(url, "fbc")
            c1, _ = self.info()
            if c1.get("get", 0) - c0.get("get", 0) == 1:
                break
        self.send(url, "fbr")  # its channel into the cache, now that the cache is on

    def measure(self, url, cid, order):
        """(commands by name, round trips) per request over N requests sent one at a time."""
        self.warm(url)

        def settled():  # every turn taken so far given back (the warm-up's last one)
            c = self.info()[0]
            return c.get("lrem", 0) >= c.get("rpush", 0)
        wait_for(settled, timeout=10, what="the warm-up's turns given back")
        c0, r0 = self.info()
        infos = self.infos
        for n in range(1, N + 1):
            self.send(url, cid)
            if order:
                # the turn is given back after the answer: the next request waits for that
                # LREM, or the two could share a write (fewer round trips, by luck)
                wait_for(lambda: self.info()[0].get("lrem", 0) - c0.get("lrem", 0) >= n,
                         timeout=10, what="the turn given back")
        c1, r1 = self.info()
        own = self.infos - infos  # this test's INFO calls, one read each
        per = {k: (c1[k] - c0.get(k, 0)) / N for k in c1
               if k != "info" and c1[k] != c0.get(k, 0)}
        return per, (r1 - r0 - own) / N

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
        order still adds exactly the four plain commands and one round trip."""
        off, off_trips = self.measure(self.off, "fbr", order=False)
        on, on_trips = self.measure(self.on, "fbr", order=True)
        self.assertEqual(off.get("evalsha"), 1.0, off)
        self.assertEqual(on.get("evalsha"), 1.0, on)
        diff = {k: on.get(k, 0) - off.get(k, 0) for k in set(on) | set(off)}
        self.assertEqual({k: v for k, v in diff.items() if v}, TURN_COMMANDS)
        self.assertEqual(on_trips - off_trips, 1.0)
        self.assertLessEqual(on_trips, 3.0)


if __name__ == "__main__":
    unittest.main()
