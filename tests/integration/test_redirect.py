"""POST /redirectMemberToNode: the three flags and their defaults, meta in templates, pre-action
changes seen by the same node and later nodes, redirect chains across trees, locale choice,
the SSRF guard of webhook actions, the concurrent write-back race, every error, and
`botgatectl tree import/get`; against real redis-server, the simulator and botgate (contract.md
sections 3-6). Webhook actions against the simulator: test_redirect_webhooks.py."""
import itertools
import json
import os
import socket
import threading
import time
import unittest

from harness import StackTest, facebook_channel, cloud_channel, member

APP = "app-redir"
OTHER = "app-redir-other"
PAGE_ID = 1234567890  # facebook_channel's info.pageId, all digits: a JSON number
ROUTE = "/redirectMemberToNode"
UNAUTHORIZED = {"ok": 0, "err": "User is not authorized", "error": "User is not authorized"}

# A value that must reach the platform byte for byte: quotes, a backslash, newlines, a tab,
# non-ASCII text, an astral-plane character, markup, and a placeholder that must not expand again.
TRICKY = 'say "hi"\nline2\r\n\ttab \\ back \u2014 \u00fcn\u00efc\u00f8d\u00e9 \u4e2d\u6587 ' \
         '\U0001F600 </x> {{member.firstName}} \'q\''

_seq = itertools.count()

# Rounds of the race tests: one round of 20 concurrent redirects shows a lost update most of
# the time, not always; ten make the outcome certain in practice.
RACE_ROUNDS = 10


def text(t):
    return {"type": "TEXT", "text": t}


def tree(tid, app, nodes, name=None):
    return {"_id": tid, "app": app, "name": name or ("tree " + tid), "nodes": nodes}


def main_trees():
    """The trees of the main class (no webhook reaches the simulator there)."""
    t1 = {
        "FLAGS": {
            "name": "flags",
            "preAction": [{"type": "set", "path": "member.meta.pre", "value": "ran-{{agendaMeta.k}}"}],
            "response": [text("flags {{agendaMeta.k}} pre=[{{member.meta.pre}}]")],
            "postAction": [{"type": "addTags", "tags": ["post-{{agendaMeta.k}}"]}],
        },
        "HELLO": {"response": [text("hello {{member.firstName}}")]},
        "META": {"response": [text(
            "order {{agendaMeta.orderId}} for {{member.firstName}} on {{channel.name}} "
            "token=[{{channel.info.accessToken}}][{{channel.info}}] "
            "miss=[{{agendaMeta.nothing.here}}][{{member.meta.none}}][{{nosuchroot.x}}]"
            "[{{agendaMeta.orderId.deeper}}] sp={{ agendaMeta.orderId }}")]},
        "RENDER": {"response": [text("v={{agendaMeta.v}}")]},
        "TYPES": {"response": [text("{{agendaMeta.n}}|{{agendaMeta.f}}|{{agendaMeta.b}}|"
                                    "{{agendaMeta.z}}|{{agendaMeta.o}}|{{agendaMeta.arr.1}}|"
                                    "{{agendaMeta.arr.7}}|{{member.tags.0}}")]},
        "CHAN": {"response": [text("{{channel}}")]},
        "SETS": {
            "preAction": [
                {"type": "set", "path": "member.meta.color", "value": "{{agendaMeta.color}}"},
                {"type": "set", "path": "member.meta.nested.deep",
                 "value": {"x": "{{agendaMeta.color}}", "n": 3}},
                {"type": "set", "path": "member.botMeta.tempData.step", "value": "one"},
                {"type": "set", "path": "member.customLocale", "value": "fr"},
                {"type": "set", "path": "member.firstName", "value": "Grace"},
                {"type": "set", "path": "member.lastName", "value": "Hopper"},
                {"type": "set", "path": "member.botMeta.subscribed", "value": False},
            ],
            "response": [text("{{member.meta.color}}|{{member.meta.nested.deep.x}}|"
                              "{{member.botMeta.tempData.step}}|{{member.customLocale}}|"
                              "{{member.firstName}} {{member.lastName}}|"
                              "{{member.botMeta.subscribed}}")],
            "redirect": {"tree": "T1", "nodeCompositeId": "SETS2"},
        },
        "SETS2": {
            "preAction": [{"type": "set", "path": "member.botMeta.tempData.step2",
                           "value": "after {{member.botMeta.tempData.step}}"}],
            "response": [text("later {{member.meta.color}} {{member.firstName}} "
                              "{{member.botMeta.tempData.step}} {{member.customLocale}} "
                              "{{member.botMeta.tempData.step2}}")],
        },
        "C1": {
            "preAction": [{"type": "addTags", "tags": ["c1pre"]}],
            "response": [text("c1")],
            "postAction": [{"type": "addTags", "tags": ["c1post"]}],
            "redirect": {"tree": "T2", "nodeCompositeId": "C2", "sendResponse": False},
        },
        "C3": {
            "preAction": [{"type": "set", "path": "member.meta.c3pre", "value": "ran"}],
            "response": [text("c3 {{member.meta.c2pre}}")],
            "postAction": [{"type": "addTags", "tags": ["c3post"]}],
        },
        "MISS": {
            "response": [text("before miss")],
            "postAction": [{"type": "addTags", "tags": ["miss-post"]}],
            "redirect": {"tree": "T1", "nodeCompositeId": "NOPE"},
        },
        "MISSTREE": {"response": [text("before missing tree")],
                     "redirect": {"tree": "NOTREE", "nodeCompositeId": "N1"}},
        "MISSOTHER": {"response": [text("before other app")],
                      "redirect": {"tree": "TO", "nodeCompositeId": "N1"}},
        "LOC": {"response": [text("default")],
                "responseByLocale": {"fr": [text("bonjour")], "zh-HK": [text("\u4f60\u597d")]}},
        "LOCPRE": {"preAction": [{"type": "set", "path": "member.customLocale", "value": "zh-HK"}],
                   "response": [text("default")],
                   "responseByLocale": {"fr": [text("bonjour")],
                                        "zh-HK": [text("\u4f60\u597d")]}},
        "MIXED": {"response": [text("before tpl"),
                               {"type": "TEMPLATE", "elementName": "t1", "languageCode": "en",
                                "components": []},
                               text("after tpl")]},
        "FAIL": {"response": [text("ok one"), text("boom fail5xx"), text("ok three")]},
        "TPL": {"response": [{
            "type": "TEMPLATE", "elementName": "order_update", "languageCode": "en_US",
            "components": [
                {"type": "body", "parameters": [
                    {"type": "text", "text": "{{member.firstName}}"},
                    {"type": "text", "text": "{{agendaMeta.orderId}}"},
                    {"type": "text", "text": "[{{agendaMeta.missing}}]"}]},
                {"type": "button", "sub_type": "url", "index": "0",
                 "parameters": [{"type": "text", "text": "track/{{agendaMeta.orderId}}"}]}]}]},
        "BADRENDER": {
            "preAction": [
                {"type": "set", "path": "member.meta.{{agendaMeta.none}}", "value": 1},
                {"type": "set", "path": "member.botMeta.subscribed", "value": "maybe"},
                {"type": "addTags", "tags": ["ok-tag", "{{agendaMeta.none}}"]}],
            "response": [text("{{agendaMeta.none}}"), text("still here")],
        },
        "IMG": {"response": [{"type": "IMAGE", "url": "https://example.com/{{agendaMeta.file}}"}]},
        "LOOP": {"response": [text("loop")], "postAction": [{"type": "addTags", "tags": ["loop"]}],
                 "redirect": {"tree": "T1", "nodeCompositeId": "LOOP"}},
        "RACE": {
            "preAction": [
                {"type": "addTags", "tags": ["{{agendaMeta.tag}}"]},
                {"type": "set", "path": "member.meta.{{agendaMeta.key}}", "value": "{{agendaMeta.i}}"}],
            "response": [text("race {{agendaMeta.i}}")],
        },
        "RACE2": {
            "preAction": [
                {"type": "addTags", "tags": ["{{agendaMeta.tag}}"]},
                {"type": "set", "path": "member.botMeta.tempData.{{agendaMeta.key}}",
                 "value": "{{agendaMeta.i}}"}],
            "response": [text("race2 {{agendaMeta.i}}")],
        },
    }
    t2 = {
        "C2": {
            "preAction": [{"type": "set", "path": "member.meta.c2pre", "value": "yes"}],
            "response": [text("c2 hidden")],
            "postAction": [{"type": "addTags", "tags": ["c2post"]}],
            "redirect": {"tree": "T1", "nodeCompositeId": "C3", "runPreAction": False},
        },
    }
    chain = {}
    for i in range(1, 13):
        node = {"response": [text("L%d" % i)], "postAction": [{"type": "addTags", "tags": ["L%d" % i]}]}
        if i < 12:
            node["redirect"] = {"tree": "TL", "nodeCompositeId": "L%d" % (i + 1)}
        chain["L%d" % i] = node
    other = {"N1": {"response": [text("other app node")],
                    "postAction": [{"type": "addTags", "tags": ["other"]}]}}
    return [tree("T1", APP, t1), tree("T2", APP, t2), tree("TL", APP, chain),
            tree("TO", OTHER, other)]


