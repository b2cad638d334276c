#!/usr/bin/env python3
"""Helpers of make bench (bench/bench.sh); Python 3 standard library only.

  report.py freeport N                 print N free TCP ports of 127.0.0.1, one a line
  report.py busy [SECONDS]             how many CPUs the machine keeps busy (before starting)
  report.py measure [options] -- WRK...
                                       run wrk once and append one JSON line to --out: wrk's
                                       figures (from bench.lua's done()), the CPU seconds of the
                                       measured processes (utime+stime from /proc, child
                                       processes included: nginx's worker), their RSS sampled
                                       every 100 ms (idle before, peak during), how many calls
                                       the upstream received (the simulator's GET /_sim/stats or
                                       the static upstream's stub_status, which also counts the
                                       connections it accepted), the measured processes' open
                                       connections to the upstream ports (sampled every 0.5 s),
                                       and what else the machine was busy with meanwhile
  report.py syscalls [options] -- WRK...
                                       strace -c -f -p PID while wrk sends a fixed number of
                                       requests (bench.lua's BENCH_COUNT); append the system
                                       calls per answered request, by kind, to --out
  report.py pace RESULTS.jsonl [--delay MS] [--calib CALIB.jsonl --conns N] [--scenario h]
                                       connections for a paced load of about half of botgate's
                                       scenario-a (or -h) maximum, and that rate
  report.py table RESULTS.jsonl META.json
                                       print the report
"""
import argparse
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")

SCENARIOS = {
    "up": "upstream alone (static nginx)",
    "a": "a  sendResponses, 1 TEXT",
    "b": "b  sendResponses, 3 TEXT",
    "c": "c  redirectMemberToNode, 2 resp.",
    "c-lua": "c-lua  c, by a Lua transform",
    "up-tls": "upstream alone, HTTPS",
    "a-off": "a-off  a, member order off",
    "a-key": "a-key  a + Idempotency-Key",
    "a-tls": "a-tls  a over TLS, botgate HTTP/2",
    "a-tls-off": "a-tls-off  a-tls, member order off",
    "a-tls-h1": "a-tls-h1  a over TLS, botgate HTTP/1.1",
    "sim": "simulator alone (d's upstream)",
    "d": "d  5000 conn., upstream 1 s",
    "d-off": "d-off  d, member order off",
    "h-gen": "webhook generator alone (static nginx)",
    "h": "h  signed webhooks in, events out",
}
ORDER = ["up", "a", "a-off", "a-key", "b", "c", "c-lua", "up-tls", "a-tls", "a-tls-off", "a-tls-h1", "sim", "d",
         "d-off", "h-gen", "h"]
# scenario h's load generator (bench/webhook.lua) sent to the static upstream alone: its req/s
# must be at least UPSTREAM_MARGIN times botgate's, or wrk, not botgate, sets the pace
GENERATOR_OF = {"h-gen": "h"}
H_GOAL_P99_MS = 5.0  # issue 32: ack p99 under 5 ms at half load
# the order-off twins (a botgate with BOTGATE_MEMBER_ORDER=0 beside the default one): their
# ratio is to the nginx run of the scenario they twin, and a section sets each beside it
TWIN_OF = {"a-off": "a", "a-tls-off": "a-tls", "d-off": "d"}
# the delivery guarantees' rows (contract section 7): botgate alone (nginx has no such thing),
# compared with botgate's scenario a
GUARANTEES = {"a-key": "a with a new Idempotency-Key on every request"}
# the upstream-alone row of each proxied scenario: it must do at least UPSTREAM_MARGIN times
# the proxy's req/s, or the upstream, not the proxy, sets the pace
UPSTREAM_OF = {"a": "up", "b": "up", "c": "up", "c-lua": "up", "a-tls": "up-tls", "a-tls-h1": "up-tls"}
UPSTREAM_MARGIN = 2.0


# ---- /proc ----

def read_stat(pid):
    """(comm, fields after the command name) of /proc/PID/stat, or None."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()


def children(pid):
    """Direct child processes of pid (nginx's worker)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(name)
            if st is not None and int(st[1][1]) == pid:
                out.append(int(name))
    return out


def tree(pids):
    """The pids and their direct children."""
    allp = []
    for p in pids:
        allp.append(p)
        allp.extend(children(p))
    return allp


def cpu_seconds(pids):
    total = 0
    for p in pids:
        st = read_stat(p)
        if st is not None:
            total += int(st[1][11]) + int(st[1][12])  # utime, stime (fields 14 and 15)
    return total / CLK_TCK


def all_cpu():
    """{pid: (comm, cpu seconds)} of every process on the machine."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(name)
            if st is not None:
                out[int(name)] = (st[0], (int(st[1][11]) + int(st[1][12])) / CLK_TCK)
    return out


def host_busy_s():
    """CPU seconds the whole machine spent outside idle and iowait (all CPUs)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / CLK_TCK


def rss_kib(pids):
    total = 0
    for p in pids:
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


def sim_total(url):
    if not url:
        return None
    try:
        with urllib.request.urlopen(url + "/_sim/stats", timeout=5) as r:
            return json.loads(r.read())["total"]
    except (OSError, ValueError, KeyError):
        return None


def redis_commands(port):
    """(scripts, commands) the Redis on 127.0.0.1:port has run so far, or None: scripts are the
    EVAL and EVALSHA calls, commands every call INFO commandstats counts (a script's own
    redis.call commands included, the INFO that asks excluded), or None."""
    if not port:
        return None
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"INFO commandstats\r\n")
            data = b""
            while b"\r\n" not in data:
                data += s.recv(65536) or b"\r\n"
            head, _, data = data.partition(b"\r\n")
            if not head.startswith(b"$"):
                return None
            while len(data) < int(head[1:]):
                chunk = s.recv(65536)
                if not chunk:
                    return None
                data += chunk
    except (OSError, ValueError):
        return None
    calls = {m.group(1): int(m.group(2)) for m in
             re.finditer(r"^cmdstat_([a-z|_-]+):calls=(\d+)", data.decode(), re.M)}
    scripts = calls.get("eval", 0) + calls.get("evalsha", 0)
    return scripts, sum(n for name, n in calls.items() if name != "info")


