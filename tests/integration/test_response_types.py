"""Every response type of contract.md section 11 on every platform, through botgate to the
simulator: the exact platform body received (the simulator refuses shapes and limits the real
platform refuses), 117 where the platform lacks a type, the limits at the limit and one over,
fallbacks, unknown fields, NATIVE objects, and wechat videos and voices by upload."""
import json
import unittest

from harness import (StackTest, whatsapp_channel, cloud_channel, facebook_channel, member,
                     wait_for)

APP = "app-types"
ANY_MEDIA = object()  # a wechat media id the simulator handed out

# the recipients, and the address each platform is sent to
RID = {"fb": "psid-1", "wa": "+852 6000 0001", "wc": "85260000002", "sl": "D123",
       "wx": "openid-1", "tw": "tw-user-1"}
PLATFORMS = ("fb", "wa", "wc", "sl", "wx", "tw")


def fb(message):
    return {"messaging_type": "RESPONSE", "recipient": {"id": "psid-1"}, "message": message}


def wa(type_, obj):
    return {"recipient_type": "individual", "to": "85260000001", "type": type_, type_: obj}


def wc(type_, obj):
    body = wa(type_, obj)
    body["to"] = "85260000002"
    body["messaging_product"] = "whatsapp"
    return body


def both_wa(type_, obj):
    return {"wa": wa(type_, obj), "wc": wc(type_, obj)}


def sl(text, blocks):
    return {"channel": "D123", "text": text, "blocks": blocks}


def wx(msgtype, obj):
    return {"touser": "openid-1", "msgtype": msgtype, msgtype: obj}


def plain(text):
    return {"type": "plain_text", "text": text}


def section(text):
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def button(title, action_id, **kw):
    b = {"type": "button", "text": plain(title), "action_id": action_id}
    b.update(kw)
    return b


def reply(id_, title):
    return {"type": "reply", "reply": {"id": id_, "title": title}}


def unsupported(*platforms):
    return {p: 117 for p in platforms}


