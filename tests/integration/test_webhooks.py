"""contract.md section 14, webhooks in: GET|POST /webhooks/<channelId> per platform. The
verification handshakes; a correctly signed inbound message becomes an event whose member is
made when new and keeps lastInboundAt; a wrong or missing signature, a slack replay and an
oversized body are refused (401 / 413, counted) and change nothing in Redis."""
import contextlib
import hashlib
import hmac
import itertools
import json
import re
import socket
import threading
import time
import unittest
import urllib.parse

from harness import (CLUSTER, Redis, StackTest, cloud_channel, facebook_channel, http, wait_for,
                     whatsapp_channel)
from test_outbox import Receiver, verify

APP = "app-hook"
FB_SECRET = "fb-app-secret"
CLOUD_SECRET = "cloud-app-secret"
SLACK_SECRET = "slack-signing-secret"
WX_TOKEN = "wx-token"
WA_VERIFY = "wa-verify-token"


def meta_sig(secret, raw):
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def slack_headers(secret, raw, ts=None):
    ts = str(int(time.time()) if ts is None else ts)
    mac = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + raw, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v0=" + mac.hexdigest()}


NONCES = itertools.count()


def wechat_query(token, ts=None, nonce=None):
    """A signed WeChat query; a nonce of its own unless given (as WeChat does: the same
    signature again is a replay)."""
    ts = str(int(time.time())) if ts is None else ts
    nonce = "n0nce%d" % next(NONCES) if nonce is None else nonce
    sig = hashlib.sha1("".join(sorted([token, ts, nonce])).encode()).hexdigest()
    return {"signature": sig, "timestamp": ts, "nonce": nonce}


def fb_body(psid, mid, text=None, payload=None):
    msg = {"mid": mid, "text": text or "hi"}
    if payload:
        msg["quick_reply"] = {"payload": payload}
    return {"object": "page", "entry": [{"id": "1234567890", "time": 1, "messaging": [
        {"sender": {"id": psid}, "recipient": {"id": "1234567890"},
         "timestamp": int(time.time() * 1000) - 1000, "message": msg}]}]}


def cloud_body(wa_id, wamid, text="hi"):
    return {"object": "whatsapp_business_account", "entry": [{"id": "2000", "changes": [
        {"field": "messages", "value": {
            "messaging_product": "whatsapp", "metadata": {"phone_number_id": "1055550000"},
            "contacts": [{"wa_id": wa_id, "profile": {"name": "Ada"}}],
            "messages": [{"from": wa_id, "id": wamid, "timestamp": str(int(time.time()) - 1),
                          "type": "text", "text": {"body": text}}]}}]}]}


def wechat_xml(openid, msgid, text="hi"):
    return ("<xml><ToUserName><![CDATA[gh_1]]></ToUserName>"
            "<FromUserName><![CDATA[%s]]></FromUserName><CreateTime>%d</CreateTime>"
            "<MsgType><![CDATA[text]]></MsgType><Content><![CDATA[%s]]></Content>"
            "<MsgId>%s</MsgId></xml>" % (openid, int(time.time()) - 1, text, msgid)).encode()


class Monitor:
    """Redis's MONITOR of one server, read by a thread until stop(), which returns each script
    run (EVALSHA, EVAL) as (its KEYS, the set of (command, key) its commands named)."""
    ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')

    def __init__(self, port):
        self.r = Redis(port)
        self.lines = []
        self.r("MONITOR")
        self.r.sock.settimeout(None)  # read until stop()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        try:
            while True:
                self.lines.append(self.r._reply())
        except (OSError, RuntimeError):
            pass

    def stop(self):
        self.r.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's read
        self.thread.join(5)
        self.r.close()
        # a script's line comes first, then the commands it ran (nothing runs between them:
        # a script is atomic)
        scripts, current = [], None
        for line in self.lines:
            if not isinstance(line, str) or "]" not in line:
                continue
            who, rest = line.split("]", 1)
            args = self.ARG.findall(rest)
            if not args:
                continue
            if who.endswith(" lua"):
                if current is not None and args[0].lower() != "time":
                    current[1].add((args[0].lower(), args[1]))
                continue
            current = None
            if args[0].lower() in ("evalsha", "eval"):
                current = (args[3:3 + int(args[2])], set())
                scripts.append(current)
        return scripts


def put_channels(s):
    """One channel per platform, with the secrets its webhooks are verified by."""
    fb = facebook_channel("hfb", APP)
    fb["info"].update(appSecret=FB_SECRET, verifyToken="fb-verify")
    s.put("channel", fb)
    cloud = cloud_channel("hwc", APP)
    cloud["info"].update(appSecret=CLOUD_SECRET, verifyToken="wc-verify")
    s.put("channel", cloud)
    wa = whatsapp_channel("hwa", APP, "http://127.0.0.1:1")
    wa["info"]["verifyToken"] = WA_VERIFY
    s.put("channel", wa)
    s.put("channel", {"_id": "hsl", "app": APP, "type": "slack", "on": True,
                      "info": {"botAccessToken": "xoxb-1", "botId": "B1",
                               "signingSecret": SLACK_SECRET}})
    s.put("channel", {"_id": "hwx", "app": APP, "type": "wechat", "on": True,
                      "info": {"appId": "wx1", "appSecret": "wxsecret", "token": WX_TOKEN,
                               "botOpenId": "gh_1"}})
    s.put("channel", {"_id": "htw", "app": APP, "type": "teamwork", "on": True,
                      "info": {"apiKey": "k", "tbId": "t"}})


