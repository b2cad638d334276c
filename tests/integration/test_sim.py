#!/usr/bin/env python3
"""Integration test of botgate-sim, the platform simulator: every platform's answers, every
fault word, tokens, the record, latency, media and hooks, against the running binary.

Run: BOTGATE_BIN_DIR=/work/main/build-sim/bin python3 tests/integration/test_sim.py
"""
import base64
import datetime
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

BIN_DIR = os.environ.get("BOTGATE_BIN_DIR", "/work/main/build/bin")
SIM = os.path.join(BIN_DIR, "botgate-sim")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class Reply:
    def __init__(self, status, headers, body, elapsed):
        self.status = status
        self.headers = headers
        self.body = body
        self.elapsed = elapsed

    def json(self):
        return json.loads(self.body)


def start_sim(*extra):
    """Starts botgate-sim on a free port; returns (process, base URL, temp dir)."""
    tmp = tempfile.TemporaryDirectory()
    port_file = os.path.join(tmp.name, "port")
    proc = subprocess.Popen(
        [SIM, "--listen", "127.0.0.1:0", "--port-file", port_file, "--quiet", *extra])
    deadline = time.monotonic() + 15
    while not os.path.exists(port_file):
        if proc.poll() is not None:
            raise RuntimeError("botgate-sim exited with %d" % proc.returncode)
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("botgate-sim did not write its port file")
        time.sleep(0.02)
    with open(port_file) as f:
        port = int(f.read())
    return proc, "http://127.0.0.1:%d" % port, tmp


def stop_sim(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


class SimTestCase(unittest.TestCase):
    args = ("--threads", "2")

    def setUp(self):
        self.proc, self.base, self.tmp = start_sim(*self.args)

    def tearDown(self):
        rc = stop_sim(self.proc)
        self.tmp.cleanup()
        self.assertEqual(rc, 0, "botgate-sim must exit 0 on SIGTERM")

    # ---- HTTP helpers ----

    def call(self, method, path, body=None, headers=None, raw=None, timeout=10, base=None):
        data = raw
        hdrs = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        req = urllib.request.Request((base or self.base) + path, data=data, headers=hdrs,
                                     method=method)
        t0 = time.monotonic()
        try:
            with _OPENER.open(req, timeout=timeout) as resp:
                return Reply(resp.status, resp.headers, resp.read(), time.monotonic() - t0)
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.headers, e.read(), time.monotonic() - t0)

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.call("POST", path, body=body, **kw)

    def log(self, since=0):
        return self.get("/_sim/log?since=%d" % since).json()

    def stats(self):
        return self.get("/_sim/stats").json()

    # ---- one send per platform, recipient and text chosen by the test ----

    def wa_login(self, prefix="/wa", user="admin", password="secret"):
        auth = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        return self.post(prefix + "/v1/users/login", headers={"Authorization": "Basic " + auth})

    def wa_token(self):
        if not hasattr(self, "_wa_token"):
            self._wa_token = self.wa_login().json()["users"][0]["token"]
        return self._wa_token

    def wx_token(self, appid="wxapp"):
        if not hasattr(self, "_wx_token"):
            r = self.get("/wechat/cgi-bin/token?grant_type=client_credential&appid=%s"
                         "&secret=s3cret" % appid)
            self._wx_token = r.json()["access_token"]
        return self._wx_token

    def send(self, platform, to, text="hello", **kw):
        if platform == "facebook":
            return self.post("/graph/v19.0/me/messages?access_token=PAGE",
                             {"messaging_type": "RESPONSE", "recipient": {"id": to},
                              "message": {"text": text}}, **kw)
        if platform == "whatsapp-cloud":
            return self.post("/graph/v19.0/1234567/messages",
                             {"messaging_product": "whatsapp", "recipient_type": "individual",
                              "to": to, "type": "text", "text": {"body": text}},
                             headers={"Authorization": "Bearer CLOUD"}, **kw)
        if platform == "whatsapp":
            return self.post("/wa/v1/messages",
                             {"recipient_type": "individual", "to": to, "type": "text",
                              "text": {"body": text}},
                             headers={"Authorization": "Bearer " + self.wa_token()}, **kw)
        if platform == "slack":
            return self.post("/slack/api/chat.postMessage", {"channel": to, "text": text},
                             headers={"Authorization": "Bearer xoxb-1"}, **kw)
        if platform == "wechat":
            return self.post("/wechat/cgi-bin/message/custom/send?access_token=" +
                             self.wx_token(),
                             {"touser": to, "msgtype": "text", "text": {"content": text}}, **kw)
        if platform == "teamwork":
            return self.post("/teamwork/appstore/api/developer/chats/message",
                             {"users": [to], "messageType": "text", "text": text},
                             headers={"x-api-key": "KEY"}, **kw)
        raise ValueError(platform)

    def assert_success(self, platform, r, to):
        self.assertEqual(r.status, 200, r.body)
        j = r.json()
        if platform == "facebook":
            self.assertEqual(j["recipient_id"], to)
            self.assertTrue(j["message_id"].startswith("m_"))
        elif platform == "whatsapp-cloud":
            self.assertEqual(j["messaging_product"], "whatsapp")
            self.assertEqual(j["contacts"], [{"input": to, "wa_id": to}])
            self.assertTrue(j["messages"][0]["id"].startswith("wamid."))
        elif platform == "whatsapp":
            self.assertTrue(j["messages"][0]["id"].startswith("gBEG"))
            self.assertEqual(j["meta"], {"api_status": "stable", "version": "2.45.1"})
        elif platform == "slack":
            self.assertIs(j["ok"], True)
            self.assertEqual(j["channel"], to)
            secs, frac = j["ts"].split(".")
            self.assertTrue(secs.isdigit() and frac.isdigit() and len(frac) == 6)
            self.assertIn("text", j["message"])
        elif platform == "wechat":
            self.assertEqual(j, {"errcode": 0, "errmsg": "ok"})
        elif platform == "teamwork":
            self.assertTrue(j["result"]["messageId"].startswith("tw-"))


