#!/bin/bash
# make test-deploy: the deployment files of deploy/ checked, built and run on this machine.
#   1. static checks: haproxy -c, docker-compose config, yamllint, systemd-analyze verify,
#      Kubernetes manifests against the API schemas (npm package kubernetes-models)
#   2. image: a Debian bookworm base made with debootstrap (cached in build-deploy/), the image
#      built with podman, run on the host network against redis-server and the simulator,
#      one real sendResponses through it, HEALTHCHECK present and passing, exit 0 on SIGTERM
#   3. compose: deploy/docker-compose.yml up with podman-compose in a private network namespace
#      (bridge on 192.0.2.0/24), load through its haproxy, every answer 200
#   4. rolling restart: haproxy (deploy/haproxy.cfg) in front of two botgate processes under
#      continuous load; each is sent SIGTERM, must exit 0 and come back; no request may fail
#      and every message must reach the platform exactly once. Done twice: with haproxy told to
#      drain the instance first (runtime API), and with SIGTERM alone (haproxy finds out by its
#      health checks and retries what it safely can).
# Needs root (podman, network namespaces, apt-get through scripts/deps.sh).
# Everything it starts is stopped, and everything it creates outside build-deploy/ removed, on
# exit. Kept in build-deploy/ between runs: the base rootfs tarball, podman's image store (layer
# cache), node_modules for the schema check. Logs of the last run: build-deploy/last-run/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
t_start=$(date +%s)

say() { printf '\n== %s\n' "$*"; }
info() { printf '   %s\n' "$*"; }
fail() { printf '\ntest-deploy: FAILED: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "run as root (podman, ip netns)"
scripts/deps.sh deploy
# Node.js's own npm (the machine's nodejs package ships it); Debian's npm conflicts with it.
command -v npm >/dev/null || fail "npm not found: install Node.js with npm (Debian: apt-get install npm)"

bd=$root/build-deploy
run=$bd/last-run
mkdir -p "$bd"
rm -rf "$run"
mkdir -p "$run"

# ---------------------------------------------------------------------------------------------
# cleanup: a stack of commands, run in reverse order on any exit
cleanups=()
defer() { cleanups+=("$*"); }
cleanup() {
  local rc=$? i
  trap - EXIT INT TERM
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do
    eval "${cleanups[i]}" >>"$run/cleanup.log" 2>&1 || true
  done
  if [ $rc -ne 0 ]; then
    echo "test-deploy: logs in $run" >&2
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Background processes of this script, stopped by pid.
stop_pid() { # pid [signal]
  kill -"${2:-TERM}" "$1" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}

free_ports() { # n: n distinct free TCP ports on 127.0.0.1
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

wait_http() { # url what [seconds]: until the URL answers 200
  local i
  for i in $(seq $((${3:-20} * 10))); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$1" 2>/dev/null)" = 200 ] && return 0
    sleep 0.1
  done
  fail "$2 did not answer 200 at $1"
}

# ---------------------------------------------------------------------------------------------
# helper programs (Python standard library only)
cat >"$run/load.py" <<'EOF'
"""Load generator: POST /sendResponses from several threads over keep-alive connections.
Every message text is unique (TAG-thread-seq), so that the simulator's record shows whether each
one arrived exactly once. Stops after --count requests, or when --stop-file appears.
Counts every answer that is not HTTP 200 with "ok":1, and every connection error."""
import argparse, http.client, json, os, threading, time, urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("--url", required=True)
ap.add_argument("--token", required=True)
ap.add_argument("--threads", type=int, default=8)
ap.add_argument("--count", type=int, default=0)
ap.add_argument("--stop-file")
ap.add_argument("--tag", default="load")
ap.add_argument("--out", required=True)
ap.add_argument("--close", action="store_true", help="a new connection for every request")
a = ap.parse_args()
u = urllib.parse.urlsplit(a.url)
lock = threading.Lock()
st = {"sent": 0, "ok": 0, "failed": 0, "kinds": {}, "failures": [], "texts": []}
budget = [a.count]
t0 = time.time()


def take():
    with lock:
        if a.count:
            if budget[0] <= 0:
                return False
            budget[0] -= 1
            return True
    return not os.path.exists(a.stop_file)


def worker(n):
    conn, seq = None, 0
    while take():
        seq += 1
        text = "%s-%d-%d" % (a.tag, n, seq)
        body = json.dumps({"channelId": "c1", "memberId": "m1",
                           "response": [{"type": "TEXT", "text": text}]})
        kind = None
        try:
            if conn is None:
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            conn.request("POST", "/sendResponses", body,
                         {"Authorization": "Bearer " + a.token, "Content-Type": "application/json",
                          "Connection": "close" if a.close else "keep-alive"})
            r = conn.getresponse()
            data = r.read()
            if r.status != 200:
                kind = "http %d: %s" % (r.status, data[:200].decode("utf-8", "replace"))
            elif json.loads(data).get("ok") != 1:
                kind = "ok!=1: " + data[:200].decode("utf-8", "replace")
            if a.close or r.getheader("Connection", "").lower() == "close":
                conn.close(); conn = None
        except Exception as e:  # connection refused, reset, timeout, bad answer
            kind = "%s: %s" % (type(e).__name__, e)
            if conn is not None:
                conn.close()
            conn = None
        with lock:
            st["sent"] += 1
            st["texts"].append(text)
            if kind is None:
                st["ok"] += 1
            else:
                st["failed"] += 1
                k = kind.split(":")[0]
                st["kinds"][k] = st["kinds"].get(k, 0) + 1
                if len(st["failures"]) < 50:
                    st["failures"].append({"t": round(time.time() - t0, 3), "text": text, "error": kind})


ths = [threading.Thread(target=worker, args=(i,)) for i in range(a.threads)]
for t in ths:
    t.start()
for t in ths:
    t.join()
st["seconds"] = round(time.time() - t0, 2)
st["started"] = t0
with open(a.out, "w") as f:
    json.dump(st, f)
print("load: %d sent, %d ok (200), %d failed in %.1f s (%.0f req/s) %s" % (
    st["sent"], st["ok"], st["failed"], st["seconds"], st["sent"] / max(st["seconds"], 0.001),
    json.dumps(st["kinds"]) if st["kinds"] else ""))
EOF

cat >"$run/delivered.py" <<'EOF'
"""Compares what the load generator sent with what the simulator recorded: each text once."""
import collections, json, sys, urllib.request
stats = json.load(open(sys.argv[1]))
sim = sys.argv[2]
got = collections.Counter()
since = 0
while True:  # the simulator answers at most 10000 entries a page
    with urllib.request.urlopen(sim + "/_sim/log?since=%d" % since, timeout=60) as r:
        page = json.load(r)
    for e in page["requests"]:
        try:
            got[e["body"]["message"]["text"]] += 1
        except (KeyError, TypeError):
            pass
    if not page["requests"]:
        break
    since = page["next"]
failed = [f["text"] for f in stats["failures"]]
sent = stats["texts"]
tag = sent[0].rsplit("-", 2)[0] if sent else ""
missing = [t for t in sent if got[t] == 0]
dups = {t: c for t, c in got.items() if t.startswith(tag + "-") and c > 1}
extra = [t for t in got if t.startswith(tag + "-") and t not in set(sent)]
print("simulator: %d of %d messages recorded, %d missing, %d recorded more than once, %d unknown" % (
    sum(1 for t in sent if got[t] > 0), len(sent), len(missing), len(dups), len(extra)))
if missing:
    print("   missing (first 10): %s" % missing[:10])
if dups:
    print("   duplicates (first 10): %s" % list(dups.items())[:10])
if failed:
    print("   of the %d failed requests (first 50 listed), delivered to the platform anyway: %d %s" % (
        stats["failed"], sum(1 for t in failed if got[t]), [t for t in failed if got[t]][:10]))
sys.exit(1 if (dups or extra or len(missing) > stats["failed"]) else 0)
EOF

cat >"$run/lbstate.py" <<'EOF'
"""haproxy server states from its stats page (CSV): prints 'name status' per botgate server."""
import csv, io, sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/stats;csv", timeout=2) as r:
    rows = list(csv.DictReader(io.StringIO(r.read().decode().lstrip("# "))))
for row in rows:
    if row["pxname"] == "be_botgate" and row["svname"] not in ("BACKEND", "FRONTEND"):
        print(row["svname"], row["status"].split(" ")[0], row["stot"], row["scur"])
EOF

cat >"$run/k8s_json.py" <<'EOF'
"""deploy/k8s: every manifest as JSON for the schema check, plus the checks a schema cannot
make: kustomization lists every file, names and labels that must agree do agree, and the grace
period covers preStop + drain."""
import glob, json, os, re, sys
import yaml
d = sys.argv[1]
docs, errs = [], []
kust = yaml.safe_load(open(os.path.join(d, "kustomization.yaml")))
files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "*.yaml")) + glob.glob(os.path.join(d, "*.yml")))
files.remove("kustomization.yaml")
if sorted(kust.get("resources", [])) != files:
    errs.append("kustomization.yaml resources %s != files %s" % (sorted(kust.get("resources", [])), files))
