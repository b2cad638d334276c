"""Integration harness: real redis-server, the platform simulator and botgate on free ports.

Python standard library only. Each test file starts its own set of processes (setUpClass) and
stops them after (tearDownClass); botgate must then exit 0, which under AddressSanitizer also
means no leak was found.
"""
import json
import os
import random
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
REDIS_CLI = os.path.join(os.path.dirname(REDIS_SERVER), "redis-cli") if os.sep in REDIS_SERVER \
    else "redis-cli"
# "cluster": every Stack runs a Redis Cluster of 3 masters and 3 replicas instead of one server
CLUSTER = os.environ.get("BOTGATE_TEST_REDIS", "") == "cluster"


def free_port():
    """A port free now, below the kernel's ephemeral range (32768 and up here): a port the
    kernel handed out for bind(0) is one it also hands to outgoing connections, so between
    this call and the listener's bind a connection of a test running beside could take it.
    Cluster ports (free_cluster_port) are 20000 and up."""
    rnd = random.Random()
    while True:
        port = rnd.randrange(10000, 20000)
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue


def free_cluster_port():
    """A free port p with p + 10000 free too (a cluster node's bus), at most 55535."""
    rnd = random.Random()
    while True:
        port = rnd.randrange(20000, 55536)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue


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


def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def keyslot(key):
    """The Redis Cluster slot of key (its hash tag's, when it has one)."""
    key = key if isinstance(key, bytes) else str(key).encode()
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc16(key) % 16384


