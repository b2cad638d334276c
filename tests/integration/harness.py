"""Integration harness: real redis-server, the platform simulator and botgate on free ports.

Python standard library only. Each test file starts its own set of processes (setUpClass) and
stops them after (tearDownClass); botgate must then exit 0, which under AddressSanitizer also
means no leak was found.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

BIN = os.environ.get("BOTGATE_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout=15.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


class Redis:
    """A minimal RESP client: enough to read and tweak what botgate stores."""

    def __init__(self, port):
        self.port = port
        self.sock = None
        self.buf = b""

    def _connect(self):
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError("bad RESP reply %r" % line)

    def __call__(self, *args, retry=True):
        if self.sock is None:
            self._connect()
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        try:
            self.sock.sendall(out)
            return self._reply()
        except OSError:
            # a server that closed an idle connection (a failover does) gets one more try
            self.close()
            if not retry:
                raise
            return self(*args, retry=False)

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None


class Answer:
    def __init__(self, status, body, headers, header_items=None):
        self.status = status
        self.raw = body
        self.headers = headers
        self.header_items = header_items or list(headers.items())  # repeated names kept
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def __repr__(self):
        return "Answer(%d, %s)" % (self.status, self.raw[:500])


def http(method, url, body=None, headers=None, timeout=30):
    data = None
    hdrs = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Answer(r.status, r.read().decode("utf-8", "replace"), dict(r.headers),
                          list(r.headers.items()))
    except urllib.error.HTTPError as e:
        return Answer(e.code, e.read().decode("utf-8", "replace"), dict(e.headers),
                      list(e.headers.items()))


class Stack:
    """redis-server + botgate-sim + botgate, each on a free port, in one temporary directory."""

    def __init__(self, workers=2, env=None, sim_threads=2, start_gateway=True,
                 sim_host="127.0.0.1"):
        self.dir = tempfile.mkdtemp(prefix="botgate-it-")
        self.procs = {}
        self.workers = workers
        self.extra_env = env or {}
        try:
            self.start_redis()
            self.start_sim(sim_threads, sim_host)
            if start_gateway:
                self.start_gateway()
        except BaseException:
            self.close()
            raise

    # -- processes --
    def start_redis(self, port=None):
        self.redis_port = port or getattr(self, "redis_port", None) or free_port()
        with open(os.path.join(self.dir, "redis.log"), "ab") as log:
            self.procs["redis"] = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save",
                 "", "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
                 "--enable-debug-command", "local"],
                stdout=log, stderr=log)
        self.redis = Redis(self.redis_port)
        wait_for(lambda: self.redis("PING") == "PONG", what="redis-server")

    def stop_redis(self):
        p = self.procs.pop("redis", None)
        if p:
            p.kill()
            p.wait()
        self.redis.close()

    def start_sim(self, threads=2, host="127.0.0.1"):
        port_file = os.path.join(self.dir, "sim.port")
        with open(os.path.join(self.dir, "sim.log"), "ab") as log:
            self.procs["sim"] = subprocess.Popen(
                [os.path.join(BIN, "botgate-sim"), "--listen", host + ":0", "--port-file",
                 port_file, "--threads", str(threads), "--quiet"], stdout=log, stderr=log)
        wait_for(lambda: os.path.exists(port_file), what="simulator port file")
        with open(port_file) as f:
            self.sim_port = int(f.read().strip())
        self.sim_url = "http://127.0.0.1:%d" % self.sim_port

    def gateway_env(self):
        env = dict(os.environ)
        env.update({
            "BOTGATE_LISTEN": "127.0.0.1:%d" % self.port,
            "BOTGATE_REDIS_URL": "redis://127.0.0.1:%d/0" % self.redis_port,
            "BOTGATE_WORKERS": str(self.workers),
            "BOTGATE_FACEBOOK_API_URL": self.sim_url + "/graph/v19.0",
            "BOTGATE_WHATSAPP_CLOUD_API_URL": self.sim_url + "/graph/v19.0",
            "BOTGATE_SLACK_API_URL": self.sim_url + "/slack/api",
            "BOTGATE_WECHAT_API_URL": self.sim_url + "/wechat",
            "BOTGATE_TEAMWORK_API_URL": self.sim_url + "/teamwork/appstore/api",
            "BOTGATE_LOG_LEVEL": "debug",
            "BOTGATE_REDIS_TIMEOUT_MS": "500",
            "BOTGATE_REQUEST_TIMEOUT_MS": "4000",
            "BOTGATE_UPSTREAM_TIMEOUT_MS": "2000",
            # Per-member order (on by default) serialises the requests for one member, and its
            # scripts count among a request's Redis commands: most tests put many requests on
            # one member at once, or count commands. test_idempotency.py runs the default
            # (a value None removes a setting).
            "BOTGATE_MEMBER_ORDER": "0",
        })
        env.update(self.extra_env)
        return {k: v for k, v in env.items() if v is not None}

    def start_gateway(self, port=None, name="botgate", extra=None):
        self.port = port or getattr(self, "port", None) or free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(self.dir, name + ".log")
        env = self.gateway_env()
        env.update(extra or {})
        with open(self.log_path, "ab") as log:
            self.procs[name] = subprocess.Popen([os.path.join(BIN, "botgate")], env=env,
                                                stdout=log, stderr=log)
        wait_for(lambda: http("GET", self.url + "/readyz", timeout=2).status == 200,
                 what="botgate /readyz")
        return self.procs[name]

    def stop_gateway(self, name="botgate", sig=signal.SIGTERM, timeout=30):
        p = self.procs.pop(name, None)
        if p is None:
            return None
        p.send_signal(sig)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return "hung"

    def close(self):
        codes = {}
        for name in [n for n in self.procs if n.startswith("botgate")]:
            codes[name] = self.stop_gateway(name)
        for name, p in list(self.procs.items()):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = {}
        if getattr(self, "redis", None):
            self.redis.close()
        return codes

    def gateway_log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def all_output(self):
        out = ""
        for name in os.listdir(self.dir):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out += f.read()
        return out

    def cleanup_dir(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- botgatectl --
    def ctl(self, *args, input=None, check=True):
        env = dict(os.environ)
        env["BOTGATE_REDIS_URL"] = "redis://127.0.0.1:%d/0" % self.redis_port
        r = subprocess.run([os.path.join(BIN, "botgatectl")] + list(args), env=env, input=input,
                           capture_output=True, text=True, timeout=30)
        if check and r.returncode != 0:
            raise AssertionError("botgatectl %s failed: %s" % (" ".join(args), r.stderr))
        return r

    def put(self, kind, record):
        return self.ctl(kind, "put", "-", input=json.dumps(record))

    def token(self, app, *scopes, extra=()):
        args = ["token", "create", "--app", app]
        for s in scopes:
            args += ["--scope", s]
        return self.ctl(*args, *extra).stdout.strip()

    # -- API --
    def post(self, path, body, token=None, query_token=None, headers=None, timeout=30):
        url = self.url + path
        hdrs = dict(headers or {})
        if token:
            hdrs["Authorization"] = "Bearer " + token
        if query_token:
            url += "?accessToken=" + urllib.request.quote(query_token, safe="")
        return http("POST", url, body, hdrs, timeout)

    def send(self, body, token, **kw):
        return self.post("/sendResponses", body, token=token, **kw)

    def metric(self, series):
        """The value of one series of GET /metrics (name with its labels), 0 when absent."""
        for line in http("GET", self.url + "/metrics").raw.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[1])
        return 0.0

    # -- simulator --
    def sim(self, method, path, body=None):
        return http(method, self.sim_url + path, body).json

    def sim_reset(self):
        self.sim("POST", "/_sim/reset", {})

    def sim_log(self, since=0):
        return self.sim("GET", "/_sim/log?since=%d" % since)["requests"]


def facebook_channel(cid, app, **over):
    ch = {"_id": cid, "app": app, "type": "facebook", "on": True, "name": "fb " + cid,
          "info": {"accessToken": "fb-page-token-" + cid, "pageId": "1234567890"}}
    ch.update(over)
    return ch


def whatsapp_channel(cid, app, api_path, **over):
    ch = {"_id": cid, "app": app, "type": "whatsapp", "on": True,
          "info": {"apiPath": api_path, "adminUsername": "admin",
                   "adminPassword": "wa-admin-password-" + cid, "waId": "85200000000"}}
    ch.update(over)
    return ch


def cloud_channel(cid, app, **over):
    ch = {"_id": cid, "app": app, "type": "whatsapp-cloud", "on": True,
          "info": {"accessToken": "cloud-token-" + cid, "phoneNumberId": "1055550000",
                   "wabaId": "2000"}}
    ch.update(over)
    return ch


def member(mid, cid, app, external, platform="facebook", **over):
    m = {"_id": mid, "channel": cid, "app": app, "externalId": external, "platform": platform,
         "firstName": "Ada", "lastName": "L", "locale": "en", "customLocale": None, "tags": [],
         "meta": {}, "botMeta": {"tree": None, "nodeCompositeId": None, "liveChat": False,
                                 "subscribed": True, "tempData": {}},
         "createdAt": 1700000000000, "updatedAt": 1700000000000}
    m.update(over)
    return m


def tenant(s, cid, mid, psid, app="A"):
    """A Facebook channel of app with one member, a send token, and a TEXT send to them."""
    s.put("channel", facebook_channel(cid, app))
    s.put("member", member(mid, cid, app, psid))
    body = {"channelId": cid, "memberId": mid, "response": [{"type": "TEXT", "text": "x"}]}
    return s.token(app, "bot:sendResponses"), body


class StackTest(unittest.TestCase):
    """A test case class whose tests share one Stack; botgate must exit 0 at the end."""

    stack_args = {}

    def assert_error(self, ans, code, http_status=500, mentions=None):
        """A failure answer as contract.md section 5 has it: exactly ok, err_code, err, error."""
        self.assertEqual(ans.status, http_status, ans)
        self.assertEqual(set(ans.json), {"ok", "err", "error", "err_code"}, ans)
        self.assertEqual(ans.json["ok"], 0, ans)
        self.assertEqual(ans.json["err_code"], code, ans)
        self.assertIsInstance(ans.json["err_code"], int)
        self.assertEqual(ans.json["err"], ans.json["error"])
        if mentions:
            self.assertIn(mentions, ans.json["err"])

    def assert_unauthorized(self, ans):
        self.assertEqual(ans.status, 500, ans)
        self.assertEqual(ans.json, {"ok": 0, "err": "User is not authorized",
                                    "error": "User is not authorized"})

    @classmethod
    def setUpClass(cls):
        cls.s = Stack(**cls.stack_args)

    @classmethod
    def tearDownClass(cls):
        codes = cls.s.close()
        log = ""
        try:
            log = cls.s.all_output()
        finally:
            bad = {k: v for k, v in codes.items() if v != 0}
            if not bad:
                cls.s.cleanup_dir()
        if bad:
            raise AssertionError("botgate exit codes %s; output:\n%s" % (bad, log[-20000:]))