by_kind = {}
for f in files:
    for doc in yaml.safe_load_all(open(os.path.join(d, f))):
        if doc is None:
            continue
        docs.append({"file": f, "doc": doc})
        by_kind.setdefault(doc["kind"], []).append(doc)
dep = by_kind["Deployment"][0]
pod = dep["spec"]["template"]
labels = pod["metadata"]["labels"]
def selects(sel):
    return all(labels.get(k) == v for k, v in sel.items())
if not selects(dep["spec"]["selector"]["matchLabels"]):
    errs.append("Deployment selector does not match its pod labels")
if not selects(by_kind["Service"][0]["spec"]["selector"]):
    errs.append("Service selector does not match the pods")
if not selects(by_kind["PodDisruptionBudget"][0]["spec"]["selector"]["matchLabels"]):
    errs.append("PodDisruptionBudget selector does not match the pods")
ref = by_kind["HorizontalPodAutoscaler"][0]["spec"]["scaleTargetRef"]
if (ref["kind"], ref["name"]) != ("Deployment", dep["metadata"]["name"]):
    errs.append("HPA does not target the Deployment")
c = pod["spec"]["containers"][0]
for src in c.get("envFrom", []):
    for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
        if key in src and src[key]["name"] not in [x["metadata"]["name"] for x in by_kind.get(kind, [])]:
            errs.append("envFrom %s %s not defined" % (kind, src[key]["name"]))
env = by_kind["ConfigMap"][0]["data"]
for k in env:
    if not re.match(r"^BOTGATE_[A-Z_]+$", k):
        errs.append("ConfigMap key %s is not a BOTGATE_* setting" % k)
