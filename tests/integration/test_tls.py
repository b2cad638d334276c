"""Outbound TLS: a platform behind HTTPS with a CA from BOTGATE_CA_FILE is reached, a wrong CA
is refused, and a new connection resumes the TLS session that another transfer of the worker
made (one session cache for all of a worker's transfers, not one per easy handle)."""
import http.server
import json
import os
import ssl
import subprocess
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from harness import StackTest, facebook_channel, member


class Platform(http.server.ThreadingHTTPServer):
    """A Facebook send endpoint over TLS that closes every connection after its answer, so
    that each send needs a new TLS connection, and records whether the client resumed."""
    daemon_threads = True

    def __init__(self, cert, key):
        super().__init__(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.socket = ctx.wrap_socket(self.socket, server_side=True)
        self.lock = threading.Lock()
        self.resumed = {}  # message text: did its connection resume a session


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        text = body["message"]["text"]
        if text.startswith("slow"):
            time.sleep(1.5)
        with self.server.lock:
            self.server.resumed[text] = self.connection.session_reused
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


def make_cert(directory, name):
    cert, key = os.path.join(directory, name + ".pem"), os.path.join(directory, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


class TlsUpstream(StackTest):
    stack_args = {"workers": 1, "start_gateway": False}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s = cls.s
        cert, key = make_cert(s.dir, "platform")
        cls.other_ca, _ = make_cert(s.dir, "other")
        cls.platform = Platform(cert, key)
        threading.Thread(target=cls.platform.serve_forever, daemon=True).start()
        base = "https://127.0.0.1:%d/graph/v19.0" % cls.platform.server_address[1]
        s.start_gateway(extra={"BOTGATE_FACEBOOK_API_URL": base, "BOTGATE_CA_FILE": cert})
        s.put("channel", facebook_channel("tls-fb", "A"))
        s.put("member", member("tls-m", "tls-fb", "A", "psid-77"))
        cls.tok = s.token("A", "bot:sendResponses")
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
            s.start_gateway(extra={"BOTGATE_FACEBOOK_API_URL": self.base,
                                   "BOTGATE_CA_FILE": self.other_ca})
            a = self.send("refused")
            self.assertEqual(a.status, 200, a)
            self.assertEqual(a.json["sendResult"]["ok"], 0, a)
            self.assertIn("error", a.json["sendResult"]["result"][0], a)
        finally:
            s.stop_gateway()
            s.start_gateway(port=port, extra={"BOTGATE_FACEBOOK_API_URL": self.base,
                                              "BOTGATE_CA_FILE": os.path.join(s.dir,
                                                                              "platform.pem")})


if __name__ == "__main__":
    unittest.main()