PLATFORMS = ["facebook", "whatsapp-cloud", "whatsapp", "slack", "wechat", "teamwork"]

# fault word -> platform -> (HTTP status, check of the JSON body)
FAULT_ERRORS = {
    "invalid": {
        "facebook": (400, lambda j: j["error"]["code"] == 100
                     and j["error"]["error_subcode"] == 2018001),
        "whatsapp-cloud": (400, lambda j: j["error"]["code"] == 131026),
        "whatsapp": (400, lambda j: j["errors"][0]["code"] == 1013
                     and j["errors"][0]["title"] == "User is not valid" and "meta" in j),
        "slack": (200, lambda j: j == {"ok": False, "error": "channel_not_found"}),
        "wechat": (200, lambda j: j == {"errcode": 40003, "errmsg": "invalid openid"}),
        "teamwork": (404, lambda j: j == {"message": "user not found"}),
    },
    "badtoken": {
        "facebook": (401, lambda j: j["error"]["code"] == 190
                     and j["error"]["type"] == "OAuthException" and j["error"]["fbtrace_id"]),
        "whatsapp-cloud": (401, lambda j: j["error"]["code"] == 190),
        "whatsapp": (401, lambda j: j["errors"][0]["code"] == 1005),
        "slack": (200, lambda j: j == {"ok": False, "error": "invalid_auth"}),
        "wechat": (200, lambda j: j["errcode"] == 40001),
        "teamwork": (401, lambda j: j == {"message": "invalid api key"}),
    },
    "fail5xx": {
        "facebook": (500, lambda j: j["error"]["code"] == 2 and j["error"]["is_transient"]),
        "whatsapp-cloud": (500, lambda j: j["error"]["code"] == 131000),
        "whatsapp": (500, lambda j: j["errors"][0]["code"] == 1014),
        "slack": (500, lambda j: j == {"ok": False, "error": "internal_error"}),
        "wechat": (200, lambda j: j == {"errcode": -1, "errmsg": "system error"}),
        "teamwork": (500, lambda j: j == {"message": "internal error"}),
    },
    "ratelimit": {
        "facebook": (400, lambda j: j["error"]["code"] == 4),
        "whatsapp-cloud": (400, lambda j: j["error"]["code"] == 130429),
        "whatsapp": (429, lambda j: j["errors"][0]["code"] == 1015),
        "slack": (429, lambda j: j == {"ok": False, "error": "ratelimited"}),
        "wechat": (200, lambda j: j["errcode"] == 45047),
        "teamwork": (429, lambda j: j == {"message": "rate limited"}),
    },
}


class TestBasics(SimTestCase):
    def test_health_unknown_paths_and_methods(self):
        r = self.get("/_sim/health")
        self.assertEqual((r.status, r.json()), (200, {"ok": True}))
        self.assertEqual(r.headers["Content-Type"], "application/json")
        for path in ("/nope", "/graph/v19.0/me/other", "/slack/api/other", "/wa/v2/messages",
                     "/wechat/cgi-bin/nope", "/_sim/nope", "/media/x.gif", "/hook/nope"):
            r = self.post(path, {})
            self.assertEqual((r.status, r.json()), (404, {"error": "not found"}), path)
        r = self.get("/graph/v19.0/me/messages")
        self.assertEqual(r.status, 405)
        r = self.call("PUT", "/_sim/health")
        self.assertIn(r.status, (405, 501))  # evhttp refuses methods outside GET and POST
        self.assertEqual(self.log()["requests"], [], "unknown paths are not recorded")


