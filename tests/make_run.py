#!/usr/bin/env python3
"""Drives `make run` as a user at a terminal does, and checks what the README promises.

    tests/make_run.py [--root DIR] [--timeout S] [--] COMMAND...

COMMAND (e.g. `make run`, or `chroot ROOT ... make run`) runs on a pseudo-terminal of its own.
Checks: the demo prints a curl line; that exact line, run, answers "ok":1; the token is shown
once; one Ctrl-C (written to the terminal, so the kernel sends SIGINT to its foreground process
group, as a keyboard would) stops everything with status 0 and no warning; no process is left
(with --root: none whose root directory is DIR; otherwise none in the terminal's session).
Then COMMAND runs twice more as a supervisor, `timeout -s INT` or a CI job runs it: in a session
of its own with no terminal, once with SIGINT at its default and once with SIGINT ignored (as a
script's background job has it), and SIGINT goes to its process group. Checks: the curl line
answers; it exits quietly (status 0, or killed by that SIGINT where it was not ignored: make,
told to stop, dies of it once botgate, the simulator and Redis are gone); no process is left
(with --root as above; otherwise none descended from this script, which adopts orphans as a
child subreaper); botgate's and the simulator's ports refuse connections.
Prints one PASS or FAIL line per check and "N passed, N failed"; exits 1 if any failed.
"""
import ctypes
import argparse
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time

SIM_LINE = re.compile(r"platform simulator http://127\.0\.0\.1:(\d+)")
CURL_LINE = re.compile(r"^curl -s -X POST '[^']*/sendResponses' .*$", re.M)
TOKEN_LINE = re.compile(r"^Demo token[^:]*: (\S+)\s*$", re.M)
# What a single Ctrl-C must not print: botgate's warnings and errors, make's "*** ... Error N".
NOISE = re.compile(r"second signal|redis down|\"level\":\"(warn|error)\"|\*\*\*|Error \d+")


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS: {what}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL: {what}{': ' + detail if detail else ''}", flush=True)
        return ok


def read_until(fd, out, pattern, deadline):
    """Reads the terminal into out (a bytearray) until pattern matches or the deadline."""
    while time.monotonic() < deadline:
        m = pattern.search(out.decode("utf-8", "replace"))
        if m:
            return m
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the terminal's other side is gone
                return None
            if not chunk:
                return None
            out += chunk
    return None


def drain(fd, out, pid, deadline):
    """Reads until the child exits or the deadline; returns its wait status or None."""
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                pass
        if done:
            return status
    return None


