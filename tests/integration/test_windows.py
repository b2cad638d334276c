"""contract.md section 14, conversation windows: checked before any platform call from the
member's lastInboundAt (set here in Redis, as the store contract lets any writer do), per
platform: inside the window sent; outside it 127 with no call at all (the simulator's record is
the judge), unless the response is one the platform takes outside it (a whatsapp TEMPLATE, a
facebook messageTag), or a TEMPLATE goes instead (the response's fallback, the channel's
info.windowTemplate); a member botgate never saw write is sent to, and the platform's own
refusal (the simulator refuses as the platforms do) is 127 with the platform's message; an
async send gets 127 in its status the same way."""
import json
import time
import unittest

from harness import (StackTest, cloud_channel, facebook_channel, http, member, wait_for,
                     whatsapp_channel)

APP = "app-win"
HOUR_MS = 3600 * 1000
TEXT = {"type": "TEXT", "text": "hello again"}
TEMPLATE = {"type": "TEMPLATE", "elementName": "reopen", "languageCode": "en"}

# channel id -> (type, the member's address in the record, the address the platform sees,
# the simulator's name of the platform)
CHANNELS = {
    "w-fb": ("facebook", "psid-w1", "psid-w1", "facebook"),
    "w-wa": ("whatsapp", "+852 6100 0001", "85261000001", "whatsapp"),
    "w-wc": ("whatsapp-cloud", "85261000002", "85261000002", "whatsapp-cloud"),
    "w-wx": ("wechat", "openid-w1", "openid-w1", "wechat"),
}
WINDOW_H = {"facebook": 24, "whatsapp": 24, "whatsapp-cloud": 24, "wechat": 48}


def wechat(cid):
    return {"_id": cid, "app": APP, "type": "wechat", "on": True,
            "info": {"appId": "wxapp-" + cid, "appsecret": "wx-secret-" + cid,
                     "botOpenId": "gh_bot_" + cid}}


def now_ms():
    return int(time.time() * 1000)


