"""sendResponses on whatsapp (on-premises) and whatsapp-cloud: admin login kept in and written
back to the channel, the weekly contacts check, re-login on 401, and the error codes that
abort a request (100, 104, 113)."""
import json
import unittest

from harness import StackTest, whatsapp_channel, cloud_channel, member

APP = "app-wa"


class WhatsApp(StackTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tok = cls.s.token(APP, "bot:sendResponses")

    def setUp(self):
        self.s.sim_reset()

    def channel(self, cid, **info):
        ch = whatsapp_channel(cid, APP, self.s.sim_url + "/wa")
        ch["info"].update(info)
        self.s.put("channel", ch)
        return ch

    def stored_info(self, cid):
        return json.loads(self.s.redis("GET", "botgate:channel:{%s}" % cid))["info"]

    def send(self, cid, text="hi", mid=None, rid=None):
        body = {"channelId": cid, "response": [{"type": "TEXT", "text": text}]}
        if mid:
            body["memberId"] = mid
        if rid:
            body["recipientId"] = rid
        return self.s.send(body, self.tok)

    def kinds(self):
        return [r["kind"] for r in self.s.sim_log()]

    def test_login_written_back_and_reused(self):
        self.channel("wa-login")
        a = self.send("wa-login", rid="+852 6000 0001")
        self.assertEqual(a.status, 200, a)
        self.assertEqual(self.kinds(), ["login", "contacts", "messages"])
        log = self.s.sim_log()
        self.assertTrue(log[0]["auth"].startswith("Basic "))
        info = self.stored_info("wa-login")
        self.assertTrue(info["adminAuthToken"].startswith("watok-"))
        self.assertGreater(info["adminAuthTokenExpiry"], 0)
        self.assertEqual(log[2]["auth"], "Bearer " + info["adminAuthToken"])
        self.assertEqual(info["adminPassword"], "wa-admin-password-wa-login")  # untouched
        # second request: no login, no contacts check (seen valid within 7 days)
        self.s.sim_reset()
        a = self.send("wa-login", rid="+852 6000 0001")
        self.assertEqual(a.status, 200, a)
        self.assertEqual(self.kinds(), ["messages"])
        self.assertEqual(a.json["sendResult"]["result"][0]["result"]["meta"]["version"], "2.45.1")
        mid = self.s.redis("GET", "botgate:recipient:{wa-login}:85260000001")
        ttl = self.s.redis("TTL", "botgate:wacontactm:{wa-login}:%s" % mid)
        self.assertGreater(ttl, 6 * 24 * 3600)

    def test_expiring_token_logs_in_again(self):
        self.channel("wa-exp", adminAuthToken="old-token", adminAuthTokenExpiry=1000)
        a = self.send("wa-exp", rid="85260000002")
        self.assertEqual(a.status, 200, a)
        self.assertEqual(self.kinds()[0], "login")
        self.assertNotEqual(self.stored_info("wa-exp")["adminAuthToken"], "old-token")

    def test_401_logs_in_once_and_retries(self):
        self.channel("wa-401")
        self.assertEqual(self.send("wa-401", rid="85260000003").status, 200)
        self.s.sim("POST", "/_sim/expire-tokens", {})
        self.s.sim_reset()
        a = self.send("wa-401", rid="85260000003")
        self.assertEqual(a.status, 200, a)
        self.assertEqual(self.kinds(), ["messages", "login", "messages"])

    def test_login_refused_is_104(self):
        self.channel("wa-wrong", adminPassword="wrong")
        a = self.send("wa-wrong", rid="85260000004")
        self.assertEqual(a.status, 500, a)
        self.assertEqual(a.json["err_code"], 104)
        self.assertNotIn("wrong", a.raw.replace("wrong password", ""))
        self.assertEqual(self.kinds(), ["login"])

    def test_invalid_number_is_100(self):
        self.channel("wa-inv")
        a = self.send("wa-inv", rid="85260invalid")
        self.assertEqual(a.status, 500, a)
        self.assertEqual(a.json["err_code"], 100)
        self.assertNotIn("messages", self.kinds())

    def test_server_error_on_first_response_is_113(self):
        self.channel("wa-5xx")
        a = self.send("wa-5xx", rid="85260000005", text="fail5xx")
        self.assertEqual(a.status, 500, a)
        self.assertEqual(a.json["err_code"], 113)

    def test_unreachable_platform_is_113(self):
        ch = whatsapp_channel("wa-down", APP, "http://127.0.0.1:9/wa")
        self.s.put("channel", ch)
        a = self.send("wa-down", rid="85260000006")
        self.assertEqual(a.status, 500, a)
        self.assertEqual(a.json["err_code"], 113)

    def test_refused_connection_is_retried_once_then_113(self):
        def refused_calls():
            return self.s.metric('botgate_platform_calls_total{target="whatsapp",outcome="no_answer"}')
        ch = whatsapp_channel("wa-refused", APP, "http://127.0.0.1:9/wa")
        ch["info"].update({"adminAuthToken": "valid", "adminAuthTokenExpiry": 4102444800000})
        self.s.put("channel", ch)
        # the member's number was seen valid lately: the first call is the message itself
        self.s.redis("SET", "botgate:member:{wa-refused}:mref",
                     json.dumps(member("mref", "wa-refused", APP, "85260000016", "whatsapp")))
        self.s.redis("SET", "botgate:wacontactm:{wa-refused}:mref", "85260000016 85260000016")
        before = refused_calls()
        a = self.send("wa-refused", mid="mref")
        self.assertEqual((a.status, a.json.get("err_code")), (500, 113), a)
        # what went wrong and after how long (the system's words for the errno), no address
        self.assertRegex(a.json["err"], r"^whatsapp: no answer: Couldn't connect to server: "
                                        r"Connection refused \(after \d+ ms\)$")
        # a refused connection surely delivered nothing: the message is tried once more
        self.assertEqual(refused_calls() - before, 2)

    def test_template_and_image(self):
        self.channel("wa-tpl", namespace="ns-1")
        body = {"channelId": "wa-tpl", "recipientId": "85260000007", "response": [
            {"type": "IMAGE", "url": "https://example.com/p.jpg"},
            {"type": "TEMPLATE", "elementName": "hello", "languageCode": "en",
             "components": [{"type": "button", "sub_type": "quick_reply", "index": "0",
                             "parameters": [{"type": "payload", "payload": "P"}]}]}]}
        a = self.s.send(body, self.tok)
        self.assertEqual(a.status, 200, a)
        msgs = [r["body"] for r in self.s.sim_log() if r["kind"] == "messages"]
        self.assertEqual(msgs[0]["image"], {"link": "https://example.com/p.jpg"})
        self.assertEqual(msgs[1]["template"]["name"], "hello")
        self.assertEqual(msgs[1]["template"]["namespace"], "ns-1")
        self.assertEqual(msgs[1]["template"]["language"], {"policy": "deterministic", "code": "en"})

    def test_cloud_errors(self):
        self.s.put("channel", cloud_channel("cl-e", APP))
        a = self.send("cl-e", rid="852invalid1")
        self.assertEqual((a.status, a.json["err_code"]), (500, 100), a)
        a = self.send("cl-e", rid="852badtoken1")
        self.assertEqual((a.status, a.json["err_code"]), (500, 104), a)
        a = self.send("cl-e", rid="8521", text="fail5xx")
        self.assertEqual((a.status, a.json["err_code"]), (500, 113), a)
        self.assertNotIn("cloud-token-cl-e", a.raw)
        log = self.s.sim_log()
        self.assertEqual(log[0]["auth"], "Bearer cloud-token-cl-e")
        self.assertIn("/1055550000/messages", log[0]["path"])

    def test_cloud_rate_limit_is_an_element_after_the_first(self):
        self.s.put("channel", cloud_channel("cl-rl", APP))
        a = self.s.send({"channelId": "cl-rl", "recipientId": "85260000008",
                         "response": [{"type": "TEXT", "text": "ok"},
                                      {"type": "TEXT", "text": "ratelimit"}]}, self.tok)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["ok"], 0)
        self.assertEqual(a.json["sendResult"]["result"][1]["error"]["err_code"], 120)

    def test_secrets_not_logged(self):
        log = self.s.gateway_log()
        for secret in ["wa-admin-password", "watok-", "cloud-token-", self.tok]:
            self.assertNotIn(secret, log)


if __name__ == "__main__":
    unittest.main()
