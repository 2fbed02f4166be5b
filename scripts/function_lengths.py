"""The lengths of the functions in src/ (developers' guide: functions under about 80 lines), from a
brace scan of the C++ sources: a function is a brace block opened outside any other function after
a signature (text with parentheses that is no control statement, namespace, class or initialiser);
lambdas and local classes count towards the function that holds them.

  function_lengths.py [--root DIR] [--limit 80] [--allowed FILE]  list the functions over the limit
  function_lengths.py --check [--root DIR] [--allowed FILE]          exit 1 when a function over the
      limit is not in FILE, or an entry of FILE names a function that is no longer over it

FILE (default tests/data/long_functions.txt) has one entry per line, "path function: reason", for
the kernels and tables that stay long on purpose, and the functions still to be split; # starts a
comment. The test LongFunctions.OnlyTheListedOnes (tests/source_shape_test.cpp) runs --check.
"""
import argparse
import os
import re
import sys

NOT_A_FUNCTION = re.compile(r"^\s*(if|for|while|switch|do|else|try|catch|namespace|class|struct|enum|union|extern)\b")


def strip_literals(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//")[0]


def function_name(signature):
    """The qualified name before the parameter list: "BpeTokenizer::load", "run_study"."""
    head = re.sub(r"template\s*<[^<>()]*>", "", signature).split("(")[0].strip()
    return head.split()[-1] if head else "?"


def functions(path):
    """(first line, lines, name) of every function defined in the file."""
    out, stack, signature = [], [], []
    in_comment = False
    for n, raw in enumerate(open(path, encoding="utf-8").read().split("\n")):
        line = strip_literals(raw)
        if in_comment:
            if "*/" not in line:
                continue
            line, in_comment = line.split("*/", 1)[1], False
        if "/*" in line:
            before, rest = line.split("/*", 1)
            line, in_comment = before, "*/" not in rest
        for i, ch in enumerate(line):
            if ch == "{":
                text = " ".join(signature + [line[:i]]).split(";")[-1].strip()
                inside = any(is_function for _, _, is_function in stack)
                is_function = (not inside and ")" in text and not NOT_A_FUNCTION.match(text) and
                               not text.endswith("=") and not text.startswith(("=", ",")))
                stack.append((n, function_name(text) if is_function else "", is_function))
                signature = []
            elif ch == "}":
                if stack:
                    start, name, is_function = stack.pop()
                    if is_function:
                        out.append((start + 1, n - start + 1, name))
                signature = []
        if line.strip() and "{" not in line and "}" not in line:
            signature = (signature + [line.strip()])[-6:]
    return out


def long_functions(root, limit):
    rows = []
    for folder, _, files in os.walk(os.path.join(root, "src")):
        for f in sorted(files):
            if f.endswith((".cpp", ".h")):
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, root)
                rows += [(rel, name, start, length) for start, length, name in functions(path) if length > limit]
    return sorted(rows)


def allowed_entries(path):
    entries = {}
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        m = re.match(r"^(\S+)\s+(\S+):\s*(\S.*)$", line)
        if not m:
            sys.exit(f"{path}:{number}: expected 'path function: reason', found '{line}'")
        entries[(m.group(1), m.group(2))] = m.group(3)
    return entries


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    p.add_argument("--limit", type=int, default=80)
    p.add_argument("--allowed", default=None)
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    rows = long_functions(a.root, a.limit)
    if not a.check:
        for rel, name, start, length in sorted(rows, key=lambda r: -r[3]):
            print(f"{length:4d} {rel}:{start} {name}")
        return 0
    allowed = allowed_entries(a.allowed or os.path.join(a.root, "tests/data/long_functions.txt"))
    found = {(rel, name): (start, length) for rel, name, start, length in rows}
    ok = True
    for (rel, name), (start, length) in sorted(found.items()):
        if (rel, name) not in allowed:
            print(f"{rel}:{start}: {name} has {length} lines (limit {a.limit}): split it, or list it with a reason")
            ok = False
    for rel, name in sorted(set(allowed) - set(found)):
        print(f"{rel}: {name} is listed as over {a.limit} lines but is not: remove its entry")
        ok = False
    print(f"{len(found)} functions over {a.limit} lines, {len(allowed)} listed: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
