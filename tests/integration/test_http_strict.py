"""Inbound HTTP framing is strict (RFC 9112 section 6.3): a request whose length evhttp could
read two ways (two Content-Length headers, an unknown Transfer-Encoding, both, "+80", a value
past int64) is answered with a JSON error and its connection closed, so no smuggled request
behind it is ever served; a declared body over 1 MiB is refused before it is read; the bytes
of requests being read per worker are capped (RSS stays bounded under 200 slow 1 MiB uploads);
HEAD on the health checks; a token with a control character, or an Authorization header that
is not a usable Bearer token, is refused."""
import json
import os
import socket
import time
import unittest

from harness import StackTest, http, tenant, wait_for


def exchange(port, raw, timeout=5.0):
    """Sends raw bytes on a fresh connection; returns everything read until the server closes
    it (or the timeout), and whether it did close."""
    c = socket.create_connection(("127.0.0.1", port))
    c.settimeout(timeout)
    data, closed = b"", False
    try:
        c.sendall(raw)
        end = time.time() + timeout
        while time.time() < end:
            chunk = c.recv(65536)
            if not chunk:
                closed = True
                break
            data += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    finally:
        c.close()
    return data, closed


def answers(data):
    """The (status, JSON body) of each HTTP answer in data."""
    out = []
    while data.startswith(b"HTTP/1."):
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        body, data = rest[:length], rest[length:]
        out.append((status, json.loads(body) if body else None))
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class StrictFraming(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_MAX_READING_MB": "16"}}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tok, cls.body = tenant(cls.s, "fs", "ms", "psid-strict")
        cls.json_body = json.dumps(cls.body).encode()

    def smuggle(self, framing, body=b"", status=400, code=108):
        """framing: the header lines that make the length ambiguous. Behind the body comes a
        complete second request: it must never be answered."""
        second = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
        raw = (b"POST /sendResponses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
               self.tok.encode() + b"\r\nContent-Type: application/json\r\n" + framing +
               b"\r\n" + body + second)
        data, closed = exchange(self.s.port, raw)
        got = answers(data)
        self.assertEqual(len(got), 1, data)  # one answer: the smuggled GET is not served
        self.assertEqual(got[0][0], status, data)
        self.assertEqual(got[0][1]["err_code"], code, data)
        self.assertEqual(set(got[0][1]), {"ok", "err_code", "err", "error"})
        self.assertIn(b"Connection: close", data)
        self.assertTrue(closed, "the connection stayed open")
        return got[0][1]

    def test_two_content_lengths(self):
        n = len(self.json_body)
        self.smuggle(b"Content-Length: %d\r\nContent-Length: %d\r\n" % (n, n + 40),
                     self.json_body)

    def test_two_equal_content_lengths_refused_too(self):
        n = len(self.json_body)
        self.smuggle(b"Content-Length: %d\r\ncontent-length: %d\r\n" % (n, n), self.json_body)

    def test_content_length_list(self):
        n = len(self.json_body)
        self.smuggle(b"Content-Length: %d, %d\r\n" % (n, n), self.json_body)

    def test_plus_sign(self):
        self.smuggle(b"Content-Length: +%d\r\n" % len(self.json_body), self.json_body)

    def test_negative_and_empty(self):
        self.smuggle(b"Content-Length: -1\r\n")
        self.smuggle(b"Content-Length:\r\n")

    def test_unknown_transfer_encoding(self):
        ans = self.smuggle(b"Transfer-Encoding: gzip, chunked\r\n",
                           b"5\r\nhello\r\n0\r\n\r\n", status=501)
        self.assertIn("Transfer-Encoding", ans["err"])
        self.smuggle(b"Transfer-Encoding: identity\r\n", status=501)

    def test_transfer_encoding_with_content_length(self):
        self.smuggle(b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                     b"5\r\nhello\r\n0\r\n\r\n")

    def test_overflowing_content_length(self):
        t0 = time.time()
        self.smuggle(b"Content-Length: 99999999999999999999999999\r\n", status=413, code=118)
        self.assertLess(time.time() - t0, 3)  # not the HTTP timeout (30 s)

    def test_declared_body_over_1mib_refused_before_it_is_sent(self):
        c = socket.create_connection(("127.0.0.1", self.s.port))
        c.settimeout(5)
        c.sendall(b"POST /sendResponses HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % (1024 * 1024 + 1))
        data = c.recv(65536)  # answered on the head alone
        c.close()
        got = answers(data)
        self.assertEqual(got[0][0], 413, data)
        self.assertEqual(got[0][1]["err_code"], 118)

    def test_exactly_1mib_is_read(self):
        # the limit is "over 1 MiB": a 1 MiB body is read and judged by the request parser
        pad = b" " * (1024 * 1024 - len(self.json_body))
        ans = http("POST", self.s.url + "/sendResponses", self.json_body + pad,
                   {"Authorization": "Bearer " + self.tok})
        self.assertEqual(ans.status, 200, ans)

    def test_chunked_still_works(self):
        raw = (b"POST /sendResponses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
               self.tok.encode() + b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
               + b"%x\r\n" % len(self.json_body) + self.json_body + b"\r\n0\r\n\r\n")
        got = answers(exchange(self.s.port, raw)[0])
        self.assertEqual(got[0][0], 200, got)

    def test_pipelined_good_then_bad(self):
        n = len(self.json_body)
        good = (b"POST /sendResponses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                self.tok.encode() + b"\r\nContent-Length: %d\r\n\r\n" % n + self.json_body)
        bad = b"POST /sendResponses HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 9\r\n\r\nhello"
        third = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
        data, closed = exchange(self.s.port, good + bad + third)
        got = answers(data)
        self.assertEqual([g[0] for g in got], [200], data)  # the first answered, then closed
        self.assertTrue(closed)

    def good_request(self):
        return (b"POST /sendResponses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                self.tok.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(self.json_body) +
                self.json_body)

    def cpu_s(self):
        with open("/proc/%d/stat" % self.s.procs["botgate"].pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def test_sent_during_a_request_is_served_after_it(self):
        # The socket stays registered for reading while a request is worked on (conn.c,
        # on_hold): what the client sends meanwhile must wait, not be read early, and must not
        # keep the loop awake (a readable socket nobody reads would wake it on every turn).
        self.s.sim("POST", "/_sim/config", {"latency_ms": 1500})
        c = socket.create_connection(("127.0.0.1", self.s.port))
        c.settimeout(10)
        try:
            c.sendall(self.good_request())
            time.sleep(0.3)  # the first is waiting for the platform now
            cpu = self.cpu_s()
            c.sendall(self.good_request() + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.9)
            busy = self.cpu_s() - cpu
            data = b""
            while len(answers(data)) < 3:
                chunk = c.recv(65536)
                self.assertTrue(chunk, data)
                data += chunk
        finally:
            c.close()
            self.s.sim("POST", "/_sim/config", {"latency_ms": 0})
        self.assertEqual([g[0] for g in answers(data)], [200, 200, 200], data)
        # an idle worker uses next to nothing; a loop spinning on the socket, all of a CPU
        self.assertLess(busy, 0.1, "the worker spun while the request waited")

    def test_half_closed_client_still_gets_its_answer(self):
        self.s.sim("POST", "/_sim/config", {"latency_ms": 500})
        c = socket.create_connection(("127.0.0.1", self.s.port))
        c.settimeout(10)
        try:
            c.sendall(self.good_request())
            c.shutdown(socket.SHUT_WR)  # the end of the stream arrives during the request
            data = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            c.close()
            self.s.sim("POST", "/_sim/config", {"latency_ms": 0})
        self.assertEqual([g[0] for g in answers(data)], [200], data)

    def test_keep_alive_still_works(self):
        one = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        data, _ = exchange(self.s.port, one * 3, timeout=1.5)
        self.assertEqual([g[0] for g in answers(data)], [200, 200, 200], data)

    def test_head_healthz(self):
        for path in ("/healthz", "/readyz"):
            ans = http("HEAD", self.s.url + path)
            self.assertEqual(ans.status, 200, path)
            self.assertEqual(ans.raw, "", path)
        ans = http("DELETE", self.s.url + "/healthz")
        self.assertEqual(ans.status, 405)
        self.assertEqual(ans.headers.get("Allow"), "GET, HEAD")

    def test_query_token_with_nul_is_refused(self):
        url = self.s.url + "/sendResponses?accessToken=" + self.tok
        self.assertEqual(http("POST", url, self.body).status, 200)  # the plain token works
        for junk in ("%00junk", "%00", "%0a", "%7f"):
            ans = http("POST", url + junk, self.body)
            self.assert_unauthorized(ans)

    def test_unusable_authorization_does_not_fall_back_to_query(self):
        url = self.s.url + "/sendResponses?accessToken=" + self.tok
        for value in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer    ", "Token " + self.tok):
            ans = http("POST", url, self.body, {"Authorization": value})
            self.assert_unauthorized(ans)

    def test_reading_budget_bounds_rss(self):
        """200 connections each declare 1 MiB and send most of it slowly. With a 16 MiB budget
        only about 16 are read; the rest are refused with 503 at once. Held unbounded, the
        bodies alone would be 200 MiB."""
        pid = self.s.procs["botgate"].pid
        base = rss_kib(pid)
        conns, refused = [], 0
        chunk = b"x" * (64 * 1024)
        head = b"POST /sendResponses HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (1024 * 1024)
        try:
            for _ in range(200):
                c = socket.create_connection(("127.0.0.1", self.s.port))
                c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
                c.sendall(head)
                conns.append(c)
            for c in conns:
                c.setblocking(False)
            answered = set()
            for _ in range(15):  # 15 x 64 KiB: all but the last 64 KiB, a round at a time
                for i, c in enumerate(conns):
                    try:
                        if i not in answered and c.recv(1, socket.MSG_PEEK):
                            answered.add(i)  # refused: a client stops sending
                    except BlockingIOError:
                        pass
                    except OSError:
                        answered.add(i)
                    if i in answered:
                        continue
                    try:
                        c.send(chunk)
                    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                        pass
                time.sleep(0.05)
            time.sleep(0.5)
            grown = rss_kib(pid) - base
            for c in conns:
                try:
                    c.setblocking(True)
                    c.settimeout(0.2)
                    if c.recv(4096).startswith(b"HTTP/1.1 503"):
                        refused += 1
                except (socket.timeout, OSError):
                    pass
        finally:
            for c in conns:
                c.close()
        # 16 MiB of budget plus slack; unbounded this is over 190 MiB
        self.assertLess(grown, 80 * 1024, "RSS grew by %d KiB (%d refused)" % (grown, refused))
        self.assertGreater(refused, 100, "the budget refused too few")
        # and the worker still serves
        ans = http("POST", self.s.url + "/sendResponses", self.body,
                   {"Authorization": "Bearer " + self.tok})
        self.assertEqual(ans.status, 200)


if __name__ == "__main__":
    unittest.main()
