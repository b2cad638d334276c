"""botgate's own HTTP/1.1 to a cleartext platform (net/h1conn.c, net/h1resp.c): the request
it writes, connection reuse, and every way an answer can come: chunked and cut into single
bytes, after a 100 Continue, delimited by the close, with bytes after it, malformed, too large,
none at all on a kept-alive connection, never. Each platform call is seen exactly once.
(Retry-After over this path: test_send_more_platforms, whose simulator is cleartext.)

The platform is a raw socket server, so that the answers are exactly the bytes written here.

Run: BOTGATE_BIN_DIR=/work/main/build-asan/bin python3 test_upstream_http1.py"""
import json
import socket
import threading
import time
import unittest

from harness import StackTest, tenant

OK_BODY = '{"recipient_id":"psid-h1","message_id":"m_h1_%d"}'


def answer(status, body, fields=()):
    head = "HTTP/1.1 %s\r\n" % status
    for f in fields:
        head += f + "\r\n"
    return head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body.encode()


class RawPlatform(threading.Thread):
    """Reads each request whole (head and Content-Length body) and plays the behaviour the
    message's text names."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.connections = 0
        self.calls = []  # (text, head lines, body)
        self.eofs = 0    # connections botgate closed after an answer

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def read_request(self, conn, buf):
        while b"\r\n\r\n" not in buf:
            data = conn.recv(65536)
            if not data:
                return None, buf
            buf += data
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        length = 0
        for line in lines[1:]:
            name, value = line.split(":", 1)
            if name.lower() == "content-length":
                length = int(value.strip())
        while len(buf) < length:
            data = conn.recv(65536)
            if not data:
                return None, buf
            buf += data
        return (lines, buf[:length]), buf[length:]

    def serve(self, conn):
        try:
            self.serve_requests(conn)
        except OSError:  # botgate reset it: it closed with an answer unread ("big")
            pass

    def serve_requests(self, conn):
        buf = b""
        with conn:
            while True:
                req, buf = self.read_request(conn, buf)
                if req is None:
                    with self.lock:
                        self.eofs += 1
                    return
                lines, body = req
                text = json.loads(body)["message"]["text"]
                with self.lock:
                    self.calls.append((text, lines, body))
                    n = len(self.calls)
                if not self.play(conn, text, n):
                    return

    def play(self, conn, text, n):
        """Answers; False when the connection is to end here."""
        ok = OK_BODY % n
        if text.startswith("plain"):
            conn.sendall(answer("200 OK", ok, ["Content-Type: application/json"]))
        elif text == "chunked-bytes":
            out = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n")
            half = len(ok) // 2
            for part in (ok[:half], ok[half:]):
                out += b"%x;ext=1\r\n" % len(part) + part.encode() + b"\r\n"
            out += b"0\r\nX-Trailer: t\r\n\r\n"
            for i in range(len(out)):
                conn.sendall(out[i:i + 1])
                if i % 16 == 0:
                    time.sleep(0.001)
        elif text == "continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            time.sleep(0.05)
            conn.sendall(answer("200 OK", ok))
        elif text == "until-close":
            conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + ok.encode())
            return False
        elif text == "extra-bytes":
            conn.sendall(answer("200 OK", ok) + b"HTTP/1.1 200 OK\r\n")
        elif text == "two-lengths":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n"
                         % (len(ok), len(ok) + 1) + ok.encode())
            return False
        elif text == "big":
            conn.sendall(answer("200 OK", "x" * (2 * 1024 * 1024)))
        elif text == "silent-close":
            return False
        elif text == "never":
            time.sleep(3)
            return False
        return True

    def close(self):
        self.sock.close()


class SendsText:
    """For a StackTest with a tenant (self.tok, self.body): one TEXT message sent, and its
    result checked; a platform's message ids begin with message_ids."""
    message_ids = "m_h1_"

    def send(self, text):
        body = dict(self.body, response=[{"type": "TEXT", "text": text}])
        a = self.s.send(body, self.tok, timeout=15)
        self.assertEqual(a.status, 200, a)
        return a.json["sendResult"]

    def assert_sent(self, r):
        self.assertEqual(r["ok"], 1, r)
        self.assertTrue(r["result"][0]["messageEvent"]["messageId"]
                        .startswith(self.message_ids), r)

    def assert_failed(self, r, pattern):
        self.assertEqual(r["ok"], 0, r)
        err = r["result"][0]["error"]["err"]
        self.assertRegex(err, pattern, r)
        self.assertNotIn("access_token", err)
        self.assertNotIn("127.0.0.1", err)


