"""A Redis that refuses botgate (wrong password) is not "up": /readyz stays 503, requests get
119, the reason is logged once rather than at every retry; the right password works. An ACL
user (redis://user:password@, as managed Redis hands out) works with the default user disabled,
for botgate and botgatectl, on one server, a Redis Cluster (BOTGATE_TEST_REDIS=cluster) and a
master found through Sentinel."""
import json
import os
import subprocess
import time
import unittest

import harness
from harness import BIN, Redis, Stack, facebook_channel, member, http, wait_for

# "p@ss:w0rd%" percent-encoded, as in a URL: the password holds the URL's own separators
ACL_PASSWORD = "p@ss:w0rd%"
ACL_URL_PASSWORD = "p%40ss%3Aw0rd%25"


def acl_user_only(ports):
    """On each server: an ACL user botgate, and the default user disabled, so that only
    AUTH botgate <password> lets a client in."""
    for port in ports:
        conn = Redis(port)
        try:
            conn("ACL", "SETUSER", "botgate", "on", ">" + ACL_PASSWORD, "~*", "&*", "+@all")
            conn("ACL", "SETUSER", "default", "off")
        finally:
            conn.close()


def ctl(env, *args, input=None):
    return subprocess.run([os.path.join(BIN, "botgatectl")] + list(args), input=input,
                          text=True, capture_output=True, env=dict(os.environ, **env),
                          timeout=30)


class RedisAclUser(unittest.TestCase):
    def check_acl_user(self, s, redis_env):
        """botgate and botgatectl on redis_env, where only the ACL user gets in."""
        for kind, rec in [("channel", facebook_channel("cu", "A")),
                          ("member", member("mu", "cu", "A", "psid-u"))]:
            r = ctl(redis_env, kind, "put", "-", input=json.dumps(rec))
            self.assertEqual(r.returncode, 0, r.stderr)
        r = ctl(redis_env, "token", "create", "--app", "A", "--scope", "bot:sendResponses")
        self.assertEqual(r.returncode, 0, r.stderr)
        tok = r.stdout.strip()
        s.extra_env.update(redis_env)
        s.start_gateway()
        a = s.send({"channelId": "cu", "memberId": "mu",
                    "response": [{"type": "TEXT", "text": "x"}]}, tok)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(s.stop_gateway(), 0)
        self.assertNotIn(ACL_PASSWORD, s.gateway_log())
        # the same user with a wrong password is refused, and said so
        bad = dict(redis_env, BOTGATE_REDIS_URL=redis_env["BOTGATE_REDIS_URL"].replace(
            ACL_URL_PASSWORD, "wrong-pw"))
        r = ctl(bad, "channel", "put", "-", input=json.dumps(facebook_channel("cv", "A")))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("AUTH", r.stderr)

    def test_acl_user(self):
        s = Stack(workers=1, start_gateway=False)
        try:
            ports = s.cluster_ports if harness.CLUSTER else [s.redis_port]
            acl_user_only(ports)
            env = s.redis_env()
            env["BOTGATE_REDIS_URL"] = "redis://botgate:%s@127.0.0.1:%d/0" % (
                ACL_URL_PASSWORD, s.redis_port)
            self.check_acl_user(s, env)
        finally:
            s.close()
            s.cleanup_dir()

    @unittest.skipIf(harness.CLUSTER, "Sentinel watches one server")
    def test_acl_user_through_sentinel(self):
        from test_sentinel import MASTER, start_sentinels
        s = Stack(workers=1, start_gateway=False)
        try:
            acl_user_only([s.redis_port])
            ports = start_sentinels(s, 1, "sentinel monitor %s 127.0.0.1 %d 1\n"
                                    "sentinel auth-user %s botgate\n"
                                    "sentinel auth-pass %s %s\n" % (
                                        MASTER, s.redis_port, MASTER, MASTER, ACL_PASSWORD))
            env = {"BOTGATE_REDIS_URL": "redis://botgate:%s@127.0.0.1:1/0" % ACL_URL_PASSWORD,
                   "BOTGATE_REDIS_SENTINELS": "127.0.0.1:%d" % ports[0],
                   "BOTGATE_REDIS_MASTER": MASTER}
            s.extra_env.update(env)
            s.start_gateway()
            self.assertEqual(http("GET", s.url + "/readyz").status, 200)
            self.assertEqual(s.stop_gateway(), 0)
        finally:
            s.close()
            s.cleanup_dir()


class RedisPassword(unittest.TestCase):
    @unittest.skipIf(harness.CLUSTER, "CONFIG SET requirepass reaches one node of a cluster")
    def test_wrong_then_right_password(self):
        s = Stack(workers=1, start_gateway=False)
        try:
            s.redis("CONFIG", "SET", "requirepass", "s3cret-pw")
            s.redis("AUTH", "s3cret-pw")
            s.extra_env["BOTGATE_REDIS_URL"] = "redis://:wrong-pw@127.0.0.1:%d/0" % s.redis_port
            s.port = None
            s.port = harness.free_port()
            s.url = "http://127.0.0.1:%d" % s.port
            env = s.gateway_env()
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