def descendants():
    """Live processes below this one: with this script a child subreaper, the orphans of its
    children's children too. Zombies adopted meanwhile are reaped."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read().rsplit(")", 1)[1].split()
                if stat[0] != "Z":
                    parent[int(name)] = int(stat[1])
            except (OSError, IndexError):
                continue
    found = set()
    for pid in parent:
        p, seen = pid, 0
        while p in parent and seen < 64:
            p, seen = parent[p], seen + 1
            if p == os.getpid():
                found.add(pid)
                break
    return found


def leftovers(root, sid):
    found = []
    below = descendants() if root is None else set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            if root is not None:
                hit = os.path.realpath(f"/proc/{name}/root") == root
            else:
                hit = int(name) in below or (sid is not None and os.getsid(int(name)) == sid)
            if hit:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
                found.append(f"{name} {cmdline.strip()}")
        except OSError:
            continue
    return found


def wait_gone(root, sid):
    left = leftovers(root, sid)
    for _ in range(20):
        if not left:
            break
        time.sleep(0.25)
        left = leftovers(root, sid)
    return left


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except OSError:
        return True


def without_terminal(args, root, checks, ignored):
    """COMMAND in a session of its own with no terminal; SIGINT to its process group."""
    how = "no terminal, SIGINT %s" % ("ignored" if ignored else "at its default")
    disposition = signal.SIG_IGN if ignored else signal.SIG_DFL
    p = subprocess.Popen(args.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, disposition))
    fd = p.stdout.fileno()
    out = bytearray()
    curl = read_until(fd, out, CURL_LINE, time.monotonic() + args.timeout)
    sim = SIM_LINE.search(out.decode("utf-8", "replace"))
    if checks.check(curl is not None and sim is not None, f"{how}: a curl line",
                    out.decode("utf-8", "replace")[-2000:]):
        answer = subprocess.run(["sh", "-c", curl.group(0)], capture_output=True, text=True,
                                timeout=30).stdout
        checks.check('"ok":1' in answer, f"{how}: the curl line answers \"ok\":1", answer)
    before = len(out)
    try:
        os.killpg(p.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    end = time.monotonic() + 60
    status = None
    while time.monotonic() < end and status is None:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            chunk = os.read(fd, 65536)
            out += chunk
        status = p.poll()
    if status is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    # a leftover child may hold the pipe open: read what is there, no more
    while select.select([fd], [], [], 0.5)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    p.stdout.close()
    after = out[before:].decode("utf-8", "replace")
    fine = status == 0 or (not ignored and status == -signal.SIGINT)
    checks.check(fine, f"{how}: it exits quietly",
                 "still running 60 s after the SIGINT" if status is None
                 else f"status {status}\n{after}")
    noise = [l for l in after.splitlines() if NOISE.search(l)]
    checks.check(not noise, f"{how}: no warning, error or second signal", "\n".join(noise))
    left = wait_gone(root, None)
    checks.check(not left, f"{how}: every process it started has stopped", "\n".join(left))
    for line in left:  # checked: now out of the way of the next run and of the machine
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except OSError:
            pass
    ports = [int(os.environ["BOTGATE_LISTEN"].rsplit(":", 1)[1])]
    if sim is not None:
        ports.append(int(sim.group(1)))
    busy = [port for port in ports if not refused(port)]
    checks.check(not busy, f"{how}: botgate's and the simulator's ports are free", str(busy))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", help="the chroot COMMAND runs in, for the leftover check")
    ap.add_argument("--timeout", type=float, default=900, help="seconds until the curl line")
    ap.add_argument("command", nargs="+")
    args = ap.parse_args()
    root = os.path.realpath(args.root) if args.root else None
    checks = Checks()
    # the children's children that lose their parent become ours (PR_SET_CHILD_SUBREAPER), so
    # that a leftover in a session of its own is still found
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    if "BOTGATE_LISTEN" not in os.environ:  # not 8080: it may be taken on a shared machine
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["BOTGATE_LISTEN"] = f"127.0.0.1:{s.getsockname()[1]}"

    pid, fd = pty.fork()
    if pid == 0:
        # A shell that started us in the background leaves SIGINT ignored; a terminal's is not.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execvp(args.command[0], args.command)
    out = bytearray()
    curl = read_until(fd, out, CURL_LINE, time.monotonic() + args.timeout)
    if checks.check(curl is not None, "make run prints a curl line", out.decode()[-2000:]):
        text = out.decode("utf-8", "replace")
        answer = subprocess.run(["sh", "-c", curl.group(0)], capture_output=True, text=True,
                                timeout=30).stdout
        checks.check('"ok":1' in answer, "the printed curl line answers \"ok\":1", answer)
        token = TOKEN_LINE.search(text)
        shown = [l for l in text.splitlines()
                 if token and token.group(1) in l and not l.startswith("curl ")]
        checks.check(token is not None and len(shown) == 1 and "shown only this once" not in text,
                     "the demo token is shown once", "\n".join(shown))
    time.sleep(1)  # botgate's start-up lines, so that what follows is the Ctrl-C's doing
    early = drain(fd, out, pid, time.monotonic() + 1)
    before = len(out)
    status = None
    if early is None:
        os.write(fd, b"\x03")
        status = drain(fd, out, pid, time.monotonic() + 60)
        if status is None:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    after = out[before:].decode("utf-8", "replace")
    checks.check(status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
                 "one Ctrl-C: make run exits with status 0",
                 f"it ended before the Ctrl-C (wait status {early:#x})" if early is not None else
                 "still running 60 s after it" if status is None else
                 f"wait status {status:#x}\n{after}")
    noise = [l for l in after.splitlines() if NOISE.search(l)]
    checks.check(not noise, "one Ctrl-C: no warning, error or second signal", "\n".join(noise))
    left = wait_gone(root, pid)
    checks.check(not left, "one Ctrl-C: every process it started has stopped", "\n".join(left))
    os.close(fd)
    for ignored in (False, True):
        without_terminal(args, root, checks, ignored)
    print(f"make run: {checks.passed} passed, {checks.failed} failed", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
