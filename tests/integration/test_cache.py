"""The worker cache of tokens and channels: hits save Redis round trips; a revoked token, a
channel switched off or moved to another app take effect within BOTGATE_CACHE_TTL_MS; with 0
they take effect at once."""
import time
import unittest

from harness import StackTest, facebook_channel, member


class Cached(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_CACHE_TTL_MS": "700"}}

    def test_hits_save_round_trips_and_changes_arrive_within_the_ttl(self):
        s = self.s
        s.put("channel", facebook_channel("fk", "A"))
        s.put("member", member("mk", "fk", "A", "psid-1"))
        tok = s.token("A", "bot:sendResponses")
        body = {"channelId": "fk", "memberId": "mk", "response": [{"type": "TEXT", "text": "x"}]}
        self.assertEqual(s.send(body, tok).status, 200)
        before = s.metric("botgate_redis_commands_total")
        for _ in range(10):
            self.assertEqual(s.send(body, tok).status, 200)
        self.assertEqual(s.metric("botgate_redis_commands_total") - before, 10)  # only the member, every time
        # the channel is switched off and the token revoked: within the TTL, then refused
        s.put("channel", facebook_channel("fk", "A", on=False))
        time.sleep(0.8)
        a = s.send(body, tok)
        self.assertEqual((a.status, a.json.get("err_code")), (500, 116), a)
        s.ctl("token", "revoke", tok)
        time.sleep(0.8)
        a = s.send(body, tok)
        self.assertEqual(a.json, {"ok": 0, "err": "User is not authorized",
                                  "error": "User is not authorized"})

    def test_channel_moved_to_another_app(self):
        s = self.s
        s.put("channel", facebook_channel("fm2", "A"))
        s.put("member", member("mm2", "fm2", "A", "psid-2"))
        tok = s.token("A", "bot:sendResponses")
        body = {"channelId": "fm2", "memberId": "mm2", "response": [{"type": "TEXT", "text": "x"}]}
        self.assertEqual(s.send(body, tok).status, 200)
        s.put("channel", facebook_channel("fm2", "B"))
        time.sleep(0.8)
        a = s.send(body, tok)
        self.assertEqual((a.status, a.json.get("err_code")), (500, 112), a)


class Uncached(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_CACHE_TTL_MS": "0"}}

    def test_changes_take_effect_at_once(self):
        s = self.s
        s.put("channel", facebook_channel("fu", "A"))
        s.put("member", member("mu", "fu", "A", "psid-1"))
        tok = s.token("A", "bot:sendResponses")
        body = {"channelId": "fu", "memberId": "mu", "response": [{"type": "TEXT", "text": "x"}]}
        self.assertEqual(s.send(body, tok).status, 200)
        before = s.metric("botgate_redis_commands_total")
        self.assertEqual(s.send(body, tok).status, 200)
        self.assertEqual(s.metric("botgate_redis_commands_total") - before, 3)  # token, channel, member
        s.ctl("token", "revoke", tok)
        a = s.send(body, tok)
        self.assertEqual(a.json["err"], "User is not authorized")


if __name__ == "__main__":
    unittest.main()