class RedirectBase(StackTest):
    @classmethod
    def import_tree(cls, t, check=True):
        path = os.path.join(cls.s.dir, "tree-%d.json" % next(_seq))
        with open(path, "w") as f:
            if isinstance(t, str):
                f.write(t)
            else:
                json.dump(t, f)
        return cls.s.ctl("tree", "import", path, check=check)

    def setUp(self):
        self.s.sim_reset()

    # -- requests --
    def redirect(self, body, token=None, **kw):
        return self.s.post(ROUTE, body, token=token if token is not None else self.tok, **kw)

    def go(self, mid, tree_id, node, cid="fb1", meta=None, token=None, **flags):
        body = {"channelId": cid, "memberId": mid,
                "redirect": dict({"tree": tree_id, "nodeCompositeId": node}, **flags)}
        if meta is not None:
            body["meta"] = meta
        return self.redirect(body, token=token)

    # -- members --
    def new_member(self, mid, cid="fb1", ext=None, **over):
        m = member(mid, cid, APP, ext or ("psid-" + mid), **over)
        self.s.put("member", m)
        return m

    def rec(self, mid, cid="fb1"):
        raw = self.s.redis("GET", "botgate:member:{%s}:%s" % (cid, mid))
        return None if raw is None else json.loads(raw)

    # -- simulator --
    def platform_log(self):
        return [r for r in self.s.sim_log() if r["platform"] != "hook"]

    def hook_log(self):
        return [r for r in self.s.sim_log() if r["platform"] == "hook"]

    def texts(self):
        return [r["body"]["message"]["text"] for r in self.platform_log()]

    # -- answers --
    def results(self, ans, mid, send_ok=1, count=None):
        """Checks the answer's shape and returns sendResult.result."""
        self.assertEqual(ans.status, 200, ans)
        j = ans.json
        self.assertEqual(set(j), {"ok", "member", "sendResult"}, ans)
        self.assertEqual(j["ok"], 1)
        self.assertEqual(j["member"], mid)
        self.assertEqual(set(j["sendResult"]), {"ok", "member", "result"}, ans)
        self.assertEqual(j["sendResult"]["ok"], send_ok, ans)
        self.assertEqual(j["sendResult"]["member"], mid)
        res = j["sendResult"]["result"]
        self.assertIsInstance(res, list)
        if count is not None:
            self.assertEqual(len(res), count, ans)
        return res

    def assert_sent(self, el, data, to, before, type_="TEXT", from_=PAGE_ID, mid_prefix="m_"):
        if isinstance(data, str):
            data = {"text": data}
        self.assertEqual(set(el), {"ok", "messageEvent"}, el)
        self.assertEqual(el["ok"], 1)
        ev = el["messageEvent"]
        self.assertEqual(set(ev), {"from", "to", "data", "type", "timestamp", "messageId"}, ev)
        self.assertEqual(ev["from"], from_)
        self.assertEqual(ev["to"], to)
        self.assertEqual(ev["data"], data)
        self.assertEqual(ev["type"], type_)
        self.assertIsInstance(ev["timestamp"], int)
        self.assertGreaterEqual(ev["timestamp"], before)
        self.assertLessEqual(ev["timestamp"], int(time.time() * 1000))
        self.assertTrue(ev["messageId"].startswith(mid_prefix), ev)

    def assert_failed(self, el, code, mentions=None):
        self.assertEqual(el["ok"], 0, el)
        self.assertEqual(set(el["error"]), {"err_code", "err"}, el)
        self.assertEqual(el["error"]["err_code"], code, el)
        self.assertIsInstance(el["error"]["err"], str)
        if mentions:
            self.assertIn(mentions, el["error"]["err"])

    def assert_node_error(self, el, code, mentions=None):
        """An element of an action or a redirect: no messageEvent."""
        self.assertEqual(set(el), {"ok", "error"}, el)
        self.assert_failed(el, code, mentions)

    def assert_position(self, rec, tree_id, node):
        self.assertEqual(rec["botMeta"]["tree"], tree_id)
        self.assertEqual(rec["botMeta"]["nodeCompositeId"], node)


