"""No secret of the test data ever appears in what botgate says: answers (successes and every
error), its log at debug level, /metrics, and botgatectl's output. The data holds one
recognisable secret per secret field of every platform, the API tokens, and a Redis
password."""
import json
import os
import subprocess
import time
import unittest

from harness import BIN, Stack, http, member

SECRETS = {
    "fb": "S3CRET-fb-page-token",
    "cloud": "S3CRET-cloud-token",
    "wa_password": "S3CRET-wa-password",
    "slack_bot": "S3CRET-xoxb-bot",
    "slack_signing": "S3CRET-slack-signing",
    "slack_token": "S3CRET-slack-token",
    "wechat_secret": "S3CRET-wechat-appsecret",
    "teamwork_key": "S3CRET-teamwork-key",
    "teamwork_token": "S3CRET-teamwork-token",
    "redis": "S3CRET-redis-password",
}


class Secrets(unittest.TestCase):
    def test_no_secret_anywhere(self):
        s = Stack(workers=2, start_gateway=False, env={"BOTGATE_ALLOW_PRIVATE_MEDIA": "1",
                                                        "BOTGATE_LOG_LEVEL": "debug"})
        outputs = []
        try:
            s.redis("CONFIG", "SET", "requirepass", SECRETS["redis"])
            s.redis("AUTH", SECRETS["redis"])
            url = "redis://:%s@127.0.0.1:%d/0" % (SECRETS["redis"], s.redis_port)
            s.extra_env["BOTGATE_REDIS_URL"] = url
            s.start_gateway()
            env = dict(os.environ, BOTGATE_REDIS_URL=url)

            def ctl(*args, input=None):
                r = subprocess.run([os.path.join(BIN, "botgatectl")] + list(args), env=env,
                                   input=input, capture_output=True, text=True)
                outputs.append(r.stdout + r.stderr)
                return r

            channels = [
                {"_id": "c-fb", "type": "facebook",
                 "info": {"accessToken": SECRETS["fb"], "pageId": "1"}},
                {"_id": "c-cloud", "type": "whatsapp-cloud",
                 "info": {"accessToken": SECRETS["cloud"], "phoneNumberId": "2"}},
                {"_id": "c-wa", "type": "whatsapp",
                 "info": {"apiPath": s.sim_url + "/wa", "adminUsername": "admin",
                          "adminPassword": SECRETS["wa_password"], "waId": "3"}},
                {"_id": "c-slack", "type": "slack",
                 "info": {"botAccessToken": SECRETS["slack_bot"], "botId": "B4",
                          "signingSecret": SECRETS["slack_signing"],
                          "token": SECRETS["slack_token"]}},
                {"_id": "c-wechat", "type": "wechat",
                 "info": {"appId": "wx5", "appsecret": SECRETS["wechat_secret"],
                          "botOpenId": "gh"}},
                {"_id": "c-tw", "type": "teamwork",
                 "info": {"apiKey": SECRETS["teamwork_key"], "apiToken": SECRETS["teamwork_token"],
                          "tbId": "tb"}},
            ]
            for ch in channels:
                ch.update({"app": "A", "on": True, "name": "n"})
                self.assertEqual(ctl("channel", "put", "-", input=json.dumps(ch)).returncode, 0)
            # the one output meant to show a secret: the new token, once
            tok = ctl("token", "create", "--app", "A", "--scope", "bot:admin").stdout.strip()
            outputs.pop()
            secrets = list(SECRETS.values()) + [tok]
            tree = os.path.join(s.dir, "t.json")
            with open(tree, "w") as f:
                json.dump({"_id": "T", "app": "A", "name": "t", "nodes": {"N": {
                    "response": [{"type": "TEXT",
                                  "text": "leak? {{channel.info.accessToken}} {{channel.info}}"}],
                    "postAction": [{"type": "webhook", "url": s.sim_url + "/hook/echo",
                                    "body": {"k": "{{channel.info.accessToken}}"},
                                    "saveAs": "echo"}]}}}, f)
            self.assertEqual(ctl("tree", "import", tree).returncode, 0)
            answers = []
            for ch in channels:
                cid = ch["_id"]
                # first: the rate-limited sends below pause the channel's sender everywhere
                a = s.post("/redirectMemberToNode",
                           {"channelId": cid, "recipientId": "8526000001",
                            "redirect": {"tree": "T", "nodeCompositeId": "N"}}, token=tok)
                answers.append(a.raw)
                self.assertEqual(a.status, 200, a)
                for rid in ["8526000001", "8526invalid", "8526badtoken", "8526ratelimit"]:
                    for text in ["hello", "fail5xx", "garbage", "truncated"]:
                        a = s.send({"channelId": cid, "recipientId": rid,
                                    "response": [{"type": "TEXT", "text": text},
                                                 {"type": "IMAGE",
                                                  "url": s.sim_url + "/media/a.png"}]}, tok)
                        answers.append(a.raw)
                outputs.append(ctl("get", "channel", cid).stdout)
            # the platforms revoke their tokens: refreshes happen, and are logged
            s.sim("POST", "/_sim/expire-tokens", {})
            for cid in ["c-wa", "c-wechat"]:
                answers.append(s.send({"channelId": cid, "recipientId": "8526000001",
                                       "response": [{"type": "TEXT", "text": "x"}]}, tok).raw)
            # bad requests and refusals
            answers.append(s.send({"channelId": "c-fb"}, tok).raw)
            answers.append(s.send({"channelId": "c-fb", "memberId": "x",
                                   "response": [{"type": "TEXT", "text": "x"}]}, "wrong").raw)
            outputs.append(http("GET", s.url + "/metrics").raw)
            # the tokens the platforms issued are secrets too
            for r in s.sim_log():
                auth = r.get("auth") or ""
                if auth.startswith("Bearer "):
                    secrets.append(auth[7:])
                for part in (r.get("query") or "").split("&"):
                    if part.startswith("access_token="):
                        secrets.append(part[len("access_token="):])
            self.assertEqual(s.stop_gateway(), 0)
            outputs.append(s.gateway_log())
            everything = "\n".join(outputs + answers)
            self.assertGreater(len(everything), 10000)
            for secret in sorted(set(x for x in secrets if len(x) >= 6)):
                self.assertNotIn(secret, everything, "secret %r leaked" % secret)
            # and the leak attempts in the tree rendered empty at the platform
            texts = [r["body"]["message"]["text"] for r in s.sim_log()
                     if r["platform"] == "facebook" and "leak?" in json.dumps(r["body"])]
            self.assertTrue(texts)
            for t in texts:
                self.assertEqual(t.strip(), "leak?")
        finally:
            s.close()
            s.cleanup_dir()


if __name__ == "__main__":
    unittest.main()