class ClusterRedis:
    """Redis's client for a cluster: each command to its key's master, MOVED and ASK followed;
    KEYS asks every master, FLUSHALL and SCRIPT go to every master."""

    EVERYWHERE = {"FLUSHALL", "FLUSHDB", "SCRIPT", "CONFIG"}

    def __init__(self, ports):
        self.ports = list(ports)
        self.conns = {}
        self.slots = [None] * 16384
        self.refresh()

    def node(self, port):
        if port not in self.conns:
            self.conns[port] = Redis(port)
        return self.conns[port]

    def refresh(self):
        for port in self.ports:
            try:
                ranges = self.node(port)("CLUSTER", "SLOTS")
            except (OSError, RuntimeError):
                continue
            for r in ranges:
                for s in range(r[0], r[1] + 1):
                    self.slots[s] = r[2][1]
            return
        raise OSError("no cluster node answers")

    def masters(self):
        return sorted(set(p for p in self.slots if p is not None))

    def port_of(self, key):
        return self.slots[keyslot(key)]

    def __call__(self, *args, retry=True):
        cmd = str(args[0]).upper()
        if cmd == "KEYS":
            return [k for p in self.masters() for k in self.node(p)(*args)]
        if cmd in self.EVERYWHERE:
            return [self.node(p)(*args) for p in self.masters()][0]
        if cmd in ("EVAL", "EVALSHA"):
            key = args[3] if int(args[2]) > 0 else None
        else:
            key = args[1] if len(args) > 1 else None
        port = self.port_of(key) if key is not None else self.masters()[0]
        asking = False
        for _ in range(6):
            conn = self.node(port)
            try:
                if asking:
                    conn("ASKING")
                return conn(*args)
            except RuntimeError as e:
                words = str(e).split()
                if words[0] not in ("MOVED", "ASK"):
                    raise
                port = int(words[2].rsplit(":", 1)[1])
                asking = words[0] == "ASK"
                if not asking:
                    self.refresh()
            except OSError:
                if not retry:
                    raise
                self.refresh()
                port = self.port_of(key) if key is not None else self.masters()[0]
        raise RuntimeError("too many redirections for %r" % (args,))

    def close(self):
        for c in self.conns.values():
            c.close()


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
        if CLUSTER:
            return self.start_cluster()
        self.redis_port = port or getattr(self, "redis_port", None) or free_port()
        with open(os.path.join(self.dir, "redis.log"), "ab") as log:
            self.procs["redis"] = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save",
                 "", "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
                 "--enable-debug-command", "local"],
                stdout=log, stderr=log)
        self.redis = Redis(self.redis_port)
        wait_for(lambda: self.redis("PING") == "PONG", what="redis-server")

    def start_cluster_node(self, port):
        with open(os.path.join(self.dir, "redis-%d.log" % port), "ab") as log:
            self.procs["redis-%d" % port] = subprocess.Popen(
                [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes-%d.conf" % port,
                 "--cluster-node-timeout", "1000", "--enable-debug-command", "local",
                 # replicas in sync at once (not after the default 5 s), and always promotable
                 "--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0",
                 # the other masters serve their slots while one is down (operations.md)
                 "--cluster-require-full-coverage", "no"],
                stdout=log, stderr=log)

    def start_cluster(self):
        """3 masters + 3 replicas on loopback; self.redis follows the slots."""
        self.cluster_ports = []
        while len(self.cluster_ports) < 6:
            port = free_cluster_port()
            if port not in self.cluster_ports:
                self.cluster_ports.append(port)
        for port in self.cluster_ports:
            self.start_cluster_node(port)
        for i in range(len(self.cluster_ports)):
            self.wait_cluster_node(i)
        subprocess.run([REDIS_CLI, "--cluster", "create"] +
                       ["127.0.0.1:%d" % p for p in self.cluster_ports] +
                       ["--cluster-replicas", "1", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        self.wait_cluster_ok()
        wait_for(self.replicas_in_sync, what="replicas in sync")
        self.redis = ClusterRedis(self.cluster_ports)
        self.redis_port = self.redis.masters()[0]

    def wait_cluster_node(self, i):
        """Node i answers. A free port can be taken between the check and redis-server's bind
        (an outgoing connection's ephemeral port, on a busy machine): the node then exits, and
        is started again on another port."""
        for _ in range(5):
            port = self.cluster_ports[i]
            proc = self.procs["redis-%d" % port]
            end = time.time() + 15
            while time.time() < end and proc.poll() is None:
                try:
                    if self.cluster_info(port) is not None:
                        return
                except OSError:
                    pass
                time.sleep(0.02)
            if proc.poll() is None:
                break
            proc.wait()
            del self.procs["redis-%d" % port]
            while port in self.cluster_ports:
                port = free_cluster_port()
            self.cluster_ports[i] = port
            self.start_cluster_node(port)
        raise AssertionError("timed out waiting for cluster node %d" % self.cluster_ports[i])

    def cluster_info(self, port):
        conn = Redis(port)
        try:
            info = conn("CLUSTER", "INFO")
        finally:
            conn.close()
        return dict(line.split(":", 1) for line in info.split("\r\n") if ":" in line)

    def wait_cluster_ok(self, timeout=30):
        """Every live node says cluster_state:ok and knows every slot."""
        def ok():
            for port in self.cluster_ports:
                if "redis-%d" % port not in self.procs:
                    continue
                info = self.cluster_info(port)
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                    return False
            return True
        wait_for(ok, timeout=timeout, what="cluster_state:ok")

    def replicas_in_sync(self):
        synced = 0
        for port in self.cluster_ports:
            conn = Redis(port)
            try:
                info = conn("INFO", "replication")
            finally:
                conn.close()
            synced += "master_link_status:up" in info
        return synced == len(self.cluster_ports) // 2

    def wait_failover(self, dead, timeout=30):
        """Until the live nodes give the slots of the dead master to one of its replicas."""
        def promoted():
            for port in self.cluster_ports:
                if port == dead or "redis-%d" % port not in self.procs:
                    continue
                conn = Redis(port)
                try:
                    masters = [r[2][1] for r in conn("CLUSTER", "SLOTS")]
                finally:
                    conn.close()
                if dead in masters:
                    return False
            return True
        wait_for(promoted, timeout=timeout, what="a replica promoted in place of %d" % dead)
        self.wait_cluster_ok(timeout)
        self.redis.refresh()

    def redis_port_of(self, key):
        """The port of the server that holds key (its master in a cluster)."""
        return self.redis.port_of(key) if CLUSTER else self.redis_port

    def redis_env(self):
        """The environment that points botgate and botgatectl at this Stack's Redis."""
        if CLUSTER:
            return {"BOTGATE_REDIS_URL": "redis://127.0.0.1:%d/0" % self.redis_port,
                    "BOTGATE_REDIS_CLUSTER": ",".join("127.0.0.1:%d" % p
                                                      for p in self.cluster_ports)}
        return {"BOTGATE_REDIS_URL": "redis://127.0.0.1:%d/0" % self.redis_port}

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
        env.update(self.redis_env())
        env.update(self.extra_env)
        return {k: v for k, v in env.items() if v is not None}

    def run_refused(self, **settings):
        """Runs botgate with these settings on a free port, expecting it to refuse to start;
        returns the finished process (its stderr says why)."""
        env = dict(self.gateway_env(), BOTGATE_LISTEN="127.0.0.1:%d" % free_port(), **settings)
        return subprocess.run([os.path.join(BIN, "botgate")], env=env, capture_output=True,
                              timeout=20)

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

    def start_gateway_under_callgrind(self, out, settings):
        """botgate with one worker under callgrind (its profile to the file out; dumped with
        callgrind_control), deadlines long enough for valgrind's slowness, then settings.
        Kept as procs["botgate"], so that close() stops it; returned once /readyz answers.
        The bench's counter (bench/instructions.py) runs it so."""
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        env = self.gateway_env()
        env.update({"BOTGATE_WORKERS": "1", "BOTGATE_REQUEST_TIMEOUT_MS": "60000",
                    "BOTGATE_UPSTREAM_TIMEOUT_MS": "50000", "BOTGATE_REDIS_TIMEOUT_MS": "20000"})
        env.update(settings)
        p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                              os.path.join(BIN, "botgate")], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs["botgate"] = p
        wait_for(lambda: http("GET", self.url + "/readyz", timeout=5).status == 200,
                 timeout=60, what="botgate under callgrind")
        return p

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
        env.update(self.redis_env())
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


def outbox_shard(cid, mid, shards=16):
    """store_outbox_shard: the outbox shard of a channel's member (BOTGATE_OUTBOX_SHARDS)."""
    h = 2166136261
    for b in cid.encode() + b"\xff" + mid.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h % shards


def turn_queue(cid, mid, shards=16):
    """A member's turn queue (store_turn_key): under the channel's hash tag on one server, in
    its outbox shard's slot on a cluster."""
    if CLUSTER:
        return "botgate:outbox:{%d}:turnq:%d:%s:%s" % (outbox_shard(cid, mid, shards),
                                                      len(cid.encode()), cid, mid)
    return "botgate:turnq:{%s}:%s" % (cid, mid)


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
