"""The SSRF guard on URLs botgate fetches for a user (wechat image downloads): loopback,
link-local (cloud metadata), private, IPv6 forms, DNS names and redirects that lead there are
refused with a clear error element; a public address is fetched. All of it again with a proxy
in the environment (HTTPS_PROXY, http_proxy), a CONNECT proxy of this test on a public address:
platform calls go through it, URLs of users never do, so the guard sees their real address.

The test runs in a network namespace of its own (unshare --net) where the loopback interface
also carries 11.0.0.7, a public address (not a documentation one: those are refused too), so
that a "public" first hop that redirects to 127.0.0.1 can be tested without leaving the
machine."""
import os
import select
import shlex
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import unittest

PUBLIC = "11.0.0.7"

if os.environ.get("BOTGATE_IN_NETNS") != "1":
    env = dict(os.environ, BOTGATE_IN_NETNS="1")
    cmd = "ip link set lo up && ip addr add %s/32 dev lo && exec %s" % (
        PUBLIC, shlex.join([sys.executable, os.path.abspath(__file__)] + sys.argv[1:]))
    r = subprocess.run(["unshare", "--net", "--", "sh", "-c", cmd], env=env)
    if r.returncode != 0:
        print("test_ssrf: exit code %d (the namespace needs unshare --net, i.e. root)"
              % r.returncode, file=sys.stderr)
    sys.exit(r.returncode)

from harness import StackTest, free_port  # noqa: E402
from test_tls import make_cert  # noqa: E402

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



class ConnectProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy that answers CONNECT only, and ends the tunnel's TLS itself with a
    certificate for 127.0.0.1 (botgate trusts it through BOTGATE_CA_FILE), then passes the
    plain bytes to the target: enough for a platform on the simulator's plain HTTP. Every
    request line is kept; any other request (a proxied GET) is answered 403."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host, cert, key):
        super().__init__((host, 0), ProxyHandler)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.lock = threading.Lock()
        self.seen = []     # request lines since the last clear
        self.connects = 0  # CONNECTs since the start

    def lines(self):
        with self.lock:
            return list(self.seen)


class ProxyHandler(socketserver.BaseRequestHandler):
    def handle(self):
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, target = (line.split(" ") + ["", ""])[:2]
        with self.server.lock:
            self.server.seen.append(line)
            self.server.connects += method == "CONNECT"
        if method != "CONNECT":
            self.request.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
            return
        host, port = target.rsplit(":", 1)
        try:
            up = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
        except OSError:
            self.request.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        with up:
            self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with self.server.ctx.wrap_socket(self.request, server_side=True) as tls:
                self.relay(tls, up)

    @staticmethod
    def relay(tls, up):
        peer = {tls: up, up: tls}
        try:
            while True:
                ready = [tls] if tls.pending() else select.select([tls, up], [], [], 30)[0]
                if not ready:
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peer[sock].sendall(data)
        except (OSError, ssl.SSLError):
            return


class SsrfGuardWithProxy(SsrfGuard):
    """Every test of SsrfGuard again, with the proxy variables set and wechat's API on HTTPS
    through the proxy."""
    stack_args = dict(SsrfGuard.stack_args, start_gateway=False)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cert, key = make_cert(s.dir, "platform")
        cls.proxy = ConnectProxy(PUBLIC, cert, key)
        threading.Thread(target=cls.proxy.serve_forever, daemon=True).start()
        proxy = "http://%s:%d" % (PUBLIC, cls.proxy.server_address[1])
        s.start_gateway(extra={
            "BOTGATE_WECHAT_API_URL": "https://127.0.0.1:%d/wechat" % s.sim_port,
            "BOTGATE_CA_FILE": cert,
            "HTTPS_PROXY": proxy, "https_proxy": proxy, "http_proxy": proxy,
            "ALL_PROXY": proxy, "NO_PROXY": "", "no_proxy": ""})

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.proxy.shutdown()
            cls.proxy.server_close()

    def setUp(self):
        with self.proxy.lock:
            self.proxy.seen.clear()

    def tearDown(self):
        """Whatever the test did, only the platform went through the proxy."""
        platform = "CONNECT 127.0.0.1:%d HTTP/1.1" % self.s.sim_port
        self.assertEqual(set(self.proxy.lines()) - {platform}, set())

    def test_platform_calls_go_through_the_proxy(self):
        self.s.sim_reset()
        a = self.s.send({"channelId": "wx", "recipientId": "openid-2",
                         "response": [{"type": "TEXT", "text": "via the proxy"}]}, self.tok)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["ok"], 1, a)
        self.assertIn("send", [r["kind"] for r in self.s.sim_log()])
        # The simulator speaks plain HTTP: only the proxy's tunnel makes it HTTPS, so the send
        # went through a tunnel, opened by this test or kept from an earlier one.
        self.assertGreaterEqual(self.proxy.connects, 1)

    def test_https_to_loopback_is_not_tunnelled(self):
        """Through the proxy, the guard would see the proxy's public address, and the proxy
        would reach this machine's loopback for the user."""
        port = free_port()
        self.assert_refused("https://127.0.0.1:%d/media/a.png" % port)
        self.assert_refused("https://169.254.169.254/latest/meta-data/")


if __name__ == "__main__":
    unittest.main()
