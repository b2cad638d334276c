"""Redis over TLS (rediss://), with certificates this test makes: botgate and botgatectl reach a
TLS-only redis-server, with the certificate checked against BOTGATE_REDIS_CA_FILE and for the
URL's host; a wrong CA, a wrong name and a missing client certificate are refused and said so
in the log; mutual TLS with a client certificate; a Redis Cluster whose nodes speak TLS only
(tls-cluster); a master found through a sentinel that speaks TLS only."""
import json
import os
import shutil
import subprocess
import unittest

import harness
from harness import (BIN, REDIS_CLI, REDIS_SERVER, Stack, facebook_channel, free_cluster_port,
                     free_port, http, member, wait_for)


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """A CA, a server certificate for localhost and 127.0.0.1 signed by it, a client
    certificate signed by it, and another CA that signed nothing we see."""
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key",
                "-out", ca + ".crt", "-days", "2", "-subj", "/CN=botgate test " + ca, cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, subj, ext in (("server", "/CN=localhost", ["-extfile", "server.ext"]),
                            ("client", "/CN=botgate", [])):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
                name + ".csr", "-subj", subj, cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", name + ".crt", "-days", "2", *ext, cwd=d)


def tls_args(d, auth_clients="no"):
    return ["--tls-cert-file", os.path.join(d, "server.crt"),
            "--tls-key-file", os.path.join(d, "server.key"),
            "--tls-ca-cert-file", os.path.join(d, "ca.crt"),
            "--tls-auth-clients", auth_clients]


def tls_cli(d, port, *args):
    return subprocess.run([REDIS_CLI, "--tls", "--cacert", os.path.join(d, "ca.crt"),
                           "--cert", os.path.join(d, "client.crt"),
                           "--key", os.path.join(d, "client.key"), "-p", str(port)] +
                          list(args), capture_output=True, text=True, timeout=30)


