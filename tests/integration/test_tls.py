"""Outbound TLS, with both settings: botgate's own HTTP/1.1 over OpenSSL (BOTGATE_UPSTREAM_HTTP=1.1)
and its own HTTP/2 on libnghttp2 (BOTGATE_UPSTREAM_HTTP=2), which falls back to its HTTP/1.1 on
the same TLS connection when the platform chooses HTTP/1.1 by ALPN. A platform behind HTTPS with a
CA from BOTGATE_CA_FILE is reached, a wrong CA and a certificate for another name are refused,
a new connection resumes the TLS session that another of the worker's connections made, and
with HTTP/2 sends to a platform that speaks it share one connection instead of opening one each
(nginx, from Debian, as the HTTP/2 front of the simulator) and cross the platform's ends of
connections (GOAWAY) each delivered once, while sends over cleartext HTTP/1.1
do not wait for a first answer before opening their connections. An answer that comes as
several TLS records in one TCP segment is read whole: botgate's own TLS reads ahead, and what
OpenSSL holds must not wait for the socket to become readable again."""
import getpass
import grp
import http.server
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import test_faults
from harness import StackTest, free_port, tenant, wait_for


class Platform(http.server.ThreadingHTTPServer):
    """A Facebook send endpoint over TLS that closes every connection after its answer, so
    that each send needs a new TLS connection, and records whether the client resumed."""
    daemon_threads = True

    def __init__(self, cert, key, alpn=None):
        super().__init__(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        if alpn:  # the protocols it selects from (none by default)
            ctx.set_alpn_protocols(alpn)
        self.socket = ctx.wrap_socket(self.socket, server_side=True)
        self.lock = threading.Lock()
        self.resumed = {}  # message text: did its connection resume a session
        self.agents = {}   # message text: the User-Agent it came with


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        text = body["message"]["text"]
        if text.startswith("slow"):
            time.sleep(1.5)
        with self.server.lock:
            self.server.resumed[text] = self.connection.session_reused
            self.server.agents[text] = self.headers.get("User-Agent")
            n = len(self.server.resumed)
        out = json.dumps({"recipient_id": body["recipient"]["id"],
                          "message_id": "m_tls_%d" % n}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(out)
        self.close_connection = True

    def log_message(self, *args):
        pass


class SplitRecords(threading.Thread):
    """An HTTP/1.1 keep-alive platform over TLS that writes each answer as three TLS records
    (head, and the body in two halves) and sends them in one send() call, so that they arrive
    together: a reader that reads ahead gets all three in one read."""

    def __init__(self, cert, key):
        super().__init__(daemon=True)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.answers = 0      # answers sent
        self.connections = 0  # connections accepted

    def run(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.ctx.wrap_bio(inc, out, server_side=True)
        buf = b""
        try:
            while True:
                try:
                    if tls.version() is None:
                        tls.do_handshake()
                    while True:  # every record that came
                        data = tls.read(65536)
                        if not data:
                            return
                        buf += data
                except ssl.SSLWantReadError:
                    pass
                conn.sendall(out.read())
                head, sep, rest = buf.partition(b"\r\n\r\n")
                if sep:
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    if len(rest) >= length:
                        self.answer(conn, tls, out, json.loads(rest[:length]))
                        buf = rest[length:]
                        continue
                data = conn.recv(65536)
                if not data:
                    return
                inc.write(data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def answer(self, conn, tls, out, body):
        with self.lock:
            self.answers += 1
            n = self.answers
        text = json.dumps({"recipient_id": body["recipient"]["id"],
                           "message_id": "m_split_%d" % n}).encode()
        half = len(text) // 2
        tls.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(text))
        tls.write(text[:half])
        tls.write(text[half:])
        conn.sendall(out.read())  # the three records in one segment

    def close(self):
        self.listener.close()


def make_cert(directory, name, alt="IP:127.0.0.1"):
    cert, key = os.path.join(directory, name + ".pem"), os.path.join(directory, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=" + alt], check=True, capture_output=True)
    return cert, key


class TlsUpstream(StackTest):
    """With BOTGATE_UPSTREAM_HTTP=1.1: botgate's own HTTP/1.1 over OpenSSL (net/h1conn.c),
    on sockets curl connects."""
    stack_args = {"workers": 1, "start_gateway": False}
    setting = {"BOTGATE_UPSTREAM_HTTP": "1.1"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cert, key = make_cert(s.dir, "platform")
        cls.other_ca, _ = make_cert(s.dir, "other")
        cls.wrong_name, cls.wrong_name_key = make_cert(s.dir, "wrongname", "DNS:example.invalid")
        cls.platform = Platform(cert, key)
        threading.Thread(target=cls.platform.serve_forever, daemon=True).start()
        base = "https://127.0.0.1:%d/graph/v19.0" % cls.platform.server_address[1]
        s.start_gateway(extra=dict(cls.setting, BOTGATE_FACEBOOK_API_URL=base,
                                   BOTGATE_CA_FILE=cert))
        cls.tok, _ = tenant(s, "tls-fb", "tls-m", "psid-77")
        cls.base = base

    @classmethod
    def tearDownClass(cls):
        cls.platform.shutdown()
        cls.platform.server_close()
        super().tearDownClass()

    def send(self, text):
        return self.s.send({"channelId": "tls-fb", "memberId": "tls-m",
                            "response": [{"type": "TEXT", "text": text}]}, self.tok, timeout=15)

    def test_sends_over_tls_and_resumes_sessions_across_transfers(self):
        a = self.send("first")
        self.assertEqual(a.status, 200, a)
        self.assertEqual(a.json["sendResult"]["ok"], 1, a)
        self.assertEqual(self.platform.agents["first"], "botgate/1.0")
        self.assertTrue(a.json["sendResult"]["result"][0]["messageEvent"]["messageId"]
                        .startswith("m_tls_"), a)
        # "slow" holds its connection, and so its easy handle, for 1.5 s after its handshake;
        # "other" starts meanwhile on an easy handle that never made a connection. It resumes
        # only when the session that "slow" got is in a cache both handles use. (Not two
        # handshakes at once: a TLS 1.3 ticket is good for one resumption, RFC 8446 C.4.)
        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(self.send, "slow")
            time.sleep(0.5)
            other = pool.submit(self.send, "other")
            answers = [slow.result(), other.result()]
        for a in answers:
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.json["sendResult"]["ok"], 1, a)
        self.assertTrue(self.platform.resumed["slow"], self.platform.resumed)
        self.assertTrue(self.platform.resumed["other"],
                        "a new easy handle did not resume the worker's TLS session")

    def test_wrong_ca_is_refused(self):
        s = self.s
        port = s.port
        s.stop_gateway()
        try:
            s.start_gateway(extra=dict(self.setting, BOTGATE_FACEBOOK_API_URL=self.base,
                                       BOTGATE_CA_FILE=self.other_ca))
            a = self.send("refused")
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.json["sendResult"]["ok"], 0, a)
            el = a.json["sendResult"]["result"][0]
            # what curl tells of the failure, the certificate's problem included; no URL
            self.assertRegex(el["error"]["err"], r"^facebook: no answer: .*: "
                             r"(unable to get local issuer certificate|self.signed certificate)", a)
            self.assertNotIn("access_token", el["error"]["err"], a)
            self.assertNotIn("127.0.0.1", el["error"]["err"], a)
        finally:
            s.stop_gateway()
            s.start_gateway(port=port, extra=dict(self.setting, BOTGATE_FACEBOOK_API_URL=self.base,
                                                  BOTGATE_CA_FILE=os.path.join(s.dir,
                                                                               "platform.pem")))

    def test_certificate_for_another_name_is_refused(self):
        # a certificate the CA file trusts, but for example.invalid: the platform's address
        # is not in it
        other = Platform(self.wrong_name, self.wrong_name_key)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        s = self.s
        port = s.port
        url = "https://127.0.0.1:%d/graph/v19.0" % other.server_address[1]
        s.stop_gateway()
        try:
            s.start_gateway(extra=dict(self.setting, BOTGATE_FACEBOOK_API_URL=url,
                                       BOTGATE_CA_FILE=self.wrong_name))
            a = self.send("wrong-name")
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.json["sendResult"]["ok"], 0, a)
            err = a.json["sendResult"]["result"][0]["error"]["err"]
            self.assertRegex(err, r"^facebook: no answer: SSL peer certificate or SSH remote key "
                             r"was not OK: ", a)
            self.assertIn("IP address mismatch", err)  # OpenSSL's own check names it
            self.assertNotIn("wrong-name", other.resumed, "the request went out")
        finally:
            other.shutdown()
            other.server_close()
            s.stop_gateway()
            s.start_gateway(port=port, extra=dict(self.setting, BOTGATE_FACEBOOK_API_URL=self.base,
                                                  BOTGATE_CA_FILE=os.path.join(s.dir,
                                                                               "platform.pem")))


class TlsUpstreamHttp2(TlsUpstream):
    """With the default setting (BOTGATE_UPSTREAM_HTTP=2): HTTP/2 offered (not taken: the
    platform speaks HTTP/1.1); the same checks, session resumption across connections included."""
    setting = {}


NGINX_CONF = """
%(user)s
worker_processes 1;
pid %(dir)s/nginx.pid;
error_log %(dir)s/error.log warn;
events { worker_connections %(conns)d; }
http {
    access_log off;
    client_body_temp_path %(dir)s/body; proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fastcgi; uwsgi_temp_path %(dir)s/uwsgi; scgi_temp_path %(dir)s/scgi;
    upstream sim { server 127.0.0.1:%(sim)d; keepalive 256; }
    %(requests)s
    server {
        listen 127.0.0.1:%(port)d ssl http2;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        http2_max_concurrent_streams 128;
        location = /_front_status { stub_status; }
        location / {
            proxy_pass http://sim;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
"""


class SplitRecordUpstream(StackTest):
    stack_args = {"workers": 1, "start_gateway": False}
    setting = {"BOTGATE_UPSTREAM_HTTP": "1.1"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cert, key = make_cert(s.dir, "split")
        cls.platform = SplitRecords(cert, key)
        cls.platform.start()
        s.start_gateway(extra=dict(
            cls.setting,
            BOTGATE_FACEBOOK_API_URL="https://127.0.0.1:%d/graph/v19.0" % cls.platform.port,
            BOTGATE_CA_FILE=cert))
        cls.tok, cls.body = tenant(s, "split-fb", "split-m", "psid-99")

    @classmethod
    def tearDownClass(cls):
        cls.platform.close()
        super().tearDownClass()

    def test_an_answer_in_several_records_at_once_is_read_whole(self):
        # one after the other on a kept-alive connection, then 20 at once on several
        for i in range(5):
            a = self.s.send(self.body, self.tok, timeout=15)
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.json["sendResult"]["ok"], 1, a)
            self.assertTrue(a.json["sendResult"]["result"][0]["messageEvent"]["messageId"]
                            .startswith("m_split_"), a)
        self.assertEqual(self.platform.connections, 1)
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: self.s.send(self.body, self.tok, timeout=15),
                                    range(20)))
        for a in answers:
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.json["sendResult"]["ok"], 1, a)
        self.assertEqual(self.platform.answers, 25)