class HookCase(StackTest):
    """The channels of every platform, and what the tests of them share."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        put_channels(cls.s)

    # ---- helpers ----

    def hook(self, method, cid, body=None, headers=None, query=None):
        url = self.s.url + "/webhooks/" + cid
        if query:
            url += "?" + urllib.parse.urlencode(query)
        raw = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return http(method, url, raw, h)

    def member_of(self, cid, external):
        mid = self.s.redis("GET", "botgate:recipient:{%s}:%s" % (cid, external))
        if mid is None:
            return None
        raw = self.s.redis("GET", "botgate:member:{%s}:%s" % (cid, mid))
        return json.loads(raw) if raw else None

    def refused(self, platform):
        return sum(self.s.metric('botgate_webhooks_refused_total{platform="%s",reason="%s"}'
                                 % (platform, r)) or 0 for r in ("signature", "replay"))

    def assert_new_member(self, cid, external, platform):
        m = self.member_of(cid, external)
        self.assertIsNotNone(m, "no member for %s in %s" % (external, cid))
        self.assertEqual(m["externalId"], external)
        self.assertEqual(m["platform"], platform)
        self.assertEqual(m["app"], APP)
        self.assertIsInstance(m["lastInboundAt"], int)
        self.assertLessEqual(m["lastInboundAt"], int(time.time() * 1000))
        self.assertGreater(m["lastInboundAt"], int(time.time() * 1000) - 60000)
        return m

    @contextlib.contextmanager
    def subscriptions_unreadable(self):
        """The app's subscriptions cannot be read inside: a webhook with events gets 503."""
        key = "botgate:subscriptions:" + APP
        saved = self.s.redis("EXISTS", key) == 1
        if saved:
            self.s.redis("RENAME", key, key + ":saved")
        self.s.redis("SET", key, "not a hash")
        try:
            yield
        finally:
            self.s.redis("DEL", key)
            if saved:
                self.s.redis("RENAME", key + ":saved", key)

    def sim_inbound(self, platform, cid, secret, sender, **what):
        body = {"platform": platform, "url": self.s.url + "/webhooks/" + cid, "secret": secret,
                "from": sender}
        body.update(what)
        return self.s.sim("POST", "/_sim/inbound", body)