drain_s = int(env.get("BOTGATE_DRAIN_TIMEOUT_MS", "10000")) / 1000
pre = c["lifecycle"]["preStop"]["exec"]["command"]
pre_s = float(pre[-1]) if pre[0] == "sleep" else 0
grace = pod["spec"]["terminationGracePeriodSeconds"]
if not grace > pre_s + drain_s:
    errs.append("terminationGracePeriodSeconds %s <= preStop %s s + drain %s s" % (grace, pre_s, drain_s))
sc = c["securityContext"]
if not (pod["spec"]["securityContext"].get("runAsNonRoot") and sc.get("readOnlyRootFilesystem")):
    errs.append("pod must run as non-root with a read-only root filesystem")
if c["readinessProbe"]["httpGet"]["path"] != "/readyz" or c["livenessProbe"]["httpGet"]["path"] != "/healthz":
    errs.append("probes: readiness /readyz, liveness /healthz")
json.dump({"docs": docs, "errors": errs,
           "timing": "grace %ss > preStop %ss + drain %ss" % (grace, pre_s, drain_s)}, sys.stdout)
EOF

cat >"$run/k8s_validate.mjs" <<'EOF'
// Validates each manifest against the Kubernetes OpenAPI schema (kubernetes-models).
// Catches wrong types, missing required fields and bad enums; not unknown fields.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
const [, , modelsDir, jsonFile] = process.argv;
const input = JSON.parse(fs.readFileSync(jsonFile, "utf8"));
async function model(apiVersion, kind) {
  const group = apiVersion.includes("/") ? apiVersion : apiVersion; // "apps/v1" or "v1"
  const file = path.join(modelsDir, group, kind + ".js");
  if (!fs.existsSync(file)) throw new Error(`no schema for ${apiVersion} ${kind}`);
  return (await import(pathToFileURL(file).href))[kind];
}
let bad = 0;
// The validator must reject a broken document, or the check proves nothing.
const Dep = await model("apps/v1", "Deployment");
try {
  new Dep({ metadata: { name: "x" }, spec: { replicas: "two", selector: {}, template: {} } }).validate();
  console.log("   schema self-test: a broken Deployment was accepted"); bad++;
} catch (e) { /* expected */ }
for (const { file, doc } of input.docs) {
  try {
    const M = await model(doc.apiVersion, doc.kind);
    new M(doc).validate();
    console.log(`   ok   ${file}: ${doc.apiVersion} ${doc.kind} ${doc.metadata.name}`);
  } catch (e) {
    console.log(`   FAIL ${file}: ${doc.apiVersion} ${doc.kind}: ${e.message}`); bad++;
  }
}
process.exit(bad ? 1 : 0);
EOF

# ---------------------------------------------------------------------------------------------
say "build: host binaries (build/bin)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBOTGATE_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >"$run/host-build.log" 2>&1 || { tail -30 "$run/host-build.log"; fail "host build"; }
bin=$root/build/bin

# =============================================================================================
say "1. static checks"
haproxy -c -f deploy/haproxy.cfg >"$run/haproxy-c.log" 2>&1 || { cat "$run/haproxy-c.log"; fail "haproxy -c deploy/haproxy.cfg"; }
info "haproxy -c deploy/haproxy.cfg: valid (service names unresolved here: init-addr none)"
sed -e 's/botgate1:8080/127.0.0.1:18081/; s/botgate2:8080/127.0.0.1:18082/' deploy/haproxy.cfg >"$run/haproxy-resolved.cfg"
haproxy -c -f "$run/haproxy-resolved.cfg" >"$run/haproxy-c2.log" 2>&1 || { cat "$run/haproxy-c2.log"; fail "haproxy -c (addresses substituted)"; }
if grep -q WARNING "$run/haproxy-c2.log"; then cat "$run/haproxy-c2.log"; fail "haproxy -c warns with resolvable servers"; fi
info "haproxy -c with the servers as addresses: valid, no warning"
REDIS_PASSWORD=test-$$ docker-compose -f deploy/docker-compose.yml config -q || fail "docker-compose config"
REDIS_PASSWORD=test-$$ docker-compose -f deploy/docker-compose.yml --profile test config --services >"$run/compose-services.txt"
info "docker-compose config -q: valid; services: $(tr '\n' ' ' <"$run/compose-services.txt")"
yamllint -s -c deploy/.yamllint deploy/ || fail "yamllint deploy/"
info "yamllint -s deploy/: clean ($(find deploy -name '*.y*ml' | wc -l) files)"
sed -e "s|^ExecStart=.*|ExecStart=$bin/botgate|" deploy/systemd/botgate.service >"$run/botgate.service"
systemd-analyze verify "$run/botgate.service" >"$run/systemd-verify.log" 2>&1 || { cat "$run/systemd-verify.log"; fail "systemd-analyze verify"; }
info "systemd-analyze verify deploy/systemd/botgate.service: clean"

mkdir -p "$bd/npm"
[ -f "$bd/npm/package.json" ] || echo '{"name":"botgate-deploy-check","private":true}' >"$bd/npm/package.json"
if [ ! -f "$bd/npm/node_modules/kubernetes-models/package.json" ]; then
  (cd "$bd/npm" && npm install --no-audit --no-fund --loglevel=error kubernetes-models@5) >"$run/npm.log" 2>&1 ||
    { cat "$run/npm.log"; fail "npm install kubernetes-models"; }
fi
python3 "$run/k8s_json.py" deploy/k8s >"$run/k8s.json" || fail "reading deploy/k8s"
python3 - "$run/k8s.json" <<'EOF' || fail "deploy/k8s consistency"
import json, sys
d = json.load(open(sys.argv[1]))
for e in d["errors"]:
    print("   FAIL " + e)