class TestPlatforms(SimTestCase):
    def test_facebook(self):
        r = self.send("facebook", "PSID1", "hi")
        self.assert_success("facebook", r, "PSID1")
        r = self.post("/graph/v19.0/998877/messages?access_token=PAGE",
                      {"recipient": {"id": "PSID2"}, "message": {"text": "x"}})
        self.assert_success("facebook", r, "PSID2")
        for q in ("?access_token=bad", ""):
            r = self.post("/graph/v19.0/me/messages" + q, {"recipient": {"id": "P"}})
            self.assertEqual(r.status, 401)
            self.assertEqual(r.json(), {"error": {
                "message": "Error validating access token", "type": "OAuthException",
                "code": 190, "fbtrace_id": "A1"}})
        entries = self.log()["requests"]
        self.assertEqual(len(entries), 4)
        e = entries[0]
        self.assertEqual(e["platform"], "facebook")
        self.assertEqual(e["kind"], "messages")
        self.assertEqual(e["method"], "POST")
        self.assertEqual(e["path"], "/graph/v19.0/me/messages")
        self.assertEqual(e["query"], "access_token=PAGE")
        self.assertIsNone(e["auth"])
        self.assertEqual(e["recipient"], "PSID1")
        self.assertEqual(e["body"]["message"], {"text": "hi"})
        self.assertIsNone(e["fault"])
        self.assertLess(abs(e["ts_ms"] - time.time() * 1000), 60000)
        self.assertEqual(entries[1]["path"], "/graph/v19.0/998877/messages")

    def test_whatsapp_cloud(self):
        r = self.send("whatsapp-cloud", "85291234567")
        self.assert_success("whatsapp-cloud", r, "85291234567")
        r = self.post("/graph/v19.0/1234567/messages",
                      {"messaging_product": "whatsapp", "to": "1", "type": "text"},
                      headers={"Authorization": "Bearer bad"})
        self.assertEqual(r.status, 401)
        self.assertEqual(r.json()["error"]["code"], 190)
        e = self.log()["requests"][0]
        self.assertEqual((e["platform"], e["kind"], e["auth"], e["recipient"]),
                         ("whatsapp-cloud", "messages", "Bearer CLOUD", "85291234567"))

    def test_whatsapp_login_contacts_messages(self):
        r = self.wa_login(password="wrong")
        self.assertEqual(r.status, 401)
        self.assertEqual(r.json(), {"errors": [{"code": 1005, "title": "Access denied",
                                                "details": "Invalid credentials."}]})
        for auth in (None, "Basic !!!notbase64", "Basic " + base64.b64encode(b"nocolon").decode(),
                     "Bearer x"):
            r = self.post("/wa/v1/users/login", headers={"Authorization": auth} if auth else {})
            self.assertEqual(r.status, 401, auth)
        r = self.wa_login(user="ops")
        self.assertEqual(r.status, 200)
        j = r.json()
        token = j["users"][0]["token"]
        self.assertTrue(token.startswith("watok-"))
        self.assertEqual(j["meta"]["version"], "2.45.1")
        exp = datetime.datetime.strptime(j["users"][0]["expires_after"],
                                         "%Y-%m-%d %H:%M:%S%z")
        left = exp - datetime.datetime.now(datetime.timezone.utc)
        self.assertTrue(datetime.timedelta(days=6, hours=23) < left < datetime.timedelta(days=7,
                                                                                        hours=1))
        bearer = {"Authorization": "Bearer " + token}

        r = self.post("/wa/v1/contacts",
                      {"blocking": "wait", "contacts": ["+85291234567", "+852invalid1"]},
                      headers=bearer)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["contacts"], [
            {"input": "+85291234567", "status": "valid", "wa_id": "85291234567"},
            {"input": "+852invalid1", "status": "invalid"}])
        self.assertIn("meta", r.json())

        self._wa_token = token
        self.assert_success("whatsapp", self.send("whatsapp", "85291234567"), "85291234567")
        # Other apiPath prefixes reach the same simulator, and share the issued tokens.
        for prefix in ("/wa2", "/wa-east"):
            r = self.post(prefix + "/v1/messages", {"to": "1", "type": "text",
                                                    "text": {"body": "x"}}, headers=bearer)
            self.assertEqual(r.status, 200, prefix)

        denied = {"errors": [{"code": 1005, "title": "Access denied",
                              "details": "Invalid credentials."}],
                  "meta": {"api_status": "stable", "version": "2.45.1"}}
        for hdrs in ({"Authorization": "Bearer never-issued"}, {}):
            for path in ("/wa/v1/messages", "/wa/v1/contacts"):
                r = self.post(path, {"to": "1", "contacts": ["+1"]}, headers=hdrs)
                self.assertEqual((r.status, r.json()), (401, denied), path)

        r = self.post("/_sim/expire-tokens")
        self.assertEqual(r.json()["ok"], True)
        r = self.send("whatsapp", "85291234567")
        self.assertEqual(r.status, 401)
        self.assertEqual(r.json()["errors"][0]["code"], 1005)

        st = self.stats()
        self.assertEqual(st["login_calls"], {"admin": 1, "ops": 1})
        kinds = [(e["kind"], e["platform"]) for e in self.log()["requests"]]
        self.assertEqual(kinds[0], ("login", "whatsapp"))
        self.assertIn(("contacts", "whatsapp"), kinds)
        contacts = [e for e in self.log()["requests"] if e["kind"] == "contacts"][0]
        self.assertEqual(contacts["recipient"], "+85291234567")
        self.assertEqual(contacts["fault"], "invalid")

    def test_slack(self):
        r = self.send("slack", "C0123", "hi there")
        self.assert_success("slack", r, "C0123")
        self.assertEqual(r.json()["message"]["text"], "hi there")
        r = self.post("/slack/api/chat.postMessage", {"channel": "C1", "text": "x"},
                      headers={"Authorization": "Bearer bad"})
        self.assertEqual((r.status, r.json()), (200, {"ok": False, "error": "invalid_auth"}))
        r = self.post("/slack/api/chat.postMessage", {"channel": "C1", "text": "x"})
        self.assertEqual(r.json()["ok"], False)
        e = self.log()["requests"][0]
        self.assertEqual((e["platform"], e["recipient"], e["auth"]),
                         ("slack", "C0123", "Bearer xoxb-1"))

    def test_wechat_tokens_and_send(self):
        for _ in range(2):
            r = self.get("/wechat/cgi-bin/token?grant_type=client_credential&appid=wxA"
                         "&secret=s3cret")
            self.assertEqual(r.status, 200)
            j = r.json()
            self.assertTrue(j["access_token"].startswith("wxtok-"))
            self.assertEqual(j["expires_in"], 7200)
        r = self.get("/wechat/cgi-bin/token?grant_type=client_credential&appid=wxB"
                     "&secret=wrong")
        self.assertEqual(r.json(), {"errcode": 40125, "errmsg": "invalid appsecret"})
        st = self.stats()
        self.assertEqual(st["token_calls"], {"wxA": 2, "wxB": 1})

        token = j["access_token"]
        self._wx_token = token
        self.assert_success("wechat", self.send("wechat", "openid-1"), "openid-1")
        bad = {"errcode": 40001,
               "errmsg": "invalid credential, access_token is invalid or not latest"}
        r = self.post("/wechat/cgi-bin/message/custom/send?access_token=nope",
                      {"touser": "o", "msgtype": "text", "text": {"content": "x"}})
        self.assertEqual(r.json(), bad)
        self.post("/_sim/expire-tokens")
        self.assertEqual(self.send("wechat", "openid-1").json(), bad)

        entries = self.log()["requests"]
        self.assertEqual([e["kind"] for e in entries],
                         ["token", "token", "token", "send", "send", "send"])
        self.assertEqual(entries[3]["recipient"], "openid-1")
        self.assertEqual(entries[3]["body"]["text"]["content"], "hello")

        self.post("/_sim/reset")
        self.assertEqual(self.stats()["token_calls"], {})
        self.get("/wechat/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=s")
        self.assertEqual(self.stats()["token_calls"], {"wxA": 1})

    def _multipart(self, fields):
        boundary = "----botgate%d" % time.time_ns()
        out = b""
        for name, filename, ctype, data in fields:
            out += b"--" + boundary.encode() + b"\r\n"
            disp = 'form-data; name="%s"' % name
            if filename:
                disp += '; filename="%s"' % filename
            out += ("Content-Disposition: %s\r\n" % disp).encode()
            if ctype:
                out += ("Content-Type: %s\r\n" % ctype).encode()
            out += b"\r\n" + data + b"\r\n"
        out += b"--" + boundary.encode() + b"--\r\n"
        return out, "multipart/form-data; boundary=" + boundary

    def test_wechat_upload(self):
        token = self.wx_token()
        png = self.get("/media/cat.png").body
        data = png * 100 + b"\r\n--not-the-boundary\r\n"
        body, ctype = self._multipart([("other", None, None, b"x"),
                                       ("media", "media", "image/png", data)])
        r = self.post("/wechat/cgi-bin/media/upload?access_token=%s&type=image" % token,
                      raw=body, headers={"Content-Type": ctype})
        self.assertEqual(r.status, 200)
        j = r.json()
        self.assertEqual(j["type"], "image")
        self.assertTrue(j["media_id"].startswith("media-"))
        self.assertLess(abs(j["created_at"] - time.time()), 60)

        body, ctype = self._multipart([("file", "x.png", "image/png", b"abc")])
        r = self.post("/wechat/cgi-bin/media/upload?access_token=%s&type=image" % token,
                      raw=body, headers={"Content-Type": ctype})
        self.assertEqual(r.json(), {"errcode": 41005, "errmsg": "media data missing"})

        body, ctype = self._multipart([("media", "a.jpg", "image/jpeg", b"abc")])
        r = self.post("/wechat/cgi-bin/media/upload?access_token=nope&type=image",
                      raw=body, headers={"Content-Type": ctype})
        self.assertEqual(r.json()["errcode"], 40001)

        uploads = [e for e in self.log()["requests"] if e["kind"] == "upload"]
        self.assertEqual(len(uploads), 3)
        self.assertEqual(uploads[0]["platform"], "wechat")
        self.assertEqual(uploads[0]["body"], {"size": len(data), "content_type": "image/png"})
        self.assertIsNone(uploads[1]["body"])
        self.assertEqual(uploads[2]["body"], {"size": 3, "content_type": "image/jpeg"})

    def test_wechat_upload_large(self):
        token = self.wx_token()
        data = os.urandom(8 * 1024 * 1024)
        body, ctype = self._multipart([("media", "big.png", "image/png", data)])
        r = self.post("/wechat/cgi-bin/media/upload?access_token=%s&type=image" % token,
                      raw=body, headers={"Content-Type": ctype}, timeout=60)
        self.assertEqual(r.status, 200, r.body)
        up = [e for e in self.log()["requests"] if e["kind"] == "upload"][0]
        self.assertEqual(up["body"]["size"], len(data))

    def test_shapes_refused_as_the_platforms_do(self):
        """The shapes and limits of platforms.md: one over each limit is refused in the
        platform's own error shape, at the limit is taken."""
        def qr(n):
            return [{"content_type": "text", "title": "T%d" % i, "payload": "P"} for i in range(n)]
        fb = "/graph/v19.0/me/messages?access_token=PAGE"
        for n, status in ((13, 200), (14, 400)):
            r = self.post(fb, {"recipient": {"id": "P"},
                               "message": {"text": "x", "quick_replies": qr(n)}})
            self.assertEqual(r.status, status, r.body)
        r = self.post(fb, {"recipient": {"id": "P"}, "message": {"text": "x", "extra": 1}})
        self.assertEqual((r.status, r.json()["error"]["code"]), (400, 100))
        button = {"type": "template", "payload": {"template_type": "button", "text": "t" * 641,
                                                  "buttons": [{"type": "postback", "title": "a",
                                                               "payload": "a"}]}}
        r = self.post(fb, {"recipient": {"id": "P"}, "message": {"attachment": button}})
        self.assertEqual(r.status, 400, r.body)

        def buttons(n):
            return {"type": "button", "body": {"text": "t"}, "action": {"buttons": [
                {"type": "reply", "reply": {"id": "i%d" % i, "title": "t"}} for i in range(n)]}}
        hdrs = {"Authorization": "Bearer CLOUD"}
        for n, status in ((3, 200), (4, 400)):
            r = self.post("/graph/v19.0/1234567/messages",
                          {"messaging_product": "whatsapp", "to": "852", "type": "interactive",
                           "interactive": buttons(n)}, headers=hdrs)
            self.assertEqual(r.status, status, r.body)
        r = self.post("/wa/v1/messages", {"to": "852", "type": "audio",
                                          "audio": {"link": "https://x", "caption": "c"}},
                      headers={"Authorization": "Bearer " + self.wa_token()})
        self.assertEqual((r.status, r.json()["errors"][0]["code"]), (400, 1009))

        slack = "/slack/api/chat.postMessage"
        hdrs = {"Authorization": "Bearer xoxb-1"}
        blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}]
        r = self.post(slack, {"channel": "D1", "blocks": blocks}, headers=hdrs)
        self.assertEqual(r.json(), {"ok": False, "error": "no_text"})
        r = self.post(slack, {"channel": "D1", "text": "hi", "blocks": blocks}, headers=hdrs)
        self.assertIs(r.json()["ok"], True)
        r = self.post(slack, {"channel": "D1", "text": "hi", "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}]}, headers=hdrs)
        self.assertEqual(r.json(), {"ok": False, "error": "invalid_blocks"})

        wx = "/wechat/cgi-bin/message/custom/send?access_token=" + self.wx_token()
        article = {"title": "a", "url": "https://x"}
        r = self.post(wx, {"touser": "o", "msgtype": "news", "news": {"articles": [article] * 2}})
        self.assertEqual(r.json()["errcode"], 47001)
        r = self.post(wx, {"touser": "o", "msgtype": "news", "news": {"articles": [article]}})
        self.assertEqual(r.json()["errcode"], 0)
        r = self.post(wx, {"touser": "o", "msgtype": "video", "video": {"media_id": "made-up"}})
        self.assertEqual(r.json()["errcode"], 40007)
        r = self.post(wx, {"touser": "o", "msgtype": "location", "location": {}})
        self.assertEqual(r.json()["errcode"], 40008)
        # an upload of the wrong kind, or over the kind's size
        up = "/wechat/cgi-bin/media/upload?access_token=%s&type=" % self.wx_token()
        body, ctype = self._multipart([("media", "v.mp4", "video/mp4", b"abc")])
        r = self.post(up + "voice", raw=body, headers={"Content-Type": ctype})
        self.assertEqual(r.json()["errcode"], 40005)
        r = self.post(up + "video", raw=body, headers={"Content-Type": ctype})
        self.assertEqual(r.json()["type"], "video")
        body, ctype = self._multipart([("media", "a.mp3", "audio/mpeg",
                                        b"x" * (2 * 1024 * 1024 + 1))])
        r = self.post(up + "voice", raw=body, headers={"Content-Type": ctype})
        self.assertEqual(r.json()["errcode"], 40006)

        r = self.post("/teamwork/appstore/api/developer/chats/message",
                      {"users": ["u"], "messageType": "video", "video": {}},
                      headers={"x-api-key": "KEY"})
        self.assertEqual(r.status, 400)

    def test_teamwork(self):
        r = self.send("teamwork", "user-9")
        self.assert_success("teamwork", r, "user-9")
        for hdrs in ({"x-api-key": "bad"}, {}):
            r = self.post("/teamwork/appstore/api/developer/chats/message",
                          {"users": ["u"], "text": "x"}, headers=hdrs)
            self.assertEqual((r.status, r.json()), (401, {"message": "invalid api key"}))
        e = self.log()["requests"][0]
        self.assertEqual((e["platform"], e["recipient"], e["auth"]), ("teamwork", "user-9", "KEY"))


class TestFaults(SimTestCase):
    def test_error_faults_by_recipient_and_by_text(self):
        for word, per_platform in FAULT_ERRORS.items():
            for platform in PLATFORMS:
                status, check = per_platform[platform]
                for to, text in (("r-%s-1" % word, "hello"), ("r-plain", "say %s now" % word)):
                    with self.subTest(word=word, platform=platform, to=to):
                        r = self.send(platform, to, text)
                        self.assertEqual(r.status, status, r.body)
                        self.assertTrue(check(r.json()), r.body)
                        if word == "ratelimit" and platform == "slack":
                            self.assertEqual(r.headers["Retry-After"], "1")
        r = self.send("facebook", "x-ratelimit613")
        self.assertEqual((r.status, r.json()["error"]["code"]), (400, 613))
        # Word order decides when several are present.
        r = self.send("facebook", "fail5xx-invalid")
        self.assertEqual(r.json()["error"]["code"], 100)
        faults = [e["fault"] for e in self.log()["requests"] if e["platform"] == "facebook"]
        self.assertEqual(faults[-2:], ["ratelimit613", "invalid"])
        self.assertIn("badtoken", faults)

    def test_contacts_faults(self):
        bearer = {"Authorization": "Bearer " + self.wa_token()}
        r = self.post("/wa/v1/contacts", {"blocking": "wait", "contacts": ["+1fail5xx"]},
                      headers=bearer)
        self.assertEqual((r.status, r.json()["errors"][0]["code"]), (500, 1014))
        r = self.post("/wa/v1/contacts", {"blocking": "wait", "contacts": ["+1badtoken"]},
                      headers=bearer)
        self.assertEqual(r.status, 401)

    def test_garbage_truncated_slow(self):
        for platform in PLATFORMS:
            with self.subTest(platform=platform, fault="garbage"):
                r = self.send(platform, "to-garbage")
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, b"<html>not json")
                self.assertTrue(r.headers["Content-Type"].startswith("text/html"))
            with self.subTest(platform=platform, fault="truncated"):
                r = self.send(platform, "to-truncated")
                self.assertEqual(r.status, 200)
                self.assertTrue(r.body.startswith(b"{"), r.body)
                with self.assertRaises(ValueError):
                    json.loads(r.body)
            with self.subTest(platform=platform, fault="slow"):
                r = self.send(platform, "to-1", "text slow300 here")
                self.assertGreaterEqual(r.elapsed, 0.29)
                self.assert_success(platform, r, "to-1")
        faults = {e["fault"] for e in self.log()["requests"]}
        self.assertTrue({"garbage", "truncated", "slow300"} <= faults, faults)

    def test_reset(self):
        for platform in PLATFORMS:
            with self.subTest(platform=platform):
                t0 = time.monotonic()
                with self.assertRaises(OSError):
                    self.send(platform, "to-reset", timeout=5)
                self.assertLess(time.monotonic() - t0, 4)
        self.assertEqual(self.get("/_sim/health").status, 200)
        resets = [e for e in self.log()["requests"] if e["fault"] == "reset"]
        self.assertEqual(len(resets), len(PLATFORMS))
        self._wait_in_flight(0)

    def _wait_in_flight(self, n, seconds=5):
        deadline = time.monotonic() + seconds
        while self.stats()["in_flight"] != n:
            if time.monotonic() > deadline:
                self.fail("in_flight stays %d, expected %d" % (self.stats()["in_flight"], n))
            time.sleep(0.05)

    def test_timeout_holds_without_blocking_others(self):
        # A client that gives up: the held request must be freed when it leaves.
        t0 = time.monotonic()
        with self.assertRaises(OSError):
            self.send("facebook", "to-timeout", timeout=1)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        self._wait_in_flight(0)

        # Clients that keep waiting, on both threads, while others are answered at once.
        errors = []

        def hold(platform):
            try:
                self.send(platform, "x", "please timeout", timeout=60)
                errors.append("answered")
            except OSError:
                pass

        holders = [threading.Thread(target=hold, args=(p,), daemon=True) for p in PLATFORMS]
        for t in holders:
            t.start()
        self._wait_in_flight(len(PLATFORMS))
        for i in range(20):
            r = self.send("slack", "C%d" % i)
            self.assertEqual(r.status, 200)
            self.assertLess(r.elapsed, 0.5)
        self.assertEqual(errors, [])
        held = [e for e in self.log()["requests"] if e["fault"] == "timeout"]
        self.assertEqual(len(held), 1 + len(PLATFORMS))
        # tearDown stops the simulator with these still held: it must exit 0 all the same.

    def test_raw_socket_reset(self):
        """The connection really closes without any HTTP answer."""
        port = int(self.base.rsplit(":", 1)[1])
        body = json.dumps({"recipient": {"id": "reset"}, "message": {"text": "x"}}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"POST /graph/v19.0/me/messages?access_token=T HTTP/1.1\r\n"
                      b"Host: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            try:
                data = s.recv(100)
            except ConnectionResetError:
                data = b""
            self.assertEqual(data, b"")


    def _raw_post(self, body, timeout=5):
        """Sends a facebook message on a raw socket; returns (bytes received, how it ended)."""
        port = int(self.base.rsplit(":", 1)[1])
        body = json.dumps(body).encode()
        data, ended = b"", "eof"
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"POST /graph/v19.0/me/messages?access_token=T HTTP/1.1\r\n"
                      b"Host: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    ended = "reset"
                    break
                except socket.timeout:
                    ended = "timeout"
                    break
                if not chunk:
                    break
                data += chunk
        return data, ended

    def test_midreset(self):
        """A 200 whose Content-Length promises the whole JSON, half of it, then a reset."""
        for text in ("hello", "x-midreset-y"):
            to = "to-midreset" if text == "hello" else "plain"
            data, ended = self._raw_post({"recipient": {"id": to}, "message": {"text": text}})
            self.assertEqual(ended, "reset", data)
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            self.assertEqual(lines[0], "HTTP/1.1 200 OK")
            hdrs = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
            self.assertEqual(hdrs["content-type"], "application/json")
            full = int(hdrs["content-length"])
            self.assertGreater(full, 20)
            self.assertEqual(len(body), full // 2)
            self.assertTrue(body.startswith(b'{"'), body)
        # Through an HTTP client, on every platform: the answer fails while the body is read.
        for platform in PLATFORMS:
            with self.subTest(platform=platform):
                t0 = time.monotonic()
                with self.assertRaises((OSError, http.client.HTTPException)):
                    self.send(platform, "to-midreset", timeout=5)
                self.assertLess(time.monotonic() - t0, 4)
        self.assertEqual(self.get("/_sim/health").status, 200)
        # "reset" inside "midreset" is not reset; a reset elsewhere still is (it comes first).
        data, ended = self._raw_post({"recipient": {"id": "a-reset-b-midreset"},
                                      "message": {"text": "x"}})
        self.assertEqual(data, b"")
        self.assertIn(ended, ("eof", "reset"))  # reset: a FIN, then the RST
        faults = [e["fault"] for e in self.log()["requests"] if e["kind"] in ("messages", "send")]
        self.assertEqual(faults, ["midreset"] * (2 + len(PLATFORMS)) + ["reset"])
        self._wait_in_flight(0)

    def _rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def test_huge(self):
        """200, application/json, 50 MiB: the platform's own answer after 50 MiB of padding,
        served from one static block (the simulator's memory does not grow by the body)."""
        rss0 = self._rss_kib()
        size = 50 * 1024 * 1024
        for platform in PLATFORMS:
            with self.subTest(platform=platform):
                to = "to-huge" if platform != "whatsapp-cloud" else "852huge"
                r = self.send(platform, to, timeout=60)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.headers["Content-Type"], "application/json")
                self.assertEqual(int(r.headers["Content-Length"]), size)
                self.assertEqual(len(r.body), size)
                self.assertTrue(r.body.startswith(b" " * 1024))
                self.assert_success(platform, r, to)  # valid JSON: whitespace, then the answer
        # Several at once, read slowly: the simulator must not copy the body per client.
        port = int(self.base.rsplit(":", 1)[1])
        body = b'{"recipient":{"id":"huge"},"message":{"text":"x"}}'
        socks = []
        for _ in range(6):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /graph/v19.0/me/messages?access_token=T HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            s.recv(4096)
            socks.append(s)
        time.sleep(0.3)
        grown_mib = (self._rss_kib() - rss0) / 1024
        for s in socks:
            s.close()
        self.assertLess(grown_mib, 20, "the simulator grew by %.1f MiB" % grown_mib)
        self.assertEqual(self.get("/_sim/health").status, 200)
        faults = [e["fault"] for e in self.log()["requests"] if e["kind"] in ("messages", "send")]
        self.assertEqual(faults, ["huge"] * (len(PLATFORMS) + 6))
        # Word order: huge comes after timeout, before slow<N>.
        r = self.send("slack", "C-huge-slow100", timeout=60)
        self.assertEqual(len(r.body), size)
        self.assertEqual(self.log()["requests"][-1]["fault"], "huge")
        self._wait_in_flight(0)

class TestRecord(SimTestCase):
    def test_log_order_since_and_reset(self):
        for i in range(5):
            self.send("slack", "C%d" % i)
        log = self.log()
        seqs = [e["seq"] for e in log["requests"]]
        self.assertEqual(len(seqs), 5)
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + 5)))
        self.assertEqual([e["recipient"] for e in log["requests"]],
                         ["C%d" % i for i in range(5)])
        self.assertEqual(log["next"], seqs[-1] + 1)
        part = self.log(seqs[2])
        self.assertEqual([e["seq"] for e in part["requests"]], seqs[2:])
        self.assertEqual(self.log(log["next"])["requests"], [])

        st = self.stats()
        self.assertEqual(st["total"], 5)
        self.assertEqual(st["by_platform"]["slack"], 5)
        self.assertEqual(st["by_kind"]["messages"], 5)
        self.assertGreaterEqual(st["uptime_ms"], 0)
        self.assertEqual(st["in_flight"], 0)

        self.assertEqual(self.post("/_sim/reset").json(), {"ok": True})
        self.assertEqual(self.log()["requests"], [])
        self.assertEqual(self.stats()["total"], 0)
        self.send("teamwork", "u")
        after = self.log(log["next"])
        self.assertEqual(len(after["requests"]), 1)
        self.assertGreaterEqual(after["requests"][0]["seq"], log["next"])

    def test_log_under_concurrency(self):
        def worker(n):
            for i in range(25):
                self.send("facebook", "w%d-%d" % (n, i))
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        reqs = self.log()["requests"]
        self.assertEqual(len(reqs), 100)
        seqs = [e["seq"] for e in reqs]
        self.assertEqual(seqs, sorted(seqs))
        self.assertEqual(len(set(seqs)), 100)
        for n in range(4):  # each client's own order is kept
            mine = [e["recipient"] for e in reqs if e["recipient"].startswith("w%d-" % n)]
            self.assertEqual(mine, ["w%d-%d" % (n, i) for i in range(25)])

    def test_latency_config(self):
        r = self.post("/_sim/config", {"latency_ms": 300})
        self.assertEqual(r.json(), {"latency_ms": 300})
        for platform in PLATFORMS:
            with self.subTest(platform=platform):
                r = self.send(platform, "lat")
                self.assertGreaterEqual(r.elapsed, 0.29)
                self.assert_success(platform, r, "lat")
        r = self.get("/_sim/health")
        self.assertLess(r.elapsed, 0.25, "control endpoints are not delayed")
        self.assertEqual(self.post("/_sim/config", {"latency_ms": -1}).status, 400)
        self.post("/_sim/config", {"latency_ms": 0})
        r = self.send("facebook", "fast")
        self.assertLess(r.elapsed, 0.25)


