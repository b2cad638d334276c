"""botgatectl: --help everywhere, tokens stored only as hashes, records validated before they
are written, get printing records with every secret masked, list by SCAN (every master of a
Redis Cluster too), get and delete by label or id, getopt_long options."""
import hashlib
import json
import os
import subprocess
import unittest

from harness import (BIN, CLUSTER, StackTest, cloud_channel, facebook_channel, whatsapp_channel,
                     member)


class Ctl(StackTest):
    stack_args = {"start_gateway": False}

    def test_help_on_every_command(self):
        for args in [["--help"], ["-h"], ["help"], ["token", "--help"], ["token", "-h"],
                     ["token", "create", "--help"], ["token", "revoke", "--help"],
                     ["channel", "put", "--help"], ["member", "put", "--help"],
                     ["tree", "import", "--help"], ["tree", "get", "--help"], ["get", "--help"]]:
            with self.subTest(args=args):
                r = self.s.ctl(*args, check=False)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("usage", r.stdout)
        for group in ["token", "channel", "member", "tree"]:
            want = self.s.ctl(group, "--help").stdout
            for verb in ["list", "get", "delete"]:
                self.assertIn("botgatectl %s %s" % (group, verb), want)
            for args in [["help", group], [group, "help"], ["help", group, "list"],
                         [group, "list", "--help"], [group, "delete", "-h"],
                         ["-h", group, "get"]]:
                with self.subTest(args=args):
                    r = self.s.ctl(*args, check=False)
                    self.assertEqual((r.returncode, r.stdout, r.stderr), (0, want, ""))
        self.assertIn("subscription add", self.s.ctl("--help").stdout)

    def test_unknown_command_fails(self):
        r = self.s.ctl("frobnicate", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command frobnicate", r.stderr)
        for args, message in [(["help", "frobnicate"], "no command frobnicate"),
                              (["token", "frob"], "unknown command token frob"),
                              (["channel"], "channel needs a subcommand")]:
            with self.subTest(args=args):
                r = self.s.ctl(*args, check=False)
                self.assertEqual(r.returncode, 2)
                self.assertIn(message, r.stderr)
        r = self.s.ctl(check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage", r.stdout)

    def test_options_take_every_form(self):
        """getopt_long: --name=value, --name value, short flags, before or after the command
        and its operands; unknown options, missing values and options of another command are
        refused by name, with status 2, before anything is written."""
        forms = [["--app=F1", "--scope=bot:admin", "--label=f1"],
                 ["--app", "F2", "--scope", "bot:admin", "--label", "f2"],
                 ["-a", "F3", "-s", "bot:admin", "-l", "f3", "-e", "1d"],
                 ["-aF4", "-sbot:admin", "-lf4"]]
        for i, args in enumerate(forms):
            with self.subTest(args=args):
                token = self.s.ctl("token", "create", *args).stdout.strip()
                digest = hashlib.sha256(token.encode()).hexdigest()
                rec = json.loads(self.s.redis("GET", "botgate:token:" + digest))
                self.assertEqual((rec["app"], rec["label"]), ("F%d" % (i + 1), "f%d" % (i + 1)))
        # the options before the command, the operands before the options
        self.s.put("channel", facebook_channel("opt-c", "F1"))
        self.assertEqual(json.loads(self.s.ctl("--json", "channel", "get", "opt-c").stdout)["_id"],
                         "opt-c")
        self.assertEqual(json.loads(self.s.ctl("channel", "get", "opt-c", "-j").stdout)["_id"],
                         "opt-c")
        before = sorted(self.s.redis("KEYS", "*"))
        for args, message in [
                (["token", "create", "--app", "A", "--scope", "bot:admin", "--frob"],
                 "unknown option --frob"),
                (["token", "create", "--app", "A", "--scope", "bot:admin", "--frob=1"],
                 "unknown option --frob"),
                (["token", "create", "--app", "A", "--scope", "bot:admin", "-Z"],
                 "unknown option -Z"),
                (["token", "create", "--scope", "bot:admin", "--app"], "option --app needs a value"),
                (["token", "create", "--scope", "bot:admin", "-a"], "option --app needs a value"),
                (["channel", "list", "--scope", "bot:admin"],
                 "--scope is not an option of channel list"),
                (["channel", "put", "-", "--label", "x"], "--label is not an option of channel put"),
                (["channel", "get"], "channel get takes CHANNEL_ID"),
                (["member", "get", "c"], "member get takes CHANNEL_ID MEMBER_ID"),
                (["tree", "list", "extra"], "tree list takes no operand")]:
            with self.subTest(args=args):
                r = self.s.ctl(*args, input="{}", check=False)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertEqual(r.stdout, "")
        self.assertEqual(sorted(self.s.redis("KEYS", "*")), before)

    def test_missing_file_is_named(self):
        missing = os.path.join(self.s.dir, "no-such-channel.json")
        for kind, verb in [("channel", "put"), ("member", "put"), ("tree", "import")]:
            with self.subTest(kind=kind):
                r = self.s.ctl(kind, verb, missing, check=False)
                self.assertEqual(r.returncode, 1)
                self.assertIn("cannot read %s: No such file or directory" % missing, r.stderr)
        r = self.s.ctl("channel", "put", self.s.dir, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot read %s: it is a directory" % self.s.dir, r.stderr)
        bad = os.path.join(self.s.dir, "bad.json")
        with open(bad, "w") as f:
            f.write('{"_id": "x",\n  oops}')
        r = self.s.ctl("channel", "put", bad, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn(bad + ": line 2:", r.stderr)
        r = self.s.ctl("channel", "put", "-", input="[1]", check=False)
        self.assertIn("standard input: must hold one JSON object", r.stderr)

    def test_redis_url_option_for_every_command(self):
        """--redis-url (and -u) wins over BOTGATE_REDIS_URL, on every command; a URL that does
        not parse or a Redis that does not answer is named."""
        env = dict(os.environ, BOTGATE_REDIS_URL="redis://127.0.0.1:1/0")
        env.pop("BOTGATE_REDIS_CLUSTER", None)
        ctl = os.path.join(BIN, "botgatectl")
        url = "redis://127.0.0.1:%d/0" % self.s.redis_port

        def run(*args, input=None):
            return subprocess.run([ctl] + list(args), env=env, input=input, text=True,
                                  capture_output=True, timeout=30)
        r = run("channel", "list")
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot connect to Redis", r.stderr)
        if CLUSTER:
            self.skipTest("the rest needs one server (a cluster takes BOTGATE_REDIS_CLUSTER)")
        r = run("--redis-url", url, "channel", "put", "-",
                input=json.dumps(facebook_channel("url-c", "U")))
        self.assertEqual(r.returncode, 0, r.stderr)
        for args in [["channel", "list", "--redis-url=" + url], ["-u", url, "channel", "list"],
                     ["channel", "get", "url-c", "-u", url], ["get", "channel", "url-c", "-u", url]]:
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("url-c", r.stdout)
        r = run("-u", url, "token", "create", "--app", "U", "--scope", "bot:admin", "-l", "u1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("u1", run("-u", url, "token", "list").stdout)
        self.assertEqual(run("-u", url, "token", "delete", "u1").returncode, 0)
        r = run("-u", "http://x", "channel", "list")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--redis-url:", r.stderr)

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
        self.s.put("channel", facebook_channel("chx", "A"))
        self.s.put("member", member("m\u00e9", "chx", "A", "psid-x"))

    def test_member_put_writes_member_and_recipient(self):
        self.s.put("channel", facebook_channel("chm", "A"))
        self.s.put("channel", whatsapp_channel("chw", "A", "http://x/wa"))
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

    def test_channel_put_refuses_unknown_types(self):
        rec = {"_id": "c-type", "app": "A", "type": "carrier-pigeon", "info": {}}
        r = self.s.ctl("channel", "put", "-", input=json.dumps(rec), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("standard input: type carrier-pigeon is not a channel type botgate knows "
                      "(facebook, whatsapp, whatsapp-cloud, slack, wechat, teamwork)", r.stderr)
        self.assertIsNone(self.s.redis("GET", "botgate:channel:{c-type}"))
        for t in ["facebook", "whatsapp", "whatsapp-cloud", "slack", "wechat", "teamwork"]:
            self.s.put("channel", dict(rec, type=t))

    def test_member_put_needs_its_channel_and_fills_botmeta(self):
        """A member is refused when its channel is not stored or is another app's, or when a
        field has a type botgate cannot use; what botgate fills in for a member it creates is
        filled in the same way (botMeta's fields one by one), and app and platform come from
        the channel."""
        r = self.s.ctl("member", "put", "-", input=json.dumps(member("mv", "ch-none", "A", "p")),
                       check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("standard input: channel ch-none does not exist: store it first "
                      "(channel put)", r.stderr)
        self.s.put("channel", facebook_channel("ch-v", "A"))
        bad = [({"app": "B"}, "app B is not the app of channel ch-v (A)"),
               ({"botMeta": []}, "botMeta must be an object"),
               ({"botMeta": {"subscribed": "yes"}}, "botMeta.subscribed must be true or false"),
               ({"botMeta": {"liveChat": 1}}, "botMeta.liveChat must be true or false"),
               ({"botMeta": {"tree": 5}}, "botMeta.tree must be a string or null"),
               ({"botMeta": {"tempData": "x"}}, "botMeta.tempData must be an object"),
               ({"tags": "vip"}, "tags must be an array"),
               ({"tags": ["vip", 3]}, "tags[1] must be a string"),
               ({"meta": []}, "meta must be an object"),
               ({"createdAt": "today"}, "createdAt must be an integer")]
        for over, message in bad:
            with self.subTest(over=over):
                rec = dict({"_id": "mv", "channel": "ch-v", "externalId": "psid-v"}, **over)
                r = self.s.ctl("member", "put", "-", input=json.dumps(rec), check=False)
                self.assertEqual(r.returncode, 1)
                self.assertIn("standard input: " + message, r.stderr)
        self.assertIsNone(self.s.redis("GET", "botgate:member:{ch-v}:mv"))
        self.assertIsNone(self.s.redis("GET", "botgate:recipient:{ch-v}:psid-v"))
        # the least a member needs: _id, channel, externalId
        self.s.put("member", {"_id": "mv", "channel": "ch-v", "externalId": "psid-v",
                              "botMeta": {"tree": "T9", "tempData": {"k": 1}}})
        rec = json.loads(self.s.redis("GET", "botgate:member:{ch-v}:mv"))
        self.assertEqual(rec["botMeta"], {"tree": "T9", "nodeCompositeId": None,
                                          "liveChat": False, "subscribed": True,
                                          "tempData": {"k": 1}})
        self.assertEqual((rec["app"], rec["platform"], rec["tags"], rec["meta"], rec["locale"]),
                         ("A", "facebook", [], {}, "en"))
        self.assertGreater(rec["createdAt"], 1700000000000)
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{ch-v}:psid-v"), "mv")
        # a whole record is stored as it is
        full = member("mw", "ch-v", "A", "psid-w", firstName="Ada")
        self.s.put("member", full)
        self.assertEqual(json.loads(self.s.redis("GET", "botgate:member:{ch-v}:mw")), full)

    def test_tokens_by_label(self):
        """token list shows hashes and labels, never a token; get and delete find a token by
        label (narrowed by --app) or hash, and refuse a label that names several."""
        t1 = self.s.ctl("token", "create", "-a", "LA", "-s", "bot:admin", "-l", "crm",
                        "-e", "30d", "-c", "c1").stdout.strip()
        t2 = self.s.ctl("token", "create", "-a", "LB", "-s", "bot:sendResponses", "-l",
                        "crm").stdout.strip()
        h1, h2 = (hashlib.sha256(t.encode()).hexdigest() for t in (t1, t2))
        out = self.s.ctl("token", "list").stdout
        self.assertEqual(out.splitlines()[0], "HASH\tAPP\tLABEL\tSCOPES\tEXPIRES\tCHANNELS")
        self.assertIn("%s\tLA\tcrm\tbot:admin\t20" % h1, out)
        self.assertIn("%s\tLB\tcrm\tbot:sendResponses\tnever\tall" % h2, out)
        self.assertNotIn(t1, out)
        self.assertNotIn(t2, out)
        listed = json.loads(self.s.ctl("token", "list", "--app", "LA", "--json").stdout)
        self.assertEqual([(t["hash"], t["label"], t["channels"]) for t in listed],
                         [(h1, "crm", ["c1"])])
        r = self.s.ctl("token", "get", "crm", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("2 tokens are labelled crm; choose one with --hash", r.stderr)
        self.assertIn(h1, r.stderr)
        self.assertEqual(r.stdout, "")
        got = json.loads(self.s.ctl("token", "get", "crm", "--app=LB", "--json").stdout)
        self.assertEqual((got["hash"], got["app"]), (h2, "LB"))
        self.assertEqual(json.loads(self.s.ctl("token", "get", "-H", h1).stdout)["app"], "LA")
        self.assertEqual(json.loads(self.s.ctl("get", "token", h1).stdout)["app"], "LA")
        for args, message in [(["token", "get", "nolabel"], "no token is labelled nolabel"),
                              (["token", "get", "crm", "-a", "LC"],
                               "no token of app LC is labelled crm"),
                              (["token", "get", "-H", "abc"], "--hash takes the 64 lower-case"),
                              (["token", "get", "-H", "0" * 64], "no token has the hash"),
                              (["token", "get", "crm", "-H", h1], "token get takes LABEL or --hash"),
                              (["token", "get", ""], "the label must not be empty"),
                              (["token", "delete", "crm"], "2 tokens are labelled crm")]:
            with self.subTest(args=args):
                r = self.s.ctl(*args, check=False)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(message, r.stderr)
        self.assertIsNotNone(self.s.redis("GET", "botgate:token:" + h1))
        r = self.s.ctl("token", "delete", "crm", "--app", "LA")
        self.assertIn("token deleted", r.stderr)
        self.assertIsNone(self.s.redis("GET", "botgate:token:" + h1))
        self.s.ctl("token", "delete", "crm")  # the only one left
        self.assertIsNone(self.s.redis("GET", "botgate:token:" + h2))
        r = self.s.ctl("token", "delete", "--hash", h2, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no token has the hash", r.stderr)

    def test_channel_list_get_delete(self):
        fb = facebook_channel("ld-fb", "LD", name="Support\tpage")
        self.s.put("channel", fb)
        self.s.put("channel", cloud_channel("ld-cl", "LD", on=False))
        self.s.put("channel", facebook_channel("ld-other", "LE"))
        out = self.s.ctl("channel", "list", "--app", "LD").stdout.splitlines()
        self.assertEqual(out[0], "ID\tAPP\tTYPE\tON\tNAME")
        self.assertEqual(sorted(out[1:]), ["ld-cl\tLD\twhatsapp-cloud\toff\t-",
                                           "ld-fb\tLD\tfacebook\ton\tSupport page"])
        listed = json.loads(self.s.ctl("channel", "list", "-a", "LD", "-j").stdout)
        self.assertEqual(sorted(c["_id"] for c in listed), ["ld-cl", "ld-fb"])
        text = json.dumps(listed)
        self.assertNotIn(fb["info"]["accessToken"], text)
        self.assertIn('"****"', text)
        got = self.s.ctl("channel", "get", "ld-fb", "--json").stdout
        self.assertEqual(got.count("\n"), 1)
        self.assertEqual(json.loads(got)["info"]["accessToken"], "****")
        self.assertEqual(json.loads(got), json.loads(self.s.ctl("get", "channel", "ld-fb").stdout))
        self.s.put("member", member("ld-m", "ld-fb", "LD", "psid-ld"))
        r = self.s.ctl("channel", "delete", "ld-fb")
        self.assertIn("channel ld-fb deleted", r.stderr)
        self.assertIsNone(self.s.redis("GET", "botgate:channel:{ld-fb}"))
        self.assertIsNotNone(self.s.redis("GET", "botgate:member:{ld-fb}:ld-m"))  # members stay
        for args in [["channel", "delete", "ld-fb"], ["channel", "get", "ld-fb"]]:
            r = self.s.ctl(*args, check=False)
            self.assertEqual(r.returncode, 1)
            self.assertIn("no channel ld-fb", r.stderr)

    def test_member_list_get_delete(self):
        self.s.put("channel", facebook_channel("lm-fb", "LM"))
        self.s.put("channel", cloud_channel("lm-cl", "LM"))
        self.s.put("member", member("m1", "lm-fb", "LM", "psid-lm1"))
        self.s.put("member", member("m2", "lm-fb", "LM", "psid-lm2",
                                    botMeta={"tree": "T1", "nodeCompositeId": "N1"}))
        self.s.put("member", member("w1", "lm-cl", "LM", "+852 9000-0001",
                                    platform="whatsapp-cloud"))
        out = self.s.ctl("member", "list", "lm-fb").stdout.splitlines()
        self.assertEqual(out[0], "CHANNEL\tID\tEXTERNALID\tPLATFORM\tTREE\tNODE")
        self.assertEqual(sorted(out[1:]), ["lm-fb\tm1\tpsid-lm1\tfacebook\t-\t-",
                                           "lm-fb\tm2\tpsid-lm2\tfacebook\tT1\tN1"])
        every = json.loads(self.s.ctl("member", "list", "--json").stdout)
        self.assertTrue({("lm-fb", "m1"), ("lm-fb", "m2"), ("lm-cl", "w1")} <=
                        {(m["channel"], m["_id"]) for m in every})
        self.assertEqual(json.loads(self.s.ctl("member", "list", "lm-none", "-j").stdout), [])
        self.assertEqual(json.loads(self.s.ctl("member", "get", "lm-fb", "m2", "-j").stdout)
                         ["botMeta"]["tree"], "T1")
        # delete takes the recipient key with it (the normalised number on whatsapp kinds)
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{lm-cl}:85290000001"), "w1")
        self.assertIn("member w1 of channel lm-cl deleted",
                      self.s.ctl("member", "delete", "lm-cl", "w1").stderr)
        self.assertIsNone(self.s.redis("GET", "botgate:member:{lm-cl}:w1"))
        self.assertIsNone(self.s.redis("GET", "botgate:recipient:{lm-cl}:85290000001"))
        # a recipient key that leads to another member stays
        self.s.redis("SET", "botgate:recipient:{lm-fb}:psid-lm1", "m9")
        self.s.ctl("member", "delete", "lm-fb", "m1")
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{lm-fb}:psid-lm1"), "m9")
        for args in [["member", "delete", "lm-fb", "m1"], ["member", "get", "lm-fb", "m1"]]:
            r = self.s.ctl(*args, check=False)
            self.assertEqual(r.returncode, 1)
            self.assertIn("no member m1 of channel lm-fb", r.stderr)

    def test_tree_list_get_delete(self):
        tree = {"_id": "LT1", "app": "LT", "name": "Orders",
                "nodes": {"N1": {"response": [{"type": "TEXT", "text": "a"}]},
                          "N2": {"response": [{"type": "TEXT", "text": "b"}]}}}
        self.s.ctl("tree", "import", "-", input=json.dumps(tree))
        self.s.ctl("tree", "import", "-", input=json.dumps(dict(tree, _id="LT2", app="LU")))
        out = self.s.ctl("tree", "list", "--app", "LT").stdout.splitlines()
        self.assertEqual(out, ["ID\tAPP\tNAME\tNODES", "LT1\tLT\tOrders\t2"])
        listed = json.loads(self.s.ctl("tree", "list", "--json").stdout)
        self.assertIn({"_id": "LT2", "app": "LU", "name": "Orders", "nodes": 2}, listed)
        self.assertEqual(json.loads(self.s.ctl("tree", "get", "LT1", "--json").stdout), tree)
        self.assertIn("tree LT1 deleted", self.s.ctl("tree", "delete", "LT1").stderr)
        self.assertEqual(self.s.redis("EXISTS", "botgate:tree:LT1"), 0)
        r = self.s.ctl("tree", "delete", "LT1", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no tree LT1", r.stderr)

    def node_ports(self):
        """The port of every master (the one server when not a cluster)."""
        if not CLUSTER:
            return [self.s.redis_port]
        from harness import Redis
        conn = Redis(self.s.cluster_ports[0])
        try:
            return sorted({r[2][1] for r in conn("CLUSTER", "SLOTS")})
        finally:
            conn.close()

    def command_calls(self, port, name):
        from harness import Redis
        conn = Redis(port)
        try:
            info = conn("INFO", "commandstats")
        finally:
            conn.close()
        for line in info.splitlines():
            if line.startswith("cmdstat_%s:" % name):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def test_list_scans_every_master_never_keys(self):
        """More records than one SCAN batch, spread over every master of a cluster: list
        shows each, with a cursor (SCAN), never KEYS."""
        n = 2500
        for i in range(n):
            self.s.redis("SET", "botgate:channel:{bulk-%d}" % i, json.dumps(
                {"_id": "bulk-%d" % i, "app": "BULK", "type": "facebook", "info": {}}))
        ports = self.node_ports()
        keys = {p: self.command_calls(p, "keys") for p in ports}
        scans = {p: self.command_calls(p, "scan") for p in ports}
        listed = json.loads(self.s.ctl("channel", "list", "--app", "BULK", "--json").stdout)
        self.assertEqual({c["_id"] for c in listed}, {"bulk-%d" % i for i in range(n)})
        text = self.s.ctl("channel", "list", "--app", "BULK").stdout.splitlines()
        self.assertEqual(len(set(text[1:])), n)
        for p in ports:
            self.assertEqual(self.command_calls(p, "keys"), keys[p], "KEYS on %d" % p)
            # each listing scanned every master (one server: 2500 keys take several batches)
            self.assertGreaterEqual(self.command_calls(p, "scan") - scans[p],
                                    2 if CLUSTER else 6, "SCAN on %d" % p)
        for i in range(n):
            self.s.redis("DEL", "botgate:channel:{bulk-%d}" % i)

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