print("   k8s consistency: selectors, names, kustomization resources, " + d["timing"] + (": ok" if not d["errors"] else ""))
sys.exit(1 if d["errors"] else 0)
EOF
node "$run/k8s_validate.mjs" "$bd/npm/node_modules/kubernetes-models" "$run/k8s.json" ||
  fail "Kubernetes schema check"
info "kubernetes-models $(node -p "require('$bd/npm/node_modules/kubernetes-models/package.json').version")"
echo "   k8s manifests: schema-checked only, not run in a cluster"

# =============================================================================================
say "2. image: debootstrap base, podman build, a real request through the container"
# podman refuses a run root path longer than 50 characters, which a checkout a few folders deep
# gives: the run root (sockets, locks; nothing kept) goes in a short folder of its own.
runroot=$(mktemp -d /tmp/bgpm.XXXXXX)
defer 'rm -rf "$runroot"'
mkdir -p "$bd/podman/root" "$bd/cni"
cat >"$bd/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[network]
network_config_dir = "$bd/cni"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
export CONTAINERS_CONF=$bd/containers.conf
# containers/storage leaves its overlay directory bind-mounted on itself: undone at exit.
defer 'mountpoint -q "$bd/podman/root/overlay" && umount "$bd/podman/root/overlay"'
cat >"$bd/podman.sh" <<EOF
#!/bin/sh
exec podman --root "$bd/podman/root" --runroot "$runroot" "\$@"
EOF
chmod +x "$bd/podman.sh"
# podman without systemd cannot schedule health checks and says so on every run, start, stop
# and rm: that line is dropped.
pm() { "$bd/podman.sh" "$@" 2> >(grep -v 'unable to get systemd connection' >&2); }
pmq() { pm "$@"; }

