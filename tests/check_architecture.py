"""docs/architecture.md stays true: every function its walks name exists where they say.

A walk is a section whose heading starts with "Walk:" and whose numbered steps have the form
``N. `dir/file.c` `function()` what it does``. Each function must be defined in that file
(a line that starts the definition, not a declaration). A walk's heading may end with
"(at most K cross-file calls)": consecutive steps in different files are counted as one
cross-file call each, and the count must not exceed K.
Usage: check_architecture.py docs/architecture.md SOURCE_ROOT
"""
import os
import re
import sys

STEP = re.compile(r"^\s*\d+\.\s+`([\w./-]+\.[ch])`\s+`(\w+)\(\)`")
BUDGET = re.compile(r"at most (\d+) cross-file calls")


def defined(path, func):
    """True when path holds a definition of func: a line that starts with its name's
    declarator and a parameter list that ends in '{' before any ';'."""
    pat = re.compile(r"^[A-Za-z_][\w \t\*]*\b" + re.escape(func) + r"\(")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not pat.match(line):
            continue
        for following in lines[i:i + 10]:
            s = following.rstrip()
            if s.endswith(";"):
                break
            if s.endswith("{"):
                return True
    return False


def main():
    doc, root = sys.argv[1], sys.argv[2]
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    walks, current = [], None
    for line in text.split("\n"):
        if line.startswith("#"):
            current = None
            if re.match(r"^#+\s+Walk:", line):
                m = BUDGET.search(line)
                current = {"title": line.strip("# "), "budget": int(m.group(1)) if m else None,
                           "steps": []}
                walks.append(current)
            continue
        m = STEP.match(line)
        if m and current is not None:
            current["steps"].append((m.group(1), m.group(2)))
    failures = 0
    if not walks:
        print("no walk found in", doc)
        failures += 1
    for w in walks:
        if len(w["steps"]) < 5:
            print(f"{w['title']}: only {len(w['steps'])} steps")
            failures += 1
        for path, func in w["steps"]:
            full = os.path.join(root, path)
            if not os.path.isfile(full):
                print(f"{w['title']}: {path} does not exist")
                failures += 1
            elif not defined(full, func):
                print(f"{w['title']}: {func}() is not defined in {path}")
                failures += 1
        crossings = sum(1 for a, b in zip(w["steps"], w["steps"][1:]) if a[0] != b[0])
        print(f"{w['title']}: {len(w['steps'])} steps, {crossings} cross-file calls")
        if w["budget"] is not None and crossings > w["budget"]:
            print(f"{w['title']}: {crossings} cross-file calls, more than {w['budget']}")
            failures += 1
    print(f"{sum(len(w['steps']) for w in walks) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
