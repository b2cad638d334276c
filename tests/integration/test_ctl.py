"""botgatectl: --help everywhere, tokens stored only as hashes, records validated before they
are written, get printing records with every secret masked."""
import json
import os
import unittest

from harness import StackTest, facebook_channel, whatsapp_channel, member


class Ctl(StackTest):
    stack_args = {"start_gateway": False}

    def test_help_on_every_command(self):
        for args in [["--help"], ["token", "--help"], ["token", "create", "--help"],
                     ["token", "revoke", "--help"], ["channel", "put", "--help"],
                     ["member", "put", "--help"], ["tree", "import", "--help"],
                     ["tree", "get", "--help"], ["get", "--help"]]:
            with self.subTest(args=args):
                r = self.s.ctl(*args, check=False)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("usage", r.stdout)

    def test_unknown_command_fails(self):
        r = self.s.ctl("frobnicate", check=False)
        self.assertNotEqual(r.returncode, 0)

    def test_token_create_stores_only_the_hash(self):
        r = self.s.ctl("token", "create", "--app", "A", "--scope", "bot:sendResponses",
                       "--scope", "bot:admin", "--label", "crm", "--expires-in", "30d")
        token = r.stdout.strip()
        self.assertRegex(token, r"^bgt_[A-Za-z0-9_-]{40}$")
        self.assertNotIn(token, r.stderr)
        import hashlib
        digest = hashlib.sha256(token.encode()).hexdigest()
        rec = json.loads(self.s.redis("GET", "botgate:token:" + digest))
        self.assertEqual(rec["app"], "A")
        self.assertEqual(rec["scopes"], ["bot:sendResponses", "bot:admin"])
        self.assertEqual(rec["label"], "crm")
        self.assertGreater(rec["expiresAt"], 0)
        for k in self.s.redis("KEYS", "*"):
            self.assertNotIn(token, k)
            self.assertNotIn(token, self.s.redis("GET", k) or "")
        # get token by hash shows the record; revoke removes it
        got = self.s.ctl("get", "token", digest).stdout
        self.assertIn('"app": "A"', got)
        self.s.ctl("token", "revoke", token)
        self.assertIsNone(self.s.redis("GET", "botgate:token:" + digest))
        self.assertNotEqual(self.s.ctl("token", "revoke", token, check=False).returncode, 0)

    def test_token_create_refuses_bad_input(self):
        for args in [["--app", "A"], ["--scope", "bot:admin"],
                     ["--app", "A", "--scope", "root"],
                     ["--app", "A", "--scope", "bot:admin", "--expires-in", "soon"]]:
            with self.subTest(args=args):
                r = self.s.ctl("token", "create", *args, check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertEqual(r.stdout, "")

    def test_app_ids_refuse_colons_and_controls(self):
        """Issue 27: app "A:sendResponses:B" shared app "A"'s Idempotency-Key records. App
        ids with ':' or a control character are refused with a clear error by every command
        that writes one, and nothing is written."""
        before = sorted(self.s.redis("KEYS", "*"))
        bad = ["A:sendResponses:B", ":", "A\u0001", "A\nB", "A\u007f"]
        for app in bad:
            with self.subTest(token_app=app):
                r = self.s.ctl("token", "create", "--app", app, "--scope", "bot:admin",
                               check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertEqual(r.stdout, "")
                self.assertIn("--app must be", r.stderr)
                self.assertIn("':'", r.stderr)
            with self.subTest(channel_app=app):
                rec = {"_id": "c-app", "app": app, "type": "facebook", "info": {}}
                r = self.s.ctl("channel", "put", "-", input=json.dumps(rec), check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("app must be", r.stderr)
            with self.subTest(tree_app=app):
                tree = {"_id": "T-app", "app": app, "name": "t",
                        "nodes": {"N": {"response": [{"type": "TEXT", "text": "x"}]}}}
                r = self.s.ctl("tree", "import", "-", input=json.dumps(tree), check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("app must be", r.stderr)
        self.assertEqual(sorted(self.s.redis("KEYS", "*")), before)
        # what stays allowed: spaces, braces, non-ASCII
        for app in ["my app", "a{b}", "\u00e9t\u00e9"]:
            self.assertRegex(self.s.token(app, "bot:admin"), r"^bgt_")

    def test_get_masks_every_secret(self):
        ch = whatsapp_channel("wa-get", "A", "http://x/wa")
        ch["info"].update({"adminAuthToken": "tok-123", "adminAuthTokenExpiry": 99})
        self.s.put("channel", ch)
        fb = facebook_channel("fb-get", "A")
        fb["info"]["nested"] = {"appSecret": "deep-secret"}
        self.s.put("channel", fb)
        out = self.s.ctl("get", "channel", "wa-get").stdout
        rec = json.loads(out)
        self.assertEqual(rec["info"]["adminPassword"], "****")
        self.assertEqual(rec["info"]["adminAuthToken"], "****")
        self.assertEqual(rec["info"]["adminAuthTokenExpiry"], 99)
        self.assertEqual(rec["info"]["adminUsername"], "admin")
        self.assertNotIn("wa-admin-password", out)
        out = self.s.ctl("get", "channel", "fb-get").stdout
        self.assertNotIn("fb-page-token", out)
        self.assertNotIn("deep-secret", out)
        self.assertEqual(json.loads(out)["info"]["pageId"], "1234567890")

    def test_channel_put_validates_before_writing(self):
        bad = [{"app": "A", "type": "facebook", "info": {}},
               {"_id": "x{y}", "app": "A", "type": "facebook", "info": {}},
               {"_id": "c", "type": "facebook", "info": {}},
               {"_id": "c", "app": "A", "info": {}},
               {"_id": "c", "app": "A", "type": "facebook", "info": []},
               {"_id": "c", "app": "A", "type": "facebook", "info": {}, "on": "yes"}]
        for rec in bad:
            with self.subTest(rec=rec):
                r = self.s.ctl("channel", "put", "-", input=json.dumps(rec), check=False)
                self.assertNotEqual(r.returncode, 0)
        self.assertEqual(self.s.redis("KEYS", "botgate:channel:{c}"), [])
        r = self.s.ctl("channel", "put", "-", input="{not json", check=False)
        self.assertNotEqual(r.returncode, 0)

    def test_put_refuses_ids_a_request_could_not_name(self):
        """The ids of channel and member records follow the rules of request ids (controls,
        U+2028/U+2029, braces, 256 bytes): a record stored under another id could never be
        reached through the API."""
        before = sorted(self.s.redis("KEYS", "*"))
        for cid in ["a\u2028b", "a\u2029", "a\u0085b", "a\u0001", "a\u007f", "x" * 257]:
            with self.subTest(channel=cid):
                rec = {"_id": cid, "app": "A", "type": "facebook", "info": {}}
                r = self.s.ctl("channel", "put", "-", input=json.dumps(rec), check=False)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("_id must be", r.stderr)
        for mid, cid in [("m\u2028", "chx"), ("m{1}", "chx"), ("m", "ch\u0085"),
                         ("m", "ch\u2029")]:
            with self.subTest(member=mid, channel=cid):
                rec = member(mid, cid, "A", "psid-x")
                r = self.s.ctl("member", "put", "-", input=json.dumps(rec), check=False)
                self.assertNotEqual(r.returncode, 0)
        self.assertEqual(sorted(self.s.redis("KEYS", "*")), before)
        # the longest id a request may carry is stored
        self.s.put("channel", {"_id": "y" * 256, "app": "A", "type": "facebook", "info": {}})
        self.s.put("member", member("m\u00e9", "chx", "A", "psid-x"))

    def test_member_put_writes_member_and_recipient(self):
        self.s.put("member", member("mp", "chm", "A", "psid-77"))
        self.assertEqual(json.loads(self.s.redis("GET", "botgate:member:{chm}:mp"))["_id"], "mp")
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{chm}:psid-77"), "mp")
        self.s.put("member", member("mw", "chw", "A", "+852 9123-4567", platform="whatsapp"))
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{chw}:85291234567"), "mw")
        path = os.path.join(self.s.dir, "m.json")
        with open(path, "w") as f:
            json.dump(member("mf", "chm", "A", "psid-78"), f)
        self.s.ctl("member", "put", path)
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{chm}:psid-78"), "mf")

    def test_prefix_is_honoured(self):
        import subprocess
        from harness import BIN
        env = dict(os.environ, BOTGATE_REDIS_URL="redis://127.0.0.1:%d/0" % self.s.redis_port,
                   BOTGATE_REDIS_PREFIX="other:")
        r = subprocess.run([os.path.join(BIN, "botgatectl"), "channel", "put", "-"], env=env,
                           input=json.dumps(facebook_channel("pfx", "A")), text=True,
                           capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNotNone(self.s.redis("GET", "other:channel:{pfx}"))
        self.assertIsNone(self.s.redis("GET", "botgate:channel:{pfx}"))


if __name__ == "__main__":
    unittest.main()
