#!/usr/bin/env python3
"""Cross-file calls inside gateway/ for one request, counted by valgrind's callgrind.

    bench/crossfile.py [BIN_DIR]    (default build-debug/bin; a Debug build keeps every
                                     static function, so each call is seen with its own name)

Starts Redis and the simulator (tests/integration/harness.py) and botgate with one worker under
callgrind, sends warm-up requests (caches, connections), then for each operation zeroes the
counters, sends exactly ONE request, dumps them, and counts the call events whose caller and
callee are both defined in gateway/ but in different files (a callback counts where it is
called: deliver_finish calling the op's done is a crossing from deliver.c). Start-up, shutdown
and the warm-up are outside the counted window.

Operations: one sendResponses with one response, and one redirectMemberToNode to a node with
one response. Per-member order is on (the default) unless BOTGATE_MEMBER_ORDER says otherwise.
Prints each crossing (caller file:function -> callee file:function, count) and the total.
With --check=SEND,REDIRECT it exits 1 when a total is above its budget.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402

OPERATIONS = [
    ("sendResponses", "/sendResponses",
     {"channelId": "fb", "memberId": "m", "response": [{"type": "TEXT", "text": "hello"}]}),
    ("redirectMemberToNode", "/redirectMemberToNode",
     {"channelId": "fb", "memberId": "m", "redirect": {"tree": "t", "nodeCompositeId": "one"}}),
]


def gateway_file(path):
    """'gateway/op.c' for a path inside the tree's gateway/ folder, else None."""
    m = re.search(r"(?:^|/)gateway/([\w.]+)$", path or "")
    return "gateway/" + m.group(1) if m else None


def crossings(dump):
    """{(caller file, caller, callee file, callee): calls} from one callgrind output file.

    The format (callgrind's docs, "Callgrind Format Specification"): fl= names the file of the
    function fn= that follows, fi=/fe= the file of inlined code inside it; cfi=/cfl= and cfn=
    name the callee of the next calls= line. Names and files may be compressed to "(id)"."""
    names = {"fl": {}, "fn": {}}
    fl = fi = cfl = cfn = fn = None
    out = collections.Counter()
    pending = None

    def name(kind, value):
        m = re.match(r"\((\d+)\)(?: (.*))?$", value)
        if not m:
            return value
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
        return names[kind][m.group(1)]

    with open(dump) as f:
        for line in f:
            line = line.rstrip("\n")
            key, _, value = line.partition("=")
            if pending is not None:  # the line after calls= (its position and cost)
                pending = None
                continue
            if key == "fl":
                fl = fi = name("fl", value)
            elif key in ("fi", "fe"):
                fi = name("fl", value)
            elif key == "fn":
                fn = name("fn", value)
                fi = fl
            elif key in ("cfi", "cfl"):
                cfl = name("fl", value)
            elif key == "cfn":
                cfn = name("fn", value)
            elif key == "calls":
                count = int(value.split()[0])
                a, b = gateway_file(fl), gateway_file(cfl or fi)
                if a and b and a != b:
                    out[(a, strip(fn), b, strip(cfn))] += count
                cfl = None
                pending = True
    return out


def strip(fn):
    """A function's name without callgrind's recursion mark ("f'2")."""
    return fn.split("'")[0]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    budgets = None
    for a in sys.argv[1:]:
        if a.startswith("--check="):
            budgets = [int(x) for x in a.split("=", 1)[1].split(",")]
    harness.BIN = os.path.abspath(args[0] if args else os.path.join(HERE, "..", "build-debug", "bin"))
    s = harness.Stack(workers=1, start_gateway=False)
    out = tempfile.mktemp(prefix="callgrind.", dir=s.dir)
    totals = []
    try:
        s.put("channel", harness.facebook_channel("fb", "A"))
        s.put("member", harness.member("m", "fb", "A", "2456789012345678"))
        tree = os.path.join(s.dir, "tree.json")
        with open(tree, "w") as f:
            f.write('{"_id":"t","app":"A","name":"b","nodes":{"one":{"response":['
                    '{"type":"TEXT","text":"a"}]}}}')
        s.ctl("tree", "import", tree)
        tok = s.token("A", "bot:admin")
        p = s.start_gateway_under_callgrind(out, {
            "BOTGATE_LOG_LEVEL": "info",
            "BOTGATE_MEMBER_ORDER": os.environ.get("BOTGATE_MEMBER_ORDER", "1")})
        for label, path, body in OPERATIONS:
            for _ in range(3):  # warm-up
                a = s.post(path, body, token=tok, timeout=60)
                assert a.status == 200, a
            subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True, check=True)
            a = s.post(path, body, token=tok, timeout=60)
            assert a.status == 200, a
            before = set(os.listdir(s.dir))
            subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True, check=True)
            harness.wait_for(lambda: set(os.listdir(s.dir)) - before, timeout=30, what="dump")
            time.sleep(0.5)
            dump = sorted(set(os.listdir(s.dir)) - before)[-1]
            found = crossings(os.path.join(s.dir, dump))
            total = sum(found.values())
            totals.append(total)
            print("%s: %d cross-file calls inside gateway/" % (label, total))
            for (fa, a_fn, fb, b_fn), n in sorted(found.items()):
                print("  %-40s -> %-40s %d" % ("%s:%s" % (fa, a_fn), "%s:%s" % (fb, b_fn), n))
    finally:
        s.close()  # botgate too
        s.cleanup_dir()
    if budgets:
        over = [(t, b) for t, b in zip(totals, budgets) if t > b]
        if over:
            print("over budget: %r" % over)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