class OwnHttp1(SendsText, StackTest):
    stack_args = {"workers": 1, "start_gateway": False}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.platform = RawPlatform()
        cls.platform.start()
        cls.s.start_gateway(extra={
            "BOTGATE_FACEBOOK_API_URL": "http://127.0.0.1:%d/graph/v19.0" % cls.platform.port,
            "BOTGATE_UPSTREAM_TIMEOUT_MS": "1500"})
        cls.tok, cls.body = tenant(cls.s, "h1-fb", "h1-m", "psid-h1")

    @classmethod
    def tearDownClass(cls):
        cls.platform.close()
        super().tearDownClass()

    def calls_of(self, text):
        with self.platform.lock:
            return [c for c in self.platform.calls if c[0] == text]

    def test_a_request_as_written_and_one_connection_reused(self):
        before = self.platform.connections
        for i in range(5):
            self.assert_sent(self.send("plain-%d" % i))
        self.assertEqual(self.platform.connections - before, 1, "a kept-alive connection "
                         "carries every call")
        text, lines, body = self.calls_of("plain-0")[0]
        method, target, version = lines[0].split(" ")
        self.assertEqual((method, version), ("POST", "HTTP/1.1"))
        self.assertTrue(target.startswith("/graph/v19.0/me/messages?"), target)
        fields = {}
        for line in lines[1:]:
            name, value = line.split(":", 1)
            self.assertNotIn(name.lower(), fields, "a field twice")
            fields[name.lower()] = value.strip()
        self.assertEqual(fields["host"], "127.0.0.1:%d" % self.platform.port)
        self.assertEqual(fields["content-type"], "application/json")
        self.assertEqual(fields["user-agent"], "botgate/1.0")
        self.assertEqual(int(fields["content-length"]), len(body))
        self.assertNotIn("expect", fields)
        self.assertEqual(json.loads(body)["recipient"]["id"], "psid-h1")

    def test_b_chunked_answer_in_single_bytes(self):
        self.assert_sent(self.send("chunked-bytes"))
        self.assert_sent(self.send("plain-after-chunked"))
        self.assertEqual(len(self.calls_of("chunked-bytes")), 1)

    def test_c_interim_100_is_skipped(self):
        self.assert_sent(self.send("continue"))
        self.assertEqual(len(self.calls_of("continue")), 1)

    def test_d_answer_delimited_by_the_close(self):
        before = self.platform.connections
        self.assert_sent(self.send("until-close"))
        self.assert_sent(self.send("plain-after-close"))
        self.assertEqual(self.platform.connections - before, 1,
                         "the closed connection was not used again")

    def test_e_bytes_after_the_answer_end_the_connection(self):
        self.assert_sent(self.send("plain-before-extra"))
        eofs = self.platform.eofs
        self.assert_sent(self.send("extra-bytes"))
        deadline = time.time() + 5
        while self.platform.eofs == eofs and time.time() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.platform.eofs, eofs + 1, "botgate kept a connection that had "
                         "sent bytes nobody asked for")
        self.assert_sent(self.send("plain-after-extra"))

    def test_f_malformed_answer_is_a_clear_failure(self):
        self.assert_failed(self.send("two-lengths"), r"^facebook: .*Content-Length")
        self.assertEqual(len(self.calls_of("two-lengths")), 1)

    def test_g_answer_too_large(self):
        self.assert_failed(self.send("big"), r"answer too large")
        self.assertEqual(len(self.calls_of("big")), 1)

    def test_h_kept_alive_connection_closed_after_the_request_is_not_sent_again(self):
        self.assert_sent(self.send("plain-before-silent"))
        self.assert_failed(self.send("silent-close"), r"not sent again")
        self.assertEqual(len(self.calls_of("silent-close")), 1, "sent twice")

    def test_i_no_answer_within_the_deadline(self):
        t0 = time.time()
        self.assert_failed(self.send("never"), r"Timeout was reached \(after 1[45]\d\d ms\)")
        self.assertLess(time.time() - t0, 3)
        self.assertEqual(len(self.calls_of("never")), 1)
        self.assert_sent(self.send("plain-after-never"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