class SplitRecordUpstreamHttp2(SplitRecordUpstream):
    """The same with the default setting (HTTP/2): the platform chooses HTTP/1.1 by ALPN, and the
    connection the HTTP/2 client made carries the calls over HTTP/1.1 (one connection, still)."""
    setting = {}


class TlsIdleConnectionClosed(test_faults.IdleConnectionClosed):
    """test_faults' idle-close check over TLS (botgate's own HTTP/1.1): a parked TLS connection
    that the platform closes is let go without the loop spinning on it, and the next call goes
    out on a new connection (resuming the TLS session). With the default setting: the platform
    speaks HTTP/1.1 only, so the connection the HTTP/2 client made is the one parked."""
    setting = {}

    @classmethod
    def make_platform(cls, s):
        cert, key = make_cert(s.dir, "idle")
        platform = test_faults.ClosingPlatform()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        platform.socket = ctx.wrap_socket(platform.socket, server_side=True)
        return platform, "https", dict(cls.setting, BOTGATE_CA_FILE=cert)


class TlsIdleConnectionClosedHttp1(TlsIdleConnectionClosed):
    """The same with BOTGATE_UPSTREAM_HTTP=1.1."""
    setting = {"BOTGATE_UPSTREAM_HTTP": "1.1"}


def established_to(port):
    """Established TCP connections whose far end is 127.0.0.1:port (/proc/net/tcp)."""
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[2] == "0100007F:%04X" % port and fields[3] == "01":
                n += 1
    return n


