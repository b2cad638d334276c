"""One botgate process per listening address. Its workers share the port (SO_REUSEPORT), but
a second process started on the same address (a second `make run`, a stale deploy) must not
join them: it would silently take a share of the connections and answer them from its own
Redis. It refuses to start, naming the address, and the first answers every request."""
import socket
import subprocess
import unittest

from harness import BIN, StackTest, free_port, http, tenant, wait_for

SENDS = 60  # a new connection each: the kernel would have given a joined process some


class ListenOnce(StackTest):
    stack_args = {"workers": 2}

    def start_second(self, **settings):
        env = dict(self.s.gateway_env(), **settings)
        p = subprocess.Popen([BIN + "/botgate"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            self.fail("a second botgate on an address in use started (and was killed)")
        return p.returncode, out.decode("utf-8", "replace")

    def test_second_instance_on_the_same_address_refused(self):
        tok, body = tenant(self.s, "lo", "mlo", "psid-lo")
        address = "127.0.0.1:%d" % self.s.port
        # another deployment: its own keys, where this token means nothing
        code, out = self.start_second(BOTGATE_LISTEN=address, BOTGATE_REDIS_PREFIX="other:")
        self.assertNotEqual(code, 0, out)
        self.assertIn(address, out)
        self.assertIn("another process already listens", out)
        self.assertIn("BOTGATE_LISTEN", out)
        for _ in range(SENDS):
            a = self.s.send(body, tok)
            self.assertEqual(a.status, 200, a)

    def test_any_other_listener_refused(self):
        # not botgate: any program of the same user listening with SO_REUSEPORT would have let
        # botgate's workers join it
        port = free_port()
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            other.bind(("127.0.0.1", port))
            other.listen()
            code, out = self.start_second(BOTGATE_LISTEN="127.0.0.1:%d" % port)
        self.assertNotEqual(code, 0, out)
        self.assertIn("127.0.0.1:%d" % port, out)
        self.assertIn("another process already listens", out)

    def test_address_free_again_after_stop(self):
        # the check does not mistake an earlier run's connections (TIME_WAIT) for a listener
        port = free_port()
        url = "http://127.0.0.1:%d" % port
        env = dict(self.s.gateway_env(), BOTGATE_LISTEN="127.0.0.1:%d" % port)
        for _ in range(2):
            p = subprocess.Popen([BIN + "/botgate"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            try:
                wait_for(lambda: http("GET", url + "/readyz", timeout=2).status == 200,
                         what="botgate on " + url)
                for _ in range(5):
                    self.assertEqual(http("GET", url + "/healthz").status, 200)
            finally:
                p.terminate()
                self.assertEqual(p.wait(20), 0)


if __name__ == "__main__":
    unittest.main()