base=$bd/bookworm-minbase.tar
if [ ! -s "$base" ]; then
  # The mirror this machine uses (deb822 or one-line sources).
  mirror=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    head -1 | awk '{print $2}') || true
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian-security/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    head -1 | awk '{print $2}') || true
  security=${security:-http://deb.debian.org/debian-security}
  info "debootstrap bookworm minbase from $mirror (cached as $base for later runs)"
  rm -rf "$bd/rootfs.tmp"
  defer rm -rf "$bd/rootfs.tmp"
  t=$(date +%s)
  debootstrap --variant=minbase bookworm "$bd/rootfs.tmp" "$mirror" >"$run/debootstrap.log" 2>&1 ||
    { tail -20 "$run/debootstrap.log"; fail "debootstrap"; }
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
    "$mirror" "$mirror" "$security" >"$bd/rootfs.tmp/etc/apt/sources.list"
  rm -rf "$bd/rootfs.tmp/var/cache/apt/archives/"*.deb "$bd/rootfs.tmp/var/lib/apt/lists/"*
  tar -C "$bd/rootfs.tmp" --numeric-owner -cf "$base.tmp" . && mv "$base.tmp" "$base"
  rm -rf "$bd/rootfs.tmp"
  info "debootstrap: $(($(date +%s) - t)) s"
  pm rmi -f docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim >/dev/null 2>&1 || true
else
  info "base rootfs: cached $base"
fi
if ! pm image exists docker.io/library/debian:bookworm-slim; then
  pm import "$base" docker.io/library/debian:bookworm >"$run/import.log" 2>&1 || { cat "$run/import.log"; fail "podman import"; }
  pm tag docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim
  info "podman import: debian:bookworm and debian:bookworm-slim"
fi

img=localhost/botgate:deploy-test
simimg=localhost/botgate-sim:deploy-test
t=$(date +%s)
# The compiler stage tagged, so that pruning old images below keeps it as the layer cache.
pm build --pull=never --network=host --format docker -f deploy/Dockerfile --target build-deps \
  -t localhost/botgate-build-deps:deploy-test . >"$run/build-deps.log" 2>&1 ||
  { tail -40 "$run/build-deps.log"; fail "podman build --target build-deps"; }
version=$(git describe --tags --always --dirty 2>/dev/null || true)
if [ -n "$version" ]; then version="$(head -1 VERSION)-g$version"; else version=$(head -1 VERSION); fi
pm build --pull=never --network=host --format docker -f deploy/Dockerfile \
  --build-arg BOTGATE_VERSION="$version" -t "$img" . >"$run/build.log" 2>&1 ||
  { tail -40 "$run/build.log"; fail "podman build deploy/Dockerfile"; }
pm build --pull=never --network=host --format docker -f deploy/Dockerfile --target sim -t "$simimg" . >"$run/build-sim.log" 2>&1 ||
  { tail -40 "$run/build-sim.log"; fail "podman build --target sim"; }
# Images left untagged by earlier builds (the layer cache of this build stays).
pm image prune -f >/dev/null 2>&1 || true
info "podman build (runtime and sim targets): $(($(date +%s) - t)) s; image $(pm image inspect -f '{{.Size}}' "$img" | awk '{printf "%.0f MB", $1/1e6}')"
pm image inspect "$img" >"$run/image.json"
python3 - "$run/image.json" <<'EOF' || fail "image configuration"
import json, sys
i = json.load(open(sys.argv[1]))[0]
hc, cfg = i.get("Healthcheck") or {}, i["Config"]
errs = []
if "/healthz" not in " ".join(hc.get("Test", [])):
    errs.append("no HEALTHCHECK on /healthz (build with --format docker)")
if cfg.get("User", "") in ("", "0", "root") or cfg.get("User", "").startswith("0:"):
    errs.append("runs as root")
if cfg.get("StopSignal") != "SIGTERM":
    errs.append("STOPSIGNAL is not SIGTERM")
if cfg.get("Entrypoint") != ["/usr/local/bin/botgate"]:
    errs.append("ENTRYPOINT is not botgate")
if "8080/tcp" not in cfg.get("ExposedPorts", {}):
    errs.append("8080 not exposed")
labels = cfg.get("Labels") or {}
for k in ("org.opencontainers.image.title", "org.opencontainers.image.version",
          "org.opencontainers.image.licenses"):
    if not labels.get(k):
        errs.append("OCI label %s missing or empty" % k)
for e in errs:
    print("   FAIL " + e)
if not errs:
    print("   image config: HEALTHCHECK %s every %ds; USER %s; STOPSIGNAL %s; ENTRYPOINT %s; version %s" % (
        hc["Test"][0], hc["Interval"] // 10**9, cfg["User"], cfg["StopSignal"], cfg["Entrypoint"][0],
        labels.get("org.opencontainers.image.version")))
sys.exit(1 if errs else 0)
EOF

read -r rport sport gport <<<"$(free_ports 3)"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$run" --daemonize no \
  >"$run/redis-2.log" 2>&1 &
rpid=$!
defer stop_pid $rpid
ctr_sim=botgate-deploy-sim-$$
ctr_gw=botgate-deploy-gw-$$
defer pm rm -f -t 0 $ctr_sim $ctr_gw
pmq run -d --name $ctr_sim --network=host "$simimg" --listen 127.0.0.1:$sport --threads 2 --quiet >/dev/null
wait_http "http://127.0.0.1:$sport/_sim/health" "the simulator container"
export BOTGATE_REDIS_URL=redis://127.0.0.1:$rport/0
echo '{"_id":"c1","app":"a1","type":"facebook","on":true,"info":{"accessToken":"t","pageId":"1"}}' | "$bin/botgatectl" channel put - >/dev/null 2>&1
echo '{"_id":"m1","channel":"c1","app":"a1","externalId":"psid-1","platform":"facebook"}' | "$bin/botgatectl" member put - >/dev/null 2>&1
token=$("$bin/botgatectl" token create --app a1 --scope bot:sendResponses 2>/dev/null) || true
[ -n "$token" ] || fail "botgatectl: no token (channel, member or token not stored)"
unset BOTGATE_REDIS_URL
info "data loaded with the host's botgatectl into redis-server :$rport"
pmq run -d --name $ctr_gw --network=host --read-only --tmpfs /tmp \
  -e BOTGATE_LISTEN=127.0.0.1:$gport -e BOTGATE_REDIS_URL=redis://127.0.0.1:$rport/0 -e BOTGATE_WORKERS=2 \
  -e BOTGATE_FACEBOOK_API_URL=http://127.0.0.1:$sport/graph/v19.0 "$img" >/dev/null
wait_http "http://127.0.0.1:$gport/readyz" "botgate in the container"
ans=$(curl -s -w ' HTTP%{http_code}' -X POST "http://127.0.0.1:$gport/sendResponses" -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/json' \
  -d '{"channelId":"c1","memberId":"m1","response":[{"type":"TEXT","text":"hi from the container"}]}')
case "$ans" in *'"ok":1'*HTTP200) ;; *) pm logs $ctr_gw | tail -20; fail "sendResponses through the container: $ans" ;; esac
info "POST /sendResponses through the container: HTTP 200 ${ans:0:60}..."
curl -s "http://127.0.0.1:$sport/_sim/log" >"$run/sim-2.json"
python3 - "$run/sim-2.json" <<'EOF' || fail "the simulator did not record the message"
import json, sys
log = json.load(open(sys.argv[1]))["requests"]
hits = [e for e in log if e["path"] == "/graph/v19.0/me/messages" and e["recipient"] == "psid-1"
        and (e["body"] or {}).get("message", {}).get("text") == "hi from the container"]
print("   simulator recorded: %d x POST %s to %s" % (len(hits), hits[0]["path"] if hits else "-", "psid-1"))
sys.exit(0 if len(hits) == 1 else 1)
EOF
pmq healthcheck run $ctr_gw >"$run/healthcheck.log" 2>&1 || { cat "$run/healthcheck.log"; fail "podman healthcheck run"; }
info "podman healthcheck run (the image's HEALTHCHECK, curl /healthz): exit 0, healthy"
pmq stop -t 20 $ctr_gw >/dev/null
code=$(pm inspect -f '{{.State.ExitCode}}' $ctr_gw)
[ "$code" = 0 ] || { pm logs $ctr_gw | tail; fail "the container exited $code on SIGTERM"; }
info "podman stop (SIGTERM): botgate drained and exited 0"
pm rm -f -t 0 $ctr_sim $ctr_gw >/dev/null
stop_pid $rpid

