"""POST /sendResponses: every field of interface.md's tables, every error code, authentication
and tenancy, against real redis-server, the simulator and botgate."""
import email.utils
import json
import socket
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs

from harness import StackTest, facebook_channel, member, cloud_channel

APP = "app-send"
OTHER = "app-other"


class SendApi(StackTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        s.put("channel", facebook_channel("fb1", APP))
        s.put("channel", facebook_channel("fb-off", APP, on=False))
        s.put("channel", facebook_channel("fb-other", OTHER))
        # written directly, as another system would: botgatectl refuses the unknown type
        s.redis("SET", "botgate:channel:{odd}", json.dumps(
            {"_id": "odd", "app": APP, "type": "carrier-pigeon", "on": True, "info": {}}))
        s.put("channel", cloud_channel("cl1", APP))
        s.put("member", member("m1", "fb1", APP, "psid-1001"))
        s.put("member", member("m-bad", "fb1", APP, "psid-invalid"))
        s.put("member", member("m-badtoken", "fb1", APP, "psid-badtoken"))
        s.put("member", member("m-other", "fb-other", OTHER, "psid-9"))
        s.put("member", member("cm1", "cl1", APP, "+852 9123-4567", platform="whatsapp-cloud"))
        cls.tok = s.token(APP, "bot:sendResponses")
        cls.admin = s.token(APP, "bot:admin")
        cls.redirect_only = s.token(APP, "bot:redirectMemberToNode")
        cls.other = s.token(OTHER, "bot:sendResponses")

    def setUp(self):
        self.s.sim_reset()

    def send(self, body, token=None, **kw):
        return self.s.send(body, token if token is not None else self.tok, **kw)

    # ---- success, every field ----
    def test_text_every_field(self):
        before = int(time.time() * 1000)
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "TEXT", "text": "hello"}]})
        self.assertEqual(ans.status, 200, ans)
        j = ans.json
        self.assertEqual(j["ok"], 1)
        self.assertEqual(j["member"], "m1")
        self.assertEqual(j["sendResult"]["ok"], 1)
        self.assertEqual(j["sendResult"]["member"], "m1")
        self.assertEqual(len(j["sendResult"]["result"]), 1)
        el = j["sendResult"]["result"][0]
        mid = el["result"]["messages"][0]["id"]
        self.assertTrue(mid.startswith("m_"), el)
        self.assertEqual(el["result"]["meta"], {"api_status": "stable", "version": "v19.0"})
        ev = el["messageEvent"]
        self.assertEqual(ev["from"], 1234567890)          # all digits: a JSON number
        self.assertEqual(ev["to"], "psid-1001")           # not digits: a string
        self.assertEqual(ev["data"], {"text": "hello"})
        self.assertEqual(ev["type"], "TEXT")
        self.assertEqual(ev["messageId"], mid)
        self.assertGreaterEqual(ev["timestamp"], before)
        self.assertLessEqual(ev["timestamp"], int(time.time() * 1000))
        self.assertEqual(el["chatId"], "psid-1001")
        self.assertNotIn("error", el)
        log = self.s.sim_log()
        self.assertEqual(len(log), 1)
        self.assertEqual(log[0]["platform"], "facebook")
        self.assertEqual(log[0]["body"], {"messaging_type": "RESPONSE",
                                          "recipient": {"id": "psid-1001"},
                                          "message": {"text": "hello"}})
        self.assertIn("access_token=fb-page-token-fb1", log[0]["query"])
        self.assertTrue(ans.headers.get("X-Request-Id"))
        self.assertIn("application/json", ans.headers.get("Content-Type"))
        # one Date header (the worker's, evhttp adds none beside it), RFC 1123, about now
        self.assertEqual(len([v for k, v in ans.header_items if k.lower() == "date"]), 1)
        when = email.utils.parsedate_to_datetime(ans.headers.get("Date"))
        self.assertTrue(ans.headers.get("Date").endswith(" GMT"))
        self.assertLess(abs(when.timestamp() - time.time()), 5)

    def test_responses_come_back_as_sent(self):
        """While its platform call waits, a response is kept as text and parsed again for its
        result: every element's messageEvent.data is the response as sent, minus its type, in
        its own key order (escapes, control characters, non-ASCII and a long text included)."""
        tricky = ["plain", "quote \" backslash \\ slash /", "tab\tnew\nline \u0001",
                  "caf\u00e9 \u4e2d\u6587 \U0001F600", "x" * 1500]
        responses = [{"type": "TEXT", "text": t} for t in tricky]
        responses.append({"type": "IMAGE", "url": "https://example.com/b.png?x=1&y=%20"})
        body = {"channelId": "fb1", "memberId": "m1", "response": responses}
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8")
        ans = self.send(raw)
        self.assertEqual(ans.status, 200, ans)
        res = ans.json["sendResult"]["result"]
        self.assertEqual(len(res), len(responses))
        for sent, el in zip(responses, res):
            want = {k: v for k, v in sent.items() if k != "type"}
            self.assertEqual(el["messageEvent"]["data"], want, el)
            self.assertEqual(el["messageEvent"]["type"], sent["type"])
            self.assertNotIn("error", el)
        texts = [r["body"]["message"].get("text") for r in self.s.sim_log()]
        self.assertEqual(texts[:len(tricky)], tricky)

    def test_image(self):
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "IMAGE", "url": "https://example.com/a.png"}]})
        self.assertEqual(ans.status, 200, ans)
        ev = ans.json["sendResult"]["result"][0]["messageEvent"]
        self.assertEqual(ev["type"], "IMAGE")
        self.assertEqual(ev["data"], {"url": "https://example.com/a.png"})
        body = self.s.sim_log()[0]["body"]
        self.assertEqual(body["message"]["attachment"],
                         {"type": "image", "payload": {"url": "https://example.com/a.png",
                                                       "is_reusable": True}})

    def test_template_on_cloud_with_components(self):
        tpl = {"type": "TEMPLATE", "elementName": "order_update", "languageCode": "en_US",
               "components": [
                   {"type": "header", "parameters": [{"type": "video", "video": {"id": "vid-1"}}]},
                   {"type": "button", "sub_type": "quick_reply", "index": "0",
                    "parameters": [{"type": "payload", "payload": "YES"}]}]}
        ans = self.send({"channelId": "cl1", "memberId": "cm1", "response": [tpl]})
        self.assertEqual(ans.status, 200, ans)
        el = ans.json["sendResult"]["result"][0]
        self.assertTrue(el["result"]["messages"][0]["id"].startswith("wamid."))
        self.assertEqual(el["messageEvent"]["from"], 1055550000)
        self.assertEqual(el["messageEvent"]["to"], 85291234567)  # normalised phone, a number
        self.assertEqual(el["messageEvent"]["data"]["elementName"], "order_update")
        body = self.s.sim_log()[0]["body"]
        self.assertEqual(body["messaging_product"], "whatsapp")
        self.assertEqual(body["to"], "85291234567")
        self.assertEqual(body["template"]["name"], "order_update")
        self.assertEqual(body["template"]["language"], {"code": "en_US"})
        self.assertEqual(body["template"]["components"], tpl["components"])

    def test_three_responses_in_request_order(self):
        texts = ["first", "second", "third"]
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "TEXT", "text": t} for t in texts]})
        self.assertEqual(ans.status, 200, ans)
        got = [r["body"]["message"]["text"] for r in self.s.sim_log()]
        self.assertEqual(got, texts)
        seqs = [r["seq"] for r in self.s.sim_log()]
        self.assertEqual(seqs, sorted(seqs))
        self.assertEqual([e["messageEvent"]["data"]["text"]
                          for e in ans.json["sendResult"]["result"]], texts)

    def test_responses_synonym_and_query_token(self):
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "responses": [{"type": "TEXT", "text": "syn"}]}, token="",
                        query_token=self.tok)
        self.assertEqual(ans.status, 200, ans)
        self.assertEqual(self.s.sim_log()[0]["body"]["message"]["text"], "syn")

    def test_member_id_wins_over_recipient_id(self):
        ans = self.send({"channelId": "fb1", "memberId": "m1", "recipientId": "psid-other",
                         "response": [{"type": "TEXT", "text": "x"}]})
        self.assertEqual(ans.status, 200, ans)
        self.assertEqual(self.s.sim_log()[0]["recipient"], "psid-1001")

    def test_recipient_id_null_with_member_id(self):
        ans = self.send({"channelId": "fb1", "memberId": "m1", "recipientId": None,
                         "response": [{"type": "TEXT", "text": "x"}]})
        self.assertEqual(ans.status, 200, ans)

    def test_unknown_recipient_creates_member_once(self):
        body = {"channelId": "fb1", "recipientId": "psid-new-77",
                "response": [{"type": "TEXT", "text": "welcome"}]}
        before = len(self.s.redis("KEYS", "botgate:member:{fb1}:*"))
        a1 = self.send(body)
        self.assertEqual(a1.status, 200, a1)
        mid = a1.json["member"]
        rec = json.loads(self.s.redis("GET", "botgate:member:{fb1}:" + mid))
        self.assertEqual(rec["externalId"], "psid-new-77")
        self.assertEqual(rec["channel"], "fb1")
        self.assertEqual(rec["app"], APP)
        self.assertEqual(rec["platform"], "facebook")
        self.assertEqual(rec["tags"], [])
        self.assertEqual(rec["botMeta"]["subscribed"], True)
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{fb1}:psid-new-77"), mid)
        a2 = self.send(body)
        self.assertEqual(a2.json["member"], mid)
        self.assertEqual(len(self.s.redis("KEYS", "botgate:member:{fb1}:*")), before + 1)

    def test_recipient_id_longer_than_an_address_is_refused(self):
        """A recipientId becomes the address of the platform call, which carries 191 bytes:
        a longer one is refused (108, naming it and the limit), never cut and sent to another
        id; 191 bytes reach the platform whole."""
        ok_resp = [{"type": "TEXT", "text": "x"}]
        members = len(self.s.redis("KEYS", "botgate:member:{fb1}:*"))
        too_long = ["r" * 192, "s" * 200, "t" * 255, "u" * 256, "v" * 190 + "\u00e9"]
        for rid in too_long:
            with self.subTest(n=len(rid.encode())):
                ans = self.send({"channelId": "fb1", "recipientId": rid, "response": ok_resp})
                self.assert_error(ans, 108, mentions="recipientId")
                self.assertIn("191 bytes", ans.json["err"])
                self.assertIsNone(self.s.redis("GET", "botgate:recipient:{fb1}:" + rid))
        self.assertEqual(self.s.sim_log(), [])
        self.assertEqual(len(self.s.redis("KEYS", "botgate:member:{fb1}:*")), members)
        # the limit itself: delivered to exactly that id, recorded whole
        rid = "psid-" + "w" * 185 + "z"
        self.assertEqual(len(rid), 191)
        ans = self.send({"channelId": "fb1", "recipientId": rid, "response": ok_resp})
        self.assertEqual(ans.status, 200, ans)
        self.assertEqual([r["recipient"] for r in self.s.sim_log()], [rid])
        self.assertEqual(ans.json["sendResult"]["result"][0]["messageEvent"]["to"], rid)
        mid = ans.json["member"]
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{fb1}:" + rid), mid)
        rec = json.loads(self.s.redis("GET", "botgate:member:{fb1}:" + mid))
        self.assertEqual(rec["externalId"], rid)

    def test_member_address_longer_than_a_call_carries_is_not_cut(self):
        """A stored member whose externalId is longer than 191 bytes (written before the limit,
        or by hand) is refused (104), not sent to the first 191 bytes of it."""
        ext = "psid-" + "q" * 200
        self.s.put("member", member("m-long", "fb1", APP, ext))
        ans = self.send({"channelId": "fb1", "memberId": "m-long",
                         "response": [{"type": "TEXT", "text": "x"}]})
        self.assert_error(ans, 104, mentions="address")
        self.assertEqual(self.s.sim_log(), [])

    def test_admin_scope_accepted(self):
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "TEXT", "text": "a"}]}, token=self.admin)
        self.assertEqual(ans.status, 200, ans)

    def test_status_callback_needs_respond_async(self):
        """A synchronous request's answer is its status: a statusCallback on it would never be
        called, so it is refused by name rather than dropped in silence; null is no callback."""
        body = {"channelId": "fb1", "memberId": "m1", "response": [{"type": "TEXT", "text": "cb"}],
                "statusCallback": "https://example.com/cb"}
        self.assert_error(self.send(body), 108, mentions="statusCallback")
        self.assertIn("Prefer: respond-async", self.send(body).json["err"])
        self.assertEqual(self.s.sim_log(), [])
        ans = self.send(dict(body, statusCallback=None))
        self.assertEqual(ans.status, 200, ans)
        self.assertEqual(len(self.s.sim_log()), 1)

    # ---- authentication and tenancy ----
    def test_no_token(self):
        self.assert_unauthorized(self.send({"channelId": "fb1", "memberId": "m1",
                                            "response": [{"type": "TEXT", "text": "a"}]},
                                           token=""))

    def test_unknown_token(self):
        self.assert_unauthorized(self.send({"channelId": "fb1", "memberId": "m1",
                                            "response": [{"type": "TEXT", "text": "a"}]},
                                           token="bgt_nope"))

    def test_wrong_scope(self):
        self.assert_unauthorized(self.send({"channelId": "fb1", "memberId": "m1",
                                            "response": [{"type": "TEXT", "text": "a"}]},
                                           token=self.redirect_only))

    def test_expired_token(self):
        tok = self.s.token(APP, "bot:sendResponses", extra=("--expires-in", "1s"))
        body = {"channelId": "fb1", "memberId": "m1", "response": [{"type": "TEXT", "text": "a"}]}
        self.assertEqual(self.send(body, token=tok).status, 200)
        time.sleep(1.2)
        self.assert_unauthorized(self.send(body, token=tok))

    def test_revoked_token(self):
        tok = self.s.token(APP, "bot:sendResponses")
        body = {"channelId": "fb1", "memberId": "m1", "response": [{"type": "TEXT", "text": "a"}]}
        for _ in range(4):  # both workers cache it
            self.assertEqual(self.send(body, token=tok).status, 200)
        self.s.ctl("token", "revoke", tok)
        # workers keep tokens BOTGATE_CACHE_TTL_MS (1 s by default): gone after that
        time.sleep(1.1)
        for _ in range(4):
            self.assert_unauthorized(self.send(body, token=tok))

    def test_token_stored_only_as_hash(self):
        keys = self.s.redis("KEYS", "botgate:token:*")
        self.assertTrue(keys)
        for k in keys:
            self.assertNotIn(self.tok, k)
            self.assertNotIn(self.tok, self.s.redis("GET", k))

    def test_other_app_channel_is_answered_like_unknown(self):
        body = {"memberId": "m-other", "response": [{"type": "TEXT", "text": "x"}]}
        theirs = self.send(dict(body, channelId="fb-other"))
        missing = self.send(dict(body, channelId="no-such-channel"))
        self.assert_error(theirs, 112)
        self.assertEqual(theirs.status, missing.status)
        self.assertEqual(theirs.json, missing.json)
        self.assertEqual(self.s.sim_log(), [])
        # ... also with recipientId: no member is created in the other app's channel
        theirs = self.send({"channelId": "fb-other", "recipientId": "psid-sneak",
                            "response": [{"type": "TEXT", "text": "x"}]})
        self.assertEqual(theirs.json, missing.json)
        self.assertIsNone(self.s.redis("GET", "botgate:recipient:{fb-other}:psid-sneak"))

    def test_token_channel_list(self):
        tok = self.s.token(APP, "bot:sendResponses", extra=("--channel", "cl1"))
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "TEXT", "text": "x"}]}, token=tok)
        self.assert_error(ans, 112)

    # ---- errors ----
    def test_108_missing_and_wrong_parameters(self):
        ok_resp = [{"type": "TEXT", "text": "x"}]
        cases = [
            ({"memberId": "m1", "response": ok_resp}, "channelId"),
            ({"channelId": 7, "memberId": "m1", "response": ok_resp}, "channelId"),
            ({"channelId": "fb1", "response": ok_resp}, "memberId or recipientId"),
            ({"channelId": "fb1", "memberId": 5, "response": ok_resp}, "memberId"),
            ({"channelId": "fb1", "memberId": "m1"}, "response"),
            ({"channelId": "fb1", "memberId": "m1", "response": {"type": "TEXT"}}, "response"),
            ({"channelId": "fb1", "memberId": "m1", "response": []}, "response"),
            ({"channelId": "fb1", "memberId": "m1", "response": [{"type": "TEXT"}]},
             "response[0].text"),
            ({"channelId": "fb1", "memberId": "m1", "response": [{"text": "x"}]},
             "response[0].type"),
            ({"channelId": "fb1", "memberId": "m1",
              "response": [ok_resp[0], {"type": "IMAGE", "url": "ftp://x"}]}, "response[1].url"),
            ({"channelId": "fb1", "memberId": "m1",
              "response": [{"type": "TEMPLATE", "elementName": "x"}]}, "languageCode"),
            ({"channelId": "fb{1}", "memberId": "m1", "response": ok_resp}, "channelId"),
        ]
        for body, name in cases:
            with self.subTest(body=body):
                self.assert_error(self.send(body), 108, mentions=name)
        self.assertEqual(self.s.sim_log(), [])

    def test_108_bad_bodies(self):
        for raw in [b"", b"not json", b"[1,2]", b'"text"', b'{"a":1', b"\xff\xfe{}",
                    b"[" * 70 + b"]" * 70, b'{"channelId":"fb1","channelId":"fb2"}']:
            with self.subTest(raw=raw[:20]):
                self.assert_error(self.send(raw), 108)
        deep = {"channelId": "fb1", "memberId": "m1", "response": [{"type": "TEXT", "text": "x"}]}
        d = deep
        for _ in range(70):
            d["x"] = {}
            d = d["x"]
        self.assert_error(self.send(deep), 108, mentions="nested")

    def test_112_unknown_channel(self):
        self.assert_error(self.send({"channelId": "nope", "memberId": "m1",
                                     "response": [{"type": "TEXT", "text": "x"}]}), 112)

    def test_114_unknown_member(self):
        self.assert_error(self.send({"channelId": "fb1", "memberId": "ghost",
                                     "response": [{"type": "TEXT", "text": "x"}]}), 114)

    def test_116_channel_off(self):
        self.s.put("member", member("m-off", "fb-off", APP, "psid-5"))
        self.assert_error(self.send({"channelId": "fb-off", "memberId": "m-off",
                                     "response": [{"type": "TEXT", "text": "x"}]}), 116)
        self.assertEqual(self.s.sim_log(), [])

    def test_117_channel_type_and_response_types(self):
        self.assert_error(self.send({"channelId": "odd", "recipientId": "r1",
                                     "response": [{"type": "TEXT", "text": "x"}]}), 117)
        # TEMPLATE does not exist on Messenger: nothing is sent, not even the TEXT before it
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "TEXT", "text": "x"},
                                      {"type": "TEMPLATE", "elementName": "t",
                                       "languageCode": "en", "components": []}]})
        self.assert_error(ans, 117, mentions="TEMPLATE")
        self.assert_error(self.send({"channelId": "fb1", "memberId": "m1",
                                     "response": [{"type": "LOCATION", "latitude": 1,
                                                   "longitude": 2}]}), 117, mentions="LOCATION")
        self.assertEqual(self.s.sim_log(), [])

    def test_118_limits(self):
        resp = [{"type": "TEXT", "text": "x"}] * 51
        self.assert_error(self.send({"channelId": "fb1", "memberId": "m1", "response": resp}), 118)
        big = "y" * (64 * 1024 + 1)
        self.assert_error(self.send({"channelId": "fb1", "memberId": "m1",
                                     "response": [{"type": "TEXT", "text": big}]}), 118)
        huge = {"channelId": "fb1", "memberId": "m1",
                "response": [{"type": "TEXT", "text": "z" * 60000}] * 20}
        ans = self.send(huge)
        self.assert_error(ans, 118, http_status=413)
        self.assertEqual(self.s.sim_log(), [])
        # exactly 50 responses is allowed
        ok = self.send({"channelId": "fb1", "memberId": "m1",
                        "response": [{"type": "TEXT", "text": "n%d" % i} for i in range(50)]})
        self.assertEqual(ok.status, 200, ok)
        self.assertEqual(len(self.s.sim_log()), 50)

    def test_104_invalid_recipient_and_bad_page_token(self):
        ans = self.send({"channelId": "fb1", "memberId": "m-bad",
                         "response": [{"type": "TEXT", "text": "x"}]})
        self.assert_error(ans, 104)
        ans = self.send({"channelId": "fb1", "memberId": "m-badtoken",
                         "response": [{"type": "TEXT", "text": "x"}]})
        self.assert_error(ans, 104)
        self.assertNotIn("fb-page-token", ans.raw)

    def test_later_failure_is_reported_in_its_element(self):
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "TEXT", "text": "fine"},
                                      {"type": "TEXT", "text": "boom fail5xx"},
                                      {"type": "TEXT", "text": "after"}]})
        self.assertEqual(ans.status, 200, ans)
        self.assertEqual(ans.json["ok"], 1)
        self.assertEqual(ans.json["sendResult"]["ok"], 0)
        res = ans.json["sendResult"]["result"]
        self.assertEqual(len(res), 3)
        self.assertNotIn("error", res[0])
        self.assertEqual(res[1]["error"]["err_code"], 113)
        self.assertIn("err", res[1]["error"])
        self.assertNotIn("messageId", res[1]["messageEvent"])
        self.assertNotIn("error", res[2])
        self.assertEqual(len(self.s.sim_log()), 3)

    def test_first_response_server_error_on_facebook_is_an_element(self):
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "TEXT", "text": "fail5xx"}]})
        self.assertEqual(ans.status, 200, ans)
        self.assertEqual(ans.json["sendResult"]["ok"], 0)
        self.assertEqual(ans.json["sendResult"]["result"][0]["error"]["err_code"], 113)

    def test_unknown_route_and_method(self):
        from harness import http
        a = http("GET", self.s.url + "/nothing")
        self.assertEqual(a.status, 404)
        self.assertEqual((a.json["ok"], a.json["err_code"]), (0, 122))
        a = http("GET", self.s.url + "/sendResponses")
        self.assertEqual(a.status, 405)
        self.assertEqual((a.json["err_code"], a.headers["Allow"]), (122, "POST"))
        self.assertEqual(http("GET", self.s.url + "/healthz").json, {"ok": 1})

    def test_request_id_is_taken_from_caller(self):
        ans = self.send({"channelId": "fb1", "memberId": "m1",
                         "response": [{"type": "TEXT", "text": "x"}]},
                        headers={"X-Request-Id": "crm-42"})
        self.assertEqual(ans.headers.get("X-Request-Id"), "crm-42")

    def raw_send(self, sock, version, connection):
        body = json.dumps({"channelId": "fb1", "memberId": "m1",
                           "response": [{"type": "TEXT", "text": "kept"}]}).encode()
        head = ["POST /sendResponses %s" % version, "Host: x", "Authorization: Bearer " + self.tok,
                "Content-Type: application/json", "Content-Length: %d" % len(body)]
        if connection:
            head.append("Connection: " + connection)
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            self.assertTrue(chunk, "closed before the answer")
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        if "content-length" in headers:
            while len(rest) < int(headers["content-length"]):
                rest += sock.recv(65536)
        else:  # HTTP/1.0 without keep-alive: the body ends where the connection does
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                rest += chunk
        self.assertIn(" 200 ", lines[0] + " ")
        self.assertEqual(json.loads(rest)["sendResult"]["ok"], 1)
        return headers

    def test_connection_header_is_honoured(self):
        # The request headers are dropped once read, all but Connection: the answer must still
        # keep or close the connection as the client asked.
        with socket.create_connection(("127.0.0.1", self.s.port), timeout=10) as c:
            h = self.raw_send(c, "HTTP/1.0", "keep-alive")
            self.assertEqual(h.get("connection", "").lower(), "keep-alive")
            self.raw_send(c, "HTTP/1.1", None)  # the same connection, still open
            h = self.raw_send(c, "HTTP/1.1", "close")
            self.assertEqual(h.get("connection", "").lower(), "close")
            self.assertEqual(c.recv(1), b"")  # and closed after the answer
        with socket.create_connection(("127.0.0.1", self.s.port), timeout=10) as c:
            h = self.raw_send(c, "HTTP/1.0", None)  # HTTP/1.0 without keep-alive: closed
            self.assertNotEqual(h.get("connection", "").lower(), "keep-alive")
            self.assertEqual(c.recv(1), b"")

    def test_header_names_are_read_without_case(self):
        # The headers botgate reads (Authorization, X-Request-Id, Idempotency-Key, Connection)
        # are found whatever the case of their names, the first of each name when repeated.
        body = json.dumps({"channelId": "fb1", "memberId": "m1",
                           "response": [{"type": "TEXT", "text": "cased"}]}).encode()
        head = ["POST /sendResponses HTTP/1.1", "Host: x", "x-request-id: crm-43",
                "X-REQUEST-ID: crm-44", "AUTHORIZATION: Bearer " + self.tok,
                "idempotency-KEY: cased-%d" % time.time_ns(), "Content-Type: application/json",
                "Content-Length: %d" % len(body), "connection: close"]
        with socket.create_connection(("127.0.0.1", self.s.port), timeout=10) as c:
            c.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            data = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break  # closed after the answer, as connection: close asked
                data += chunk
        head_text, rest = data.split(b"\r\n\r\n", 1)
        lines = head_text.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        self.assertIn(" 200 ", lines[0] + " ")
        self.assertEqual(headers.get("x-request-id"), "crm-43")
        self.assertEqual(headers.get("connection", "").lower(), "close")
        self.assertEqual(json.loads(rest)["sendResult"]["ok"], 1)
        # the key is read under a name in another case: a bad one is refused
        a = self.send({"channelId": "fb1", "memberId": "m1",
                       "response": [{"type": "TEXT", "text": "cased"}]},
                      headers={"idempotency-KEY": "k" * 300})
        self.assert_error(a, 108, http_status=a.status, mentions="Idempotency-Key")

    def test_each_call_reaches_its_own_url(self):
        # A transfer record keeps the parsed URL of its last call for the next one to the same
        # URL: calls that alternate between two channels (two tokens) must each carry their own.
        s = self.s
        s.put("channel", facebook_channel("fb-url-a", "app-url"))
        s.put("channel", facebook_channel("fb-url-b", "app-url"))
        s.put("member", member("mu-a", "fb-url-a", "app-url", "psid-2001"))
        s.put("member", member("mu-b", "fb-url-b", "app-url", "psid-2002"))
        tok = s.token("app-url", "bot:sendResponses")
        order = ["a", "a", "b", "a", "b", "b"]
        for which in order:
            ans = self.send({"channelId": "fb-url-" + which, "memberId": "mu-" + which,
                             "response": [{"type": "TEXT", "text": which}]}, token=tok)
            self.assertEqual(ans.status, 200, ans)
            self.assertEqual(ans.json["sendResult"]["ok"], 1, ans.json)
        log = self.s.sim_log()
        self.assertEqual(len(log), len(order))
        for which, entry in zip(order, log):
            self.assertEqual(entry["body"]["message"], {"text": which})
            self.assertIn("access_token=fb-page-token-fb-url-" + which, entry["query"])
            self.assertNotIn("fb-url-" + ("b" if which == "a" else "a"), entry["query"])
            self.assertEqual(entry["path"], log[0]["path"])

    def test_many_urls_in_flight_each_reach_their_own(self):
        # More different URLs in flight at once than the worker keeps parsed (64): a call whose
        # slot another URL's calls hold is parsed by curl itself, and every call, in both rounds,
        # still reaches its own channel's URL.
        s = self.s
        n = 80
        for i in range(n):
            s.put("channel", facebook_channel("fb-many-%d" % i, "app-many"))
            s.put("member", member("mm-%d" % i, "fb-many-%d" % i, "app-many", "psid-3%03d" % i))
        tok = s.token("app-many", "bot:sendResponses")

        def one(i):
            return self.send({"channelId": "fb-many-%d" % i, "memberId": "mm-%d" % i,
                              "response": [{"type": "TEXT", "text": "c%d" % i}]}, token=tok)

        s.sim("POST", "/_sim/config", {"latency_ms": 300})
        try:
            for _ in range(2):
                with ThreadPoolExecutor(max_workers=n) as pool:
                    answers = list(pool.map(one, range(n)))
                for ans in answers:
                    self.assertEqual(ans.status, 200, ans)
                    self.assertEqual(ans.json["sendResult"]["ok"], 1, ans.json)
        finally:
            s.sim("POST", "/_sim/config", {"latency_ms": 0})
        log = self.s.sim_log()
        self.assertEqual(len(log), 2 * n)
        for entry in log:
            i = int(entry["body"]["message"]["text"][1:])
            self.assertEqual(parse_qs(entry["query"])["access_token"],
                             ["fb-page-token-fb-many-%d" % i], entry)
            self.assertEqual(entry["recipient"], "psid-3%03d" % i)

    def test_secrets_never_in_logs(self):
        self.send({"channelId": "fb1", "memberId": "m-badtoken",
                   "response": [{"type": "TEXT", "text": "x"}]})
        log = self.s.gateway_log()
        for secret in [self.tok, self.admin, self.other, "fb-page-token-fb1", "cloud-token-cl1"]:
            self.assertNotIn(secret, log)


if __name__ == "__main__":
    unittest.main()