class TestOptions(unittest.TestCase):
    def test_latency_option_and_log_max_zero(self):
        proc, base, tmp = start_sim("--latency-ms", "200", "--log-max", "0")
        try:
            t0 = time.monotonic()
            urllib.request.urlopen(urllib.request.Request(
                base + "/slack/api/chat.postMessage", method="POST",
                data=b'{"channel":"C","text":"x"}',
                headers={"Authorization": "Bearer t"}), timeout=10).read()
            self.assertGreaterEqual(time.monotonic() - t0, 0.19)
            with urllib.request.urlopen(base + "/_sim/log?since=0", timeout=10) as r:
                self.assertEqual(json.loads(r.read())["requests"], [])
            with urllib.request.urlopen(base + "/_sim/stats", timeout=10) as r:
                st = json.loads(r.read())
            self.assertEqual(st["total"], 1)
            self.assertEqual(st["by_platform"]["slack"], 1)
        finally:
            self.assertEqual(stop_sim(proc), 0)
            tmp.cleanup()

    def test_log_max_keeps_the_newest(self):
        proc, base, tmp = start_sim("--log-max", "3", "--threads", "1")
        try:
            for i in range(5):
                urllib.request.urlopen(urllib.request.Request(
                    base + "/hook/echo?i=%d" % i, method="POST", data=b"{}"), timeout=10).read()
            with urllib.request.urlopen(base + "/_sim/log?since=0", timeout=10) as r:
                log = json.loads(r.read())
            self.assertEqual([e["query"] for e in log["requests"]], ["i=2", "i=3", "i=4"])
            self.assertEqual(log["next"], log["requests"][-1]["seq"] + 1)
        finally:
            self.assertEqual(stop_sim(proc), 0)
            tmp.cleanup()

    def test_bad_options(self):
        for args in (["--threads", "0"], ["--listen", "nohost"], ["--bogus"]):
            r = subprocess.run([SIM, *args], capture_output=True, timeout=10)
            self.assertNotEqual(r.returncode, 0, args)
        r = subprocess.run([SIM, "--help"], capture_output=True, timeout=10)
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"--latency-ms", r.stdout)


