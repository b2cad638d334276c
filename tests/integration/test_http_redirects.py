"""HTTP redirects of the calls botgate makes for a user (media downloads, webhook actions):
up to 3 are followed, a POST behind a 307 or 308 stays a POST whose body reaches the final
target once, a fourth hop and a hop to another scheme are refused, and a hop's request is still
never sent twice when its connection is reset after it went out.

Found by these tests: every redirect failed with 113, because the check that refuses a resend
(CURLOPT_PREREQFUNCTION in net/netcurl.c) took the first hop's request bytes, which curl
adds up over the whole transfer, for a resend of the second hop."""
import time
import unittest
import urllib.parse

from harness import facebook_channel
from test_redirect import APP, RedirectBase, text, tree


def quote(url):
    return urllib.parse.quote(url, safe="")


class HttpRedirects(RedirectBase):
    """The simulator is on loopback: private addresses allowed (the guard on redirects is in
    test_ssrf.py)."""
    stack_args = {"env": {"BOTGATE_ALLOW_PRIVATE_MEDIA": "1"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        s.put("channel", facebook_channel("fb1", APP))
        s.put("channel", {"_id": "wx", "app": APP, "type": "wechat", "on": True,
                          "info": {"appId": "a", "appsecret": "s", "botOpenId": "gh"}})
        echo = s.sim_url + "/hook/echo"
        reset_text = "reset behind a redirect"
        fb = s.sim_url + "/graph/v19.0/me/messages?access_token=fb-page-token-fb1"

        def hook(url, saved, **more):
            return dict({"type": "webhook", "url": url, "saveAs": saved, "timeoutMs": 3000},
                        **more)
        nodes = {
            "H307": {"preAction": [hook(cls.hops(echo, 1, 307), "r", method="POST",
                                        body={"n": 1, "s": "once"})],
                     "response": [text("307 {{member.botMeta.tempData.r.body.s}}")]},
            "H308": {"preAction": [hook(cls.hops(echo, 1, 308), "r", method="POST",
                                        body={"n": 2})],
                     "response": [text("308 {{member.botMeta.tempData.r.method}}")]},
            "H3": {"preAction": [hook(cls.hops(echo + "?k=v", 3, 302), "r", method="GET")],
                   "response": [text("3 {{member.botMeta.tempData.r.query}}")]},
            "H4": {"preAction": [hook(cls.hops(echo, 4, 302), "r", method="GET")],
                   "response": [text("after four")]},
            "HFILE": {"preAction": [hook(cls.hops("file:///etc/passwd", 1, 302), "r",
                                         method="GET")],
                      "response": [text("after file")]},
            "HRESET": {"preAction": [hook(cls.hops(fb, 1, 307), "r", method="POST",
                                          body={"recipient": {"id": "psid-x"},
                                                "message": {"text": reset_text}})],
                       "response": [text("after reset")]},
        }
        cls.reset_text = reset_text
        cls.import_tree(tree("TR", APP, nodes))
        cls.tok = s.token(APP, "bot:redirectMemberToNode")
        cls.send_tok = s.token(APP, "bot:sendResponses")

    @classmethod
    def hops(cls, final, n, code):
        """A URL that reaches final after n redirects with the status code."""
        url = final
        for _ in range(n):
            url = cls.s.sim_url + "/hook/redirect/%d?to=%s" % (code, quote(url))
        return url

    def image(self, url):
        return self.s.send({"channelId": "wx", "recipientId": "openid-1",
                            "response": [{"type": "TEXT", "text": "first"},
                                         {"type": "IMAGE", "url": url}]}, self.send_tok)

    def media_hops(self, final, n):
        url = final
        for _ in range(n):
            url = self.s.sim_url + "/media/redirect?to=" + quote(url)
        return url

    # ---- media downloads ----
    def test_image_behind_two_302s_is_sent(self):
        a = self.image(self.media_hops(self.s.sim_url + "/media/ok.png", 2))
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["ok"], 1, a)
        el = a.json["sendResult"]["result"][1]
        self.assertNotIn("error", el)
        self.assertEqual(el["messageEvent"]["type"], "IMAGE", el)
        kinds = [r["kind"] for r in self.s.sim_log()]
        self.assertEqual(kinds.count("upload"), 1, kinds)
        self.assertEqual(kinds.count("send"), 2, kinds)

    def assert_image_refused(self, url, mentions):
        a = self.image(url)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["ok"], 0, a)
        err = a.json["sendResult"]["result"][1]["error"]
        self.assertEqual(err["err_code"], 113, a)
        self.assertIn(mentions, err["err"])
        self.assertNotIn("upload", [r["kind"] for r in self.s.sim_log()])

    def test_image_behind_four_redirects_is_refused(self):
        self.assert_image_refused(self.media_hops(self.s.sim_url + "/media/ok.png", 4),
                                  "redirects")

    def test_image_redirect_to_another_scheme_is_refused(self):
        for final in ["file:///etc/passwd", "ftp://127.0.0.1:%d/ok.png" % self.s.sim_port,
                      "gopher://127.0.0.1:%d/_x" % self.s.sim_port]:
            with self.subTest(final=final):
                self.s.sim_reset()
                self.assert_image_refused(self.media_hops(final, 1), "rotocol")

    # ---- webhooks ----
    def test_post_behind_307_stays_a_post_and_arrives_once(self):
        self.new_member("mr1")
        before = int(time.time() * 1000)
        res = self.results(self.go("mr1", "TR", "H307"), "mr1", count=1)
        self.assert_sent(res[0], "307 once", "psid-mr1", before)
        hooks = self.hook_log()
        self.assertEqual([(h["method"], h["path"]) for h in hooks],
                         [("POST", "/hook/redirect/307"), ("POST", "/hook/echo")], hooks)
        self.assertEqual(hooks[1]["body"], {"n": 1, "s": "once"})
        self.assertEqual(self.rec("mr1")["botMeta"]["tempData"]["r"]["method"], "POST")

    def test_post_behind_308_stays_a_post(self):
        self.new_member("mr2")
        before = int(time.time() * 1000)
        res = self.results(self.go("mr2", "TR", "H308"), "mr2", count=1)
        self.assert_sent(res[0], "308 POST", "psid-mr2", before)
        echoes = [h for h in self.hook_log() if h["path"] == "/hook/echo"]
        self.assertEqual([(h["method"], h["body"]) for h in echoes], [("POST", {"n": 2})])

    def test_three_redirects_are_followed(self):
        self.new_member("mr3")
        before = int(time.time() * 1000)
        res = self.results(self.go("mr3", "TR", "H3"), "mr3", count=1)
        self.assert_sent(res[0], "3 k=v", "psid-mr3", before)
        self.assertEqual([h["path"] for h in self.hook_log()],
                         ["/hook/redirect/302"] * 3 + ["/hook/echo"])

    def test_fourth_redirect_is_not_followed(self):
        self.new_member("mr4")
        before = int(time.time() * 1000)
        res = self.results(self.go("mr4", "TR", "H4"), "mr4", send_ok=0, count=2)
        self.assert_node_error(res[0], 113)
        self.assert_sent(res[1], "after four", "psid-mr4", before)
        self.assertEqual([h["path"] for h in self.hook_log()], ["/hook/redirect/302"] * 4)
        self.assertNotIn("r", self.rec("mr4")["botMeta"]["tempData"])

    def test_webhook_redirect_to_a_file_is_refused(self):
        self.new_member("mr5")
        res = self.results(self.go("mr5", "TR", "HFILE"), "mr5", send_ok=0, count=2)
        self.assert_node_error(res[0], 113)
        self.assertEqual([h["path"] for h in self.hook_log()], ["/hook/redirect/302"])
        self.assertEqual(self.rec("mr5")["botMeta"]["tempData"], {})

    def test_reset_after_a_redirected_post_is_not_sent_again(self):
        """The second hop goes out on the connection the first kept alive; the target reads
        it and closes without an answer. curl would send it again on a new connection (up to
        5 times); the hop's request went out, so it is refused."""
        self.new_member("mr6")
        res = self.results(self.go("mr6", "TR", "HRESET"), "mr6", send_ok=0, count=2)
        self.assert_node_error(res[0], 113)
        got = [r for r in self.s.sim_log() if r["path"].endswith("/me/messages")
               and (r.get("body") or {}).get("message", {}).get("text") == self.reset_text]
        self.assertEqual(len(got), 1, got)
        self.assertEqual(got[0]["method"], "POST")


if __name__ == "__main__":
    unittest.main()
