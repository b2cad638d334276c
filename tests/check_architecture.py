"""docs/architecture.md stays true: every function its walks name exists where they say.

A walk is a section whose heading starts with "Walk:" and whose numbered steps have the form
``N. `dir/file.c` `function()` what it does``. Each function must be defined in that file
(a line that starts the definition, not a declaration), and every other `name()` a step's text
names must be defined in a .c file of one of the product's folders (core/, adapters/, store/,
net/, gateway/, ctl/ and any other folder of cmake/layers.cmake's layers).
Usage: check_architecture.py docs/architecture.md SOURCE_ROOT
"""
import glob
import os
import re
import sys

STEP = re.compile(r"^\s*\d+\.\s+`([\w./-]+\.[ch])`\s+`(\w+)\(\)`(.*)$")
NAMED = re.compile(r"`(\w+)\(\)`")


def definitions(path):
    """The functions path defines: a line that starts with a declarator and a parameter list
    that ends in '{' before any ';'."""
    pat = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\(")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = set()
    for i, line in enumerate(lines):
        m = pat.match(line)
        if not m:
            continue
        for following in lines[i:i + 10]:
            s = following.rstrip()
            if s.endswith(";"):
                break
            if s.endswith("{"):
                found.add(m.group(1))
                break
    return found


def product_folders(root):
    """The folders cmake/layers.cmake layers (BOTGATE_FOLDER_LAYERS)."""
    with open(os.path.join(root, "cmake", "layers.cmake"), encoding="utf-8") as f:
        m = re.search(r'set\(BOTGATE_FOLDER_LAYERS "([^"]+)"\)', f.read())
    return re.split(r"[| ]+", m.group(1)) if m else []


def main():
    doc, root = sys.argv[1], sys.argv[2]
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    anywhere = set()
    for folder in product_folders(root):
        for path in glob.glob(os.path.join(root, folder, "*.c")):
            anywhere |= definitions(path)
    walks, current = [], None
    for line in text.split("\n"):
        if line.startswith("#"):
            current = None
            if re.match(r"^#+\s+Walk:", line):
                current = {"title": line.strip("# "), "steps": []}
                walks.append(current)
            continue
        m = STEP.match(line)
        if m and current is not None:
            current["steps"].append((m.group(1), m.group(2), NAMED.findall(m.group(3))))
    failures = checked = 0
    if not walks:
        print("no walk found in", doc)
        failures += 1
    for w in walks:
        if len(w["steps"]) < 5:
            print(f"{w['title']}: only {len(w['steps'])} steps")
            failures += 1
        for path, func, named in w["steps"]:
            full = os.path.join(root, path)
            checked += 1
            if not os.path.isfile(full):
                print(f"{w['title']}: {path} does not exist")
                failures += 1
            elif func not in definitions(full):
                print(f"{w['title']}: {func}() is not defined in {path}")
                failures += 1
            for name in named:
                checked += 1
                if name not in anywhere:
                    print(f"{w['title']}: {name}() (in the step of {func}) is defined nowhere")
                    failures += 1
        crossings = sum(1 for a, b in zip(w["steps"], w["steps"][1:]) if a[0] != b[0])
        print(f"{w['title']}: {len(w['steps'])} steps, {crossings} calls from one file to another")
    print(f"{checked - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
