"""The SSRF guard on URLs botgate fetches for a user (wechat image downloads): loopback,
link-local (cloud metadata), private, IPv6 forms, DNS names and redirects that lead there are
refused with a clear error element; a public address is fetched.

The test runs in a network namespace of its own (unshare --net) where the loopback interface
also carries 11.0.0.7, a public address (not a documentation one: those are refused too), so
that a "public" first hop that redirects to 127.0.0.1 can be tested without leaving the
machine."""
import os
import subprocess
import sys
import unittest

PUBLIC = "11.0.0.7"

if os.environ.get("BOTGATE_IN_NETNS") != "1":
    env = dict(os.environ, BOTGATE_IN_NETNS="1")
    cmd = "ip link set lo up && ip addr add %s/32 dev lo && exec %s %s" % (
        PUBLIC, sys.executable, os.path.abspath(__file__))
    r = subprocess.run(["unshare", "--net", "--", "sh", "-c", cmd], env=env)
    if r.returncode != 0:
        print("test_ssrf: exit code %d (the namespace needs unshare --net, i.e. root)"
              % r.returncode, file=sys.stderr)
    sys.exit(r.returncode)

from harness import StackTest  # noqa: E402

APP = "app-ssrf"


class SsrfGuard(StackTest):
    # BOTGATE_ALLOW_PRIVATE_MEDIA is off: the production default
    stack_args = {"sim_host": "0.0.0.0", "env": {"BOTGATE_ALLOW_PRIVATE_MEDIA": "0"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.tok = s.token(APP, "bot:sendResponses")
        s.put("channel", {"_id": "wx", "app": APP, "type": "wechat", "on": True,
                          "info": {"appId": "a", "appsecret": "s", "botOpenId": "gh"}})
        cls.public = "http://%s:%d" % (PUBLIC, s.sim_port)
        cls.loop = "http://127.0.0.1:%d" % s.sim_port

    def image(self, url):
        return self.s.send({"channelId": "wx", "recipientId": "openid-1",
                            "response": [{"type": "TEXT", "text": "first"},
                                         {"type": "IMAGE", "url": url}]}, self.tok)

    def assert_refused(self, url):
        self.s.sim_reset()
        a = self.image(url)
        self.assertEqual(a.status, 200, a)
        el = a.json["sendResult"]["result"][1]
        self.assertIn("error", el, el)
        self.assertIn("not allowed", el["error"]["err"])
        self.assertEqual(a.json["sendResult"]["ok"], 0)
        kinds = [r["kind"] for r in self.s.sim_log()]
        self.assertNotIn("upload", kinds)

    def test_public_address_is_fetched(self):
        self.s.sim_reset()
        a = self.image(self.public + "/media/ok.png")
        self.assertEqual(a.status, 200, a)
        self.assertNotIn("error", a.json["sendResult"]["result"][1])
        self.assertIn("upload", [r["kind"] for r in self.s.sim_log()])

    def test_loopback(self):
        self.assert_refused(self.loop + "/media/a.png")

    def test_cloud_metadata(self):
        self.assert_refused("http://169.254.169.254/latest/meta-data/")

    def test_private_ranges(self):
        for ip in ["10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "0.0.0.0"]:
            with self.subTest(ip=ip):
                self.assert_refused("http://%s:%d/media/a.png" % (ip, self.s.sim_port))

    def test_ipv6_forms(self):
        for host in ["[::1]", "[::ffff:127.0.0.1]", "[fe80::1]", "[fd00::1]"]:
            with self.subTest(host=host):
                self.assert_refused("http://%s:%d/media/a.png" % (host, self.s.sim_port))

    def test_documentation_and_teredo_ranges(self):
        for host in ["192.0.2.1", "198.51.100.7", "203.0.113.9", "[2001:db8::1]",
                     "[2001:0:4136:e378:8000:63bf:3fff:fdd2]"]:
            with self.subTest(host=host):
                self.assert_refused("http://%s:%d/media/a.png" % (host, self.s.sim_port))

    def test_public_address_behind_two_redirects_is_fetched(self):
        import urllib.parse
        url = self.public + "/media/ok.png"
        for _ in range(2):
            url = self.public + "/media/redirect?to=" + urllib.parse.quote(url, safe="")
        self.s.sim_reset()
        a = self.image(url)
        self.assertEqual(a.status, 200, a)
        self.assertNotIn("error", a.json["sendResult"]["result"][1])
        self.assertIn("upload", [r["kind"] for r in self.s.sim_log()])

    def test_dns_name_to_loopback(self):
        self.assert_refused("http://localhost:%d/media/a.png" % self.s.sim_port)

    def test_redirect_to_loopback(self):
        import urllib.parse
        target = urllib.parse.quote(self.loop + "/media/a.png", safe="")
        self.assert_refused(self.public + "/media/redirect?to=" + target)

    def test_redirect_to_metadata(self):
        import urllib.parse
        target = urllib.parse.quote("http://169.254.169.254/", safe="")
        self.assert_refused(self.public + "/media/redirect?to=" + target)


if __name__ == "__main__":
    unittest.main()