def tls_ready(port, cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                return True
    except OSError:
        return False


def while_in_flight(test, body, tok, n, during):
    """n sends that the simulator holds for 1.5 s: during() runs once all n are in flight, and
    its result is returned after every send was checked to have succeeded."""
    s = test.s
    s.sim("POST", "/_sim/config", {"latency_ms": 1500})
    try:
        with ThreadPoolExecutor(n) as pool:
            futures = [pool.submit(s.send, body, tok, timeout=20) for _ in range(n)]
            wait_for(lambda: s.metric("botgate_requests_in_flight") >= n, timeout=10,
                     what="%d sends in flight" % n)
            seen = during()
            answers = [f.result() for f in futures]
    finally:
        s.sim("POST", "/_sim/config", {"latency_ms": 0})
    for a in answers:
        test.assertEqual(a.status, 200, a)
        test.assertEqual(a.json["sendResult"]["ok"], 1, a)
    return seen


def start_tls_front(s, name, conns=1024, requests=None):
    """nginx (Debian's) as an HTTPS front of the stack's simulator, HTTP/2 offered by ALPN,
    taking up to conns connections, each ended after requests (nginx's default: 1000) with a
    GOAWAY: (process, port, certificate)."""
    cert, key = make_cert(s.dir, name)
    d = os.path.join(s.dir, "nginx-" + name)
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(d, sub))
    port = free_port()
    user = ""
    if os.getuid() == 0:  # nginx's workers would be nobody otherwise
        user = "user %s %s;" % (getpass.getuser(), grp.getgrgid(os.getgid()).gr_name)
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(NGINX_CONF % {"user": user, "dir": d, "sim": s.sim_port, "port": port,
                              "cert": cert, "key": key, "conns": conns,
                              "requests": "keepalive_requests %d;" % requests if requests else ""})
    proc = subprocess.Popen(["nginx", "-p", d + "/", "-c", os.path.join(d, "nginx.conf"),
                             "-e", os.path.join(d, "error.log"), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: tls_ready(port, cert), what="nginx")
    return proc, port, cert


class NginxFront(StackTest):
    """A botgate with the default setting (HTTP/2) whose Facebook platform is the simulator
    behind an nginx HTTPS front (start_tls_front) of the class's name."""
    stack_args = {"workers": 1, "start_gateway": False}
    front, front_requests, extra = "h2", None, {}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cls.nginx, cls.port, cls.cert = start_tls_front(s, cls.front,
                                                        requests=cls.front_requests)
        s.start_gateway(extra=dict(
            cls.extra, BOTGATE_FACEBOOK_API_URL="https://127.0.0.1:%d/graph/v19.0" % cls.port,
            BOTGATE_CA_FILE=cls.cert))
        cls.tok, cls.body = tenant(s, cls.front + "-fb", cls.front + "-m", "psid-88")

    @classmethod
    def tearDownClass(cls):
        cls.nginx.terminate()
        cls.nginx.wait(10)
        super().tearDownClass()


class Http2Upstream(NginxFront):

    def test_sends_in_flight_share_one_connection(self):
        def connections():  # all 100 wait for the platform now
            time.sleep(0.5)
            return established_to(self.port)

        conns = while_in_flight(self, self.body, self.tok, 100, connections)
        # one connection carries the 100: those that came while it was being made waited on
        # it as streams, and the platform allows 128 at once
        self.assertEqual(conns, 1, "%d connections for 100 sends in flight" % conns)

    def test_http1_setting_keeps_one_connection_per_send_in_flight(self):
        s = self.s
        port = s.port
        url = "https://127.0.0.1:%d/graph/v19.0" % self.port
        cert = os.path.join(s.dir, "h2.pem")
        s.stop_gateway()
        try:
            s.start_gateway(extra={"BOTGATE_FACEBOOK_API_URL": url, "BOTGATE_CA_FILE": cert,
                                   "BOTGATE_UPSTREAM_HTTP": "1.1"})

            def connections():
                time.sleep(0.5)
                return established_to(self.port)

            conns = while_in_flight(self, self.body, self.tok, 20, connections)
            # HTTP/1.1 carries one call at a time: no stream sharing, a connection each
            self.assertGreaterEqual(conns, 20, "%d connections for 20 sends in flight" % conns)
        finally:
            s.stop_gateway()
            s.start_gateway(port=port, extra={"BOTGATE_FACEBOOK_API_URL": url,
                                              "BOTGATE_CA_FILE": cert})

    def test_unreadable_ca_file_is_refused_at_start(self):
        p = self.s.run_refused(BOTGATE_CA_FILE=os.path.join(self.s.dir, "missing.pem"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"BOTGATE_CA_FILE", p.stderr)
        self.assertIn(b"cannot be read: No such file or directory", p.stderr)

    def test_unknown_http_version_is_refused_at_start(self):
        p = self.s.run_refused(BOTGATE_UPSTREAM_HTTP="3")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"BOTGATE_UPSTREAM_HTTP must be 2 or 1.1", p.stderr)


class Http2PlatformEndsConnections(NginxFront):
    """nginx ends each HTTP/2 connection after 50 requests (keepalive_requests: a GOAWAY naming
    the last stream it takes, then the close once those are answered): 400 sends, 16 at a
    time, cross 8 such ends or more. Every send is answered, and the platform receives each
    message exactly once (a stream past the GOAWAY goes again on a new connection)."""
    front, front_requests, extra = "ends", 50, {"BOTGATE_MEMBER_ORDER": "0"}

    def test_every_send_crosses_the_connection_ends_once(self):
        s = self.s
        texts = ["end-%d" % i for i in range(400)]

        def send(text):
            return s.send(dict(self.body, response=[{"type": "TEXT", "text": text}]), self.tok,
                          timeout=20)
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(send, texts))
        for a in answers:
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.json["sendResult"]["ok"], 1, a)
        seen = [r["body"]["message"]["text"] for r in s.sim_log()
                if r["kind"] == "messages" and r["body"]["message"]["text"].startswith("end-")]
        self.assertEqual(sorted(seen), sorted(texts), "a message lost or received twice")
        # the premise: nginx did end connections (stub_status: connections it accepted)
        ctx = ssl.create_default_context(cafile=self.cert)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as t:
                t.sendall(b"GET /_front_status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                status = b""
                while True:
                    data = t.recv(4096)
                    if not data:
                        break
                    status += data
        accepts = int(status.split(b"server accepts handled requests")[1].split()[0])
        self.assertGreaterEqual(accepts, 8 + 1, status)  # 400 / 50 connections, and this one


class CleartextBurst(StackTest):
    """Waiting to learn whether a connection multiplexes is for TLS, where the handshake tells:
    over cleartext libcurl 7.88 learns it from the first answer, and a burst would wait for it."""
    stack_args = {"workers": 1}

    def test_a_first_burst_opens_its_connections_at_once(self):
        s = self.s
        tok, body = tenant(s, "cb-fb", "cb-m", "psid-99")
        while_in_flight(self, body, tok, 20, lambda: wait_for(
            lambda: established_to(s.sim_port) >= 20, timeout=1.2,
            what="20 connections to the simulator before its first answer"))


if __name__ == "__main__":
    unittest.main()