class Windows(StackTest):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        s.put("channel", facebook_channel("w-fb", APP))
        s.put("channel", whatsapp_channel("w-wa", APP, s.sim_url + "/wa"))
        s.put("channel", cloud_channel("w-wc", APP))
        s.put("channel", wechat("w-wx"))
        s.put("channel", {"_id": "w-sl", "app": APP, "type": "slack", "on": True,
                          "info": {"botAccessToken": "xoxb-w", "botId": "B0W"}})
        tmpl = dict(TEMPLATE, elementName="window_reopen")
        s.put("channel", cloud_channel("w-wct", APP, info={
            "accessToken": "cloud-token-wct", "phoneNumberId": "1055550001", "wabaId": "2000",
            "windowTemplate": tmpl}))
        s.put("channel", cloud_channel("w-wcb", APP, info={
            "accessToken": "cloud-token-wcb", "phoneNumberId": "1055550002", "wabaId": "2000",
            "windowTemplate": {"type": "TEMPLATE", "languageCode": "en"}}))
        cls.tok = s.token(APP, "bot:sendResponses", "bot:redirectMemberToNode")
        path = s.dir + "/win-tree.json"
        with open(path, "w") as f:
            json.dump({"_id": "win-tree", "app": APP, "name": "windows", "nodes": {
                "N1": {"response": [TEXT, dict(TEXT, text="b", fallback=TEMPLATE), TEMPLATE]}}},
                f)
        s.ctl("tree", "import", path)

    def setUp(self):
        self.s.sim_reset()

    # ---- helpers ----
    def put_member(self, cid, mid, last=None, external=None):
        """The member record written straight into Redis, lastInboundAt as given (None: the
        field absent: botgate never saw the member write)."""
        ctype = CHANNELS.get(cid, ("whatsapp-cloud", "85261000009"))[0]
        ext = external or CHANNELS.get(cid, (None, "85261000009"))[1]
        m = member(mid, cid, APP, ext, platform=ctype)
        if last is not None:
            m["lastInboundAt"] = last
        self.s.redis("SET", "botgate:member:{%s}:%s" % (cid, mid), json.dumps(m))

    def send(self, cid, mid, responses, headers=None):
        h = {"Authorization": "Bearer " + self.tok}
        h.update(headers or {})
        return http("POST", self.s.url + "/sendResponses",
                    {"channelId": cid, "memberId": mid, "response": responses}, h)

    def messages(self):
        """The message calls the simulator took (not logins, contact checks or tokens)."""
        return [e for e in self.s.sim_log() if e["kind"] in ("messages", "send")]

    def elements(self, a):
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["ok"], 1, a)
        return a.json["sendResult"]["result"]

    def assert_window_refused(self, el, hours, way="send a TEMPLATE"):
        self.assertEqual(el["error"]["err_code"], 127, el)
        self.assertEqual(el["error"]["err"], "outside the conversation window: the member last "
                         "wrote %d h ago; %s" % (hours, way))

    # ---- inside and outside, per platform ----
    def test_inside_the_window_sent(self):
        for cid, (ctype, _, address, platform) in CHANNELS.items():
            with self.subTest(ctype):
                self.s.sim_reset()
                self.put_member(cid, "in-" + cid, last=now_ms() - HOUR_MS)
                els = self.elements(self.send(cid, "in-" + cid, [TEXT]))
                self.assertNotIn("error", els[0])
                self.assertNotIn("fallbackUsed", els[0])
                sent = self.messages()
                self.assertEqual([(e["platform"], e["recipient"]) for e in sent],
                                 [(platform, address)])

    def test_outside_the_window_127_without_a_call(self):
        ways = {"facebook": "send it with a messageTag",
                "wechat": "it opens again when the member writes"}
        for cid, (ctype, _, _, _) in CHANNELS.items():
            with self.subTest(ctype):
                self.s.sim_reset()
                hours = WINDOW_H[ctype] + 6
                self.put_member(cid, "out-" + cid, last=now_ms() - hours * HOUR_MS - 60000)
                a = self.send(cid, "out-" + cid, [TEXT, dict(TEXT, text="second")])
                els = self.elements(a)
                self.assertEqual(a.json["sendResult"]["ok"], 0, a)
                for el in els:
                    self.assert_window_refused(el, hours, ways.get(ctype, "send a TEMPLATE"))
                self.assertEqual(els[1]["messageEvent"]["data"], {"text": "second"})
                # no call at all: no message, and no login, token or contact check either
                self.assertEqual(self.s.sim_log(), [])

    def test_the_edge_and_the_record_forms(self):
        # wechat's window is 48 h: 47 h is inside
        self.put_member("w-wx", "edge-wx", last=now_ms() - 47 * HOUR_MS)
        self.assertNotIn("error", self.elements(self.send("w-wx", "edge-wx", [TEXT]))[0])
        # an ISO-8601 date (another writer's) counts as ms do
        iso = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() - 30 * 3600))
        self.put_member("w-wc", "iso-wc", last=iso)
        self.assert_window_refused(self.elements(self.send("w-wc", "iso-wc", [TEXT]))[0], 30)
        self.put_member("w-wc", "iso-in", last=time.strftime(
            "%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 3600)))
        self.assertNotIn("error", self.elements(self.send("w-wc", "iso-in", [TEXT]))[0])

    def test_no_window_on_slack(self):
        self.put_member("w-sl", "sl1", last=now_ms() - 1000 * HOUR_MS, external="D123")
        self.assertNotIn("error", self.elements(self.send("w-sl", "sl1", [TEXT]))[0])
        self.assertEqual(len(self.messages()), 1)

    # ---- what goes outside the window ----
    def test_a_template_goes_outside_the_window(self):
        for cid in ("w-wa", "w-wc"):
            with self.subTest(cid):
                self.s.sim_reset()
                self.put_member(cid, "t-" + cid, last=now_ms() - 40 * HOUR_MS)
                a = self.send(cid, "t-" + cid, [TEXT, TEMPLATE])
                els = self.elements(a)
                self.assert_window_refused(els[0], 40)
                self.assertNotIn("error", els[1])
                sent = self.messages()
                self.assertEqual([e["body"]["type"] for e in sent], ["template"])

    def test_a_template_fallback_goes_instead(self):
        resp = dict(TEXT, fallback=dict(TEMPLATE, elementName="fallback_tmpl"))
        # inside the window the response itself goes
        self.put_member("w-wc", "fb-in", last=now_ms() - HOUR_MS)
        els = self.elements(self.send("w-wc", "fb-in", [resp]))
        self.assertNotIn("fallbackUsed", els[0])
        self.assertEqual(self.messages()[0]["body"]["type"], "text")
        # outside it, the TEMPLATE, and the element says so
        self.s.sim_reset()
        self.put_member("w-wc", "fb-out", last=now_ms() - 30 * HOUR_MS)
        els = self.elements(self.send("w-wc", "fb-out", [resp]))
        self.assertNotIn("error", els[0])
        self.assertIs(els[0]["fallbackUsed"], True)
        self.assertEqual(els[0]["messageEvent"]["data"], {"text": "hello again"})
        sent = self.messages()
        self.assertEqual(len(sent), 1)
        self.assertEqual(sent[0]["body"]["type"], "template")
        self.assertEqual(sent[0]["body"]["template"]["name"], "fallback_tmpl")
        # a fallback the window refuses too is no way out
        self.s.sim_reset()
        a = self.send("w-wc", "fb-out", [dict(TEXT, fallback={"type": "TEXT", "text": "b"})])
        self.assert_window_refused(self.elements(a)[0], 30)
        self.assertEqual(self.messages(), [])

    def test_the_channel_window_template_goes_instead(self):
        self.put_member("w-wct", "ct1", last=now_ms() - 26 * HOUR_MS)
        els = self.elements(self.send("w-wct", "ct1", [TEXT, TEMPLATE]))
        self.assertNotIn("error", els[0])
        self.assertIs(els[0]["fallbackUsed"], True)
        self.assertEqual(els[0]["messageEvent"]["data"], {"text": "hello again"})
        self.assertNotIn("fallbackUsed", els[1])  # a TEMPLATE goes as it is
        self.assertEqual([e["body"]["template"]["name"] for e in self.messages()],
                         ["window_reopen", "reopen"])
        # a response whose own fallback the window refuses too: the channel's template goes,
        # not that fallback (delivery takes the template, not the validated fallback object)
        self.s.sim_reset()
        els = self.elements(self.send("w-wct", "ct1", [
            dict(TEXT, fallback={"type": "TEXT", "text": "b"})]))
        self.assertNotIn("error", els[0])
        self.assertIs(els[0]["fallbackUsed"], True)
        self.assertEqual([e["body"]["type"] for e in self.messages()], ["template"])
        self.assertEqual(self.messages()[0]["body"]["template"]["name"], "window_reopen")
        # inside the window the channel's template is not used
        self.s.sim_reset()
        self.put_member("w-wct", "ct2", last=now_ms() - HOUR_MS)
        els = self.elements(self.send("w-wct", "ct2", [TEXT]))
        self.assertNotIn("fallbackUsed", els[0])
        self.assertEqual(self.messages()[0]["body"]["type"], "text")

    def test_a_broken_channel_window_template_is_named(self):
        self.put_member("w-wcb", "cb1", last=now_ms() - 26 * HOUR_MS)
        el = self.elements(self.send("w-wcb", "cb1", [TEXT]))[0]
        self.assertEqual(el["error"]["err_code"], 127, el)
        self.assertIn("info.windowTemplate.elementName", el["error"]["err"])
        self.assertEqual(self.s.sim_log(), [])

    def test_facebook_message_tag_goes_outside_the_window(self):
        self.put_member("w-fb", "tag1", last=now_ms() - 100 * HOUR_MS)
        tagged = dict(TEXT, messageTag="CONFIRMED_EVENT_UPDATE")
        a = self.send("w-fb", "tag1", [tagged, TEXT])
        els = self.elements(a)
        self.assertNotIn("error", els[0])
        self.assertEqual(els[0]["messageEvent"]["data"],
                         {"text": "hello again", "messageTag": "CONFIRMED_EVENT_UPDATE"})
        self.assert_window_refused(els[1], 100, "send it with a messageTag")
        sent = self.messages()
        self.assertEqual(len(sent), 1)
        self.assertEqual(sent[0]["body"]["messaging_type"], "MESSAGE_TAG")
        self.assertEqual(sent[0]["body"]["tag"], "CONFIRMED_EVENT_UPDATE")
        # inside the window a tag is sent as a tag too
        self.s.sim_reset()
        self.put_member("w-fb", "tag2", last=now_ms() - HOUR_MS)
        self.elements(self.send("w-fb", "tag2", [tagged]))
        self.assertEqual(self.messages()[0]["body"]["tag"], "CONFIRMED_EVENT_UPDATE")

    def test_message_tag_checked_before_anything_is_sent(self):
        self.put_member("w-fb", "tag3", last=now_ms() - HOUR_MS)
        self.put_member("w-wc", "tag4", last=now_ms() - HOUR_MS)
        a = self.send("w-fb", "tag3", [TEXT, dict(TEXT, messageTag="PROMOTION")])
        self.assert_error(a, 108, mentions="response[1].messageTag")
        a = self.send("w-wc", "tag4", [TEXT, dict(TEXT, messageTag="HUMAN_AGENT")])
        self.assert_error(a, 108, mentions="messageTag is only for facebook")
        self.assertEqual(self.s.sim_log(), [])

    # ---- never seen writing: the platform decides ----
    def test_never_seen_the_platform_refusal_is_127(self):
        refusals = {"facebook": "outside of allowed window",
                    "whatsapp": "24 hours have passed since the customer last replied to this "
                                "number. (code 470)",
                    "whatsapp-cloud": "24 hours have passed since the customer last replied to "
                                      "this number. (code 131047)",
                    "wechat": "(errcode 45015)"}
        for cid, (ctype, _, address, platform) in CHANNELS.items():
            with self.subTest(ctype):
                self.s.sim_reset()
                self.s.sim("POST", "/_sim/windows",
                           {"platform": platform, "recipient": address, "closed": True})
                self.put_member(cid, "new-" + cid)  # no lastInboundAt
                a = self.send(cid, "new-" + cid, [TEXT])
                el = self.elements(a)[0]
                self.assertEqual(el["error"]["err_code"], 127, el)
                self.assertTrue(el["error"]["err"].startswith(ctype + ": "), el)
                self.assertIn(refusals[ctype], el["error"]["err"])
                self.assertEqual(len(self.messages()), 1)  # botgate did try
        # what the platform takes outside its window still goes: a facebook tag
        self.s.sim_reset()
        self.s.sim("POST", "/_sim/windows",
                   {"platform": "facebook", "recipient": "psid-w1", "closed": True})
        el = self.elements(self.send("w-fb", "new-w-fb",
                                     [dict(TEXT, messageTag="HUMAN_AGENT")]))[0]
        self.assertNotIn("error", el)

    # ---- a node's responses ----
    def test_redirect_checks_the_window_too(self):
        self.put_member("w-wc", "rd1", last=now_ms() - 30 * HOUR_MS)
        a = http("POST", self.s.url + "/redirectMemberToNode",
                 {"channelId": "w-wc", "memberId": "rd1",
                  "redirect": {"tree": "win-tree", "nodeCompositeId": "N1"}},
                 {"Authorization": "Bearer " + self.tok})
        self.assertEqual(a.status, 200, a)
        els = a.json["sendResult"]["result"]
        self.assertEqual(len(els), 3, a)
        self.assert_window_refused(els[0], 30)
        self.assertEqual(els[1]["ok"], 1, els[1])
        self.assertIs(els[1]["fallbackUsed"], True)
        self.assertEqual(els[2]["ok"], 1, els[2])
        self.assertNotIn("fallbackUsed", els[2])
        self.assertEqual([e["body"]["template"]["name"] for e in self.messages()],
                         ["reopen", "reopen"])

    # ---- async ----
    def test_async_send_reports_127_in_its_status(self):
        self.put_member("w-wc", "as1", last=now_ms() - 30 * HOUR_MS)
        a = self.send("w-wc", "as1", [TEXT, TEMPLATE], headers={"Prefer": "respond-async"})
        self.assertEqual(a.status, 202, a)
        rid = a.json["requestId"]
        got = {}

        def final():
            st = http("GET", self.s.url + "/requests/" + rid,
                      headers={"Authorization": "Bearer " + self.tok})
            got["st"] = st
            return st.status == 200 and st.json["status"] in ("done", "failed")
        wait_for(final, timeout=30, what="the queued request to end")
        els = got["st"].json["sendResult"]["result"]
        self.assert_window_refused(els[0], 30)
        self.assertNotIn("error", els[1])
        self.assertEqual([e["body"]["type"] for e in self.messages()], ["template"])


if __name__ == "__main__":
    unittest.main()
