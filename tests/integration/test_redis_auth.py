"""A Redis that refuses botgate (wrong password) is not "up": /readyz stays 503, requests get
119, the reason is logged once rather than at every retry; the right password works."""
import time
import unittest

from harness import Stack, facebook_channel, member, http, wait_for


class RedisPassword(unittest.TestCase):
    def test_wrong_then_right_password(self):
        s = Stack(workers=1, start_gateway=False)
        try:
            s.redis("CONFIG", "SET", "requirepass", "s3cret-pw")
            s.redis("AUTH", "s3cret-pw")
            s.extra_env["BOTGATE_REDIS_URL"] = "redis://:wrong-pw@127.0.0.1:%d/0" % s.redis_port
            s.port = None
            import harness
            s.port = harness.free_port()
            s.url = "http://127.0.0.1:%d" % s.port
            env = s.gateway_env()
            import os
            import subprocess
            s.log_path = os.path.join(s.dir, "botgate.log")
            with open(s.log_path, "ab") as log:
                s.procs["botgate"] = subprocess.Popen([os.path.join(harness.BIN, "botgate")],
                                                      env=env, stdout=log, stderr=log)
            wait_for(lambda: http("GET", s.url + "/healthz", timeout=2).status == 200,
                     what="botgate up")
            time.sleep(2.0)
            a = http("GET", s.url + "/readyz")
            self.assertEqual(a.status, 503, a)
            self.assertEqual(a.json["err_code"], 119)
            a = s.send({"channelId": "c", "memberId": "m",
                        "response": [{"type": "TEXT", "text": "x"}]}, "bgt_any")
            self.assertEqual((a.status, a.json.get("err_code")), (500, 119), a)
            log = s.gateway_log()
            refusals = [l for l in log.splitlines() if "refused at connect" in l]
            self.assertGreaterEqual(len(refusals), 1, log[-2000:])
            self.assertLessEqual(len(refusals), 2, log[-2000:])  # once, not at every retry
            self.assertNotIn("wrong-pw", log)
            self.assertNotIn("s3cret-pw", log)
            self.assertEqual(s.stop_gateway(), 0)
            # the right password
            s.extra_env["BOTGATE_REDIS_URL"] = "redis://:s3cret-pw@127.0.0.1:%d/0" % s.redis_port
            s.start_gateway()
            env_ctl = "redis://:s3cret-pw@127.0.0.1:%d/0" % s.redis_port
            import json
            for kind, rec in [("channel", facebook_channel("cp", "A")),
                              ("member", member("mp", "cp", "A", "psid-1"))]:
                r = subprocess.run([os.path.join(harness.BIN, "botgatectl"), kind, "put", "-"],
                                   input=json.dumps(rec), text=True, capture_output=True,
                                   env=dict(os.environ, BOTGATE_REDIS_URL=env_ctl))
                self.assertEqual(r.returncode, 0, r.stderr)
            r = subprocess.run([os.path.join(harness.BIN, "botgatectl"), "token", "create",
                                "--app", "A", "--scope", "bot:sendResponses"], text=True,
                               capture_output=True, env=dict(os.environ, BOTGATE_REDIS_URL=env_ctl))
            tok = r.stdout.strip()
            a = s.send({"channelId": "cp", "memberId": "mp",
                        "response": [{"type": "TEXT", "text": "x"}]}, tok)
            self.assertEqual(a.status, 200, a)
            self.assertEqual(s.stop_gateway(), 0)
        finally:
            s.close()
            s.cleanup_dir()


if __name__ == "__main__":
    unittest.main()