def upstream_status(url):
    """(accepted connections, requests) from nginx's stub_status page, or None."""
    if not url:
        return None
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    m = re.search(r"accepts handled requests\s+(\d+)\s+\d+\s+(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def socket_inodes(pids):
    out = set()
    for p in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % p)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%d/fd/%s" % (p, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    return out


def upstream_sockets(pids, ports):
    """Local ports of the established TCP connections of pids to 127.0.0.1:ports."""
    inodes = socket_inodes(pids)
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    v = line.split()
                    # local address, remote address, state (01 = established), ..., inode
                    if v[3] == "01" and v[9] in inodes and int(v[2].split(":")[1], 16) in ports:
                        out.add(int(v[1].split(":")[1], 16))
        except (OSError, StopIteration, IndexError, ValueError):
            pass
    return out


# ---- subcommands ----

def cmd_freeport(args):
    socks = []
    for _ in range(args.n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    for s in socks:
        print(s.getsockname()[1])
    for s in socks:
        s.close()


def cmd_busy(args):
    h0 = host_busy_s()
    time.sleep(args.seconds)
    print("%.2f" % ((host_busy_s() - h0) / args.seconds))


def parse_pids(spec):
    return [int(p) for p in spec.split(",") if p.strip()] if spec else []


def parse_aux(spec):
    """{name: the pid and its children} of "name=pid,...": processes whose CPU is told aside."""
    aux = {}
    for item in (spec or "").split(","):
        if "=" in item:
            name, pid = item.split("=", 1)
            aux[name] = tree([int(pid)])
    return aux


def cmd_measure(args):
    wrk = args.wrk
    if wrk and wrk[0] == "--":
        wrk = wrk[1:]
    procs = tree(parse_pids(args.pids))
    aux = parse_aux(args.aux)

    ports = {int(p) for p in args.upstream_ports.split(",") if p.strip()}
    idle_rss = rss_kib(procs)
    peak = [idle_rss]
    conns_max = [0]
    conns_seen = set()
    stop = threading.Event()

    def sample_sockets():
        now = upstream_sockets(procs, ports)
        conns_max[0] = max(conns_max[0], len(now))
        conns_seen.update(now)

    def sampler():
        tick = 0
        while not stop.wait(0.1):
            peak[0] = max(peak[0], rss_kib(procs))
            tick += 1
            if ports and tick % 5 == 0:
                sample_sockets()

    calls0 = sim_total(args.sim)
    status0 = upstream_status(args.upstream_status)
    redis0 = redis_commands(args.redis_port)
    cpu0 = cpu_seconds(procs)
    aux0 = {k: cpu_seconds(v) for k, v in aux.items()}
    host0 = host_busy_s()
    every0 = all_cpu()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = threading.Thread(target=sampler, daemon=True)
    t.start()
    t0 = time.monotonic()
    r = subprocess.run(wrk, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    stop.set()
    t.join()
    peak[0] = max(peak[0], rss_kib(procs))
    if ports:
        sample_sockets()
    cpu1 = cpu_seconds(procs)
    aux1 = {k: cpu_seconds(v) for k, v in aux.items()}
    host1 = host_busy_s()
    every1 = all_cpu()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    calls1 = sim_total(args.sim)
    status1 = upstream_status(args.upstream_status)
    redis1 = redis_commands(args.redis_port)

    # what else ran meanwhile: every other process (wrk, our child, has exited by now)
    mine = set(procs) | {p for v in aux.values() for p in v} | {os.getpid()}
    others = {}
    for pid, (comm, c1) in every1.items():
        if pid not in mine:
            d = c1 - every0.get(pid, (comm, 0.0))[1]
            if d >= 0.01:
                others[comm] = others.get(comm, 0.0) + d

    if args.log:
        with open(args.log, "a") as f:
            f.write("$ %s\n%s\n" % (" ".join(wrk), r.stdout))
    rec = {"scenario": args.scenario, "target": args.target, "connections": args.connections,
           "wall_s": round(wall, 3), "cpu_s": round(cpu1 - cpu0, 3),
           "idle_rss_kib": idle_rss, "peak_rss_kib": peak[0],
           "aux_cpu_s": {k: round(aux1[k] - aux0[k], 3) for k in aux},
           "wrk_cpu_s": round((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime), 3),
           "host_cpus_busy": round((host1 - host0) / wall, 2) if wall > 0 else 0,
           "others_cpu_s": round(sum(others.values()), 2),
           "others_top": sorted(([k, round(v, 2)] for k, v in others.items()),
                                key=lambda kv: -kv[1])[:4],
           "wrk_rc": r.returncode, "note": args.note}
    if args.kind:
        rec["kind"] = args.kind  # not a row of the table (load)
    if calls0 is not None and calls1 is not None:
        rec["upstream_calls"] = calls1 - calls0
    if status0 is not None and status1 is not None:
        # minus the second status request and its connection
        rec["upstream_accepts"] = status1[0] - status0[0] - 1
        rec["upstream_calls"] = status1[1] - status0[1] - 1
    if redis0 is not None and redis1 is not None:
        rec["redis_scripts"] = redis1[0] - redis0[0]
        rec["redis_commands"] = redis1[1] - redis0[1]
    if ports:
        rec["upstream_conns_max"] = conns_max[0]
        rec["upstream_conns_seen"] = len(conns_seen)
    m = re.search(r"^BENCH_JSON (\{.*\})$", r.stdout, re.M)
    if m:
        rec.update(json.loads(m.group(1)))
    else:
        rec["error"] = "no BENCH_JSON in wrk's output: " + " ".join(r.stdout[-500:].split())
    with open(args.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("  %-5s %-8s %s" % (args.scenario, args.target, short(rec)), file=sys.stderr)
    if "error" in rec or r.returncode != 0:
        print(r.stdout, file=sys.stderr)
        sys.exit(1)


def traced(pid):
    """True when every thread of pid has a tracer."""
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                if re.search(r"^TracerPid:\s+0$", f.read(), re.M):
                    return False
        except OSError:
            pass
    return True


def run_until_threads_done(wrk):
    """Run wrk; once its threads have all stopped (bench.lua's BENCH_COUNT), interrupt it:
    its main thread sleeps out -d whatever the threads do, and prints the summary on SIGINT."""
    p = subprocess.Popen(wrk, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = False
    while p.poll() is None:
        try:
            n = len(os.listdir("/proc/%d/task" % p.pid))
        except OSError:
            n = 0
        if n > 1:
            started = True
        elif started and n == 1:
            p.send_signal(signal.SIGINT)
            break
        time.sleep(0.1)
    out, _ = p.communicate()
    return subprocess.CompletedProcess(wrk, p.returncode, out)


def cmd_syscalls(args):
    """strace -c -f -p PID (every thread) around a wrk run of a fixed number of requests."""
    wrk = args.wrk[1:] if args.wrk and args.wrk[0] == "--" else args.wrk
    rec = {"scenario": args.scenario, "target": args.target, "kind": "syscalls",
           "connections": args.connections}
    out = args.summary
    st = subprocess.Popen(["strace", "-c", "-f", "-U", "calls,name", "-S", "calls", "-o", out,
                           "-p", str(args.pid)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while not traced(args.pid) and st.poll() is None and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    if not traced(args.pid):
        st.kill()
        st.wait()
        rec["error"] = "strace could not attach to pid %d" % args.pid
    else:
        r = run_until_threads_done(wrk)
        st.send_signal(signal.SIGINT)  # strace detaches and writes its summary
        st.wait()
        if args.log:
            with open(args.log, "a") as f:
                f.write("$ %s\n%s\n" % (" ".join(wrk), r.stdout))
        m = re.search(r"^BENCH_JSON (\{.*\})$", r.stdout, re.M)
        calls = {}
        try:
            with open(out) as f:
                for line in f:
                    v = line.split()
                    if len(v) == 2 and v[0].isdigit():
                        calls[v[1]] = int(v[0])
        except OSError:
            pass
        if m is None or r.returncode != 0:
            rec["error"] = "wrk failed: " + " ".join(r.stdout[-500:].split())
        elif "total" not in calls:
            rec["error"] = "no strace summary in " + out
        else:
            w = json.loads(m.group(1))
            n = w["requests"] or 1
            rec.update({"requests": w["requests"], "errors": errors(w),
                        "calls": calls["total"], "per_request": round(calls["total"] / n, 2),
                        "top": [[k, round(c / n, 2)] for k, c in
                                sorted(calls.items(), key=lambda kv: -kv[1])
                                if k != "total"][:8]})
    with open(args.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    if "error" in rec:
        print("  %-5s %-8s syscalls: %s" % (args.scenario, args.target, rec["error"]),
              file=sys.stderr)
        sys.exit(1)
    print("  %-5s %-8s %.2f system calls per request over %d requests: %s"
          % (args.scenario, args.target, rec["per_request"], rec["requests"],
             ", ".join("%s %.2f" % (k, v) for k, v in rec["top"][:5])), file=sys.stderr)


def load(path):
    """The timed runs of a results file (the strace phase's records have a "kind")."""
    return [r for r in load_all(path) if "kind" not in r]


def load_all(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rps(rec):
    if not rec.get("duration_us"):
        return 0.0
    return rec["requests"] / (rec["duration_us"] / 1e6)


def errors(rec):
    return sum(rec.get(k, 0) for k in ("connect", "read", "write", "status", "timeout"))


def short(rec):
    if "error" in rec:
        return rec["error"]
    return "%.0f req/s, p50 %.2f ms, p99 %.2f ms, errors %d, CPU %.2f s, others %.2f s" % (
        rps(rec), rec["p50_us"] / 1e3, rec["p99_us"] / 1e3, errors(rec), rec["cpu_s"],
        rec.get("others_cpu_s", 0))


def per_req_us(rec):
    return rec["cpu_s"] * 1e6 / (rec["requests"] or 1)


def redis_us(rec):
    """Redis's CPU during a botgate run, in us per request answered."""
    return rec["aux_cpu_s"].get("redis", 0) * 1e6 / (rec["requests"] or 1)


def order_rounds(recs, on, off):
    """The alternating rounds of a scenario and its order-off twin (bench.sh's order_rounds,
    kind "pair": each round two runs in a row, one of each), as (on, off) pairs of the same
    round: the machine's drift over a minute, which moves one long run of each by more than
    order costs, weighs on both alike. A round with a failed run is left out whole."""
    runs = [r for r in recs if r.get("kind") == "pair" and r["target"] == "botgate"
            and r["scenario"] in (on, off)]
    pairs = []
    for i in range(0, len(runs) - 1, 2):
        got = {r["scenario"]: r for r in runs[i:i + 2] if "error" not in r and rps(r) > 0}
        if len(got) == 2:
            pairs.append((got[on], got[off]))
    return pairs


def find(recs, scenario, target):
    for r in recs:
        if r["scenario"] == scenario and r["target"] == target:
            return r
    return None


def proxied_by(recs, upstream_scenario):
    """nginx-proxy's fastest run among the scenarios this upstream-alone row serves."""
    best = None
    for sc, up in UPSTREAM_OF.items():
        ng = find(recs, sc, "nginx") if up == upstream_scenario else None
        if ng is not None and "error" not in ng and rps(ng) > 0 and (
                best is None or rps(ng) > rps(best)):
            best = ng
    return best


def cmd_pace(args):
    """Half of botgate's req/s in scenario args.scenario (a; h for the webhooks), and the
    connections for it with a mean pause of args.delay ms after each answer: rate = conns /
    (pause + latency). With --calib (a short run of the same target at --conns connections)
    the count is corrected by what it did."""
    a = find(load(args.results), args.scenario, "botgate")
    if a is None or "error" in a or rps(a) <= 0:
        sys.exit("pace: no scenario-%s result of botgate" % args.scenario)
    rate = rps(a) / 2
    if args.calib:
        c = load(args.calib)[-1]
        got = rps(c) if "error" not in c else 0
        conns = args.conns * rate / got if got > 0 else args.conns
    else:
        conns = rate * (args.delay + 1) / 1000.0  # ~1 ms answers at half load, to start with
    print(max(1, int(round(conns))), round(rate))


def ms(us):
    return "%.2f" % (us / 1000.0)


def h_section(recs, every, meta, w):
    """Scenario h: webhooks/s per worker, the ack latency at half that, and whether every event
    stored reached the subscriber once."""
    h = find(recs, "h", "botgate")
    if h is None:
        return
    drains = {r["scenario"]: r for r in every if r.get("kind") == "delivery"}
    gen = find(recs, "h-gen", "upstream")
    w("")
    w("h: signed Messenger webhooks to POST /webhooks/<channelId> (X-Hub-Signature-256 checked,")
    w("one inbound text each, every message id new, the senders spread over the members), each")
    w("event posted, signed, to one subscription: a botgate-sim of its own answering 200 and")
    w("recording every post. %s worker(s). The webhooks are signed before the run" % meta.get("workers"))
    w("(bench/webhooks.py), which wrk cycles through (bench/webhook.lua).")

    def events(d):
        if d is None:
            return "events: no count (the drain failed)"
        return ("events: stored %d, posted %d, distinct eventIds %d: lost %d, duplicates %d "
                "(the outbox drained %.1f s after the run)"
                % (d["events"], d["posts"], d["unique"], d["lost"], d["duplicates"], d["drain_s"]))

    def costs(r, d):
        n = float(r["requests"] or 1)
        cpu = r["cpu_s"] + (d or {}).get("drain_cpu_s", 0)
        red = r["aux_cpu_s"].get("redis", 0) + (d or {}).get("drain_aux_cpu_s", {}).get("redis", 0)
        line = "botgate CPU %.0f us per webhook (its event's post included), Redis %.1f us" % (
            cpu * 1e6 / n, red * 1e6 / n)
        if "redis_commands" in r:
            line += " and %.2f commands (%.2f scripts)" % (r["redis_commands"] / n,
                                                          r.get("redis_scripts", 0) / n)
        return line + " per webhook"

    if "error" in h:
        w("  max   FAILED: %s" % h["error"])
    else:
        line = "  max   %.0f webhooks/s per worker (%d conns): ack p50 %s ms, p99 %s ms, errors %d" % (
            rps(h) / float(meta.get("workers") or 1), h.get("connections", 0), ms(h["p50_us"]),
            ms(h["p99_us"]), errors(h))
        w(line)
        if gen is not None and "error" not in gen and rps(h) > 0:
            w("        the generator alone: %.0f req/s, %.1fx (wrk's CPU in h: %.0f us per webhook)"
              % (rps(gen), rps(gen) / rps(h), h.get("wrk_cpu_s", 0) * 1e6 / (h["requests"] or 1)))
        w("        " + costs(h, drains.get("h")))
        w("        " + events(drains.get("h")))
        if h.get("wraps"):
            w("        WARNING: wrk's threads came to the end of their signed bodies %d time(s):"
              % h["wraps"])
            w("        the webhooks after that were retries to botgate (raise BENCH_H_RATE)")
    lat = find(recs, "h-lat", "botgate")
    if lat is None:
        return
    if "error" in lat:
        w("  half  FAILED: %s" % lat["error"])
        return
    p99 = lat["p99_us"] / 1000.0
    w("  half  %.0f webhooks/s (%d conns, paced: a random pause of mean %s ms after each answer;"
      % (rps(lat), lat.get("connections", 0), meta.get("pace_delay", "?")))
    w("        aimed at %s): ack p50 %s ms, p99 %s ms, p99.9 %s ms, errors %d"
      % (meta.get("h_pace_desc") or "?", ms(lat["p50_us"]), ms(lat["p99_us"]),
         ms(lat["p999_us"]), errors(lat)))
    w("        goal ack p99 under %.0f ms at half load: %s" % (
        H_GOAL_P99_MS, "met" if p99 < H_GOAL_P99_MS else "NOT met (%.2f ms)" % p99))
    w("        " + costs(lat, drains.get("h-lat")))
    w("        " + events(drains.get("h-lat")))


def cmd_table(args):
    recs = load(args.results)
    with open(args.meta) as f:
        meta = json.load(f)
    nproc = meta.get("nproc")
    out = []
    w = out.append
    w("botgate vs nginx (make bench) - %s" % meta.get("date", ""))
    w("machine: %s CPU(s), %s; kernel %s" % (nproc, meta.get("cpu"), meta.get("kernel")))
    w("botgate: %s worker(s); nginx %s: 1 worker_process, keepalive upstream; "
      "wrk %s, %s s per run" % (meta.get("workers"), meta.get("nginx_version"),
                                meta.get("wrk_version"), meta.get("duration")))
    w("upstream: a, b, c, a-tls and a-tls-h1 a static nginx (worker_processes %s) answering"
      % meta.get("upstream_workers", "?"))
    w("the Messenger success body (HTTP, and HTTPS with h2 by ALPN); d the simulator")
    w("(botgate-sim, 1 thread)")
    w("load average (1/5/15 min): %s" % meta.get("load", "?"))
    w("file descriptors: asked %s, allowed %s" % (meta.get("nofile_asked"), meta.get("nofile")))
    w("botgate knobs: %s" % meta.get("knobs", ""))
    w("")
    hdr = ("scenario", "target", "conns", "req/s", "p50 ms", "p99 ms", "errors", "CPU s",
           "CPU us/req", "peak RSS MiB", "upstr/req", "upstr conns", "redis CPU s",
           "redis us/req", "redis cmd/req",
           "upstr CPU s", "host CPUs", "others CPU s", "ratio")
    rows = []
    for sc in ORDER:
        for r in [x for x in recs if x["scenario"] == sc]:
            if "error" in r:
                rows.append((SCENARIOS.get(sc, sc), r["target"], str(r.get("connections", "")),
                             "FAILED") + ("",) * (len(hdr) - 4))
                continue
            n = r["requests"] or 1
            ratio = ""
            if r["target"] == "botgate" and sc in GUARANTEES:
                a = find(recs, "a", "botgate")
                if a and "error" not in a and rps(a) > 0:
                    ratio = "%.2fx a" % (rps(r) / rps(a))
            elif r["target"] == "botgate":
                ng = find(recs, TWIN_OF.get(sc, sc), "nginx")
                if ng and "error" not in ng and rps(ng) > 0:
                    ratio = "%.2fx" % (rps(r) / rps(ng))
            elif sc in GENERATOR_OF:
                h = find(recs, GENERATOR_OF[sc], "botgate")
                if h and "error" not in h and rps(h) > 0:
                    ratio = "%.2fx %s" % (rps(r) / rps(h), GENERATOR_OF[sc])
            elif r["target"] == "upstream":
                ng = proxied_by(recs, sc)
                if ng is not None:
                    ratio = "%.2fx" % (rps(r) / rps(ng))
            up = r.get("upstream_calls")
            conns = ""
            if "upstream_conns_max" in r:
                conns = "%d" % r["upstream_conns_max"]
                if "upstream_accepts" in r:
                    conns += "/%d" % r["upstream_accepts"]
            rows.append((SCENARIOS.get(sc, sc), r["target"], str(r.get("connections", "")),
                         "%.0f" % rps(r), ms(r["p50_us"]), ms(r["p99_us"]), str(errors(r)),
                         "%.2f" % r["cpu_s"], "%.0f" % per_req_us(r),
                         "%.1f" % (r["peak_rss_kib"] / 1024.0),
                         "%.2f" % (up / n) if up is not None else "", conns,
                         "%.2f" % r["aux_cpu_s"].get("redis", 0)
                         if r["target"] == "botgate" else "",
                         "%.1f" % redis_us(r) if r["target"] == "botgate" else "",
                         "%.2f" % (r["redis_commands"] / float(n))
                         if r["target"] == "botgate" and "redis_commands" in r else "",
                         "%.2f" % r["aux_cpu_s"]["upstream"]
                         if "upstream" in r["aux_cpu_s"] else "",
                         "%.2f" % r.get("host_cpus_busy", 0),
                         "%.2f" % r.get("others_cpu_s", 0), ratio))
    widths = [max([len(hdr[i])] + [len(row[i]) for row in rows]) for i in range(len(hdr))]

    def fmt(row):
        return "  ".join(c.ljust(widths[i]) if i < 3 else c.rjust(widths[i])
                         for i, c in enumerate(row)).rstrip()
    w(fmt(hdr))
    w("  ".join("-" * x for x in widths))
    for row in rows:
        w(fmt(row))
    for r in recs:
        if r["target"] != "upstream" or "error" in r:
            continue
        ng = proxied_by(recs, r["scenario"])
        if ng is not None and rps(r) < UPSTREAM_MARGIN * rps(ng):
            w("WARNING: %s did %.0f req/s, less than %.0fx nginx-proxy's %.0f (%.2fx): the "
              "upstream may be" % (SCENARIOS.get(r["scenario"]), rps(r), UPSTREAM_MARGIN,
                                   rps(ng), rps(r) / rps(ng)))
            w("         what limits the proxied runs; their ratios say less than they seem")
        h = find(recs, GENERATOR_OF.get(r["scenario"]), "botgate")
        if h is not None and "error" not in h and rps(r) < UPSTREAM_MARGIN * rps(h):
            w("WARNING: the webhook generator alone did %.0f req/s, less than %.0fx botgate's h"
              % (rps(r), UPSTREAM_MARGIN))
            w("         (%.0f): wrk may be what limits h" % rps(h))
    w("")
    w("req/s counts every answer, errors included; errors = non-2xx + wrk socket errors "
      "(connect, read, write, timeout).")
    w("CPU s: utime+stime of botgate (all threads) or of nginx (master + worker) during the run;")
    w("redis CPU s: the private redis-server during botgate's runs (part of botgate's cost);")
    w("redis us/req: that over the requests answered; redis cmd/req: the commands Redis ran per")
    w("request (INFO commandstats: every call, those a script runs with redis.call included).")
    w("upstr CPU s: the static upstream nginx (master + workers) during the run.")
    w("host CPUs: how many of the machine's %s CPUs were busy during the run (wrk, upstream," % nproc)
    w("Redis, the target, the kernel's network work, anything else): near %s, the machine was"
      % nproc)
    w("the limit. others CPU s: CPU time of the machine's other processes during the run (not")
    w("the target, wrk, the upstream, the simulator or Redis): other jobs competing for the CPUs.")
    w("upstr/req: calls the upstream received per answered request (the static upstream's")
    w("stub_status, the simulator's /_sim/stats). In b nginx still makes ONE upstream call per")
    w("request where botgate makes 3; in c botgate reads the tree, updates the member and sends")
    w("2 messages, nginx again proxies one Facebook call.")
    w("upstr conns: most connections the target had open to the upstream at once (sampled every")
    w("0.5 s from /proc) / connections the upstream accepted during the run (stub_status).")
    w("ratio: botgate rows, botgate's req/s / nginx-proxy's; upstream-alone rows, the upstream's")
    w("req/s / nginx-proxy's in the scenario it serves (a, or a-tls): at least %.0fx, or the"
      % UPSTREAM_MARGIN)
    w("upstream is not clearly out of the way. a-off, a-tls-off, d-off: botgate's req/s with")
    w("member order off / nginx's in a, a-tls, d. a-key: botgate's req/s / its scenario a's")
    w("(\"x a\"; nginx has nothing like an Idempotency-Key).")
    if any(r["scenario"] in GENERATOR_OF for r in recs):
        w("h: a request is a webhook; upstr/req: posts the subscriber got per webhook during the")
        w("run; upstr CPU s: the subscriber (a botgate-sim of its own). webhook generator alone:")
        w("h's wrk and script against the static nginx (answering 200 to /webhooks/); ratio: its")
        w("req/s / botgate's in h.")

    twins = [(r, find(recs, TWIN_OF[r["scenario"]], "botgate")) for r in recs
             if r["scenario"] in TWIN_OF and r["target"] == "botgate" and "error" not in r]
    twins = [(off, on) for off, on in twins if on is not None and "error" not in on
             and rps(on) > 0 and rps(off) > 0]
    if twins:
        w("")
        w("Per-member order, on (the product's default, every row above but the -off ones) against")
        w("off (the twins, a botgate of their own started beside it, run right after it): on / off.")
        for off, on in twins:
            n_on, n_off = float(on["requests"] or 1), float(off["requests"] or 1)
            red_on, red_off = redis_us(on), redis_us(off)
            cmd = ""
            if "redis_commands" in on and "redis_commands" in off:
                cmd = ", Redis commands %.2f / %.2f per request" % (
                    on["redis_commands"] / n_on, off["redis_commands"] / n_off)
            w("  %-7s req/s %.0f / %.0f = %.2fx; botgate CPU %.0f / %.0f us/req = %.2fx; Redis CPU "
              "%.1f / %.1f us/req = %s%s"
              % (on["scenario"], rps(on), rps(off), rps(on) / rps(off), per_req_us(on),
                 per_req_us(off), per_req_us(on) / per_req_us(off) if per_req_us(off) else 0,
                 red_on, red_off, "%.2fx" % (red_on / red_off) if red_off > 0 else "-", cmd))
            rounds = order_rounds(load_all(args.results), on["scenario"], off["scenario"])
            if rounds:
                w("          alternating: %d rounds of %.0f s each, on and off in turn (on first, then"
                  % (len(rounds), rounds[0][0]["duration_us"] / 1e6))
                w("          off first, ...): req/s on / off %s, median %.2fx; Redis CPU median %s"
                  % (" ".join("%.2f" % (rps(a) / rps(b)) for a, b in rounds),
                     statistics.median([rps(a) / rps(b) for a, b in rounds]),
                     "%.2fx" % statistics.median([redis_us(a) / redis_us(b) for a, b in rounds])
                     if all(redis_us(b) > 0 for _, b in rounds) else "-"))

    guarded = [r for r in recs if r["scenario"] in GUARANTEES and r["target"] == "botgate"
               and "error" not in r]
    a = find(recs, "a", "botgate")
    if guarded and a is not None and "error" not in a and rps(a) > 0:
        w("")
        w("Idempotency-Key: what it costs botgate against its scenario a (both with member order")
        w("on, the requests spread over members). CPU us/req counts botgate's own CPU only.")

        def cost(r, base, name):
            cpu, cpu0 = per_req_us(r), per_req_us(base)
            line = "%.2fx %s's req/s, CPU %.0f -> %.0f us/req (%+.1f %%)" % (
                rps(r) / rps(base), name, cpu0, cpu, 100.0 * (cpu - cpu0) / cpu0 if cpu0 else 0)
            return line

        def scripts(r):
            if "redis_scripts" not in r or not r["requests"]:
                return ""
            n = float(r["requests"])
            return ", Redis %.1f us/req, %.2f commands/req, %.2f scripts/req" % (
                redis_us(r), r.get("redis_commands", 0) / n,
                r["redis_scripts"] / n)

        w("  %-8s %.0f req/s, CPU %.0f us/req%s" % ("a", rps(a), per_req_us(a), scripts(a)))
        for r in guarded:
            w("  %-8s %s: %s%s" % (r["scenario"], GUARANTEES[r["scenario"]], cost(r, a, "a"),
                                   scripts(r)))
            red, red0 = redis_us(r), redis_us(a)
            if red0 > 0:
                w("  %-8s Redis CPU per request %.2fx a's" % ("", red / red0))

    tls = [r for r in recs if r["scenario"] in ("a-tls", "a-tls-h1") and "error" not in r]
    if tls:
        w("")
        w("a-tls: the static upstream serves HTTPS (TLS 1.2/1.3, a certificate the bench makes,")
        w("trusted by botgate with BOTGATE_CA_FILE and by nginx with proxy_ssl_trusted_certificate)")
        w("and offers h2 and http/1.1 by ALPN. HTTP version that reached the upstream (the upstream")
        w("names it in its message_id; one check call each): botgate %s (a-tls, told"
          % (meta.get("tls_botgate_proto") or "?"))
        h1 = meta.get("tls_h1_botgate_proto")
        w("BOTGATE_UPSTREAM_HTTP=2, its default%s), nginx %s."
          % ("; a-tls-h1, told 1.1: " + h1 if h1 else "", meta.get("tls_nginx_proto") or "?"))
        for r in tls:
            if "upstream_conns_max" in r:
                w("  %-8s %-8s at most %d upstream connection(s) open at once, %s accepted by "
                  "the upstream during the run"
                  % (r["scenario"], r["target"], r["upstream_conns_max"],
                     r.get("upstream_accepts", "?")))

    sys_recs = [r for r in load_all(args.results) if r.get("kind") == "syscalls"]
    if sys_recs:
        w("")
        w("System calls per request: strace -c -f -p PID (every thread of botgate; nginx-proxy's")
        w("worker) while wrk sends a fixed count (%s per wrk thread, %s connections), in a"
          % (meta.get("strace_count", "?"), sys_recs[0].get("connections", "?")))
        w("separate phase after the timed runs. strace slows the traced process until each loop")
        w("turn handles about one event, so an event loop's epoll_wait, epoll_ctl and timer calls")
        w("count several times more than at full speed (botgate's a: about 33 here, 4.5 measured")
        w("with perf stat at full load: bench/README.md). Total calls over the requests")
        w("answered, then the commonest kinds per request:")
        for r in sys_recs:
            if "error" in r:
                w("  %-8s %-8s FAILED: %s" % (r["scenario"], r["target"], r["error"]))
                continue
            w("  %-8s %-8s %6.2f per request (%d requests, %d calls): %s"
              % (r["scenario"], r["target"], r["per_request"], r["requests"], r["calls"],
                 ", ".join("%s %.2f" % (k, v) for k, v in r["top"])))

    d_rows = [r for r in recs if r["scenario"] in ("d", "d-off") and "error" not in r]
    if d_rows:
        dur = float(meta.get("d_duration") or meta.get("duration", 10))
        w("")
        w("d: 5000 connections, simulator latency 1000 ms, %.0f s run. Little's law bound: "
          "5000 req/s" % dur)
        w("   (%.0f req/s over a %.0f s run: the first second has no answers yet)."
          % (5000 * (dur - 1) / dur, dur))
        for r in d_rows:
            inflight = r.get("connections") or 5000
            w("  %-8s %5.0f req/s = %3.0f%% of 5000/s (%.0f%% of the run's %.0f); non-2xx %d; "
              "socket errors: connect %d, read %d, write %d, timeout %d"
              % (r["target"] if r["scenario"] == "d" else "d-off", rps(r), rps(r) / 50.0, 100.0 * rps(r) / (5000 * (dur - 1) / dur),
                 5000 * (dur - 1) / dur, r["status"], r["connect"], r["read"], r["write"],
                 r["timeout"]))
            w("  %-8s RSS idle %.1f MiB -> peak %.1f MiB: %.1f KiB per in-flight request"
              % ("", r["idle_rss_kib"] / 1024.0, r["peak_rss_kib"] / 1024.0,
                 (r["peak_rss_kib"] - r["idle_rss_kib"]) / float(inflight)))

    lat = {r["target"]: r for r in recs if r["scenario"] == "lat" and "error" not in r}
    if "botgate" in lat and "upstream" in lat:
        b, s = lat["botgate"], lat["upstream"]
        w("")
        w("p99 added latency, scenario a at about half of botgate's maximum (%s)."
          % meta.get("pace_desc", ""))
        w("No wrk2 here: wrk with a random pause (mean %s ms) after each answer on each"
          % meta.get("pace_delay", "?"))
        w("connection, the connection count calibrated per target by a 3 s run: a paced closed")
        w("loop, not wrk2's constant rate (coordinated omission is not corrected). The upstream")
        w("is the static nginx of a; \"added\" is a target's p99 minus the upstream alone's.")
        for t in ("upstream", "botgate", "nginx"):
            if t in lat:
                r = lat[t]
                w("  %-9s %4d conns %6.0f req/s  p50 %s ms  p99 %s ms  p99.9 %s ms  errors %d"
                  "  others CPU %.2f s"
                  % (t, r.get("connections", 0), rps(r), ms(r["p50_us"]), ms(r["p99_us"]),
                     ms(r["p999_us"]), errors(r), r.get("others_cpu_s", 0)))
        w("  botgate p99 added = %s - %s = %s ms" % (ms(b["p99_us"]), ms(s["p99_us"]),
                                                     ms(b["p99_us"] - s["p99_us"])))
        if "nginx" in lat:
            n = lat["nginx"]
            w("  nginx   p99 added = %s - %s = %s ms" % (ms(n["p99_us"]), ms(s["p99_us"]),
                                                         ms(n["p99_us"] - s["p99_us"])))

    h_section(recs, load_all(args.results), meta, w)

    busy = {}
    for r in recs:
        for comm, sec in r.get("others_top", []):
            busy[comm] = busy.get(comm, 0.0) + sec
    top = sorted(busy.items(), key=lambda kv: -kv[1])[:6]
    if top and top[0][1] >= 0.5:
        w("")
        w("Other processes busy during the runs (CPU s, summed over all runs): " +
          ", ".join("%s %.1f" % (k, v) for k, v in top))
    for r in recs:
        if "error" in r:
            w("FAILED %s %s: %s" % (r["scenario"], r["target"], r["error"]))
    if meta.get("command"):
        w("")
        w("command: %s" % meta["command"])
    print("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("freeport")
    p.add_argument("n", type=int, nargs="?", default=1)
    p.set_defaults(func=cmd_freeport)
    p = sub.add_parser("busy")
    p.add_argument("seconds", type=float, nargs="?", default=2.0)
    p.set_defaults(func=cmd_busy)
    p = sub.add_parser("measure")
    p.add_argument("--out", required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--connections", type=int, default=0)
    p.add_argument("--pids", default="", help="comma list; their child processes count too")
    p.add_argument("--aux", default="", help="name=pid,... whose CPU is reported aside")
    p.add_argument("--sim", default="", help="simulator URL, to count upstream calls")
    p.add_argument("--upstream-status", default="",
                   help="stub_status URL of the static upstream: calls and accepted connections")
    p.add_argument("--upstream-ports", default="",
                   help="comma list: count the measured processes' connections to these ports")
    p.add_argument("--redis-port", type=int, default=0,
                   help="the Redis on 127.0.0.1 whose scripts (EVAL, EVALSHA) are counted")
    p.add_argument("--log", default="")
    p.add_argument("--note", default="")
    p.add_argument("--kind", default="",
                   help="pair: one of the alternating on / off rounds (order_rounds)")
    p.add_argument("wrk", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_measure)
    p = sub.add_parser("syscalls")
    p.add_argument("--out", required=True)
    p.add_argument("--summary", required=True, help="file for strace's own summary")
    p.add_argument("--scenario", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--connections", type=int, default=0)
    p.add_argument("--log", default="")
    p.add_argument("wrk", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_syscalls)
    p = sub.add_parser("pace")
    p.add_argument("results")
    p.add_argument("--delay", type=float, default=20)
    p.add_argument("--scenario", default="a")
    p.add_argument("--calib", default="")
    p.add_argument("--conns", type=int, default=0)
    p.set_defaults(func=cmd_pace)
    p = sub.add_parser("table")
    p.add_argument("results")
    p.add_argument("meta")
    p.set_defaults(func=cmd_table)
    args = ap.parse_args()
    try:
        args.func(args)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