@unittest.skipIf(harness.CLUSTER, "starts its own servers")
class RedisTls(unittest.TestCase):
    def setUp(self):
        self.s = Stack(workers=1, start_gateway=False)
        self.d = self.s.dir
        make_pki(self.d)

    def tearDown(self):
        codes = self.s.close()
        self.assertIn(codes.get("botgate"), (None, 0), self.s.all_output()[-3000:])
        self.s.cleanup_dir()

    def start_tls_redis(self, name, port, *extra):
        # "localhost" may name ::1 first (Debian's minbase root does): listen there too, where
        # the system has it ("-": skipped when it cannot be bound)
        with open(os.path.join(self.d, name + ".log"), "ab") as log:
            self.s.procs[name] = subprocess.Popen(
                [REDIS_SERVER, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                 "-::1",
                 "--save", "", "--appendonly", "no", "--dir", self.d] + list(extra),
                stdout=log, stderr=log)
        wait_for(lambda: tls_cli(self.d, port, "PING").stdout.strip() == "PONG",
                 what="TLS redis-server %d" % port)

    def env(self, url, **more):
        e = {"BOTGATE_REDIS_URL": url, "BOTGATE_REDIS_CA_FILE": os.path.join(self.d, "ca.crt")}
        e.update(more)
        return e

    def ctl(self, env, *args, input=None):
        return subprocess.run([os.path.join(BIN, "botgatectl")] + list(args), input=input,
                              text=True, capture_output=True, timeout=30,
                              env=dict(os.environ, **env))

    def tenant_and_send(self, env):
        """botgatectl writes a tenant through env's Redis, botgate sends through it."""
        for kind, rec in [("channel", facebook_channel("ct", "A")),
                          ("member", member("mt", "ct", "A", "psid-t"))]:
            r = self.ctl(env, kind, "put", "-", input=json.dumps(rec))
            self.assertEqual(r.returncode, 0, r.stderr)
        r = self.ctl(env, "token", "create", "--app", "A", "--scope", "bot:sendResponses")
        self.assertEqual(r.returncode, 0, r.stderr)
        tok = r.stdout.strip()
        self.s.extra_env.update(env)
        self.s.start_gateway()
        a = self.s.send({"channelId": "ct", "memberId": "mt",
                         "response": [{"type": "TEXT", "text": "over tls"}]}, tok)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(self.s.stop_gateway(), 0)

    def refused(self, env, says, ctl_says=None):
        """botgate stays unready on env, and its log says says; botgatectl fails saying
        ctl_says (default: says)."""
        self.s.extra_env.update(env)
        self.s.port = free_port()
        self.s.url = "http://127.0.0.1:%d" % self.s.port
        self.s.log_path = os.path.join(self.d, "botgate.log")
        with open(self.s.log_path, "ab") as log:
            self.s.procs["botgate"] = subprocess.Popen([os.path.join(BIN, "botgate")],
                                                       env=self.s.gateway_env(), stdout=log,
                                                       stderr=log)
        wait_for(lambda: says in self.s.gateway_log(), what="the log saying " + says)
        self.assertEqual(http("GET", self.s.url + "/readyz").status, 503)
        self.assertEqual(self.s.stop_gateway(), 0)
        r = self.ctl(env, "channel", "put", "-", input=json.dumps(facebook_channel("x", "A")))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(ctl_says or says, r.stderr)

    def test_tls_with_ca_and_host_name(self):
        port = free_port()
        self.start_tls_redis("redis-tls", port, *tls_args(self.d))
        self.tenant_and_send(self.env("rediss://localhost:%d/0" % port))
        # the records are in the TLS-only server
        self.assertGreater(int(tls_cli(self.d, port, "DBSIZE").stdout.strip()), 0)

    def test_wrong_ca_is_refused(self):
        port = free_port()
        self.start_tls_redis("redis-tls", port, *tls_args(self.d))
        self.refused(self.env("rediss://localhost:%d/0" % port,
                              BOTGATE_REDIS_CA_FILE=os.path.join(self.d, "other-ca.crt")),
                     "certificate verify failed")

    def test_wrong_name_is_refused(self):
        port = free_port()
        self.start_tls_redis("redis-tls", port, *tls_args(self.d))
        self.refused(self.env("rediss://127.0.0.1:%d/0" % port,
                              BOTGATE_REDIS_TLS_NAME="redis.example.com"),
                     "hostname mismatch")

    def test_plain_url_on_tls_settings_is_an_error(self):
        self.s.port = free_port()
        r = self.s.run_refused(BOTGATE_REDIS_CA_FILE=os.path.join(self.d, "ca.crt"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"rediss://", r.stderr)

    def test_mutual_tls(self):
        port = free_port()
        self.start_tls_redis("redis-tls", port, *tls_args(self.d, "yes"))
        url = "rediss://localhost:%d/0" % port
        # TLS 1.3: the server refuses the client after the client's handshake is done, so
        # botgatectl learns it as a reset on its first command
        self.refused(self.env(url), "TLS: tlsv13 alert certificate required", "Redis")
        self.tenant_and_send(self.env(
            url, BOTGATE_REDIS_TLS_CERT_FILE=os.path.join(self.d, "client.crt"),
            BOTGATE_REDIS_TLS_KEY_FILE=os.path.join(self.d, "client.key")))

    def test_cluster_over_tls(self):
        ports = []
        while len(ports) < 3:
            p = free_cluster_port()
            if p not in ports:
                ports.append(p)
        for p in ports:
            self.start_tls_redis("redis-%d" % p, p, *tls_args(self.d), "--tls-cluster", "yes",
                                 "--cluster-enabled", "yes", "--cluster-config-file",
                                 "nodes-%d.conf" % p, "--cluster-node-timeout", "1000")
        r = subprocess.run([REDIS_CLI, "--tls", "--cacert", os.path.join(self.d, "ca.crt"),
                            "--cluster", "create"] + ["127.0.0.1:%d" % p for p in ports] +
                           ["--cluster-yes"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for p in ports:
            wait_for(lambda: "cluster_state:ok" in tls_cli(self.d, p, "CLUSTER", "INFO").stdout,
                     what="cluster_state:ok on %d" % p)
        # the nodes' certificates hold 127.0.0.1: each node is checked for its address
        self.tenant_and_send(self.env(
            "rediss://127.0.0.1:%d/0" % ports[0],
            BOTGATE_REDIS_CLUSTER=",".join("127.0.0.1:%d" % p for p in ports)))

    def test_sentinel_over_tls(self):
        port, sport = free_port(), free_port()
        self.start_tls_redis("redis-tls", port, *tls_args(self.d), "--tls-replication", "yes")
        conf = os.path.join(self.d, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port 0\ntls-port %d\nbind 127.0.0.1\ndir %s\n" % (sport, self.d) +
                    "tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n" % (
                        os.path.join(self.d, "server.crt"), os.path.join(self.d, "server.key"),
                        os.path.join(self.d, "ca.crt")) +
                    "tls-auth-clients no\ntls-replication yes\n"
                    "sentinel monitor tlsmaster 127.0.0.1 %d 1\n" % port)
        sentinel = shutil.which("redis-sentinel")
        with open(os.path.join(self.d, "sentinel.log"), "ab") as log:
            self.s.procs["sentinel"] = subprocess.Popen(
                [sentinel, conf] if sentinel else [REDIS_SERVER, conf, "--sentinel"],
                stdout=log, stderr=log)
        wait_for(lambda: str(port) in tls_cli(self.d, sport, "SENTINEL",
                                              "get-master-addr-by-name", "tlsmaster").stdout,
                 what="the sentinel knows the master")
        self.s.extra_env["BOTGATE_REDIS_MASTER"] = "tlsmaster"
        self.tenant_and_send_sentinel(port, sport)

    def tenant_and_send_sentinel(self, port, sport):
        # botgatectl does not ask sentinels: it is pointed at the master
        for kind, rec in [("channel", facebook_channel("ct", "A")),
                          ("member", member("mt", "ct", "A", "psid-t"))]:
            r = self.ctl(self.env("rediss://127.0.0.1:%d/0" % port), kind, "put", "-",
                         input=json.dumps(rec))
            self.assertEqual(r.returncode, 0, r.stderr)
        r = self.ctl(self.env("rediss://127.0.0.1:%d/0" % port), "token", "create", "--app",
                     "A", "--scope", "bot:sendResponses")
        tok = r.stdout.strip()
        self.s.extra_env.update(self.env("rediss://127.0.0.1:1/0",
                                         BOTGATE_REDIS_SENTINELS="127.0.0.1:%d" % sport))
        self.s.start_gateway()
        a = self.s.send({"channelId": "ct", "memberId": "mt",
                         "response": [{"type": "TEXT", "text": "over tls"}]}, tok)
        self.assertEqual(a.status, 200, a)
        self.assertEqual(self.s.stop_gateway(), 0)


if __name__ == "__main__":
    unittest.main()
