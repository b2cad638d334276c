"""The worker caches of tokens and channels are kept coherent by Redis (client-side caching,
CLIENT TRACKING ... REDIRECT to each worker's subscriber): a change written by anyone is seen
by every request sent to any worker of any instance once the writer has Redis's answer (a
flush: its next answer), with no waiting; while the
invalidation connection is down the cache is bypassed, and it serves again once back."""
import hashlib
import json
import unittest

from harness import StackTest, free_port, http, tenant, wait_for, whatsapp_channel

SENDS = 24  # new connections each: with 2 workers, both get some (SO_REUSEPORT)


def commands(url):
    for line in http("GET", url + "/metrics").raw.splitlines():
        if line.startswith("botgate_redis_commands_total "):
            return float(line.split()[1])
    return 0.0


class Coherent(StackTest):
    stack_args = {"workers": 2, "env": {"BOTGATE_REQUEST_TIMEOUT_MS": "8000"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # a second botgate process on the same Redis
        url, log = cls.s.url, cls.s.log_path
        cls.s.start_gateway(port=free_port(), name="botgate2")
        cls.url2 = cls.s.url
        cls.s.url, cls.s.log_path = url, log
        cls.urls = [cls.s.url, cls.url2]

    def send(self, url, body, tok):
        return http("POST", url + "/sendResponses", body, {"Authorization": "Bearer " + tok})

    def warm(self, body, tok, per_send=2):
        """Until SENDS sends in a row to each instance cost only per_send Redis commands each
        (the member GET and the send's rate-limit slot): every worker has the token and the
        channel cached."""
        def cached(url):
            before = commands(url)
            for _ in range(SENDS):
                a = self.send(url, body, tok)
                self.assertEqual(a.status, 200, a)
            return commands(url) - before == SENDS * per_send
        for url in self.urls:
            wait_for(lambda: cached(url), timeout=20, what="the cache of every worker of " + url)

    def test_revoked_token_refused_at_once_everywhere(self):
        tok, body = tenant(self.s, "cc-rev", "mc-rev", "psid-cc1")
        self.warm(body, tok)
        self.s.ctl("token", "revoke", tok)
        for url in self.urls:
            for _ in range(SENDS):
                self.assert_unauthorized(self.send(url, body, tok))

    def test_token_scopes_changed_seen_at_once(self):
        # A worker decodes a token record once while its cache hands out the same record: the
        # record rewritten (its scopes no longer allow sends) is read and decoded anew.
        tok, body = tenant(self.s, "cc-scope", "mc-scope", "psid-cc5")
        self.warm(body, tok)
        h = hashlib.sha256(tok.encode()).hexdigest()
        key = [k for k in self.s.redis("KEYS", "*token*") if h in k]
        self.assertEqual(len(key), 1, key)
        rec = json.loads(self.s.redis("GET", key[0]))
        self.assertIn("bot:sendResponses", rec["scopes"])
        rec["scopes"] = ["bot:redirectMemberToNode"]
        self.s.redis("SET", key[0], json.dumps(rec))  # another system's write
        for url in self.urls:
            for _ in range(SENDS):
                self.assert_unauthorized(self.send(url, body, tok))

    def test_channel_switched_off_seen_at_once(self):
        tok, body = tenant(self.s, "cc-off", "mc-off", "psid-cc2")
        self.warm(body, tok)
        key = "botgate:channel:{cc-off}"
        ch = json.loads(self.s.redis("GET", key))
        ch["on"] = False
        self.s.redis("SET", key, json.dumps(ch))  # another system's write, not botgatectl's
        for url in self.urls:
            for _ in range(SENDS):
                self.assert_error(self.send(url, body, tok), 116)

    def test_whatsapp_token_emptied_in_redis_logs_in_first(self):
        tok = self.s.token("A", "bot:sendResponses")
        ch = whatsapp_channel("cc-wa", "A", self.s.sim_url + "/wa")
        ch["info"]["adminUsername"] = "admin-cc"
        self.s.put("channel", ch)
        body = {"channelId": "cc-wa", "recipientId": "85261000001",
                "response": [{"type": "TEXT", "text": "hi"}]}

        def logins():
            return self.s.sim("GET", "/_sim/stats")["login_calls"].get("admin-cc", 0)
        self.assertEqual(self.send(self.s.url, body, tok).status, 200)
        self.assertEqual(logins(), 1)
        # the channel with its token cached everywhere (a send: member by recipient, contact)
        for url in self.urls:
            for _ in range(SENDS):
                self.assertEqual(self.send(url, body, tok).status, 200)
        self.assertEqual(logins(), 1)
        key = "botgate:channel:{cc-wa}"
        ch = json.loads(self.s.redis("GET", key))
        ch["info"]["adminAuthToken"] = ""
        self.s.redis("SET", key, json.dumps(ch))
        self.assertEqual(self.send(self.url2, body, tok).status, 200)
        self.assertEqual(logins(), 2)  # the empty token was seen: botgate logged in first
        stored = json.loads(self.s.redis("GET", key))["info"]["adminAuthToken"]
        self.assertTrue(stored)

    def test_invalidation_connection_killed(self):
        tok, body = tenant(self.s, "cc-kill", "mc-kill", "psid-cc3")
        self.warm(body, tok)
        killed = self.s.redis("CLIENT", "KILL", "TYPE", "pubsub")
        self.assertGreaterEqual(killed, 4)  # one per worker, two workers, two instances
        # whether a worker has noticed, reconnected or not yet: nothing stale is served
        self.s.ctl("token", "revoke", tok)
        for url in self.urls:
            for _ in range(SENDS):
                self.assert_unauthorized(self.send(url, body, tok))
        # once the subscribers are back and tracking enabled again, hits stop going to Redis
        tok2, body2 = tenant(self.s, "cc-kill2", "mc-kill2", "psid-cc4")
        self.warm(body2, tok2)
        subscribers = self.s.redis("CLIENT", "LIST", "TYPE", "pubsub").strip().splitlines()
        self.assertGreaterEqual(len(subscribers), 4)

    def test_flushall_drops_everything(self):
        tok, body = tenant(self.s, "cc-flush", "mc-flush", "psid-cc5")
        self.warm(body, tok)
        self.s.redis("FLUSHDB")
        # Redis 7.0 answers FLUSHDB before it writes the flush notice to the subscribers (in the
        # same pass of its loop), so the guarantee starts at the flusher's next answer
        # (docs/operations.md, Cache coherence): on a loaded machine a request sent right after
        # the +OK could reach a worker before the notice left Redis.
        self.assertEqual(self.s.redis("PING"), "PONG")
        for url in self.urls:
            for _ in range(SENDS):
                self.assert_unauthorized(self.send(url, body, tok))


if __name__ == "__main__":
    unittest.main()
