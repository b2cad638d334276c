"""contract.md section 12, the outbox: Prefer: respond-async is checked at once and answered 202,
then delivered from Redis by any instance (the simulator's record is the judge): retried when
the platform failed surely without taking it, never twice, in order per member; GET
/requests/<id> tells its status; signed status callbacks; expiry gives 128."""
import hashlib
import hmac
import json
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import StackTest, facebook_channel, free_port, http, member, wait_for

APP = "app-ob"
ASYNC = {"Prefer": "respond-async"}


class Outbox(StackTest):
    stack_args = {"workers": 2, "env": {"BOTGATE_MEMBER_ORDER": None,
                                        "BOTGATE_OUTBOX_CLAIM_MS": "2000"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        s.put("channel", facebook_channel("fbq", APP))
        s.put("member", member("mq", "fbq", APP, "psid-q"))
        s.put("member", member("mr", "fbq", APP, "psid-r"))
        s.put("channel", facebook_channel("fbx", "app-other"))
        cls.tok = s.token(APP, "bot:sendResponses")
        cls.tok_other = s.token("app-other", "bot:sendResponses")

    def post(self, body, headers=None, tok=None, url=None):
        h = {"Authorization": "Bearer " + (tok or self.tok)}
        h.update(headers if headers is not None else ASYNC)
        return http("POST", (url or self.s.url) + "/sendResponses", body, h)

    def status(self, rid, tok=None, url=None):
        return http("GET", (url or self.s.url) + "/requests/" + rid,
                    headers={"Authorization": "Bearer " + (tok or self.tok)})

    def wait_final(self, rid, timeout=30, url=None):
        got = {}

        def final():
            a = self.status(rid, url=url)
            got["a"] = a
            return a.status == 200 and a.json["status"] in ("done", "failed")
        wait_for(final, timeout=timeout, what="request %s to end" % rid)
        return got["a"].json

    def texts(self, word):
        return [r["body"]["message"]["text"] for r in self.s.sim_log()
                if word in r["body"].get("message", {}).get("text", "")]

    def test_1_accepted_then_delivered(self):
        body = {"channelId": "fbq", "memberId": "mq",
                "response": [{"type": "TEXT", "text": "ob1-a"}, {"type": "TEXT", "text": "ob1-b"}]}
        a = self.post(body)
        self.assertEqual(a.status, 202, a)
        self.assertEqual(set(a.json), {"ok", "requestId", "member", "status"})
        self.assertEqual((a.json["ok"], a.json["member"], a.json["status"]), (1, "mq", "queued"))
        rid = a.json["requestId"]
        self.assertEqual(a.headers.get("Preference-Applied"), "respond-async")
        self.assertEqual(a.headers.get("Location"), "/requests/" + rid)
        st = self.wait_final(rid)
        self.assertEqual(st["status"], "done", st)
        self.assertEqual(st["requestId"], rid)
        self.assertGreaterEqual(st["attempts"], 1)
        self.assertLessEqual(st["createdAt"], st["updatedAt"])
        self.assertEqual(st["sendResult"]["ok"], 1, st)
        self.assertEqual(len(st["sendResult"]["result"]), 2)
        self.assertEqual(self.texts("ob1-"), ["ob1-a", "ob1-b"])

    def test_2_checked_at_once(self):
        base = {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": "ob2"}]}
        self.assert_error(self.post(dict(base, channelId="nope")), 112)
        self.assert_error(self.post(dict(base, memberId="nope")), 114)
        self.assert_error(self.post(dict(base, response=[{"type": "VIDEO", "url": "https://x"}])),
                          117)
        self.assert_error(self.post({"channelId": "fbq", "memberId": "mq"}), 108, mentions="response")
        self.assert_error(self.post(dict(base, statusCallback="ftp://x")), 108,
                          mentions="statusCallback")
        self.assert_error(self.post(base, headers={"Prefer": "respond-async=("}), 108,
                          mentions="Prefer")
        self.assert_unauthorized(self.post(base, tok="wrong"))
        # another preference alone, or one that only looks like it: answered synchronously
        a = self.post(base, headers={"Prefer": "wait=5, x=respond-async"})
        self.assertEqual(a.status, 200, a)
        self.assertNotIn("Preference-Applied", a.headers)
        self.assertEqual(self.texts("ob2"), ["ob2"])

    def test_3_status_is_the_apps_own(self):
        body = {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": "ob3"}]}
        rid = self.post(body).json["requestId"]
        self.wait_final(rid)
        self.assert_error(self.status(rid, tok=self.tok_other), 129)
        self.assert_error(self.status("0" * 24), 129)
        self.assert_error(self.status("not-an-id"), 129)
        self.assert_unauthorized(self.status(rid, tok="wrong"))

    def test_4_idempotency_key_same_request_id(self):
        body = {"channelId": "fbq", "memberId": "mq", "response": [{"type": "TEXT", "text": "ob4"}]}
        h = dict(ASYNC, **{"Idempotency-Key": "ob4-key"})
        a1, a2 = self.post(body, headers=h), self.post(body, headers=h)
        self.assertEqual(a1.status, 202, a1)
        self.assertEqual(a2.status, 202, a2)
        self.assertEqual(a1.json["requestId"], a2.json["requestId"])
        self.assertEqual(a2.headers.get("Idempotent-Replayed"), "true")
        self.assertEqual(a2.headers.get("Location"), "/requests/" + a1.json["requestId"])
        self.wait_final(a1.json["requestId"])
        self.assertEqual(self.texts("ob4"), ["ob4"])
        self.assert_error(self.post(dict(body, response=[{"type": "TEXT", "text": "ob4x"}]),
                                    headers=h), 124)


if __name__ == "__main__":
    unittest.main(verbosity=2)