class Webhooks(HookCase):
    stack_args = {"workers": 2}

    # ---- handshakes ----

    def test_meta_handshake(self):
        for cid, token in (("hfb", "fb-verify"), ("hwc", "wc-verify")):
            q = {"hub.mode": "subscribe", "hub.verify_token": token, "hub.challenge": "c-123"}
            a = self.hook("GET", cid, query=q)
            self.assertEqual((a.status, a.raw), (200, "c-123"), a)
            self.assertTrue(a.headers["Content-Type"].startswith("text/plain"), a.headers)
            q["hub.verify_token"] = token + "x"
            before = self.refused("facebook" if cid == "hfb" else "whatsapp-cloud")
            self.assert_error(self.hook("GET", cid, query=q), 130, 401)
            self.assertEqual(self.refused("facebook" if cid == "hfb" else "whatsapp-cloud"),
                             before + 1)

    def test_wechat_handshake(self):
        q = wechat_query(WX_TOKEN)
        q["echostr"] = "echo-42"
        a = self.hook("GET", "hwx", query=q)
        self.assertEqual((a.status, a.raw), (200, "echo-42"), a)
        q["signature"] = "0" * 40
        self.assert_error(self.hook("GET", "hwx", query=q), 130, 401)

    def test_slack_url_verification(self):
        raw = json.dumps({"type": "url_verification", "challenge": "ch-9", "token": "t"}).encode()
        a = self.hook("POST", "hsl", raw, slack_headers(SLACK_SECRET, raw))
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json, {"challenge": "ch-9"})

    def test_whatsapp_token(self):
        self.assertEqual(self.hook("GET", "hwa", query={"token": WA_VERIFY}).status, 200)
        self.assert_error(self.hook("GET", "hwa", query={"token": "nope"}), 130, 401)
        self.assert_error(self.hook("GET", "hwa"), 130, 401)

    def test_other_methods(self):
        a = self.hook("PUT", "hfb", {"a": 1})
        self.assert_error(a, 122, 405)
        self.assertEqual(a.headers["Allow"], "GET, HEAD, POST")
        self.assertEqual(self.hook("HEAD", "hfb", query={
            "hub.mode": "subscribe", "hub.verify_token": "fb-verify",
            "hub.challenge": "7"}).status, 200)
        self.assert_error(self.hook("GET", "hsl"), 122, 405)

    def test_teamwork_and_unknown(self):
        self.assert_error(self.hook("POST", "htw", {"a": 1}), 117, 404, mentions="no webhooks")
        self.assert_error(self.hook("POST", "nosuch", {"a": 1}), 112, 404)
        self.assert_error(self.hook("GET", "bad%20id"), 112, 404)

    # ---- inbound messages: member made, lastInboundAt kept ----

    def test_facebook_inbound(self):
        raw = json.dumps(fb_body("psid-in-1", "m_in_1", "hello")).encode()
        a = self.hook("POST", "hfb", raw, {"X-Hub-Signature-256": meta_sig(FB_SECRET, raw)})
        self.assertEqual(a.status, 200, a)
        self.assert_new_member("hfb", "psid-in-1", "facebook")

    def test_cloud_inbound(self):
        raw = json.dumps(cloud_body("85291110001", "wamid.in1")).encode()
        a = self.hook("POST", "hwc", raw, {"X-Hub-Signature-256": meta_sig(CLOUD_SECRET, raw)})
        self.assertEqual(a.status, 200, a)
        self.assert_new_member("hwc", "85291110001", "whatsapp-cloud")

    def test_whatsapp_onprem_inbound(self):
        body = cloud_body("85291110002", "gBEG.in2")["entry"][0]["changes"][0]["value"]
        del body["messaging_product"]
        a = self.hook("POST", "hwa", body, query={"token": WA_VERIFY})
        self.assertEqual(a.status, 200, a)
        self.assert_new_member("hwa", "85291110002", "whatsapp")

    def test_slack_inbound_and_replay(self):
        raw = json.dumps({"type": "event_callback", "team_id": "T1", "event_id": "Ev1",
                          "event": {"type": "message", "channel": "D777", "user": "U7",
                                    "text": "hi", "ts": "%d.000100" % (time.time() - 1)}}).encode()
        hdrs = slack_headers(SLACK_SECRET, raw)
        self.assertEqual(self.hook("POST", "hsl", raw, hdrs).status, 200)
        m = self.assert_new_member("hsl", "D777", "slack")
        before = self.refused("slack")
        self.assert_error(self.hook("POST", "hsl", raw, hdrs), 130, 401, mentions="replay")
        self.assertEqual(self.refused("slack"), before + 1)
        # the same body signed 10 minutes ago: outside the window
        old = slack_headers(SLACK_SECRET, raw, ts=int(time.time()) - 600)
        self.assert_error(self.hook("POST", "hsl", raw, old), 130, 401, mentions="5 minutes")
        self.assertEqual(self.member_of("hsl", "D777"), m)

    def test_slack_retry_after_a_failure_is_no_replay(self):
        """A request botgate could not take (a 5xx) leaves no trace: the platform's retry with
        the same signature is taken, not refused as a replay."""
        raw = json.dumps({"type": "event_callback", "team_id": "T1", "event_id": "EvR",
                          "event": {"type": "message", "channel": "D779", "user": "U9",
                                    "text": "hi", "ts": "%d.000100" % (time.time() - 1)}}).encode()
        hdrs = slack_headers(SLACK_SECRET, raw)
        with self.subscriptions_unreadable():
            a = self.hook("POST", "hsl", raw, hdrs)
            self.assertGreaterEqual(a.status, 500, a)
        a = self.hook("POST", "hsl", raw, hdrs)
        self.assertEqual(a.status, 200, a)
        self.assert_new_member("hsl", "D779", "slack")
        # taken now, so the same signature again is a replay
        self.assert_error(self.hook("POST", "hsl", raw, hdrs), 130, 401, mentions="replay")

    def test_slack_button_tap(self):
        payload = {"type": "block_actions", "user": {"id": "U8"}, "channel": {"id": "D888"},
                   "actions": [{"type": "button", "action_id": "a1", "value": "RED",
                                "text": {"type": "plain_text", "text": "Red"},
                                "action_ts": "%d.000200" % time.time()}]}
        raw = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
        hdrs = slack_headers(SLACK_SECRET, raw)
        hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        a = self.hook("POST", "hsl", raw, hdrs)
        self.assertEqual(a.status, 200, a)
        self.assert_new_member("hsl", "D888", "slack")

    def test_wechat_old_timestamp(self):
        """WeChat signs the query, not the body: a signed URL older than 5 minutes is refused
        whatever it carries."""
        raw = wechat_xml("openid-old", "6009")
        q = wechat_query(WX_TOKEN, ts=str(int(time.time()) - 600))
        self.assert_error(self.hook("POST", "hwx", raw, {"Content-Type": "text/xml"}, q), 130,
                          401, mentions="5 minutes")
        self.assertIsNone(self.member_of("hwx", "openid-old"))

    def test_last_inbound_whatever_the_record_holds(self):
        """lastInboundAt moves up on every inbound message whatever form the stored record has:
        compact (written in the member's script), another writer's spacing, an ISO date, a
        field of the same name inside another field (by compare-and-set, where the script
        cannot be sure); nothing else of the record changes."""
        old = int(time.time() * 1000) - 48 * 3600 * 1000
        cases = {
            "compact": '{"_id":"%s","externalId":"%s","tags":[],"lastInboundAt":%d}' % (
                "{id}", "{ext}", old),
            "spaced": '{"_id": "%s", "externalId": "%s", "tags": [], "lastInboundAt": %d}' % (
                "{id}", "{ext}", old),
            "iso": '{"_id":"%s","externalId":"%s","tags":[],"lastInboundAt":"%s"}' % (
                "{id}", "{ext}", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(old / 1000))),
            "nested": '{"_id":"%s","externalId":"%s","tags":[],"meta":{"lastInboundAt":7}}' % (
                "{id}", "{ext}"),
        }
        for name, text in cases.items():
            with self.subTest(record=name):
                ext, mid = "psid-rec-" + name, "mrec" + name
                self.s.redis("SET", "botgate:recipient:{hfb}:" + ext, mid)
                self.s.redis("SET", "botgate:member:{hfb}:" + mid,
                             text.replace("{id}", mid).replace("{ext}", ext))
                raw = json.dumps(fb_body(ext, "m_rec_" + name)).encode()
                a = self.hook("POST", "hfb", raw, {"X-Hub-Signature-256": meta_sig(FB_SECRET, raw)})
                self.assertEqual(a.status, 200, a)
                m = self.member_of("hfb", ext)
                self.assertEqual(m["_id"], mid)
                self.assertIsInstance(m["lastInboundAt"], int)
                self.assertGreater(m["lastInboundAt"], int(time.time() * 1000) - 60000)
                self.assertEqual(m["tags"], [])
                if name == "nested":
                    self.assertEqual(m["meta"], {"lastInboundAt": 7})

    def test_wechat_replay(self):
        """WeChat signs the query, not the body: the same signed URL again within its 5 minutes
        is a replay, whatever body it carries, refused (401, counted) with nothing of it
        processed; a new nonce signs a new request."""
        q = wechat_query(WX_TOKEN, nonce="n-replay")
        xml = {"Content-Type": "text/xml"}
        a = self.hook("POST", "hwx", wechat_xml("openid-rp-1", "6101"), xml, q)
        self.assertEqual((a.status, a.raw), (200, "success"), a)
        self.assert_new_member("hwx", "openid-rp-1", "wechat")
        metric = 'botgate_webhooks_refused_total{platform="wechat",reason="replay"}'
        before = self.s.metric(metric) or 0
        for body in (wechat_xml("openid-rp-2", "6102"), wechat_xml("openid-rp-1", "6101")):
            a = self.hook("POST", "hwx", body, xml, q)
            self.assert_error(a, 130, 401, mentions="replay")
        self.assertEqual(self.s.metric(metric), before + 2)
        self.assertIsNone(self.member_of("hwx", "openid-rp-2"))
        a = self.hook("POST", "hwx", wechat_xml("openid-rp-2", "6102"), xml,
                      wechat_query(WX_TOKEN, nonce="n-replay-2"))
        self.assertEqual((a.status, a.raw), (200, "success"), a)
        self.assert_new_member("hwx", "openid-rp-2", "wechat")

    def test_wechat_retry_after_a_failure_is_no_replay(self):
        """As slack's: a request answered 5xx leaves its signature forgotten, so WeChat's retry
        of the same URL is taken."""
        q = wechat_query(WX_TOKEN, nonce="n-retry")
        xml = {"Content-Type": "text/xml"}
        with self.subscriptions_unreadable():
            a = self.hook("POST", "hwx", wechat_xml("openid-retry", "6201"), xml, q)
            self.assertGreaterEqual(a.status, 500, a)
        a = self.hook("POST", "hwx", wechat_xml("openid-retry", "6201"), xml, q)
        self.assertEqual((a.status, a.raw), (200, "success"), a)
        self.assert_error(self.hook("POST", "hwx", wechat_xml("openid-retry", "6201"), xml, q),
                          130, 401, mentions="replay")

    def test_refusal_names_the_signature_not_a_bearer_token(self):
        """A webhook's 401 carries a challenge (RFC 9110 requires one) that names where the
        platform's credential goes, never the API's Bearer."""
        raw = json.dumps(fb_body("psid-401", "m_401")).encode()
        xml = {"Content-Type": "text/xml"}
        cases = [
            ("POST", "hfb", raw, {"X-Hub-Signature-256": meta_sig("wrong", raw)}, None,
             'header="X-Hub-Signature-256"'),
            ("GET", "hwc", None, None, {"hub.mode": "subscribe", "hub.verify_token": "wrong",
                                        "hub.challenge": "1"}, 'param="hub.verify_token"'),
            ("POST", "hsl", raw, slack_headers("wrong", raw), None, 'header="X-Slack-Signature"'),
            ("POST", "hwx", wechat_xml("openid-401", "6301"), xml, wechat_query("wrong"),
             'param="signature"'),
            ("GET", "hwx", None, None, wechat_query("wrong"), 'param="signature"'),
            ("POST", "hwa", b"{}", None, {"token": "wrong"}, 'param="token"'),
        ]
        for method, cid, body, hdrs, q, where in cases:
            with self.subTest(cid=cid, method=method):
                a = self.hook(method, cid, body, hdrs, q)
                self.assert_error(a, 130, 401)
                self.assertEqual([v for k, v in a.header_items
                                  if k.lower() == "www-authenticate"],
                                 ['Signature realm="webhooks", ' + where], a.header_items)

    def test_wechat_inbound(self):
        raw = wechat_xml("openid-in-1", "6001")
        a = self.hook("POST", "hwx", raw, {"Content-Type": "text/xml"},
                      query=wechat_query(WX_TOKEN))
        self.assertEqual((a.status, a.raw), (200, "success"), a)
        self.assert_new_member("hwx", "openid-in-1", "wechat")

    # ---- the simulator as the platform: its webhooks are signed as the platforms sign ----

    def test_sim_webhooks(self):
        cases = [("facebook", "hfb", FB_SECRET, "psid-sim-1"),
                 ("whatsapp-cloud", "hwc", CLOUD_SECRET, "85291110101"),
                 ("whatsapp", "hwa", WA_VERIFY, "85291110102"),
                 ("slack", "hsl", SLACK_SECRET, "D0SIM1"),
                 ("wechat", "hwx", WX_TOKEN, "openid-sim-1")]
        for platform, cid, secret, sender in cases:
            with self.subTest(platform=platform):
                got = self.sim_inbound(platform, cid, secret, sender, text="hello")
                self.assertEqual(got["status"], 200, got)
                self.assert_new_member(cid, sender, platform)
                got = self.sim_inbound(platform, cid, secret, sender,
                                       tap={"payload": "RED", "title": "Red"})
                self.assertEqual(got["status"], 200, got)
                got = self.sim_inbound(platform, cid, secret + "x", sender, text="hello")
                self.assertEqual(got["status"], 401, got)

    # ---- refusals: nothing of them is processed ----

    def test_refused_change_nothing(self):
        raw = json.dumps(fb_body("psid-bad-1", "m_bad")).encode()
        cases = [
            ("hfb", raw, {"X-Hub-Signature-256": meta_sig(FB_SECRET + "x", raw)}, None),
            ("hfb", raw, {}, None),
            ("hwc", json.dumps(cloud_body("85291119999", "wamid.bad")).encode(),
             {"X-Hub-Signature-256": meta_sig(FB_SECRET, raw)}, None),
            ("hsl", raw, slack_headers(SLACK_SECRET + "x", raw), None),
            ("hwx", wechat_xml("openid-bad", "6002"), {"Content-Type": "text/xml"},
             wechat_query(WX_TOKEN + "x")),
            ("hwa", json.dumps(cloud_body("85291119998", "x")["entry"][0]["changes"][0]["value"])
             .encode(), {}, {"token": WA_VERIFY + "x"}),
        ]
        for cid, body, hdrs, q in cases:
            with self.subTest(cid=cid):
                self.assert_error(self.hook("POST", cid, body, hdrs, q), 130, 401)
        for cid, ext in (("hfb", "psid-bad-1"), ("hwc", "85291119999"), ("hwx", "openid-bad"),
                         ("hwa", "85291119998")):
            self.assertIsNone(self.member_of(cid, ext), cid)

    def test_oversized_body(self):
        body = fb_body("psid-big", "m_big", "x" * (1024 * 1024 + 10))
        raw = json.dumps(body).encode()
        a = self.hook("POST", "hfb", raw, {"X-Hub-Signature-256": meta_sig(FB_SECRET, raw)})
        self.assert_error(a, 118, 413)
        self.assertIsNone(self.member_of("hfb", "psid-big"))

    def test_strict_bodies(self):
        for raw in (b'{"object":"page","entry":[]', b'{"object":"page","object":"page"}',
                    b'[1]', b'{"object":"user","entry":[]}'):
            with self.subTest(raw=raw):
                a = self.hook("POST", "hfb", raw, {"X-Hub-Signature-256": meta_sig(FB_SECRET, raw)})
                self.assert_error(a, 108, 400)
        xml = (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]>'
               b'<xml><FromUserName>&a;</FromUserName><MsgType>text</MsgType></xml>')
        a = self.hook("POST", "hwx", xml, {"Content-Type": "text/xml"}, wechat_query(WX_TOKEN))
        self.assert_error(a, 108, 400, mentions="DOCTYPE")

    def test_zz_no_secret_in_the_log(self):
        """Runs last (by name): every secret the tests above sent, right or wrong, is absent
        from botgate's log at the debug level."""
        log = self.s.gateway_log()
        self.assertIn('"route":"webhooks"', log)
        for secret in (FB_SECRET, CLOUD_SECRET, SLACK_SECRET, WX_TOKEN, WA_VERIFY, "fb-verify",
                       "wc-verify"):
            self.assertNotIn(secret, log)