class RedirectApi(RedirectBase):
    # Explicitly off, whatever the environment says: the SSRF guard test relies on it.
    stack_args = {"env": {"BOTGATE_ALLOW_PRIVATE_MEDIA": "0"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.fb1 = facebook_channel("fb1", APP)
        s.put("channel", cls.fb1)
        s.put("channel", facebook_channel("fb-off", APP, on=False))
        s.put("channel", facebook_channel("fb-other", OTHER))
        # written directly, as another system would: botgatectl refuses the unknown type
        s.redis("SET", "botgate:channel:{odd}", json.dumps(
            {"_id": "odd", "app": APP, "type": "carrier-pigeon", "on": True, "info": {}}))
        s.put("channel", cloud_channel("cl1", APP))
        s.put("member", member("m-other", "fb-other", OTHER, "psid-other"))
        s.put("member", member("m-off", "fb-off", APP, "psid-off"))
        s.put("member", member("m-odd", "odd", APP, "odd-1", platform="carrier-pigeon"))
        s.put("member", member("cm1", "cl1", APP, "+852 9123-4567", platform="whatsapp-cloud"))
        for t in main_trees():
            cls.import_tree(t)
        hooks = {"HOOKLOCAL": {
            "preAction": [
                {"type": "webhook", "url": s.sim_url + "/hook/echo", "method": "POST",
                 "body": {"a": "{{member.firstName}}"}, "saveAs": "viaip", "timeoutMs": 2000},
                {"type": "webhook", "url": "http://localhost:%d/hook/echo?x=1" % s.sim_port,
                 "method": "GET", "saveAs": "vianame", "timeoutMs": 2000}],
            "response": [text("after local hooks")],
            "postAction": [{"type": "addTags", "tags": ["hooked"]}]}}
        port = s.sim_port
        hooks["HOOKTRICKS"] = {
            "preAction": [{"type": "webhook", "url": u, "method": "GET", "timeoutMs": 2000}
                          for u in ["http://0.0.0.0:%d/hook/echo" % port,
                                    "http://127.1:%d/hook/echo" % port,
                                    "http://2130706433:%d/hook/echo" % port,
                                    "http://[::ffff:127.0.0.1]:%d/hook/echo" % port,
                                    "http://[::1]:%d/hook/echo" % port]],
            "response": [text("after tricks")]}
        cls.import_tree(tree("TH", APP, hooks))
        cls.tok = s.token(APP, "bot:redirectMemberToNode")
        cls.admin = s.token(APP, "bot:admin")
        cls.api_admin = s.token(APP, "api:admin")
        cls.send_only = s.token(APP, "bot:sendResponses")
        cls.other = s.token(OTHER, "bot:redirectMemberToNode")

    # ---- the three flags ----
    def run_flags(self, mid, flags, k):
        """Redirects a fresh member to FLAGS with flags (a dict, keys may be omitted) and checks
        everything against what the flags (default true) say should have run."""
        orig = self.new_member(mid)
        pre = flags.get("runPreAction", True)
        send = flags.get("sendResponse", True)
        post = flags.get("runPostAction", True)
        before = int(time.time() * 1000)
        ans = self.go(mid, "T1", "FLAGS", meta={"k": k}, **flags)
        after = int(time.time() * 1000)
        expected_text = "flags %s pre=[%s]" % (k, "ran-" + k if pre else "")
        res = self.results(ans, mid, count=1 if send else 0)
        if send:
            self.assert_sent(res[0], expected_text, "psid-" + mid, before)
            log = self.platform_log()
            self.assertEqual(len(log), 1)
            self.assertEqual(log[0]["platform"], "facebook")
            self.assertEqual(log[0]["body"], {"messaging_type": "RESPONSE",
                                              "recipient": {"id": "psid-" + mid},
                                              "message": {"text": expected_text}})
        else:
            self.assertEqual(self.s.sim_log(), [])
        self.assertEqual(ans.json["sendResult"]["result"], res)
        rec = self.rec(mid)
        expected = json.loads(json.dumps(orig))
        expected["meta"] = {"pre": "ran-" + k} if pre else {}
        expected["tags"] = ["post-" + k] if post else []
        expected["botMeta"]["tree"] = "T1"
        expected["botMeta"]["nodeCompositeId"] = "FLAGS"
        self.assertGreaterEqual(rec["updatedAt"], before)
        self.assertLessEqual(rec["updatedAt"], after)
        expected["updatedAt"] = rec["updatedAt"]
        self.assertEqual(rec, expected)

    def test_status_callback_needs_respond_async(self):
        # as for sendResponses: a synchronous redirect's answer is its status
        self.new_member("mcb")
        body = {"channelId": "fb1", "memberId": "mcb", "statusCallback": "https://example.com/cb",
                "redirect": {"tree": "T1", "nodeCompositeId": "MISS"}}
        self.assert_error(self.redirect(body), 108, mentions="statusCallback")
        self.assertEqual(self.texts(), [])

    def test_flags_all_eight_combinations(self):
        for pre, send, post in itertools.product([True, False], repeat=3):
            k = "c%d%d%d" % (pre, send, post)
            with self.subTest(runPreAction=pre, sendResponse=send, runPostAction=post):
                self.s.sim_reset()
                self.run_flags("mf-" + k, {"runPreAction": pre, "sendResponse": send,
                                           "runPostAction": post}, k)

    def test_flags_each_alone_others_default_true(self):
        cases = [({}, "dall"),
                 ({"runPreAction": False}, "dpre0"), ({"sendResponse": False}, "dsend0"),
                 ({"runPostAction": False}, "dpost0"),
                 ({"runPreAction": True}, "dpre1"), ({"sendResponse": True}, "dsend1"),
                 ({"runPostAction": True}, "dpost1")]
        for flags, k in cases:
            with self.subTest(flags=flags):
                self.s.sim_reset()
                self.run_flags("md-" + k, flags, k)

    def test_flags_do_not_reach_the_nodes_of_a_redirect(self):
        # The request's flags choose for C1 only; C2 runs with the hop's own flags
        # (sendResponse false), C3 with its hop's (runPreAction false).
        self.new_member("mch-f")
        before = int(time.time() * 1000)
        ans = self.go("mch-f", "T1", "C1", runPreAction=False, sendResponse=False,
                      runPostAction=False)
        res = self.results(ans, "mch-f", count=1)
        self.assert_sent(res[0], "c3 yes", "psid-mch-f", before)
        self.assertEqual(self.texts(), ["c3 yes"])
        rec = self.rec("mch-f")
        self.assert_position(rec, "T1", "C3")
        self.assertEqual(rec["tags"], ["c2post", "c3post"])
        self.assertEqual(rec["meta"], {"c2pre": "yes"})

    # ---- meta and templates ----
    def test_meta_member_channel_in_templates(self):
        self.new_member("mmeta")
        before = int(time.time() * 1000)
        ans = self.go("mmeta", "T1", "META", meta={"orderId": "O-1001"})
        res = self.results(ans, "mmeta", count=1)
        expected = ("order O-1001 for Ada on fb fb1 token=[][] miss=[][][][] sp=O-1001")
        self.assert_sent(res[0], expected, "psid-mmeta", before)
        log = self.platform_log()
        self.assertEqual(self.texts(), [expected])
        # the channel's secret reaches the platform only where it belongs (the query string),
        # never in what the node rendered, and never in the answer
        self.assertNotIn("fb-page-token-fb1", json.dumps(log[0]["body"]))
        self.assertNotIn("fb-page-token-fb1", ans.raw)

    def test_channel_renders_without_info(self):
        self.new_member("mchan")
        ans = self.go("mchan", "T1", "CHAN")
        res = self.results(ans, "mchan", count=1)
        shown = json.loads(self.texts()[0])
        stored = json.loads(self.s.redis("GET", "botgate:channel:{fb1}"))
        del stored["info"]
        self.assertEqual(shown, stored)
        self.assertNotIn("fb-page-token-fb1", self.texts()[0])
        self.assertEqual(res[0]["messageEvent"]["data"]["text"], self.texts()[0])

    def test_values_arrive_intact(self):
        self.new_member("mtricky")
        ans = self.go("mtricky", "T1", "RENDER", meta={"v": TRICKY})
        res = self.results(ans, "mtricky", count=1)
        self.assertEqual(self.texts(), ["v=" + TRICKY])
        self.assertEqual(res[0]["messageEvent"]["data"], {"text": "v=" + TRICKY})

    def test_value_types_render(self):
        self.new_member("mtypes", tags=["vip", "x"])
        meta = {"n": 42, "f": 1.5, "b": True, "z": None, "o": {"a": [1, "x"]}, "arr": ["p", "q"]}
        ans = self.go("mtypes", "T1", "TYPES", meta=meta)
        self.results(ans, "mtypes", count=1)
        self.assertEqual(self.texts(), ['42|1.5|true||{"a":[1,"x"]}|q||vip'])

    def test_template_components_on_whatsapp_cloud(self):
        before = int(time.time() * 1000)
        ans = self.go("cm1", "T1", "TPL", cid="cl1", meta={"orderId": "W-77 \"x\""})
        res = self.results(ans, "cm1", count=1)
        comps = [{"type": "body", "parameters": [
                     {"type": "text", "text": "Ada"},
                     {"type": "text", "text": "W-77 \"x\""},
                     {"type": "text", "text": "[]"}]},
                 {"type": "button", "sub_type": "url", "index": "0",
                  "parameters": [{"type": "text", "text": "track/W-77 \"x\""}]}]
        self.assert_sent(res[0], {"elementName": "order_update", "languageCode": "en_US",
                                  "components": comps},
                         85291234567, before, type_="TEMPLATE", from_=1055550000,
                         mid_prefix="wamid.")
        log = self.platform_log()
        self.assertEqual(len(log), 1)
        self.assertEqual(log[0]["platform"], "whatsapp-cloud")
        body = log[0]["body"]
        self.assertEqual(body["to"], "85291234567")
        self.assertEqual(body["template"]["name"], "order_update")
        self.assertEqual(body["template"]["language"], {"code": "en_US"})
        self.assertEqual(body["template"]["components"], comps)
        self.assertNotIn("cloud-token-cl1", json.dumps(body))
        self.assertNotIn("cloud-token-cl1", ans.raw)
        self.assert_position(self.rec("cm1", "cl1"), "T1", "TPL")

    # ---- pre-action changes ----
    def test_pre_action_set_seen_by_same_node_and_later_nodes(self):
        orig = self.new_member("msets")
        before = int(time.time() * 1000)
        ans = self.go("msets", "T1", "SETS", meta={"color": TRICKY})
        res = self.results(ans, "msets", count=2)
        first = "%s|%s|one|fr|Grace Hopper|false" % (TRICKY, TRICKY)
        later = "later %s Grace one fr after one" % TRICKY
        self.assert_sent(res[0], first, "psid-msets", before)
        self.assert_sent(res[1], later, "psid-msets", before)
        self.assertEqual(self.texts(), [first, later])
        rec = self.rec("msets")
        self.assertEqual(rec["meta"], {"color": TRICKY, "nested": {"deep": {"x": TRICKY, "n": 3}}})
        self.assertEqual(rec["botMeta"]["tempData"], {"step": "one", "step2": "after one"})
        self.assertEqual(rec["customLocale"], "fr")
        self.assertEqual(rec["firstName"], "Grace")
        self.assertEqual(rec["lastName"], "Hopper")
        self.assertIs(rec["botMeta"]["subscribed"], False)
        self.assert_position(rec, "T1", "SETS2")
        # untouched fields stay
        for f in ("_id", "channel", "app", "externalId", "platform", "locale", "tags",
                  "createdAt"):
            self.assertEqual(rec[f], orig[f], f)
        self.assertIs(rec["botMeta"]["liveChat"], False)
        # ... and a later request sees the stored changes
        self.s.sim_reset()
        self.results(self.go("msets", "T1", "HELLO"), "msets", count=1)
        self.assertEqual(self.texts(), ["hello Grace"])

    # ---- chains ----
    def test_chain_across_two_trees(self):
        self.new_member("mchain")
        before = int(time.time() * 1000)
        ans = self.go("mchain", "T1", "C1")
        res = self.results(ans, "mchain", count=2)
        self.assert_sent(res[0], "c1", "psid-mchain", before)
        self.assert_sent(res[1], "c3 yes", "psid-mchain", before)
        # C2 (tree T2) ran its pre- and post-action but sent nothing; C3's pre-action did not run
        self.assertEqual(self.texts(), ["c1", "c3 yes"])
        rec = self.rec("mchain")
        self.assert_position(rec, "T1", "C3")
        self.assertEqual(rec["tags"], ["c1pre", "c1post", "c2post", "c3post"])
        self.assertEqual(rec["meta"], {"c2pre": "yes"})

    def test_chain_of_eleven_nodes_is_fine(self):
        self.new_member("ml2")
        before = int(time.time() * 1000)
        ans = self.go("ml2", "TL", "L2")
        res = self.results(ans, "ml2", count=11)
        names = ["L%d" % i for i in range(2, 13)]
        for el, name in zip(res, names):
            self.assert_sent(el, name, "psid-ml2", before)
        self.assertEqual(self.texts(), names)
        rec = self.rec("ml2")
        self.assert_position(rec, "TL", "L12")
        self.assertEqual(rec["tags"], names)

    def test_twelfth_node_is_not_reached(self):
        self.new_member("ml1")
        before = int(time.time() * 1000)
        ans = self.go("ml1", "TL", "L1")
        res = self.results(ans, "ml1", send_ok=0, count=12)
        names = ["L%d" % i for i in range(1, 12)]
        for el, name in zip(res, names):
            self.assert_sent(el, name, "psid-ml1", before)
        self.assert_node_error(res[11], 118)
        self.assertEqual(self.texts(), names)
        rec = self.rec("ml1")
        self.assert_position(rec, "TL", "L11")
        self.assertEqual(rec["tags"], names)

    def test_redirect_to_missing_node_or_tree_stops_at_last_node(self):
        for node, sent in [("MISS", "before miss"), ("MISSTREE", "before missing tree"),
                           ("MISSOTHER", "before other app")]:
            with self.subTest(node=node):
                self.s.sim_reset()
                mid = "mmiss-" + node.lower()
                self.new_member(mid)
                before = int(time.time() * 1000)
                ans = self.go(mid, "T1", node)
                res = self.results(ans, mid, send_ok=0, count=2)
                self.assert_sent(res[0], sent, "psid-" + mid, before)
                self.assert_node_error(res[1], 115)
                self.assertEqual(self.texts(), [sent])  # the other app's node never ran
                rec = self.rec(mid)
                self.assert_position(rec, "T1", node)
                self.assertEqual(rec["tags"], ["miss-post"] if node == "MISS" else [])
        # the other app's node is not named differently from a missing one
        a = self.go("mmiss-missother", "T1", "MISSOTHER").json["sendResult"]["result"][1]
        b = self.go("mmiss-misstree", "T1", "MISSTREE").json["sendResult"]["result"][1]
        self.assertEqual(a["error"]["err"].replace("TO/N1", "X"),
                         b["error"]["err"].replace("NOTREE/N1", "X"))

    def test_redirect_loop_stops_after_eleven_nodes(self):
        self.new_member("mloop")
        ans = self.go("mloop", "T1", "LOOP")
        res = self.results(ans, "mloop", send_ok=0, count=12)
        self.assertEqual([e["ok"] for e in res], [1] * 11 + [0])
        self.assert_node_error(res[11], 118)
        self.assertEqual(self.texts(), ["loop"] * 11)
        rec = self.rec("mloop")
        self.assert_position(rec, "T1", "LOOP")
        self.assertEqual(rec["tags"], ["loop"])

    def test_refused_actions_and_empty_responses_are_elements(self):
        self.new_member("mbad")
        before = int(time.time() * 1000)
        ans = self.go("mbad", "T1", "BADRENDER")
        res = self.results(ans, "mbad", send_ok=0, count=4)
        self.assert_node_error(res[0], 108, mentions="preAction[0]")
        self.assert_node_error(res[1], 108, mentions="preAction[1]")
        self.assert_failed(res[2], 108, mentions="text")
        self.assert_sent(res[3], "still here", "psid-mbad", before)
        self.assertEqual(self.texts(), ["still here"])
        rec = self.rec("mbad")
        self.assertEqual(rec["meta"], {})
        self.assertIs(rec["botMeta"]["subscribed"], True)
        self.assertEqual(rec["tags"], ["ok-tag"])
        self.assert_position(rec, "T1", "BADRENDER")

    def test_templated_image_url(self):
        self.new_member("mimg")
        before = int(time.time() * 1000)
        ans = self.go("mimg", "T1", "IMG", meta={"file": "a b.png"})
        res = self.results(ans, "mimg", count=1)
        self.assert_sent(res[0], {"url": "https://example.com/a b.png"}, "psid-mimg", before,
                         type_="IMAGE")
        self.assertEqual(self.platform_log()[0]["body"]["message"]["attachment"]["payload"]["url"],
                         "https://example.com/a b.png")

    # ---- locale ----
    def test_locale_choice(self):
        cases = [
            ("loc-en", "en", None, "default"),
            ("loc-fr", "fr", None, "bonjour"),
            ("loc-zh", "fr", "zh-HK", "\u4f60\u597d"),   # customLocale wins over locale
            ("loc-de-fr", "fr", "de", "bonjour"),         # no list for customLocale: locale
            ("loc-de-en", "en", "de", "default"),         # neither: response
            ("loc-en-fr", "en", "fr", "bonjour"),
        ]
        for mid, loc, custom, want in cases:
            with self.subTest(locale=loc, customLocale=custom):
                self.s.sim_reset()
                self.new_member(mid, locale=loc, customLocale=custom)
                ans = self.go(mid, "T1", "LOC")
                res = self.results(ans, mid, count=1)
                self.assertEqual(res[0]["messageEvent"]["data"], {"text": want})
                self.assertEqual(self.texts(), [want])

    def test_locale_chosen_after_pre_action(self):
        self.new_member("loc-pre", locale="fr")
        ans = self.go("loc-pre", "T1", "LOCPRE")
        self.results(ans, "loc-pre", count=1)
        self.assertEqual(self.texts(), ["\u4f60\u597d"])
        self.assertEqual(self.rec("loc-pre")["customLocale"], "zh-HK")

    # ---- webhooks: the SSRF guard ----
    def test_webhook_to_loopback_is_refused(self):
        self.new_member("mhook")
        before = int(time.time() * 1000)
        ans = self.go("mhook", "TH", "HOOKLOCAL")
        res = self.results(ans, "mhook", send_ok=0, count=3)
        self.assert_node_error(res[0], 113)
        self.assert_node_error(res[1], 113)
        self.assert_sent(res[2], "after local hooks", "psid-mhook", before)
        self.assertEqual(self.hook_log(), [])
        self.assertEqual(self.texts(), ["after local hooks"])
        rec = self.rec("mhook")
        self.assertEqual(rec["botMeta"]["tempData"], {})
        self.assertEqual(rec["tags"], ["hooked"])
        self.assert_position(rec, "TH", "HOOKLOCAL")

    def test_webhook_guard_sees_through_address_spellings(self):
        self.new_member("mhook2")
        ans = self.go("mhook2", "TH", "HOOKTRICKS")
        res = self.results(ans, "mhook2", send_ok=0, count=6)
        for el in res[:5]:
            self.assert_node_error(el, 113)
        self.assertEqual(res[5]["messageEvent"]["data"], {"text": "after tricks"})
        self.assertEqual(self.hook_log(), [])

    # ---- the concurrent write-back race ----
    def race(self, mid, plan):
        """plan: list of (node, meta). All requests start together; returns the answers."""
        answers = [None] * len(plan)
        gate = threading.Barrier(len(plan))

        def one(i, node, meta):
            gate.wait()
            answers[i] = self.go(mid, "T1", node, meta=meta)

        threads = [threading.Thread(target=one, args=(i, n, m)) for i, (n, m) in enumerate(plan)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return answers

    def assert_race_answers(self, mid, answers):
        got = []
        for a in answers:
            self.assertIsNotNone(a)
            res = self.results(a, mid, count=1)
            got.append(res[0]["messageEvent"]["data"]["text"])
        self.assertEqual(sorted(got), sorted(self.texts()))
        self.assertEqual(len(got), 20)

    # Found by this test: writes of one worker to one member used to defeat each other on its
    # one Redis connection until the compare-and-set gave up; they are now queued per key.
    def test_concurrent_redirects_of_one_member_lose_no_update(self):
        for rnd in range(RACE_ROUNDS):
            with self.subTest(round=rnd):
                self.s.sim_reset()
                mid = "mrace-%d" % rnd
                self.new_member(mid)
                plan = [("RACE", {"tag": "tag%02d" % i, "key": "k%02d" % i, "i": i})
                        for i in range(20)]
                answers = self.race(mid, plan)
                rec = self.rec(mid)
                self.assertEqual(sorted(rec["tags"]), ["tag%02d" % i for i in range(20)])
                self.assertEqual(len(rec["tags"]), 20)
                self.assertEqual(rec["meta"], {"k%02d" % i: str(i) for i in range(20)})
                self.assert_position(rec, "T1", "RACE")
                self.assert_race_answers(mid, answers)

    def test_two_nodes_racing_on_one_member(self):
        for rnd in range(RACE_ROUNDS):
            with self.subTest(round=rnd):
                self.s.sim_reset()
                mid = "mrace2-%d" % rnd
                self.new_member(mid)
                plan = []
                for i in range(20):
                    node = "RACE" if i % 2 == 0 else "RACE2"
                    plan.append((node, {"tag": "t%02d" % i, "key": "k%02d" % i, "i": i}))
                answers = self.race(mid, plan)
                rec = self.rec(mid)
                self.assertEqual(sorted(rec["tags"]), ["t%02d" % i for i in range(20)])
                self.assertEqual(rec["meta"], {"k%02d" % i: str(i) for i in range(0, 20, 2)})
                self.assertEqual(rec["botMeta"]["tempData"],
                                 {"k%02d" % i: str(i) for i in range(1, 20, 2)})
                self.assertEqual(rec["botMeta"]["tree"], "T1")
                self.assertIn(rec["botMeta"]["nodeCompositeId"], ("RACE", "RACE2"))
                self.assert_race_answers(mid, answers)

    def test_moderate_concurrency_loses_no_update(self):
        # Within the compare-and-set's retry budget: must hold today.
        mid = "mrace-small"
        self.new_member(mid)
        plan = [("RACE", {"tag": "s%d" % i, "key": "s%d" % i, "i": i}) for i in range(6)]
        answers = self.race(mid, plan)
        rec = self.rec(mid)
        self.assertEqual(sorted(rec["tags"]), ["s%d" % i for i in range(6)])
        self.assertEqual(rec["meta"], {"s%d" % i: str(i) for i in range(6)})
        for a in answers:
            self.results(a, mid, count=1)

    def member_commands(self, mid, action):
        """The Redis commands naming member mid's key while action runs, as MONITOR shows
        them: (source, command) pairs, source "lua" for those of a script."""
        key = "botgate:member:{fb1}:%s" % mid
        sock = socket.create_connection(("127.0.0.1", self.s.redis_port_of(key)), timeout=5)
        try:
            sock.sendall(b"MONITOR\r\n")
            buf = b""
            while b"\r\n" not in buf:
                buf += sock.recv(4096)
            buf = buf.split(b"\r\n", 1)[1]
            action()
            time.sleep(0.3)
            sock.settimeout(0.3)
            try:
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
            except socket.timeout:
                pass
        finally:
            sock.close()
        seen = []
        for line in buf.decode("utf-8", "replace").split("\r\n"):
            # +1700000000.123456 [0 127.0.0.1:4242] "GET" "botgate:member:{fb1}:m"
            if ('"%s"' % key) not in line or "] " not in line:
                continue
            source = "lua" if "[0 lua]" in line else "client"
            seen.append((source, line.split("] ", 1)[1].split(" ", 1)[0].strip('"').upper()))
        return seen

    def test_write_back_compares_with_the_record_it_read(self):
        # The member read to run the node is the one the compare-and-set expects: one GET of
        # the member by botgate, then the script (whose own GET and SET show as lua).
        self.new_member("mopt")
        seen = self.member_commands(
            "mopt", lambda: self.results(self.go("mopt", "T1", "HELLO"), "mopt", count=1))
        self.assertEqual([c for c in seen if c[0] == "client"],
                         [("client", "GET"), ("client", "EVAL")], seen)
        self.assertEqual([c for c in seen if c[0] == "lua"], [("lua", "GET"), ("lua", "SET")],
                         seen)
        self.assert_position(self.rec("mopt"), "T1", "HELLO")

    def test_write_back_of_a_record_stored_in_another_layout(self):
        # Stored pretty-printed (by another tool): the first compare fails, the member is read
        # again and written; nothing is lost, the answer is the same.
        m = self.new_member("mpretty")
        m["meta"] = {"keep": "me"}
        self.s.redis("SET", "botgate:member:{fb1}:mpretty", json.dumps(m, indent=2))
        seen = self.member_commands(
            "mpretty", lambda: self.results(self.go("mpretty", "T1", "HELLO"), "mpretty",
                                            count=1))
        self.assertEqual([c[1] for c in seen if c[0] == "client"], ["GET", "EVAL", "GET", "EVAL"],
                         seen)
        rec = self.rec("mpretty")
        self.assert_position(rec, "T1", "HELLO")
        self.assertEqual(rec["meta"], {"keep": "me"})
        self.assertEqual(rec["firstName"], m["firstName"])

    # ---- errors ----
    def test_108_parameters(self):
        self.new_member("m108")
        target = {"tree": "T1", "nodeCompositeId": "HELLO"}
        base = {"channelId": "fb1", "memberId": "m108"}
        cases = [
            (dict(base), "redirect"),
            (dict(base, redirect=None), "redirect"),
            (dict(base, redirect="T1/HELLO"), "redirect"),
            (dict(base, redirect=[target]), "redirect"),
            (dict(base, redirect={"nodeCompositeId": "HELLO"}), "redirect.tree"),
            (dict(base, redirect={"tree": 7, "nodeCompositeId": "HELLO"}), "redirect.tree"),
            (dict(base, redirect={"tree": "", "nodeCompositeId": "HELLO"}), "redirect.tree"),
            (dict(base, redirect={"tree": "T1"}), "redirect.nodeCompositeId"),
            (dict(base, redirect={"tree": "T1", "nodeCompositeId": None}),
             "redirect.nodeCompositeId"),
            (dict(base, redirect={"tree": "T1", "nodeCompositeId": ["HELLO"]}),
             "redirect.nodeCompositeId"),
            (dict(base, redirect=dict(target, runPreAction="yes")), "redirect.runPreAction"),
            (dict(base, redirect=dict(target, sendResponse=1)), "redirect.sendResponse"),
            (dict(base, redirect=dict(target, runPostAction="false")), "redirect.runPostAction"),
            (dict(base, redirect=dict(target, runPostAction=[])), "redirect.runPostAction"),
            (dict(base, redirect=target, meta=[1, 2]), "meta"),
            (dict(base, redirect=target, meta="orderId=1"), "meta"),
            (dict(base, redirect=target, meta=5), "meta"),
            ({"memberId": "m108", "redirect": target}, "channelId"),
            ({"channelId": 3, "memberId": "m108", "redirect": target}, "channelId"),
            ({"channelId": "fb1", "redirect": target}, "memberId or recipientId"),
            ({"channelId": "fb1", "memberId": 12, "redirect": target}, "memberId"),
        ]
        for body, name in cases:
            with self.subTest(body=body):
                self.assert_error(self.redirect(body), 108, mentions=name)
        for raw in [b"", b"not json", b"[]", b'{"channelId":', b"\xff{}"]:
            with self.subTest(raw=raw):
                self.assert_error(self.redirect(raw), 108)
        self.assertEqual(self.s.sim_log(), [])
        rec = self.rec("m108")
        self.assert_position(rec, None, None)
        self.assertEqual(rec["updatedAt"], 1700000000000)

    def test_118_limits(self):
        self.new_member("m118")
        target = {"tree": "T1", "nodeCompositeId": "HELLO"}
        body = {"channelId": "fb1", "memberId": "m118", "redirect": target,
                "meta": {"big": "x" * (64 * 1024 + 1)}}
        self.assert_error(self.redirect(body), 118)
        body["meta"] = {"parts": ["y" * 60000] * 20}
        self.assert_error(self.redirect(body), 118, http_status=413)
        body["meta"] = {"ok": "z" * (64 * 1024)}
        self.results(self.redirect(body), "m118", count=1)
        self.assertEqual(len(self.platform_log()), 1)

    def test_token_channel_list_and_method(self):
        from harness import http
        tok = self.s.token(APP, "bot:redirectMemberToNode", extra=("--channel", "cl1"))
        self.new_member("mlist")
        self.assert_error(self.go("mlist", "T1", "HELLO", token=tok), 112)
        self.results(self.go("cm1", "T1", "LOC", cid="cl1", token=tok), "cm1", count=1)
        self.assertEqual(http("GET", self.s.url + ROUTE).status, 405)

    def test_112_unknown_channel_and_other_apps_channel(self):
        target = {"tree": "T1", "nodeCompositeId": "HELLO"}
        missing = self.redirect({"channelId": "no-such", "memberId": "m-other", "redirect": target})
        theirs = self.redirect({"channelId": "fb-other", "memberId": "m-other", "redirect": target})
        self.assert_error(missing, 112)
        self.assertEqual(theirs.status, missing.status)
        self.assertEqual(theirs.json, missing.json)
        by_rid = self.redirect({"channelId": "fb-other", "recipientId": "psid-sneak",
                                "redirect": target})
        self.assertEqual(by_rid.json, missing.json)
        self.assertIsNone(self.s.redis("GET", "botgate:recipient:{fb-other}:psid-sneak"))
        self.assertEqual(self.s.sim_log(), [])
        self.assertIsNone(self.rec("m-other", "fb-other")["botMeta"]["tree"])

    def test_114_unknown_member(self):
        self.assert_error(self.go("ghost", "T1", "HELLO"), 114)
        self.assertIsNone(self.rec("ghost"))
        self.assertEqual(self.s.sim_log(), [])

    def test_115_unknown_tree_node_and_other_apps_tree(self):
        self.new_member("m115")
        unknown_tree = self.go("m115", "NOTREE", "N1")
        unknown_node = self.go("m115", "T1", "NOPE")
        theirs = self.go("m115", "TO", "N1")
        self.assert_error(unknown_tree, 115)
        self.assert_error(unknown_node, 115)
        self.assert_error(theirs, 115)
        # another app's tree: exactly like an unknown tree, the whole body
        self.assertEqual(theirs.status, unknown_tree.status)
        self.assertEqual(theirs.json, unknown_tree.json)
        self.assertEqual(theirs.raw, unknown_tree.raw)
        self.assertEqual(unknown_node.json, unknown_tree.json)
        # ... also for the other app's own token and channel, aimed at this app's tree
        o_unknown = self.go("m-other", "NOTREE", "HELLO", cid="fb-other", token=self.other)
        o_theirs = self.go("m-other", "T1", "HELLO", cid="fb-other", token=self.other)
        self.assert_error(o_unknown, 115)
        self.assertEqual(o_theirs.json, o_unknown.json)
        self.assertEqual(self.s.sim_log(), [])
        rec = self.rec("m115")
        self.assert_position(rec, None, None)
        self.assertEqual(rec["tags"], [])
        self.assertEqual(rec["updatedAt"], 1700000000000)
        self.assertIsNone(self.rec("m-other", "fb-other")["botMeta"]["tree"])

    def test_115_with_a_new_recipient_id_writes_nothing(self):
        """The target is checked before the member of a new recipientId is created: a 115
        leaves no member and no recipient key behind."""
        before = sorted(self.s.redis("KEYS", "botgate:*"))
        targets = [("NOTREE", "N1"), ("T1", "NOPE"), ("TO", "N1"), ("T1", "_tree")]
        for i, (tree_id, node) in enumerate(targets):
            rid = "psid-ghost-115-%d" % i
            with self.subTest(target=(tree_id, node)):
                ans = self.redirect({"channelId": "fb1", "recipientId": rid,
                                     "redirect": {"tree": tree_id, "nodeCompositeId": node}})
                self.assert_error(ans, 115, mentions="not found")
                self.assertIsNone(self.s.redis("GET", "botgate:recipient:{fb1}:" + rid))
                for key in self.s.redis("KEYS", "botgate:member:{fb1}:*"):
                    self.assertNotIn(rid, self.s.redis("GET", key), key)
        self.assertEqual(sorted(self.s.redis("KEYS", "botgate:*")), before)
        self.assertEqual(self.s.sim_log(), [])
        # a known recipient is found as before, and left as it was
        self.new_member("m115r", ext="psid-known-115")
        ans = self.redirect({"channelId": "fb1", "recipientId": "psid-known-115",
                             "redirect": {"tree": "T1", "nodeCompositeId": "NOPE"}})
        self.assert_error(ans, 115)
        self.assertEqual(self.rec("m115r")["updatedAt"], 1700000000000)

    def test_115_tree_field_is_not_a_node(self):
        """`_tree` holds the tree itself: naming it as a node is 115, as a target and inside a
        chain, and the member is not moved there."""
        self.new_member("m-tf")
        ans = self.go("m-tf", "T1", "_tree")
        self.assert_error(ans, 115)
        self.assertEqual(ans.json, self.go("m-tf", "T1", "NOPE").json)
        self.assert_position(self.rec("m-tf"), None, None)
        self.import_tree(tree("TTF", APP, {"A": {"response": [text("a")],
                                                 "redirect": {"tree": "TTF",
                                                              "nodeCompositeId": "_tree"}}}))
        res = self.results(self.go("m-tf", "TTF", "A"), "m-tf", send_ok=0, count=2)
        self.assert_node_error(res[1], 115)
        self.assert_position(self.rec("m-tf"), "TTF", "A")
        self.assertEqual(self.texts(), ["a"])

    def test_116_channel_off(self):
        self.assert_error(self.go("m-off", "T1", "HELLO", cid="fb-off"), 116)
        self.assertEqual(self.s.sim_log(), [])
        self.assertIsNone(self.rec("m-off", "fb-off")["botMeta"]["tree"])

    def test_117_channel_type_unknown(self):
        self.assert_error(self.go("m-odd", "T1", "HELLO", cid="odd"), 117)
        self.assertEqual(self.s.sim_log(), [])
        self.assertIsNone(self.rec("m-odd", "odd")["botMeta"]["tree"])

    def test_117_response_type_the_channel_lacks_is_an_element(self):
        self.new_member("m117")
        before = int(time.time() * 1000)
        ans = self.go("m117", "T1", "MIXED")
        res = self.results(ans, "m117", send_ok=0, count=3)
        self.assert_sent(res[0], "before tpl", "psid-m117", before)
        self.assert_failed(res[1], 117, mentions="TEMPLATE")
        if "messageEvent" in res[1]:
            self.assertEqual(res[1]["messageEvent"]["type"], "TEMPLATE")
            self.assertNotIn("messageId", res[1]["messageEvent"])
        self.assert_sent(res[2], "after tpl", "psid-m117", before)
        self.assertEqual(self.texts(), ["before tpl", "after tpl"])
        self.assert_position(self.rec("m117"), "T1", "MIXED")

    def test_later_platform_failure_is_an_element(self):
        self.new_member("mfail")
        before = int(time.time() * 1000)
        ans = self.go("mfail", "T1", "FAIL")
        res = self.results(ans, "mfail", send_ok=0, count=3)
        self.assert_sent(res[0], "ok one", "psid-mfail", before)
        self.assert_failed(res[1], 113)
        self.assert_sent(res[2], "ok three", "psid-mfail", before)
        self.assertEqual(len(self.platform_log()), 3)
        self.assert_position(self.rec("mfail"), "T1", "FAIL")

    def test_104_invalid_recipient_aborts(self):
        self.new_member("minv", ext="psid-invalid-1")
        ans = self.go("minv", "T1", "HELLO")
        self.assert_error(ans, 104)
        rec = self.rec("minv")
        self.assert_position(rec, None, None)

    def test_scopes(self):
        for name, tok in [("bot:redirectMemberToNode", self.tok), ("bot:admin", self.admin),
                          ("api:admin", self.api_admin)]:
            with self.subTest(scope=name):
                mid = "mscope-" + name.replace(":", "-")
                self.new_member(mid)
                self.results(self.go(mid, "T1", "HELLO", token=tok), mid, count=1)
        self.new_member("mscope-x")
        for tok in [self.send_only, "", "bgt_nope"]:
            with self.subTest(token=tok[:8]):
                ans = self.go("mscope-x", "T1", "HELLO", token=tok)
                self.assertEqual(ans.status, 500, ans)
                self.assertEqual(ans.json, UNAUTHORIZED)
        self.assertIsNone(self.rec("mscope-x")["botMeta"]["tree"])
        # the token in the query string works as well
        ans = self.s.post(ROUTE, {"channelId": "fb1", "memberId": "mscope-x",
                                  "redirect": {"tree": "T1", "nodeCompositeId": "HELLO"}},
                          query_token=self.tok)
        self.results(ans, "mscope-x", count=1)

    def test_recipient_id_finds_the_member(self):
        self.new_member("mr1", ext="psid-r1")
        before = int(time.time() * 1000)
        ans = self.redirect({"channelId": "fb1", "recipientId": "psid-r1",
                             "redirect": {"tree": "T1", "nodeCompositeId": "HELLO"}})
        res = self.results(ans, "mr1", count=1)
        self.assert_sent(res[0], "hello Ada", "psid-r1", before)
        self.assertEqual(self.platform_log()[0]["recipient"], "psid-r1")
        self.assert_position(self.rec("mr1"), "T1", "HELLO")
        # memberId wins when both are given
        self.new_member("mr2", ext="psid-r2")
        ans = self.redirect({"channelId": "fb1", "memberId": "mr2", "recipientId": "psid-r1",
                             "redirect": {"tree": "T1", "nodeCompositeId": "LOC"}})
        self.results(ans, "mr2", count=1)
        self.assert_position(self.rec("mr2"), "T1", "LOC")
        self.assert_position(self.rec("mr1"), "T1", "HELLO")

    def test_unknown_recipient_id_creates_the_member(self):
        ans = self.redirect({"channelId": "fb1", "recipientId": "psid-fresh-5",
                             "redirect": {"tree": "T1", "nodeCompositeId": "HELLO"}})
        mid = ans.json["member"]
        self.results(ans, mid, count=1)
        self.assertEqual(self.s.redis("GET", "botgate:recipient:{fb1}:psid-fresh-5"), mid)
        rec = self.rec(mid)
        self.assertEqual(rec["externalId"], "psid-fresh-5")
        self.assert_position(rec, "T1", "HELLO")
        self.assertEqual(self.texts(), ["hello "])

    # ---- botgatectl tree ----
    def tree_get(self, tid):
        r = self.s.ctl("tree", "get", tid)
        return json.loads(r.stdout)

    def test_tree_import_get_and_replace(self):
        v1 = tree("TIMP", APP, {"A": {"name": "a", "response": [text("a1")]},
                                "B": {"response": [text("b1")],
                                      "redirect": {"tree": "TIMP", "nodeCompositeId": "A",
                                                   "sendResponse": False, "runPreAction": None}}},
                  name="Import \u00e9 test")
        self.import_tree(v1)
        self.assertEqual(self.tree_get("TIMP"), v1)
        self.new_member("mimp")
        self.results(self.go("mimp", "TIMP", "B"), "mimp", count=1)
        self.assertEqual(self.texts(), ["b1"])
        v2 = tree("TIMP", APP, {"A": {"response": [text("a2")]}}, name="v2")
        self.import_tree(v2)
        self.assertEqual(self.tree_get("TIMP"), v2)
        self.assertIsNone(self.s.redis("HGET", "botgate:tree:TIMP", "B"))
        self.assertEqual(self.s.redis("KEYS", "botgate:tree:TIMP*"), ["botgate:tree:TIMP"])
        self.s.sim_reset()
        self.assert_error(self.go("mimp", "TIMP", "B"), 115)
        self.results(self.go("mimp", "TIMP", "A"), "mimp", count=1)
        self.assertEqual(self.texts(), ["a2"])
        r = self.s.ctl("tree", "get", "NO-SUCH-TREE", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("NO-SUCH-TREE", r.stderr)

    def test_tree_import_refuses_invalid_tree(self):
        good = tree("TBAD", APP, {"N1": {"response": [text("kept")]},
                                  "N2": {"response": [text("kept too")]}})
        self.import_tree(good)
        stored = self.s.redis("HGETALL", "botgate:tree:TBAD")

        def variant(**nodes):
            t = json.loads(json.dumps(good))
            t["nodes"].update(nodes)
            return t

        cases = [
            (variant(N1={"preAction": [{"type": "set", "value": 1}]}),
             "nodes.N1.preAction[0].path"),
            (variant(N1={"preAction": [{"type": "set", "path": "member.tags", "value": 1}]}),
             "nodes.N1.preAction[0].path"),
            (variant(N1={"preAction": [{"type": "set", "path": "member.meta.x"}]}),
             "nodes.N1.preAction[0].value"),
            (variant(N2={"response": [text("ok"), {"type": "TEXT"}]}),
             "nodes.N2.response[1].text"),
            (variant(N2={"response": [{"type": "IMAGE", "url": "ftp://x"}]}),
             "nodes.N2.response[0].url"),
            (variant(N2={"response": [{"type": "TEMPLATE", "elementName": "x"}]}),
             "nodes.N2.response[0].languageCode"),
            (variant(N2={"responseByLocale": {"fr": [{"text": "x"}]}}),
             "nodes.N2.responseByLocale.fr[0].type"),
            (variant(N1={"postAction": [{"type": "explode"}]}), "nodes.N1.postAction[0].type"),
            (variant(N1={"postAction": [{"type": "addTags", "tags": ["a", 2]}]}),
             "nodes.N1.postAction[0].tags[1]"),
            (variant(N1={"preAction": [{"type": "webhook", "url": "http://x", "timeoutMs": 0}]}),
             "nodes.N1.preAction[0].timeoutMs"),
            (variant(N1={"preAction": [{"type": "webhook", "url": "file:///etc/passwd"}]}),
             "nodes.N1.preAction[0].url"),
            (variant(N1={"preAction": [{"type": "webhook", "url": "http://x", "saveAs": "a.b"}]}),
             "nodes.N1.preAction[0].saveAs"),
            (variant(N1={"redirect": {"tree": 5, "nodeCompositeId": "N2"}}),
             "nodes.N1.redirect.tree"),
            (variant(N1={"redirect": {"tree": "TBAD"}}), "nodes.N1.redirect.nodeCompositeId"),
            (variant(N1={"redirect": {"tree": "TBAD", "nodeCompositeId": "N2",
                                      "sendResponse": "no"}}),
             "nodes.N1.redirect.sendResponse"),
            (variant(N1={"response": {"type": "TEXT", "text": "x"}}), "nodes.N1.response"),
            (variant(N1={"response": [text("x")] * 51}), "nodes.N1.response"),
            (variant(N1="not a node"), "nodes.N1"),
            (variant(_tree={}), "_tree"),
            (dict(good, nodes={}), "nodes"),
            ({k: v for k, v in good.items() if k != "app"}, "app"),
            (dict(good, name=5), "name"),
            ("{not json", "line"),
            ("[1, 2]", "object"),
        ]
        for t, place in cases:
            with self.subTest(place=place):
                r = self.import_tree(t, check=False)
                self.assertNotEqual(r.returncode, 0, r)
                self.assertIn(place, r.stderr)
                self.assertEqual(self.s.redis("HGETALL", "botgate:tree:TBAD"), stored)
        self.assertEqual(self.tree_get("TBAD"), good)
        self.assertEqual(self.s.redis("KEYS", "botgate:tree:TBAD*"), ["botgate:tree:TBAD"])


if __name__ == "__main__":
    unittest.main()
