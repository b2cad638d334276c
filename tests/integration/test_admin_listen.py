"""BOTGATE_ADMIN_LISTEN: /metrics, /healthz and /readyz on their own address. Once it is set,
/metrics is no longer answered on the API listener (404), the health checks stay on both, and
the API routes are not on the admin address."""
import unittest

from harness import StackTest, free_port, http, tenant


class AdminListener(StackTest):
    @classmethod
    def setUpClass(cls):
        # the port is taken just before the stack starts, not when the module is read
        cls.admin_port = free_port()
        cls.stack_args = {"workers": 2,
                          "env": {"BOTGATE_ADMIN_LISTEN": "127.0.0.1:%d" % cls.admin_port}}
        super().setUpClass()
        cls.admin = "http://127.0.0.1:%d" % cls.admin_port
        cls.tok, cls.body = tenant(cls.s, "fa", "ma", "psid-admin")

    def test_metrics_moves_to_the_admin_listener(self):
        a = http("GET", self.admin + "/metrics")
        self.assertEqual(a.status, 200)
        self.assertTrue(a.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        self.assertIn("botgate_workers 2", a.raw)
        api = http("GET", self.s.url + "/metrics")
        self.assertEqual(api.status, 404)
        self.assertEqual(api.json["err_code"], 122)

    def test_health_checks_on_both(self):
        for base in (self.admin, self.s.url):
            for path in ("/healthz", "/readyz"):
                self.assertEqual(http("GET", base + path).status, 200, base + path)
                head = http("HEAD", base + path)
                self.assertEqual((head.status, head.raw), (200, ""), base + path)

    def test_api_routes_not_on_the_admin_listener(self):
        a = http("POST", self.admin + "/sendResponses", self.body,
                 {"Authorization": "Bearer " + self.tok})
        self.assertEqual(a.status, 404)
        ok = self.s.send(self.body, self.tok)
        self.assertEqual(ok.status, 200, ok)
        # the send is counted, and seen on the admin listener
        a = http("GET", self.admin + "/metrics")
        self.assertIn('botgate_requests_total{route="sendResponses",status="200",err_code="0"}',
                      a.raw)

    def test_bad_admin_address_is_refused_at_start(self):
        p = self.s.run_refused(BOTGATE_ADMIN_LISTEN="no-port-here")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"BOTGATE_ADMIN_LISTEN", p.stderr)

    def test_admin_address_in_use_is_refused_at_start(self):
        # a second process would otherwise join the admin listener's SO_REUSEPORT group and
        # answer part of the health checks and scrapes
        address = "127.0.0.1:%d" % self.admin_port
        p = self.s.run_refused(BOTGATE_ADMIN_LISTEN=address)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(address.encode(), p.stderr)
        self.assertIn(b"BOTGATE_ADMIN_LISTEN", p.stderr)
        self.assertIn(b"another process already listens", p.stderr)
        for _ in range(20):
            self.assertEqual(http("GET", self.admin + "/readyz").status, 200)


if __name__ == "__main__":
    unittest.main()