# =============================================================================================
say "3. compose: podman-compose in a network namespace (bridge 192.0.2.0/24)"
infra=localhost/botgate-test-infra:deploy-test
mkdir -p "$run/infra"
# Stand-ins for the redis and haproxy images of docker-compose.yml (this machine reaches no
# image registry): Debian's packages, same commands.
cat >"$run/infra/Containerfile" <<'EOF'
FROM debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      redis-server haproxy && rm -rf /var/lib/apt/lists/*
EOF
pm build --pull=never --network=host --format docker -t $infra "$run/infra" >"$run/build-infra.log" 2>&1 ||
  { tail -20 "$run/build-infra.log"; fail "stand-in redis/haproxy image"; }
info "stand-in image for redis and haproxy (Debian packages): $infra"

ns=botgate-deploy-$$
ip netns add $ns
defer ip netns del $ns
ip -n $ns link set lo up
nsx() { nsenter --net=/run/netns/$ns "$@"; }
project=botgate-deploy
export BOTGATE_IMAGE=$img BOTGATE_SIM_IMAGE=$simimg REDIS_IMAGE=$infra HAPROXY_IMAGE=$infra
export BOTGATE_FACEBOOK_API_URL=http://sim:9100/graph/v19.0 BOTGATE_PUBLIC_PORT=8080
REDIS_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
export REDIS_PASSWORD
compose() { nsx podman-compose --podman-path "$bd/podman.sh" -p $project -f deploy/docker-compose.yml "$@"; }
pm network rm -f botgate-net >/dev/null 2>&1 || true
# podman-compose 1.0.3 does not pass a subnet: the network (name: botgate-net) is made first.
nsx "$bd/podman.sh" network create --subnet 192.0.2.0/24 botgate-net >/dev/null
defer 'nsx "$bd/podman.sh" network rm -f botgate-net'
defer 'compose down -v'
compose up -d --no-build >"$run/compose-up.log" 2>&1 || { tail -30 "$run/compose-up.log"; fail "podman-compose up"; }
pm ps -a --filter label=io.podman.compose.project=$project --format '{{.Names}} {{.Status}}' >"$run/compose-ps.txt"
info "podman-compose up: $(wc -l <"$run/compose-ps.txt") containers: $(awk '{print $1}' "$run/compose-ps.txt" | tr '\n' ' ')"
ip_of() { pm inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }
lbip=$(ip_of ${project}_haproxy_1)
lb=http://192.0.2.1:8080   # the published port, on the bridge's host side in the namespace
for i in $(seq 100); do
  nsx python3 "$run/lbstate.py" "http://$lbip:8404" >"$run/lbstate-3.txt" 2>/dev/null || true
  [ "$(grep -c ' UP ' "$run/lbstate-3.txt")" = 2 ] && break
  [ "$i" = 100 ] && { cat "$run/lbstate-3.txt"; compose logs >"$run/compose-logs.txt" 2>&1; fail "haproxy never saw both botgates UP"; }
  sleep 0.2
done
info "haproxy ($lbip): $(awk '{print $1 " " $2}' "$run/lbstate-3.txt" | tr '\n' ',' | sed 's/,$//')"
for c in redis botgate1 botgate2 haproxy; do
  pmq healthcheck run ${project}_${c}_1 >"$run/hc-$c.log" 2>&1 || { cat "$run/hc-$c.log"; fail "compose health check of $c"; }
done
info "compose health checks (podman healthcheck run): redis, botgate1, botgate2, haproxy healthy"
# The drain command of the compose file's header, in the haproxy container.
hacli() { pm exec ${project}_haproxy_1 bash -c "echo '$1' >/dev/tcp/127.0.0.1/9999"; }
compose_state() { # server state: until the compose haproxy shows it (at most 5 s)
  local i
  for i in $(seq 50); do
    nsx python3 "$run/lbstate.py" "http://$lbip:8404" 2>/dev/null | grep -q "^$1 $2 " && return 0
    sleep 0.1
  done
  return 1
}
hacli "set server be_botgate/botgate1 state drain" || fail "haproxy runtime API in the container"
compose_state botgate1 DRAIN || fail "haproxy did not drain botgate1 on the runtime API command"
hacli "set server be_botgate/botgate1 state ready"
compose_state botgate1 UP || fail "haproxy did not take botgate1 back on the runtime API command"
info "haproxy runtime API in the container (port 9999): botgate1 drained, then ready again"
gw1=${project}_botgate1_1
echo '{"_id":"c1","app":"a1","type":"facebook","on":true,"info":{"accessToken":"t","pageId":"1"}}' | pm exec -i $gw1 botgatectl channel put - >/dev/null 2>&1
echo '{"_id":"m1","channel":"c1","app":"a1","externalId":"psid-1","platform":"facebook"}' | pm exec -i $gw1 botgatectl member put - >/dev/null 2>&1
token=$(pm exec $gw1 botgatectl token create --app a1 --scope bot:sendResponses 2>/dev/null) || true
[ -n "$token" ] || fail "botgatectl in the botgate1 container: no token"
info "data loaded with botgatectl inside the botgate1 container"
nsx python3 "$run/load.py" --url $lb --token "$token" --threads 8 --count 200 --tag compose --out "$run/load-3.json" |
  sed 's/^/   /'
simip=$(ip_of ${project}_sim_1)
nsx python3 "$run/delivered.py" "$run/load-3.json" "http://$simip:9100" | sed 's/^/   /' ||
  fail "compose: messages not delivered exactly once"
nsx python3 "$run/lbstate.py" "http://$lbip:8404" >"$run/lbstate-3.txt"
info "requests per botgate (haproxy stot, health checks excluded): $(awk '{print $1 "=" $3}' "$run/lbstate-3.txt" | tr '\n' ' ')"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s['ok']==200 and s['failed']==0 else 1)" \
  "$run/load-3.json" || fail "compose: not every request answered 200"
nsx "$bd/podman.sh" stop -t 20 $gw1 ${project}_botgate2_1 >/dev/null 2>"$run/compose-stop.err" || { cat "$run/compose-stop.err"; fail "podman stop botgate1 botgate2"; }
for c in botgate1 botgate2; do
  code=$(pm inspect -f '{{.State.ExitCode}}' ${project}_${c}_1)
  [ "$code" = 0 ] || fail "compose $c exited $code on SIGTERM"
done
info "podman stop botgate1 botgate2 (SIGTERM): both exited 0"
compose logs >"$run/compose-logs.txt" 2>&1 || true
compose down -v >"$run/compose-down.log" 2>&1 || { tail "$run/compose-down.log"; fail "podman-compose down"; }
nsx "$bd/podman.sh" network rm -f botgate-net >/dev/null
ip netns del $ns
info "podman-compose down -v, network and namespace removed"

# =============================================================================================
say "4. rolling restart: haproxy in front of two botgate processes, under load"
read -r rport sport p1 p2 lbport stport <<<"$(free_ports 6)"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$run" --daemonize no \
  >"$run/redis-4.log" 2>&1 &
rpid=$!
defer stop_pid $rpid
"$bin/botgate-sim" --listen 127.0.0.1:$sport --threads 2 --log-max 2000000 --quiet >"$run/sim-4.log" 2>&1 &
spid=$!
defer stop_pid $spid
wait_http "http://127.0.0.1:$sport/_sim/health" "the simulator"
export BOTGATE_REDIS_URL=redis://127.0.0.1:$rport/0
for i in $(seq 50); do "$bin/botgatectl" get channel none >/dev/null 2>&1 && break; sleep 0.1; done
echo '{"_id":"c1","app":"a1","type":"facebook","on":true,"info":{"accessToken":"t","pageId":"1"}}' | "$bin/botgatectl" channel put - >/dev/null 2>&1
echo '{"_id":"m1","channel":"c1","app":"a1","externalId":"psid-1","platform":"facebook"}' | "$bin/botgatectl" member put - >/dev/null 2>&1
token=$("$bin/botgatectl" token create --app a1 --scope bot:sendResponses 2>/dev/null) || true
[ -n "$token" ] || fail "botgatectl: no token (channel, member or token not stored)"
unset BOTGATE_REDIS_URL

declare -A gwpid gwport
gwport[1]=$p1
gwport[2]=$p2
start_gw() { # n
  BOTGATE_LISTEN=127.0.0.1:${gwport[$1]} BOTGATE_REDIS_URL=redis://127.0.0.1:$rport/0 \
    BOTGATE_WORKERS=2 BOTGATE_LOG_LEVEL=info BOTGATE_DRAIN_TIMEOUT_MS=10000 \
    BOTGATE_FACEBOOK_API_URL=http://127.0.0.1:$sport/graph/v19.0 \
    "$bin/botgate" >>"$run/botgate$1.log" 2>&1 &
  gwpid[$1]=$!
}
start_gw 1
start_gw 2
defer 'for n in 1 2; do stop_pid ${gwpid[$n]:-0}; done'
wait_http "http://127.0.0.1:$p1/readyz" "botgate #1"
wait_http "http://127.0.0.1:$p2/readyz" "botgate #2"

# deploy/haproxy.cfg as it is, with host addresses for the servers and free ports for its own.
sed -e "s/botgate1:8080/127.0.0.1:$p1/; s/botgate2:8080/127.0.0.1:$p2/" \
  -e "s/^\( *bind\) :8080/\1 127.0.0.1:$lbport/; s/^\( *bind\) :8404/\1 127.0.0.1:$stport/" \
  -e "s|stats socket ipv4@127.0.0.1:9999|stats socket $run/haproxy.sock|" deploy/haproxy.cfg >"$run/haproxy.cfg"
grep -q "stats socket $run/haproxy.sock" "$run/haproxy.cfg" || fail "haproxy test copy: stats socket"
grep -q "127.0.0.1:$lbport" "$run/haproxy.cfg" && grep -q "127.0.0.1:$p2" "$run/haproxy.cfg" || fail "haproxy test copy"
haproxy -db -f "$run/haproxy.cfg" >"$run/haproxy.log" 2>&1 &
hpid=$!
defer stop_pid $hpid
lbstate() { python3 "$run/lbstate.py" "http://127.0.0.1:$stport" 2>/dev/null || true; }
haproxy_cmd() { # runtime API command
  python3 - "$run/haproxy.sock" "$1" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode() + b"\n")
out = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    out += b
sys.stdout.write(out.decode())
EOF
}
wait_state() { # server state seconds [scur]: until haproxy shows it (and that many current sessions)
  local i
  for i in $(seq $(($3 * 20))); do
    lbstate | grep -q "^$1 $2 [0-9]* ${4:-[0-9]*}\$" && return 0
    sleep 0.05
  done
  lbstate
  fail "haproxy did not mark $1 $2 within $3 s"
}
wait_state botgate1 UP 20
wait_state botgate2 UP 20
info "haproxy :$lbport -> botgate #1 :$p1, botgate #2 :$p2 (both UP); simulator :$sport; redis :$rport"
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
counters() { # haproxy's counters for the botgate backend, as "name=value ..."
  python3 - "http://127.0.0.1:$stport" <<'EOF'
import csv, io, sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/stats;csv", timeout=2) as r:
    rows = list(csv.DictReader(io.StringIO(r.read().decode().lstrip("# "))))
for row in rows:
    if row["pxname"] == "be_botgate" and row["svname"] == "BACKEND":
        print(" ".join("%s=%s" % (k, row[k] or 0) for k in
                       ("stot", "wretr", "wredis", "eresp", "econ", "srv_abrt", "cli_abrt", "hrsp_5xx")))
EOF
}

# One rolling restart of both instances under continuous load (8 client threads, keep-alive).
#  mode lb-drain: the procedure of deploy/haproxy.cfg's header: "set server ... state drain" on
#                 haproxy's runtime API, wait until the instance has no session, then SIGTERM
#  mode sigterm:  SIGTERM only; haproxy has to notice by itself (health checks, retries)
# Sets phase_failed to the number of failed requests (plus 1 if delivery was not exactly once).
rolling() { # mode tag
  local mode=$1 tag=$2 n ts rc t_exit t_drained t_down t_ready t_up before
  info "-- $mode: $( [ "$mode" = lb-drain ] && echo "haproxy drain first, then SIGTERM" || echo "SIGTERM only, haproxy notices by itself")"
  before=$(counters)
  rm -f "$run/stop-$tag"
  python3 "$run/load.py" --url "http://127.0.0.1:$lbport" --token "$token" --threads 8 \
    --stop-file "$run/stop-$tag" --tag "$tag" --out "$run/load-$tag.json" >"$run/load-$tag.txt" 2>&1 &
  lpid=$!
  defer 'touch "$run/stop-'"$tag"'"; stop_pid '$lpid
  sleep 2
  for n in 1 2; do
    ts=$(date +%s%N)
    t_drained=
    if [ "$mode" = lb-drain ]; then
      haproxy_cmd "set server be_botgate/botgate$n state drain" >/dev/null
      wait_state botgate$n DRAIN 10 0
      t_drained="haproxy drained it in $(ms_since "$ts") ms; "
      ts=$(date +%s%N)
    fi
    kill -TERM "${gwpid[$n]}"
    set +e
    wait "${gwpid[$n]}"
    rc=$?
    set -e
    t_exit=$(ms_since "$ts")
    [ "$rc" = 0 ] || { touch "$run/stop-$tag"; fail "botgate #$n exited $rc after SIGTERM (see $run/botgate$n.log)"; }
    t_down=
    if [ "$mode" = sigterm ]; then
      # As a process manager would: restart once the old process is gone and haproxy noticed.
      t_down="not within 5 s"
      for _ in $(seq 100); do
        if lbstate | grep -q "^botgate$n DOWN "; then t_down="$(ms_since "$ts") ms"; break; fi
        sleep 0.05
      done
      t_down="haproxy DOWN after $t_down; "
    fi
    start_gw $n
    wait_http "http://127.0.0.1:${gwport[$n]}/readyz" "botgate #$n (restarted)"
    t_ready=$(ms_since "$ts")
    [ "$mode" = lb-drain ] && haproxy_cmd "set server be_botgate/botgate$n state ready" >/dev/null
    wait_state botgate$n UP 20
    t_up=$(ms_since "$ts")
    info "botgate #$n: ${t_drained}SIGTERM -> exit 0 after ${t_exit} ms; ${t_down}restarted: ready after ${t_ready} ms, haproxy UP after ${t_up} ms"
    sleep 1
  done
  sleep 2
  touch "$run/stop-$tag"
  wait $lpid || true
  sed 's/^/   /' "$run/load-$tag.txt"
  python3 - "$before" "$(counters)" <<'EOF'
import sys
b = dict(kv.split("=") for kv in sys.argv[1].split())
a = dict(kv.split("=") for kv in sys.argv[2].split())
d = {k: int(a[k]) - int(b[k]) for k in a}
print("   haproxy backend: %d requests, %d retried (%d redispatched), %d server aborts, %d response errors (retried ones included), %d 5xx" % (
    d["stot"], d["wretr"] + d["wredis"], d["wredis"], d["srv_abrt"], d["eresp"], d["hrsp_5xx"]))
EOF
  phase_failed=0
  python3 "$run/delivered.py" "$run/load-$tag.json" "http://127.0.0.1:$sport" | sed 's/^/   /' || phase_failed=1
  python3 - "$run/load-$tag.json" <<'EOF' || phase_failed=$((phase_failed + $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['failed'])" "$run/load-$tag.json")))
import json, sys
s = json.load(open(sys.argv[1]))
for f in s["failures"][:20]:
    print("   failure at %.3f s: %s (%s)" % (f["t"], f["error"], f["text"]))
sys.exit(0 if s["failed"] == 0 and s["sent"] > 0 else 1)
EOF
  return 0
}

rolling lb-drain drain
failed_drain=$phase_failed
rolling sigterm sigterm
failed_sigterm=$phase_failed
grep -h '"level":"\(warn\|error\)"' "$run"/botgate1.log "$run"/botgate2.log | head -5 | sed 's/^/   botgate log: /' || true
if [ "$failed_sigterm" != 0 ] && [ "$failed_drain" = 0 ]; then
  echo "   note: with SIGTERM alone, a botgate stops accept()ing at once but keeps its listening"
  echo "   sockets open until it exits; connections haproxy opens meanwhile (before its health"
  echo "   checks mark it DOWN) wait unread in the backlog and are reset at exit. haproxy does not"
  echo "   resend a request whose connection was reset after sending (only connect failures and"
  echo "   clean closes), so the client gets a 502 or, on keep-alive, a silent close."
fi
if [ "$failed_drain" != 0 ] || [ "$failed_sigterm" != 0 ]; then
  fail "rolling restart lost requests: $failed_drain with haproxy drain first, $failed_sigterm with SIGTERM only (details above; logs in $run)"
fi
info "rolling restart: 0 failed requests, each message delivered exactly once, in both modes"

say "test-deploy: all passed in $(($(date +%s) - t_start)) s"