class TestMediaAndHooks(SimTestCase):
    def test_media(self):
        r = self.get("/media/cat.png")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers["Content-Type"], "image/png")
        self.assertTrue(r.body.startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertTrue(50 <= len(r.body) <= 200)
        self.assertEqual(r.body[12:16], b"IHDR")

        req = urllib.request.Request(self.base + "/media/big.png")
        with urllib.request.urlopen(req, timeout=60) as resp:
            self.assertEqual(resp.headers["Content-Type"], "image/png")
            self.assertEqual(int(resp.headers["Content-Length"]), 50 * 1024 * 1024)
            first = resp.read(8)
            total = len(first)
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    break
                total += len(chunk)
        self.assertEqual(first, b"\x89PNG\r\n\x1a\n")
        self.assertEqual(total, 50 * 1024 * 1024)

        r = self.get("/media/page.html")
        self.assertEqual(r.status, 200)
        self.assertTrue(r.headers["Content-Type"].startswith("text/html"))
        self.assertIn(b"<html>", r.body)

        target = "http://example.invalid/a b.png?x=1&y=2"
        r = self.get("/media/redirect?to=" + urllib.parse.quote(target, safe=""))
        self.assertEqual(r.status, 302)
        self.assertEqual(r.headers["Location"], target)
        self.assertEqual(self.get("/media/redirect").status, 400)
        self.assertEqual(self.log()["requests"], [], "media is not recorded")

    def test_hooks(self):
        r = self.post("/hook/echo?a=1&b=x%20y", {"event": "delivered", "n": [1, 2]})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json(), {"ok": True, "method": "POST", "query": "a=1&b=x%20y",
                                    "body": {"event": "delivered", "n": [1, 2]}})
        r = self.get("/hook/echo")
        self.assertEqual(r.json(), {"ok": True, "method": "GET", "query": "", "body": None})
        for code in (200, 201, 404, 500, 503):
            r = self.post("/hook/status/%d" % code, {})
            self.assertEqual((r.status, r.json()), (code, {"status": code}))
        r = self.post("/hook/slow/300", {})
        self.assertEqual(r.json(), {"ok": True})
        self.assertGreaterEqual(r.elapsed, 0.29)
        r = self.get("/hook/text")
        self.assertEqual((r.status, r.body), (200, b"hello"))
        self.assertTrue(r.headers["Content-Type"].startswith("text/plain"))

        entries = self.log()["requests"]
        self.assertEqual(len(entries), 9)
        self.assertTrue(all(e["platform"] == "hook" and e["kind"] == "webhook"
                            for e in entries))
        self.assertEqual(entries[0]["body"], {"event": "delivered", "n": [1, 2]})
        self.assertEqual(entries[0]["query"], "a=1&b=x%20y")
        self.assertEqual(self.stats()["by_platform"]["hook"], 9)


if __name__ == "__main__":
    unittest.main(verbosity=2)
