"""POST /redirectMemberToNode's webhook actions against the simulator (contract.md section 6):
a POST with a templated body, a GET with a templated query, a post-action webhook that sees the
pre-action's change, and every failure (a server error, a timeout, an answer that is not JSON)
an element while the run goes on; none when the actions do not run. The SSRF guard that refuses
loopback without BOTGATE_ALLOW_PRIVATE_MEDIA is test_redirect.py's."""
import json
import time
import unittest

from harness import facebook_channel
from test_redirect import APP, TRICKY, RedirectBase, text, tree


class RedirectWebhooks(RedirectBase):
    """Webhook actions against the simulator, which is on loopback: private addresses allowed."""
    stack_args = {"env": {"BOTGATE_ALLOW_PRIVATE_MEDIA": "1"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        s.put("channel", facebook_channel("fb1", APP))
        hook = s.sim_url + "/hook"
        post_body = {"order": "{{agendaMeta.orderId}}", "who": "{{member.firstName}}",
                     "note": "{{agendaMeta.note}}", "fixed": 7, "flag": True, "none": None,
                     "nested": {"list": ["{{channel.name}}", "{{channel.info.accessToken}}", 2]}}
        nodes = {
            "WPOST": {
                "preAction": [{"type": "webhook", "url": hook + "/echo", "method": "POST",
                               "body": post_body, "saveAs": "lookup", "timeoutMs": 3000}],
                "response": [text("got {{member.botMeta.tempData.lookup.body.order}} by "
                                  "{{member.botMeta.tempData.lookup.method}} for "
                                  "{{member.botMeta.tempData.lookup.body.who}}")],
                "redirect": {"tree": "TW", "nodeCompositeId": "WLATER"},
            },
            "WLATER": {"response": [text("later {{member.botMeta.tempData.lookup.body.note}}")]},
            "WGET": {
                "preAction": [{"type": "webhook", "method": "GET",
                               "url": hook + "/echo?order={{agendaMeta.orderId}}"
                                             "&who={{member.firstName}}&lit=a%20b",
                               "saveAs": "g"}],
                "response": [text("q={{member.botMeta.tempData.g.query}} "
                                  "m={{member.botMeta.tempData.g.method}}")],
            },
            "WPOSTACT": {
                "response": [text("first")],
                "postAction": [{"type": "webhook", "url": hook + "/echo",
                                "body": {"after": "{{member.meta.x}}"}, "saveAs": "post"}],
                "preAction": [{"type": "set", "path": "member.meta.x", "value": "pre-set"}],
            },
            "W500": {
                "preAction": [{"type": "webhook", "url": hook + "/status/500", "method": "POST",
                               "body": {"a": 1}, "saveAs": "bad"}],
                "response": [text("after 500")],
                "postAction": [{"type": "addTags", "tags": ["w500"]}],
            },
            "WSLOW": {
                "preAction": [{"type": "webhook", "url": hook + "/slow/2500", "method": "POST",
                               "body": {}, "saveAs": "late", "timeoutMs": 300}],
                "response": [text("after the wait")],
                "postAction": [{"type": "addTags", "tags": ["wslow"]}],
            },
            "WTEXT": {
                "preAction": [{"type": "webhook", "url": hook + "/text", "saveAs": "t"}],
                "response": [text("after text [{{member.botMeta.tempData.t}}]")],
            },
        }
        cls.import_tree(tree("TW", APP, nodes))
        cls.tok = s.token(APP, "bot:redirectMemberToNode")

    def test_post_webhook_with_templated_body(self):
        self.new_member("mw1")
        meta = {"orderId": "O-9", "note": TRICKY}
        before = int(time.time() * 1000)
        ans = self.go("mw1", "TW", "WPOST", meta=meta)
        res = self.results(ans, "mw1", count=2)
        rendered = {"order": "O-9", "who": "Ada", "note": TRICKY, "fixed": 7, "flag": True,
                    "none": None, "nested": {"list": ["fb fb1", "", 2]}}
        hooks = self.hook_log()
        self.assertEqual(len(hooks), 1)
        self.assertEqual(hooks[0]["method"], "POST")
        self.assertEqual(hooks[0]["path"], "/hook/echo")
        self.assertEqual(hooks[0]["body"], rendered)
        self.assertNotIn("fb-page-token-fb1", json.dumps(hooks[0]))
        # the answer is saved and seen by the same node's response and by the next node
        self.assert_sent(res[0], "got O-9 by POST for Ada", "psid-mw1", before)
        self.assert_sent(res[1], "later " + TRICKY, "psid-mw1", before)
        self.assertEqual(self.texts(), ["got O-9 by POST for Ada", "later " + TRICKY])
        # the webhook came before the responses
        self.assertLess(hooks[0]["seq"], self.platform_log()[0]["seq"])
        rec = self.rec("mw1")
        self.assertEqual(rec["botMeta"]["tempData"],
                         {"lookup": {"ok": True, "method": "POST", "query": "", "body": rendered}})
        self.assert_position(rec, "TW", "WLATER")

    def test_get_webhook_with_templated_query(self):
        self.new_member("mw2")
        ans = self.go("mw2", "TW", "WGET", meta={"orderId": "A&B=C d/\u00e9?#"})
        res = self.results(ans, "mw2", count=1)
        query = "order=A%26B%3DC%20d%2F%C3%A9%3F%23&who=Ada&lit=a%20b"
        hooks = self.hook_log()
        self.assertEqual(len(hooks), 1)
        self.assertEqual(hooks[0]["method"], "GET")
        self.assertEqual(hooks[0]["path"], "/hook/echo")
        self.assertEqual(hooks[0]["query"], query)
        self.assertEqual(self.texts(), ["q=%s m=GET" % query])
        self.assertEqual(res[0]["messageEvent"]["data"], {"text": "q=%s m=GET" % query})
        saved = self.rec("mw2")["botMeta"]["tempData"]["g"]
        self.assertEqual(saved["method"], "GET")
        self.assertEqual(saved["query"], query)
        self.assertIsNone(saved.get("body"))

    def test_post_action_webhook_sees_pre_action(self):
        self.new_member("mw3")
        ans = self.go("mw3", "TW", "WPOSTACT")
        self.results(ans, "mw3", count=1)
        hooks = self.hook_log()
        self.assertEqual([h["body"] for h in hooks], [{"after": "pre-set"}])
        self.assertEqual(hooks[0]["method"], "POST")  # a body without a method: POST
        self.assertGreater(hooks[0]["seq"], self.platform_log()[0]["seq"])
        self.assertEqual(self.rec("mw3")["botMeta"]["tempData"]["post"]["body"],
                         {"after": "pre-set"})

    def test_webhook_server_error_is_an_element_and_the_run_goes_on(self):
        self.new_member("mw4")
        before = int(time.time() * 1000)
        ans = self.go("mw4", "TW", "W500")
        res = self.results(ans, "mw4", send_ok=0, count=2)
        self.assert_node_error(res[0], 113)
        self.assert_sent(res[1], "after 500", "psid-mw4", before)
        self.assertEqual(len(self.hook_log()), 1)
        self.assertEqual(self.hook_log()[0]["path"], "/hook/status/500")
        rec = self.rec("mw4")
        self.assertEqual(rec["botMeta"]["tempData"], {})
        self.assertEqual(rec["tags"], ["w500"])
        self.assert_position(rec, "TW", "W500")

    def test_webhook_slower_than_its_timeout_is_an_element(self):
        self.new_member("mw5")
        before = int(time.time() * 1000)
        t0 = time.time()
        ans = self.go("mw5", "TW", "WSLOW")
        elapsed = time.time() - t0
        res = self.results(ans, "mw5", send_ok=0, count=2)
        self.assert_node_error(res[0], 113)
        self.assert_sent(res[1], "after the wait", "psid-mw5", before)
        self.assertLess(elapsed, 2.0)
        rec = self.rec("mw5")
        self.assertEqual(rec["botMeta"]["tempData"], {})
        self.assertEqual(rec["tags"], ["wslow"])

    def test_webhook_answer_that_is_not_json_is_not_saved(self):
        self.new_member("mw6")
        ans = self.go("mw6", "TW", "WTEXT")
        self.results(ans, "mw6", count=1)
        self.assertEqual(self.texts(), ["after text []"])
        self.assertEqual(self.rec("mw6")["botMeta"]["tempData"], {})
        self.assertEqual(len(self.hook_log()), 1)

    def test_webhooks_skipped_when_the_actions_do_not_run(self):
        self.new_member("mw7")
        ans = self.go("mw7", "TW", "WPOST", runPreAction=False, meta={"orderId": "O-1"})
        res = self.results(ans, "mw7", count=2)
        self.assertEqual(self.hook_log(), [])
        self.assertEqual(res[0]["messageEvent"]["data"], {"text": "got  by  for "})


if __name__ == "__main__":
    unittest.main()