class ResponseTypes(StackTest):
    stack_args = {"env": {"BOTGATE_ALLOW_PRIVATE_MEDIA": "1"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.tok = s.token(APP, "bot:sendResponses")
        s.put("channel", facebook_channel("rt-fb", APP))
        s.put("channel", whatsapp_channel("rt-wa", APP, s.sim_url + "/wa"))
        s.put("channel", cloud_channel("rt-wc", APP))
        s.put("channel", {"_id": "rt-sl", "app": APP, "type": "slack", "on": True,
                          "info": {"botAccessToken": "xoxb-rt", "botId": "B0RT"}})
        s.put("channel", {"_id": "rt-wx", "app": APP, "type": "wechat", "on": True,
                          "info": {"appId": "wx-rt", "appsecret": "wx-secret-rt",
                                   "botOpenId": "gh_rt"}})
        s.put("channel", {"_id": "rt-tw", "app": APP, "type": "teamwork", "on": True,
                          "info": {"apiKey": "tw-key-rt", "tbId": "tb-rt"}})

    def setUp(self):
        self.s.sim_reset()

    def media(self, name):
        return self.s.sim_url + "/media/" + name

    def send(self, p, responses):
        return self.s.send({"channelId": "rt-" + p, "recipientId": RID[p],
                            "response": responses}, self.tok)

    def sent(self):
        """The message bodies the simulator took, in order."""
        return [e["body"] for e in self.s.sim_log() if e["kind"] in ("messages", "send")]

    def assert_body(self, got, want):
        if isinstance(want, dict) and want.get("msgtype") in ("video", "voice", "image"):
            obj = dict(got[want["msgtype"]])
            self.assertTrue(obj.pop("media_id").startswith("media-"), got)
            want = dict(want)
            want_obj = dict(want[want["msgtype"]])
            want_obj.pop("media_id")
            self.assertEqual(obj, want_obj)
            got = dict(got, **{want["msgtype"]: None})
            want[want["msgtype"]] = None
        self.assertEqual(got, want)

    def check(self, response, want):
        """want: platform -> the exact body, or an err_code (nothing is sent then)."""
        for p in PLATFORMS:
            with self.subTest(platform=p, type=response["type"]):
                self.s.sim_reset()
                a = self.send(p, [response])
                w = want[p]
                if isinstance(w, int):
                    self.assertEqual((a.status, a.json.get("err_code")), (500, w), a)
                    self.assertEqual(self.sent(), [])
                    continue
                self.assertEqual(a.status, 200, a)
                el = a.json["sendResult"]["result"][0]
                self.assertNotIn("error", el, a)
                self.assertNotIn("fallbackUsed", el)
                ev = el["messageEvent"]
                self.assertEqual(ev["type"], response["type"])
                self.assertEqual(ev["data"], {k: v for k, v in response.items() if k != "type"})
                bodies = self.sent()
                self.assertEqual(len(bodies), 1, bodies)
                self.assert_body(bodies[0], w)

    # ---- one test per type ----

    def test_text_quick_replies(self):
        r = {"type": "TEXT", "text": "Pick",
             "quickReplies": [{"title": "Red", "payload": "RED"},
                              {"title": "Blue", "payload": "BLUE"}]}
        want = {
            "fb": fb({"text": "Pick", "quick_replies": [
                {"content_type": "text", "title": "Red", "payload": "RED"},
                {"content_type": "text", "title": "Blue", "payload": "BLUE"}]}),
            "sl": sl("Pick", [section("Pick"), {"type": "actions", "elements": [
                button("Red", "qr0", value="RED"), button("Blue", "qr1", value="BLUE")]}]),
            "wx": wx("msgmenu", {"head_content": "Pick", "tail_content": "",
                                 "list": [{"id": "RED", "content": "Red"},
                                          {"id": "BLUE", "content": "Blue"}]}),
            "tw": 117,
        }
        want.update(both_wa("interactive", {"type": "button", "body": {"text": "Pick"},
                                            "action": {"buttons": [reply("RED", "Red"),
                                                                   reply("BLUE", "Blue")]}}))
        self.check(r, want)

    def test_image_caption(self):
        url = self.media("cat.png")
        r = {"type": "IMAGE", "url": url, "caption": "A cat"}
        want = unsupported("fb", "wx", "tw")
        want.update(both_wa("image", {"link": url, "caption": "A cat"}))
        want["sl"] = sl("A cat", [{"type": "image", "image_url": url, "alt_text": "A cat",
                                   "title": plain("A cat")}])
        self.check(r, want)

    def test_video(self):
        url = self.media("clip.mp4")
        want = {"fb": fb({"attachment": {"type": "video",
                                         "payload": {"url": url, "is_reusable": True}}}),
                "sl": sl(url, [section("<%s|%s>" % (url, url))]),
                "wx": wx("video", {"media_id": ANY_MEDIA}), "tw": 117}
        want.update(both_wa("video", {"link": url}))
        self.check({"type": "VIDEO", "url": url}, want)
        # with a caption: Messenger has no room for it
        want = {"fb": 117, "sl": sl("Clip", [section("<%s|Clip>" % url)]),
                "wx": wx("video", {"media_id": ANY_MEDIA, "description": "Clip"}), "tw": 117}
        want.update(both_wa("video", {"link": url, "caption": "Clip"}))
        self.check({"type": "VIDEO", "url": url, "caption": "Clip"}, want)

    def test_audio(self):
        url = self.media("voice.mp3")
        want = {"fb": fb({"attachment": {"type": "audio",
                                         "payload": {"url": url, "is_reusable": True}}}),
                "sl": sl(url, [section("<%s|%s>" % (url, url))]),
                "wx": wx("voice", {"media_id": ANY_MEDIA}), "tw": 117}
        want.update(both_wa("audio", {"link": url}))
        self.check({"type": "AUDIO", "url": url}, want)

    def test_file(self):
        url = self.media("report.pdf")
        want = {"fb": fb({"attachment": {"type": "file",
                                         "payload": {"url": url, "is_reusable": True}}}),
                "sl": sl(url, [section("<%s|%s>" % (url, url))]), "wx": 117, "tw": 117}
        want.update(both_wa("document", {"link": url}))
        self.check({"type": "FILE", "url": url}, want)
        want = {"fb": 117, "sl": sl("Q3", [section("Q3\n<%s|report.pdf>" % url)]),
                "wx": 117, "tw": 117}
        want.update(both_wa("document", {"link": url, "caption": "Q3",
                                         "filename": "report.pdf"}))
        self.check({"type": "FILE", "url": url, "caption": "Q3", "filename": "report.pdf"}, want)

    def test_sticker(self):
        url = self.media("hi.webp")
        want = unsupported("fb", "sl", "wx", "tw")
        want.update(both_wa("sticker", {"link": url}))
        self.check({"type": "STICKER", "url": url}, want)
        self.check({"type": "STICKER", "sticker": "like_heart"}, unsupported(*PLATFORMS))

    def test_location(self):
        r = {"type": "LOCATION", "latitude": 22.28, "longitude": 114.16, "name": "Office",
             "address": "1 Queen's Rd"}
        want = unsupported("fb", "sl", "wx", "tw")
        want.update(both_wa("location", {"latitude": 22.28, "longitude": 114.16,
                                         "name": "Office", "address": "1 Queen's Rd"}))
        self.check(r, want)

    def test_button_postback(self):
        r = {"type": "BUTTON", "text": "Choose",
             "buttons": [{"type": "postback", "title": "Yes", "payload": "Y"},
                         {"type": "postback", "title": "No", "payload": "N"}]}
        want = {
            "fb": fb({"attachment": {"type": "template", "payload": {
                "template_type": "button", "text": "Choose", "buttons": [
                    {"type": "postback", "title": "Yes", "payload": "Y"},
                    {"type": "postback", "title": "No", "payload": "N"}]}}}),
            "sl": sl("Choose", [section("Choose"), {"type": "actions", "elements": [
                button("Yes", "b0", value="Y"), button("No", "b1", value="N")]}]),
            "wx": wx("msgmenu", {"head_content": "Choose", "tail_content": "",
                                 "list": [{"id": "Y", "content": "Yes"},
                                          {"id": "N", "content": "No"}]}),
            "tw": 117,
        }
        want.update(both_wa("interactive", {"type": "button", "body": {"text": "Choose"},
                                            "action": {"buttons": [reply("Y", "Yes"),
                                                                   reply("N", "No")]}}))
        self.check(r, want)

    def test_button_url_and_phone(self):
        link = "https://example.com/x"
        r = {"type": "BUTTON", "text": "See", "buttons": [{"type": "url", "title": "Open",
                                                          "url": link}]}
        want = {
            "fb": fb({"attachment": {"type": "template", "payload": {
                "template_type": "button", "text": "See",
                "buttons": [{"type": "web_url", "url": link, "title": "Open"}]}}}),
            "sl": sl("See", [section("See"), {"type": "actions", "elements": [
                button("Open", "b0", url=link)]}]),
            "wx": wx("news", {"articles": [{"title": "Open", "description": "See",
                                            "url": link}]}),
            "tw": 117,
        }
        want.update(both_wa("interactive", {
            "type": "cta_url", "body": {"text": "See"},
            "action": {"name": "cta_url", "parameters": {"display_text": "Open", "url": link}}}))
        self.check(r, want)
        # a phone button: only Messenger has one
        r = {"type": "BUTTON", "text": "Talk",
             "buttons": [{"type": "postback", "title": "Later", "payload": "L"},
                         {"type": "phone", "title": "Call", "phone": "+85291234567"}]}
        want = unsupported("wa", "wc", "sl", "wx", "tw")
        want["fb"] = fb({"attachment": {"type": "template", "payload": {
            "template_type": "button", "text": "Talk", "buttons": [
                {"type": "postback", "title": "Later", "payload": "L"},
                {"type": "phone_number", "title": "Call", "payload": "+85291234567"}]}}})
        self.check(r, want)

    def test_carousel(self):
        img = "https://example.com/a.png"
        r = {"type": "CAROUSEL", "cards": [
            {"title": "A", "subtitle": "a", "imageUrl": img,
             "buttons": [{"type": "postback", "title": "Buy", "payload": "BUY_A"}]},
            {"title": "B"}]}
        a_section = section("*A*\na")
        a_section["accessory"] = {"type": "image", "image_url": img, "alt_text": "A"}
        want = {
            "fb": fb({"attachment": {"type": "template", "payload": {
                "template_type": "generic", "elements": [
                    {"title": "A", "subtitle": "a", "image_url": img, "buttons": [
                        {"type": "postback", "title": "Buy", "payload": "BUY_A"}]},
                    {"title": "B"}]}}}),
            "sl": sl("A", [a_section, {"type": "actions", "elements": [
                button("Buy", "c0_0", value="BUY_A")]}, section("*B*")]),
            "wx": 118,  # one article per customer-service message
            "wa": 117, "wc": 117, "tw": 117,
        }
        self.check(r, want)
        # one card with a link: wechat's one article
        r = {"type": "CAROUSEL", "cards": [
            {"title": "A", "subtitle": "a", "imageUrl": img,
             "buttons": [{"type": "url", "title": "Go", "url": "https://example.com/a"}]}]}
        want = {
            "fb": fb({"attachment": {"type": "template", "payload": {
                "template_type": "generic", "elements": [
                    {"title": "A", "subtitle": "a", "image_url": img, "buttons": [
                        {"type": "web_url", "title": "Go", "url": "https://example.com/a"}]}]}}}),
            "sl": sl("A", [a_section, {"type": "actions", "elements": [
                button("Go", "c0_0", url="https://example.com/a")]}]),
            "wx": wx("news", {"articles": [{"title": "A", "description": "a",
                                            "url": "https://example.com/a", "picurl": img}]}),
            "wa": 117, "wc": 117, "tw": 117,
        }
        self.check(r, want)

    def test_list(self):
        r = {"type": "LIST", "text": "Menu", "button": "Options", "sections": [
            {"title": "Drinks", "rows": [{"id": "tea", "title": "Tea", "description": "Hot"},
                                         {"id": "cof", "title": "Coffee"}]},
            {"title": "Food", "rows": [{"id": "cake", "title": "Cake"}]}]}
        menu = section("Menu")
        menu["accessory"] = {
            "type": "static_select", "placeholder": plain("Options"), "action_id": "list",
            "option_groups": [
                {"label": plain("Drinks"), "options": [
                    {"text": plain("Tea"), "value": "tea", "description": plain("Hot")},
                    {"text": plain("Coffee"), "value": "cof"}]},
                {"label": plain("Food"), "options": [{"text": plain("Cake"), "value": "cake"}]}]}
        want = {
            "fb": 117, "tw": 117, "sl": sl("Menu", [menu]),
            "wx": wx("msgmenu", {"head_content": "Menu", "tail_content": "", "list": [
                {"id": "tea", "content": "Tea - Hot"}, {"id": "cof", "content": "Coffee"},
                {"id": "cake", "content": "Cake"}]}),
        }
        want.update(both_wa("interactive", {
            "type": "list", "body": {"text": "Menu"},
            "action": {"button": "Options", "sections": r["sections"]}}))
        self.check(r, want)

    def test_native(self):
        cases = {
            "fb": ({"messaging_type": "MESSAGE_TAG", "tag": "ACCOUNT_UPDATE",
                    "message": {"text": "hi"}},
                   {"messaging_type": "MESSAGE_TAG", "tag": "ACCOUNT_UPDATE",
                    "message": {"text": "hi"}, "recipient": {"id": "psid-1"}}),
            "wa": ({"type": "text", "text": {"body": "hi", "preview_url": True}},
                   wa("text", {"body": "hi", "preview_url": True})),
            "wc": ({"type": "text", "text": {"body": "hi", "preview_url": True}},
                   wc("text", {"body": "hi", "preview_url": True})),
            "sl": ({"text": "hi", "unfurl_links": False},
                   {"channel": "D123", "text": "hi", "unfurl_links": False}),
            "wx": ({"msgtype": "text", "text": {"content": "hi"}},
                   wx("text", {"content": "hi"})),
            "tw": ({"messageType": "text", "text": "hi"},
                   {"users": ["tw-user-1"], "messageType": "text", "text": "hi"}),
        }
        for p, (message, body) in cases.items():
            with self.subTest(platform=p):
                self.s.sim_reset()
                a = self.send(p, [{"type": "NATIVE", "message": message}])
                self.assertEqual(a.status, 200, a)
                self.assertEqual(a.json["sendResult"]["result"][0]["messageEvent"]["data"],
                                 {"message": message})
                self.assertEqual(self.sent(), [body])
        # nobody chooses the recipient but botgate
        for field, value in (("recipient", {"id": "someone-else"}), ("to", "85299999999"),
                             ("touser", "o-other"), ("channel", "C-other"),
                             ("users", ["u-other"]), ("messaging_product", "whatsapp"),
                             ("recipient_type", "group")):
            for p in PLATFORMS:
                with self.subTest(platform=p, field=field):
                    self.s.sim_reset()
                    a = self.send(p, [{"type": "NATIVE",
                                       "message": {field: value, "text": "x"}}])
                    self.assertEqual((a.status, a.json.get("err_code")), (500, 108), a)
                    self.assertIn("message." + field, a.json["err"])
                    self.assertEqual(self.s.sim_log(), [])

    # ---- no silent loss ----

    def test_unknown_field_is_108_and_nothing_sent(self):
        for p in PLATFORMS:
            with self.subTest(platform=p):
                a = self.send(p, [{"type": "TEXT", "text": "first"},
                                  {"type": "TEXT", "text": "x",
                                   "quick_replies": [{"title": "A", "payload": "A"}]}])
                self.assertEqual((a.status, a.json.get("err_code")), (500, 108), a)
                self.assertIn("response[1].quick_replies", a.json["err"])
                self.assertEqual(self.s.sim_log(), [])

    def test_fallback(self):
        loc = {"type": "LOCATION", "latitude": 22.28, "longitude": 114.16,
               "fallback": {"type": "TEXT", "text": "We are at 22.28, 114.16"}}
        a = self.send("fb", [{"type": "TEXT", "text": "one"}, loc])
        self.assertEqual(a.status, 200, a)
        els = a.json["sendResult"]["result"]
        self.assertNotIn("fallbackUsed", els[0])
        self.assertIs(els[1]["fallbackUsed"], True)
        # what was asked, without its fallback
        self.assertEqual(els[1]["messageEvent"]["type"], "LOCATION")
        self.assertEqual(els[1]["messageEvent"]["data"], {"latitude": 22.28, "longitude": 114.16})
        self.assertEqual(self.sent(), [fb({"text": "one"}),
                                       fb({"text": "We are at 22.28, 114.16"})])
        # where the type exists the fallback is not used
        self.s.sim_reset()
        a = self.send("wc", [loc])
        self.assertEqual(a.status, 200, a)
        self.assertNotIn("fallbackUsed", a.json["sendResult"]["result"][0])
        self.assertEqual(self.sent(), [wc("location", {"latitude": 22.28, "longitude": 114.16})])
        # a fallback the platform lacks as well: 117 naming it, nothing sent
        self.s.sim_reset()
        a = self.send("fb", [{"type": "TEXT", "text": "one"},
                             dict(loc, fallback={"type": "STICKER", "url": self.media("s.webp")})])
        self.assertEqual((a.status, a.json.get("err_code")), (500, 117), a)
        self.assertIn("response[1].fallback", a.json["err"])
        self.assertEqual(self.s.sim_log(), [])
        # a fallback with a fallback of its own is refused
        a = self.send("fb", [dict(loc, fallback=dict(loc["fallback"],
                                                     fallback={"type": "TEXT", "text": "x"}))])
        self.assertEqual((a.status, a.json.get("err_code")), (500, 108), a)
        self.assertIn("response[0].fallback.fallback", a.json["err"])

    # ---- the platforms' own limits: at the limit, one over ----

    def at_and_over(self, platforms, make, at, code=118, name=None):
        for p in platforms:
            with self.subTest(platform=p, n=at):
                self.s.sim_reset()
                a = self.send(p, [make(at)])
                self.assertEqual(a.status, 200, a)
                self.assertNotIn("error", a.json["sendResult"]["result"][0], a)
                self.assertEqual(len(self.sent()), 1)
            with self.subTest(platform=p, n=at + 1):
                self.s.sim_reset()
                a = self.send(p, [{"type": "TEXT", "text": "first"}, make(at + 1)])
                self.assertEqual((a.status, a.json.get("err_code")), (500, code), a)
                if name:
                    self.assertIn(name, a.json["err"])
                self.assertEqual(self.s.sim_log(), [])

    def test_quick_reply_counts(self):
        def qr(n):
            return {"type": "TEXT", "text": "t",
                    "quickReplies": [{"title": "T%d" % i, "payload": "P%d" % i}
                                     for i in range(n)]}
        self.at_and_over(("wa", "wc"), qr, 3, name="quickReplies")
        self.at_and_over(("fb", "sl", "wx"), qr, 13, name="quickReplies")

    def test_title_and_text_lengths(self):
        def qr_title(n):
            return {"type": "TEXT", "text": "t", "quickReplies": [{"title": "é" * n,
                                                                   "payload": "P"}]}
        self.at_and_over(("fb", "wa", "sl", "wx"), qr_title, 20, name="title")

        def fb_text(n):
            return {"type": "BUTTON", "text": "x" * n,
                    "buttons": [{"type": "postback", "title": "A", "payload": "A"}]}
        self.at_and_over(("fb",), fb_text, 640, name="text")
        self.at_and_over(("sl",), fb_text, 3000, name="text")

        def reply_id(n):
            return {"type": "BUTTON", "text": "t",
                    "buttons": [{"type": "postback", "title": "A", "payload": "p" * n}]}
        self.at_and_over(("wa", "wc"), reply_id, 256, name="payload")

        def row(title_n, desc_n):
            return {"type": "LIST", "text": "t", "button": "b", "sections": [
                {"rows": [{"id": "1", "title": "t" * title_n, "description": "d" * desc_n}]}]}
        self.at_and_over(("wa", "wc"), lambda n: row(n, 1), 24, name="title")
        self.at_and_over(("wa", "wc"), lambda n: row(1, n), 72, name="description")
        self.at_and_over(("sl",), lambda n: row(n, 1), 75, name="title")

        def cards(n):
            return {"type": "CAROUSEL", "cards": [{"title": "c%d" % i} for i in range(n)]}
        self.at_and_over(("wx",), cards, 1, name="cards")
        self.at_and_over(("fb", "sl"), cards, 10, name="cards")

    # ---- wechat media by upload ----

    def test_wechat_video_and_voice_uploaded_and_cached(self):
        video, voice = self.media("cached.mp4"), self.media("cached.mp3")
        a = self.send("wx", [{"type": "VIDEO", "url": video, "caption": "Clip"},
                             {"type": "AUDIO", "url": voice}])
        self.assertEqual(a.status, 200, a)
        log = [e for e in self.s.sim_log() if e["kind"] != "token"]
        self.assertEqual([e["kind"] for e in log], ["upload", "send", "upload", "send"])
        self.assertIn("type=video", log[0]["query"])
        self.assertEqual(log[0]["body"]["content_type"], "video/mp4")
        self.assertIn("type=voice", log[2]["query"])
        self.assertEqual(log[2]["body"]["content_type"], "audio/mpeg")
        vid = log[1]["body"]["video"]["media_id"]
        self.assertEqual(log[1]["body"]["video"], {"media_id": vid, "description": "Clip"})
        # the same URLs again: from the media cache, neither downloaded nor uploaded
        # the media ids are written back without holding the answer: they may land just after
        wait_for(lambda: len(self.s.redis("KEYS", "botgate:media:{rt-wx}:*")) >= 2, 5,
                 "both media ids in the cache")
        self.s.sim_reset()
        a = self.send("wx", [{"type": "VIDEO", "url": video}])
        self.assertEqual(a.status, 200, a)
        self.assertEqual([e["kind"] for e in self.s.sim_log()], ["send"])
        self.assertEqual(self.sent()[0]["video"], {"media_id": vid})

    def test_wechat_media_refused(self):
        # a voice over wechat's 2 MB is refused before any upload
        a = self.send("wx", [{"type": "TEXT", "text": "first"},
                             {"type": "AUDIO", "url": self.media("big.mp3")}])
        self.assertEqual(a.status, 200, a)
        el = a.json["sendResult"]["result"][1]
        self.assertEqual(el["error"]["err_code"], 113, el)
        self.assertIn("audio download refused", el["error"]["err"])
        self.assertNotIn("upload", [e["kind"] for e in self.s.sim_log()])
        # a video URL that serves an image is not uploaded as a video
        self.s.sim_reset()
        a = self.send("wx", [{"type": "TEXT", "text": "first"},
                             {"type": "VIDEO", "url": self.media("cat.png")}])
        el = a.json["sendResult"]["result"][1]
        self.assertIn("not a video", el["error"]["err"])
        self.assertNotIn("upload", [e["kind"] for e in self.s.sim_log()])


class NodeResponses(StackTest):
    """A tree's nodes may use every type, templated; botgatectl tree import checks them."""

    def setUp(self):
        self.s.sim_reset()

    def test_node_types_templated_and_fallback(self):
        s = self.s
        s.put("channel", facebook_channel("nr-fb", APP))
        s.put("member", member("nr-m1", "nr-fb", APP, "psid-nr"))
        tree = {"_id": "TT", "app": APP, "name": "types", "nodes": {"N1": {"response": [
            {"type": "TEXT", "text": "Hi {{member.firstName}}",
             "quickReplies": [{"title": "{{member.lastName}}", "payload": "P-{{member.locale}}"}]},
            {"type": "LOCATION", "latitude": 1.5, "longitude": 2.5,
             "fallback": {"type": "TEXT", "text": "at 1.5, 2.5"}}]}}}
        s.ctl("tree", "import", "-", input=json.dumps(tree))
        a = s.post("/redirectMemberToNode",
                   {"channelId": "nr-fb", "memberId": "nr-m1",
                    "redirect": {"tree": "TT", "nodeCompositeId": "N1"}},
                   token=s.token(APP, "bot:redirectMemberToNode"))
        self.assertEqual(a.status, 200, a)
        els = a.json["sendResult"]["result"]
        self.assertNotIn("fallbackUsed", els[0])
        self.assertIs(els[1]["fallbackUsed"], True, els)
        self.assertEqual(els[1]["messageEvent"]["data"], {"latitude": 1.5, "longitude": 2.5})
        bodies = [e["body"] for e in s.sim_log() if e["kind"] == "messages"]
        self.assertEqual(bodies, [
            {"messaging_type": "RESPONSE", "recipient": {"id": "psid-nr"},
             "message": {"text": "Hi Ada", "quick_replies": [
                 {"content_type": "text", "title": "L", "payload": "P-en"}]}},
            {"messaging_type": "RESPONSE", "recipient": {"id": "psid-nr"},
             "message": {"text": "at 1.5, 2.5"}}])

    def test_transform_returns_rich_types(self):
        s = self.s
        s.put("channel", facebook_channel("nr-fb2", APP))
        s.put("member", member("nr-m2", "nr-fb2", APP, "psid-nr2"))
        code = ("return {{type = 'BUTTON', text = 'Order ' .. self.agendaMeta.id,"
                " buttons = {{type = 'postback', title = 'Track', payload = 'T-' .. self.agendaMeta.id}}},"
                " {type = 'TEXT', text = 'x', quick_replys = {}}}")
        tree = {"_id": "TS", "app": APP, "name": "script", "nodes": {"N1": {"transform": code}}}
        s.ctl("tree", "import", "-", input=json.dumps(tree))
        a = s.post("/redirectMemberToNode",
                   {"channelId": "nr-fb2", "memberId": "nr-m2", "meta": {"id": "42"},
                    "redirect": {"tree": "TS", "nodeCompositeId": "N1"}},
                   token=s.token(APP, "bot:redirectMemberToNode"))
        self.assertEqual(a.status, 200, a)
        els = a.json["sendResult"]["result"]
        self.assertEqual(els[0]["ok"], 1, els)
        # what a script returns is checked as a request's response: nothing dropped in silence
        self.assertEqual(els[1]["error"]["err_code"], 108, els)
        self.assertIn("quick_replys", els[1]["error"]["err"])
        bodies = [e["body"] for e in s.sim_log() if e["kind"] == "messages"]
        self.assertEqual(bodies, [
            {"messaging_type": "RESPONSE", "recipient": {"id": "psid-nr2"},
             "message": {"attachment": {"type": "template", "payload": {
                 "template_type": "button", "text": "Order 42",
                 "buttons": [{"type": "postback", "title": "Track", "payload": "T-42"}]}}}}])

    def test_import_checks_types_and_limits(self):
        bad = [({"type": "BUTTON", "text": "t", "buttons": [
                    {"type": "postback", "title": "x" * 21, "payload": "p"}]},
                "nodes.N1.response[0].buttons[0].title"),
               ({"type": "TEXT", "text": "t", "quick_replies": []},
                "nodes.N1.response[0].quick_replies"),
               ({"type": "CAROUSEL", "cards": [{"title": "c"}] * 11},
                "nodes.N1.response[0].cards")]
        for resp, place in bad:
            with self.subTest(place=place):
                tree = {"_id": "TB", "app": APP, "name": "bad",
                        "nodes": {"N1": {"response": [resp]}}}
                r = self.s.ctl("tree", "import", "-", input=json.dumps(tree), check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(place, r.stderr)
        self.assertEqual(self.s.redis("EXISTS", "botgate:tree:TB"), 0)


class WechatMediaGuard(StackTest):
    """Without BOTGATE_ALLOW_PRIVATE_MEDIA a video on a private address is never fetched."""

    def test_private_video_refused(self):
        s = self.s
        tok = s.token(APP, "bot:sendResponses")
        s.put("channel", {"_id": "rt-wx2", "app": APP, "type": "wechat", "on": True,
                          "info": {"appId": "wx-rt2", "appsecret": "s", "botOpenId": "gh"}})
        a = s.send({"channelId": "rt-wx2", "recipientId": "o1",
                    "response": [{"type": "TEXT", "text": "first"},
                                 {"type": "VIDEO", "url": s.sim_url + "/media/clip.mp4"}]}, tok)
        self.assertEqual(a.status, 200, a)
        el = a.json["sendResult"]["result"][1]
        self.assertIn("video download refused", el["error"]["err"])
        self.assertEqual([e["kind"] for e in s.sim_log() if e["kind"] != "token"], ["send"])


if __name__ == "__main__":
    unittest.main()