class EndToEnd(HookCase):
    """platform (the simulator) -> botgate -> subscriber: each correctly signed webhook becomes
    one signed event at every subscription it matches, in order per member; refused webhooks
    and a platform's retries add nothing."""
    # the subscribers are on loopback: the SSRF guard lets them through only so
    stack_args = {"workers": 2, "env": {"BOTGATE_ALLOW_PRIVATE_MEDIA": "1",
                                        "BOTGATE_OUTBOX_CLAIM_MS": "2000"}}
    SECRETS = {"facebook": ("hfb", FB_SECRET), "whatsapp-cloud": ("hwc", CLOUD_SECRET),
               "whatsapp": ("hwa", WA_VERIFY), "slack": ("hsl", SLACK_SECRET),
               "wechat": ("hwx", WX_TOKEN)}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.secret = s.ctl("app", "secret", "rotate", "--app", APP).stdout.strip()
        cls.rx = Receiver()
        cls.rx_read = Receiver()  # READ events of the facebook channel only
        s.ctl("subscription", "add", "--app", APP, "--url", cls.rx.url)
        s.ctl("subscription", "add", "--app", APP, "--url", cls.rx_read.url, "--events", "READ",
              "--channel", "hfb")

    @classmethod
    def tearDownClass(cls):
        cls.rx.stop()
        cls.rx_read.stop()
        super().tearDownClass()

    def events(self, rx=None, **match):
        """The events rx took that match, in the order it took them, each signature checked."""
        out = []
        for headers, raw, _ in list((rx or self.rx).got):
            ev = json.loads(raw)
            if all(ev.get(k) == v for k, v in match.items()):
                self.assertTrue(verify(self.secret, headers["Botgate-Signature"], raw), headers)
                out.append(ev)
        return out

    def wait_event(self, rx=None, n=1, **match):
        wait_for(lambda: len(self.events(rx, **match)) >= n, timeout=30,
                 what="%d event(s) %s" % (n, match))
        return self.events(rx, **match)

    def send(self, platform, sender, **what):
        cid, secret = self.SECRETS[platform]
        got = self.sim_inbound(platform, cid, secret, sender, **what)
        self.assertEqual(got["status"], 200, got)
        return got

    def test_inbound_and_taps_per_platform(self):
        senders = {"facebook": "psid-e2e", "whatsapp-cloud": "85291112001",
                   "whatsapp": "85291112002", "slack": "D0E2E", "wechat": "openid-e2e"}
        for platform, sender in senders.items():
            with self.subTest(platform=platform):
                cid = self.SECRETS[platform][0]
                self.send(platform, sender, text="hello " + platform)
                ev, = self.wait_event(channelId=cid, eventType="INBOUND")
                m = self.assert_new_member(cid, sender, platform)
                self.assertEqual(set(ev), {"eventId", "eventType", "channelId", "memberId",
                                           "timestamp", "data", "platform"})
                self.assertEqual(ev["memberId"], m["_id"])
                self.assertEqual(ev["data"]["type"], "TEXT")
                self.assertEqual(ev["data"]["text"], "hello " + platform)
                self.assertRegex(ev["eventId"], r"^[0-9a-f]{32}$")
                self.assertIsInstance(ev["platform"], dict)
                self.send(platform, sender, tap={"payload": "RED", "title": "Red"})
                tap, = self.wait_event(channelId=cid, eventType="POSTBACK")
                self.assertEqual(tap["data"]["payload"], "RED")
                self.assertEqual(tap["memberId"], m["_id"])
        # the READ-only subscription of hfb took none of these
        self.assertEqual(self.events(self.rx_read), [])
        for platform in senders:
            self.assertGreaterEqual(
                self.s.metric('botgate_webhook_events_total{platform="%s"}' % platform), 2)
        # counted once botgate has the subscriber's 2xx, a moment after the subscriber has it
        wait_for(lambda: self.s.metric('botgate_webhook_posts_total{outcome="delivered"}') >= 10,
                 what="10 posts counted delivered")

    def test_receipts(self):
        self.send("whatsapp-cloud", "85291112101",
                  receipt={"status": "delivered", "messageId": "wamid.r1"})
        m = self.member_of("hwc", "85291112101")
        ev, = self.wait_event(eventType="DELIVERED", memberId=m["_id"])
        self.assertEqual(ev["data"]["messageId"], "wamid.r1")
        self.send("facebook", "psid-receipt", receipt={"status": "read"})
        m = self.member_of("hfb", "psid-receipt")
        ev, = self.wait_event(self.rx_read, eventType="READ", memberId=m["_id"])
        self.wait_event(eventType="READ", memberId=m["_id"])  # and the subscription of all

    def queued_message(self, sender, callback):
        """The whatsapp-cloud member of sender (made by an inbound message, which opens its
        window) and a queued request to it, done: its status URL, the headers that read it,
        the member and the platform's id of the message it sent."""
        tok = self.s.token(APP, "bot:sendResponses")
        self.send("whatsapp-cloud", sender, text="hi")
        m = self.member_of("hwc", sender)
        body = {"channelId": "hwc", "memberId": m["_id"],
                "response": [{"type": "TEXT", "text": "to be read"}]}
        if callback:
            body["statusCallback"] = callback
        a = http("POST", self.s.url + "/sendResponses", body,
                 {"Authorization": "Bearer " + tok, "Prefer": "respond-async"})
        self.assertEqual(a.status, 202, a)
        url = self.s.url + "/requests/" + a.json["requestId"]
        auth = {"Authorization": "Bearer " + tok}
        wait_for(lambda: http("GET", url, headers=auth).json["status"] == "done",
                 timeout=30, what="the request done")
        el = http("GET", url, headers=auth).json["sendResult"]["result"][0]
        self.assertNotIn("receipt", el)
        return url, auth, m, el["result"]["messages"][0]["id"]

    def test_receipt_marks_the_queued_element(self):
        """A receipt of a message a queued request sent marks that element (GET /requests/<id>
        and a new status callback show "receipt"), forward only: delivered after read stays
        read."""
        sender = "85291112301"
        cb = Receiver()
        try:
            url, auth, m, mid = self.queued_message(sender, cb.url)
            self.send("whatsapp-cloud", sender, receipt={"status": "read", "messageId": mid})
            wait_for(lambda: http("GET", url, headers=auth).json["sendResult"]["result"][0]
                     .get("receipt") == "read", timeout=30, what="the element read")
            wait_for(lambda: [g for g in cb.got if json.loads(g[1])["sendResult"]["result"][0]
                              .get("receipt") == "read"], timeout=30, what="the callback of it")
            self.send("whatsapp-cloud", sender, receipt={"status": "delivered", "messageId": mid})
            self.wait_event(eventType="DELIVERED", channelId="hwc", memberId=m["_id"])
            st = http("GET", url, headers=auth).json
            self.assertEqual(st["sendResult"]["result"][0]["receipt"], "read")
            for headers, raw, _ in cb.got:
                self.assertTrue(verify(self.secret, headers["Botgate-Signature"], raw))
        finally:
            cb.stop()

    def test_scripts_name_every_key_they_touch(self):
        """Every key a webhook's script touches is among its KEYS (on a Redis Cluster a key
        outside them fails the script in its middle while its slot migrates): the member's
        script, and the event's, with a receipt of a queued request's message. Seen by MONITOR
        on one server: each script with the commands it ran."""
        if CLUSTER:
            self.skipTest("MONITOR of one server")
        mon = Monitor(self.s.redis_port)
        try:
            _, _, m, mid = self.queued_message("85291112501", None)
            self.send("whatsapp-cloud", "85291112501", text="again")  # a known member
            self.send("whatsapp-cloud", "85291112501",
                      receipt={"status": "read", "messageId": mid})
            self.wait_event(eventType="READ", channelId="hwc", memberId=m["_id"])
        finally:
            scripts = mon.stop()
        # the member's (by its recipient key), the event's (it remembers the event's id) and
        # the receipt's (it reads the message index)
        member = [sc for sc in scripts if any(":recipient:{hwc}:" in k for _, k in sc[1])]
        events = [sc for sc in scripts if any(":evseen:" in k for _, k in sc[1])]
        receipts = [sc for sc in scripts if any(c == "get" and ":msg:" in k for c, k in sc[1])]
        for keys, touched in member + events + receipts:
            self.assertLessEqual({k for _, k in touched}, set(keys), keys)
        self.assertGreaterEqual(len(member), 3, scripts)
        self.assertGreaterEqual(len(events), 3, scripts)
        self.assertTrue(receipts, scripts)

    def test_send_by_recipient_names_every_key(self):
        """A send by recipientId finds or makes its member in one script (store.c's
        RESOLVE_SCRIPT) that names every key it touches among its KEYS: a new recipient, the
        same one again, and one whose member the webhook made (a sending worker with no guess
        of its id, not the one that took the webhook: the script says whose it is, and runs
        once more with that key)."""
        if CLUSTER:
            self.skipTest("MONITOR of one server")
        tok = self.s.token(APP, "bot:sendResponses")
        self.send("facebook", "psid-rcp-hook", text="hello")  # its member made by the webhook
        made = self.member_of("hfb", "psid-rcp-hook")["_id"]
        mon = Monitor(self.s.redis_port)
        try:
            answers = [http("POST", self.s.url + "/sendResponses",
                            {"channelId": "hfb", "recipientId": rid,
                             "response": [{"type": "TEXT", "text": "by recipient"}]},
                            {"Authorization": "Bearer " + tok})
                       for rid in ("psid-rcp-new", "psid-rcp-new", "psid-rcp-hook")]
        finally:
            scripts = mon.stop()
        for a in answers:
            self.assertEqual((a.status, a.json["sendResult"]["ok"]), (200, 1), a)
        new = self.member_of("hfb", "psid-rcp-new")["_id"]
        self.assertEqual([a.json["member"] for a in answers], [new, new, made])
        resolves = [sc for sc in scripts
                    if any(":recipient:{hfb}:psid-rcp-" in k for _, k in sc[1])]
        for keys, touched in resolves:
            self.assertLessEqual({k for _, k in touched}, set(keys), keys)
        # one run each for the new member and itself again (when the same worker sent both,
        # else two), and for the webhook's one when the worker that took the webhook sends
        # (it remembers the member's id: the store's table), else two (the first says whose)
        self.assertGreaterEqual(len(resolves), 3, resolves)
        self.assertLessEqual(len(resolves), 5, resolves)

    def test_webhook_opens_the_window(self):
        """The conversation window (contract section 14) counts from the lastInboundAt the
        webhooks keep: a member who last wrote two days ago gets 127 and no platform call;
        once they write again (the simulator's webhook), the same send goes."""
        tok = self.s.token(APP, "bot:sendResponses")
        sender = "85291112401"
        self.send("whatsapp-cloud", sender, text="first")
        m = self.member_of("hwc", sender)
        m["lastInboundAt"] = int(time.time() * 1000) - 48 * 3600 * 1000
        self.s.put("member", m)
        body = {"channelId": "hwc", "memberId": m["_id"],
                "response": [{"type": "TEXT", "text": "window?"}]}
        auth = {"Authorization": "Bearer " + tok}
        a = http("POST", self.s.url + "/sendResponses", body, auth)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["result"][0]["error"]["err_code"], 127, a)
        self.send("whatsapp-cloud", sender, text="back again")
        self.assertGreater(self.member_of("hwc", sender)["lastInboundAt"],
                           int(time.time() * 1000) - 60000)
        a = http("POST", self.s.url + "/sendResponses", body, auth)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["ok"], 1, a)

    def test_order_per_member(self):
        for i in range(6):
            self.send("facebook", "psid-order", text="order %d" % i)
        m = self.member_of("hfb", "psid-order")
        evs = self.wait_event(n=6, memberId=m["_id"])
        self.assertEqual([e["data"]["text"] for e in evs], ["order %d" % i for i in range(6)])

    def test_refused_and_repeated_produce_nothing(self):
        cid, secret = self.SECRETS["facebook"]
        raw = json.dumps(fb_body("psid-quiet", "m_quiet_1", "once")).encode()
        good = {"X-Hub-Signature-256": meta_sig(FB_SECRET, raw)}
        self.assertEqual(self.hook("POST", cid, raw, good).status, 200)
        self.assertEqual(self.hook("POST", cid, raw, good).status, 200)  # the platform's retry
        bad = json.dumps(fb_body("psid-quiet", "m_quiet_2", "forged")).encode()
        self.assert_error(self.hook("POST", cid, bad, {"X-Hub-Signature-256": meta_sig(
            "nope", bad)}), 130, 401)
        big = json.dumps(fb_body("psid-quiet", "m_quiet_3", "x" * (1 << 20))).encode()
        self.assert_error(self.hook("POST", cid, big, {"X-Hub-Signature-256": meta_sig(
            FB_SECRET, big)}), 118, 413)
        sraw = json.dumps({"type": "event_callback", "event_id": "EvQ", "event": {
            "type": "message", "channel": "D0QUIET", "user": "U1", "text": "s-once",
            "ts": "%d.000001" % time.time()}}).encode()
        sh = slack_headers(SLACK_SECRET, sraw)
        self.assertEqual(self.hook("POST", "hsl", sraw, sh).status, 200)
        self.assert_error(self.hook("POST", "hsl", sraw, sh), 130, 401)  # the replay
        # a last message of each member: once it is in, everything before it would be too
        self.send("facebook", "psid-quiet", text="marker")
        self.send("slack", "D0QUIET", text="s-marker")
        m = self.member_of("hfb", "psid-quiet")
        texts = [e["data"]["text"] for e in self.wait_event(n=2, memberId=m["_id"])]
        self.assertEqual(texts, ["once", "marker"])
        m = self.member_of("hsl", "D0QUIET")
        texts = [e["data"]["text"] for e in self.wait_event(n=2, memberId=m["_id"])]
        self.assertEqual(texts, ["s-once", "s-marker"])


