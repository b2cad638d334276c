"""sendResponses on slack, wechat and teamwork: request formats, error mapping, the wechat
access token (fetch, write-back, refresh-once on 40001), wechat images by media_id with the
media cache, slack's Retry-After."""
import json
import time
import unittest

from harness import StackTest, member, wait_for

APP = "app-more"


def wechat(cid, **info):
    i = {"appId": "wxapp-" + cid, "appsecret": "wx-secret-" + cid, "botOpenId": "gh_bot_" + cid}
    i.update(info)
    return {"_id": cid, "app": APP, "type": "wechat", "on": True, "info": i}


def slack(cid, **info):
    i = {"botAccessToken": "xoxb-secret-" + cid, "botId": "B0" + cid}
    i.update(info)
    return {"_id": cid, "app": APP, "type": "slack", "on": True, "info": i}


def teamwork(cid, **info):
    i = {"apiKey": "tw-key-" + cid, "tbId": "tb-" + cid}
    i.update(info)
    return {"_id": cid, "app": APP, "type": "teamwork", "on": True, "info": i}


class MorePlatforms(StackTest):
    # the simulator serves the images on loopback
    stack_args = {"env": {"BOTGATE_ALLOW_PRIVATE_MEDIA": "1", "BOTGATE_REQUEST_TIMEOUT_MS": "4000"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tok = cls.s.token(APP, "bot:sendResponses")

    def setUp(self):
        self.s.sim_reset()

    def send(self, cid, responses, rid="user-1"):
        return self.s.send({"channelId": cid, "recipientId": rid, "response": responses}, self.tok)

    def info(self, cid):
        return json.loads(self.s.redis("GET", "botgate:channel:{%s}" % cid))["info"]

    def image(self, name="cat.png"):
        return {"type": "IMAGE", "url": self.s.sim_url + "/media/" + name}

    # ---- slack ----
    def test_slack_text_and_image(self):
        self.s.put("channel", slack("sl1"))
        a = self.send("sl1", [{"type": "TEXT", "text": "hi"}, self.image()], rid="D123")
        self.assertEqual(a.status, 200, a)
        els = a.json["sendResult"]["result"]
        self.assertEqual(els[0]["chatId"], "D123")
        self.assertRegex(els[0]["result"]["messages"][0]["id"], r"^\d+\.\d{6}$")
        self.assertEqual(els[0]["messageEvent"]["from"], "B0sl1")
        log = self.s.sim_log()
        self.assertEqual(log[0]["auth"], "Bearer xoxb-secret-sl1")
        self.assertEqual(log[0]["body"], {"channel": "D123", "text": "hi"})
        self.assertEqual(log[1]["body"]["blocks"][0]["image_url"], self.s.sim_url + "/media/cat.png")

    def test_slack_errors(self):
        self.s.put("channel", slack("sl2"))
        a = self.send("sl2", [{"type": "TEXT", "text": "x"}], rid="Cinvalid")
        self.assertEqual((a.status, a.json.get("err_code")), (500, 104), a)
        a = self.send("sl2", [{"type": "TEXT", "text": "x"}], rid="Cbadtoken")
        self.assertEqual((a.status, a.json.get("err_code")), (500, 104), a)
        self.assertNotIn("xoxb-secret", a.raw)
        a = self.send("sl2", [{"type": "TEMPLATE", "elementName": "t", "languageCode": "en"}])
        self.assertEqual((a.status, a.json.get("err_code")), (500, 117), a)

    def test_slack_retry_after_honoured_once(self):
        self.s.put("channel", slack("sl3"))
        t0 = time.time()
        a = self.send("sl3", [{"type": "TEXT", "text": "ok"}, {"type": "TEXT", "text": "ratelimit"}],
                      rid="D9")
        took = time.time() - t0
        self.assertEqual(a.status, 200, a)
        el = a.json["sendResult"]["result"][1]
        self.assertEqual(el["error"]["err_code"], 120, el)
        # set aside while its first call was out, taken back whole for the retry
        self.assertEqual((el["messageEvent"]["type"], el["messageEvent"]["data"]),
                         ("TEXT", {"text": "ratelimit"}), el)
        # the simulator always answers 429 Retry-After: 1 for this text: one wait, one retry
        texts = [r["body"]["text"] for r in self.s.sim_log()]
        self.assertEqual(texts, ["ok", "ratelimit", "ratelimit"])
        self.assertGreaterEqual(took, 1.0)

    # ---- teamwork ----
    def test_teamwork_text_image_errors(self):
        self.s.put("channel", teamwork("tw1"))
        a = self.send("tw1", [{"type": "TEXT", "text": "hi"}, self.image()])
        self.assertEqual(a.status, 200, a)
        self.assertTrue(a.json["sendResult"]["result"][0]["result"]["messages"][0]["id"].startswith("tw-"))
        log = self.s.sim_log()
        self.assertEqual(log[0]["body"], {"users": ["user-1"], "messageType": "text", "text": "hi"})
        self.assertEqual(log[1]["body"]["image"], {"url": self.s.sim_url + "/media/cat.png"})
        self.s.put("channel", teamwork("tw2", apiKey="bad"))
        a = self.send("tw2", [{"type": "TEXT", "text": "x"}])
        self.assertEqual((a.status, a.json.get("err_code")), (500, 104), a)
        a = self.send("tw1", [{"type": "TEXT", "text": "x"}], rid="user-invalid")
        self.assertEqual((a.status, a.json.get("err_code")), (500, 104), a)

    # ---- wechat ----
    def test_wechat_token_fetched_written_back_and_reused(self):
        self.s.put("channel", wechat("wx1"))
        a = self.send("wx1", [{"type": "TEXT", "text": "hi"}], rid="openid-1")
        self.assertEqual(a.status, 200, a)
        kinds = [r["kind"] for r in self.s.sim_log()]
        self.assertEqual(kinds, ["token", "send"])
        info = self.info("wx1")
        self.assertTrue(info["accessToken"].startswith("wxtok-"))
        self.assertGreater(info["accessTokenExpiry"], int(time.time() * 1000) + 7000 * 1000)
        self.assertEqual(info["appsecret"], "wx-secret-wx1")
        el = a.json["sendResult"]["result"][0]
        self.assertTrue(el["result"]["messages"][0]["id"])  # generated: wechat gives none
        self.assertEqual(el["messageEvent"]["from"], "gh_bot_wx1")
        self.s.sim_reset()
        self.assertEqual(self.send("wx1", [{"type": "TEXT", "text": "again"}], rid="openid-1").status, 200)
        self.assertEqual([r["kind"] for r in self.s.sim_log()], ["send"])

    def test_wechat_token_expiring_within_5_minutes_is_refreshed(self):
        soon = int(time.time() * 1000) + 4 * 60 * 1000
        self.s.put("channel", wechat("wx2", accessToken="old", accessTokenExpiry=soon))
        self.assertEqual(self.send("wx2", [{"type": "TEXT", "text": "x"}]).status, 200)
        self.assertEqual([r["kind"] for r in self.s.sim_log()], ["token", "send"])

    def test_wechat_40001_refreshes_once_and_retries(self):
        later = int(time.time() * 1000) + 3600 * 1000
        self.s.put("channel", wechat("wx3", accessToken="revoked-token", accessTokenExpiry=later))
        a = self.send("wx3", [{"type": "TEXT", "text": "x"}])
        self.assertEqual(a.status, 200, a)
        self.assertEqual([r["kind"] for r in self.s.sim_log()], ["send", "token", "send"])
        self.assertNotEqual(self.info("wx3")["accessToken"], "revoked-token")

    def test_wechat_bad_secret_is_104(self):
        self.s.put("channel", wechat("wx4", appsecret="wrong"))
        a = self.send("wx4", [{"type": "TEXT", "text": "x"}])
        self.assertEqual((a.status, a.json.get("err_code")), (500, 104), a)
        self.assertNotIn("wrong", json.dumps(a.json["err"]).replace("wrong secret", ""))

    def test_wechat_bad_openid_is_104_and_template_117(self):
        self.s.put("channel", wechat("wx5"))
        a = self.send("wx5", [{"type": "TEXT", "text": "x"}], rid="openid-invalid")
        self.assertEqual((a.status, a.json.get("err_code")), (500, 104), a)
        a = self.send("wx5", [{"type": "TEMPLATE", "elementName": "t", "languageCode": "en"}])
        self.assertEqual((a.status, a.json.get("err_code")), (500, 117), a)

    def test_wechat_image_upload_and_media_cache(self):
        self.s.put("channel", wechat("wx6"))
        a = self.send("wx6", [self.image("dog.png")])
        self.assertEqual(a.status, 200, a)
        log = self.s.sim_log()
        self.assertEqual([r["kind"] for r in log], ["token", "upload", "send"])
        self.assertEqual(log[1]["body"]["content_type"], "image/png")
        self.assertGreater(log[1]["body"]["size"], 50)
        media_id = log[2]["body"]["image"]["media_id"]
        self.assertEqual(log[2]["body"]["msgtype"], "image")
        # The media id is written back without holding the answer: it may land just after it.
        wait_for(lambda: len(self.s.redis("KEYS", "botgate:media:{wx6}:*")) == 1, 5,
                 "the media id in the cache")
        keys = self.s.redis("KEYS", "botgate:media:{wx6}:*")
        self.assertEqual(len(keys), 1)
        self.assertEqual(self.s.redis("GET", keys[0]), media_id)
        ttl = self.s.redis("TTL", keys[0])
        self.assertGreater(ttl, 47 * 3600)
        self.assertLessEqual(ttl, 48 * 3600)
        # the same URL again: no download, no upload
        self.s.sim_reset()
        self.assertEqual(self.send("wx6", [self.image("dog.png")], rid="user-2").status, 200)
        log = self.s.sim_log()
        self.assertEqual([r["kind"] for r in log], ["send"])
        self.assertEqual(log[0]["body"]["image"]["media_id"], media_id)

    def test_wechat_image_not_an_image(self):
        self.s.put("channel", wechat("wx7"))
        a = self.send("wx7", [{"type": "TEXT", "text": "first"},
                              {"type": "IMAGE", "url": self.s.sim_url + "/media/page.html"}])
        self.assertEqual(a.status, 200, a)
        err = a.json["sendResult"]["result"][1]["error"]
        self.assertIn("not an image", err["err"])
        self.assertNotIn("upload", [r["kind"] for r in self.s.sim_log()])

    def test_wechat_image_too_large(self):
        self.s.put("channel", wechat("wx8"))
        a = self.send("wx8", [{"type": "TEXT", "text": "first"},
                              {"type": "IMAGE", "url": self.s.sim_url + "/media/big.png"}])
        self.assertEqual(a.status, 200, a)
        self.assertIn("too large", a.json["sendResult"]["result"][1]["error"]["err"])

    def test_rate_limits_map_to_120(self):
        self.s.put("channel", {"_id": "fb-rl", "app": APP, "type": "facebook", "on": True,
                               "info": {"accessToken": "t", "pageId": "1"}})
        a = self.send("fb-rl", [{"type": "TEXT", "text": "a"}, {"type": "TEXT", "text": "ratelimit"},
                                {"type": "TEXT", "text": "ratelimit613"}])
        self.assertEqual(a.status, 200, a)
        res = a.json["sendResult"]["result"]
        self.assertEqual([r.get("error", {}).get("err_code") for r in res], [None, 120, 120])

    def test_secrets_not_in_logs(self):
        log = self.s.gateway_log()
        for s in ["xoxb-secret", "wx-secret", "tw-key-", "wxtok-", self.tok]:
            self.assertNotIn(s, log)


class RetryAfterPastDeadline(StackTest):
    stack_args = {"env": {"BOTGATE_REQUEST_TIMEOUT_MS": "800"}}

    def test_retry_after_that_does_not_fit_is_reported(self):
        tok = self.s.token(APP, "bot:sendResponses")
        self.s.put("channel", slack("sl9"))
        t0 = time.time()
        a = self.s.send({"channelId": "sl9", "recipientId": "D1",
                         "response": [{"type": "TEXT", "text": "ok"},
                                      {"type": "TEXT", "text": "ratelimit"}]}, tok)
        self.assertLess(time.time() - t0, 0.8)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["result"][1]["error"]["err_code"], 120)
        self.assertEqual([r["body"]["text"] for r in self.s.sim_log()], ["ok", "ratelimit"])


if __name__ == "__main__":
    unittest.main()