class Subscriptions(StackTest):
    """botgatectl subscription add, list, delete: URLs and event types checked, bounded."""
    stack_args = {"workers": 1}

    def test_add_list_delete(self):
        s = self.s
        sid = s.ctl("subscription", "add", "--app", "sa", "--url", "https://crm.example/in",
                    "--events", "INBOUND,READ,INBOUND", "--channel", "c1").stdout.strip()
        self.assertRegex(sid, r"^sub_[0-9a-f]{16}$")
        listed = json.loads(s.ctl("subscription", "list", "--app", "sa", "--json").stdout)
        self.assertEqual(len(listed), 1)
        rec = listed[0]
        self.assertEqual((rec["_id"], rec["url"], rec["events"], rec["channel"], rec["app"]),
                         (sid, "https://crm.example/in", ["INBOUND", "READ"], "c1", "sa"))
        text = s.ctl("subscription", "list", "--app", "sa").stdout
        self.assertIn(sid + "\thttps://crm.example/in\tINBOUND,READ\tc1", text)
        self.assertEqual(json.loads(s.ctl("subscription", "list", "--app", "other",
                                          "--json").stdout), [])
        self.assertEqual(s.ctl("subscription", "delete", sid, "--app", "other",
                               check=False).returncode, 1)
        s.ctl("subscription", "delete", sid, "--app", "sa")
        self.assertEqual(json.loads(s.ctl("subscription", "list", "--app", "sa",
                                          "--json").stdout), [])

    def test_refused(self):
        s = self.s
        for args, mention in (
                (["--url", "ftp://x.example/"], "--url"),
                (["--url", "https://"], "--url"),
                (["--url", "https://x.example/a b"], "--url"),
                (["--url", "https://x.example/" + "a" * 3000], "--url"),
                (["--url", "https://x.example/", "--events", "INBOUND,NOPE"], "NOPE"),
                (["--url", "https://x.example/", "--channel", "a", "--channel", "b"], "one"),
                ([], "--url")):
            with self.subTest(args=args):
                r = s.ctl("subscription", "add", "--app", "sr", *args, check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(mention, r.stderr)
        self.assertNotEqual(s.ctl("subscription", "add", "--url", "https://x.example/",
                                  check=False).returncode, 0)

    def test_bounded_per_app(self):
        s = self.s
        for i in range(20):
            s.ctl("subscription", "add", "--app", "sb", "--url", "https://x.example/%d" % i)
        r = s.ctl("subscription", "add", "--app", "sb", "--url", "https://x.example/21",
                  check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("20 subscriptions", r.stderr)


if __name__ == "__main__":
    unittest.main()
