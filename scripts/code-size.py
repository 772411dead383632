#!/usr/bin/env python3
"""Sizes of the product code: every Rust file under the `src/` of a crate
that is published (not `publish = false`), without its `#[cfg(test)] mod
tests { .. }` block, and every function in it.

Functions are found as lines that start (after indentation) with `fn`,
`pub fn`, `pub(crate) fn`, `async fn`, `const fn` and the like, and measured
from that line to the line of the brace that closes the body (braces are
counted outside strings, chars and comments). Prints the largest files and
functions and exits 1 if a file has more than MAX_FILE lines or a function
more than MAX_FN.

    scripts/code-size.py            # the report and the verdict
"""
import pathlib
import re
import sys

MAX_FILE = 800
MAX_FN = 100
ROOT = pathlib.Path(__file__).resolve().parent.parent

FN = re.compile(r"^\s*(pub(\([a-z:]+\))?\s+)?((const|async|unsafe|extern \"C\")\s+)*fn\s+(\w+)")


def published(crate: pathlib.Path) -> bool:
    text = (crate / "Cargo.toml").read_text()
    return not re.search(r"^publish\s*=\s*false", text, re.M)


def strip_code(line: str, state: dict) -> str:
    """The line without string, char and comment contents (for brace
    counting); `state` carries block comments and raw strings over lines."""
    out = []
    i = 0
    while i < len(line):
        if state.get("block"):
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["block"] = False
            i = end + 2
            continue
        if state.get("raw"):
            end = line.find(state["raw"], i)
            if end < 0:
                return "".join(out)
            i = end + len(state["raw"])
            state["raw"] = None
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        m = re.match(r'r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["raw"] = '"' + m.group(1)
            i += len(m.group(0))
            continue
        if c == '"':
            j = i + 1
            while j < len(line) and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            if j >= len(line):
                state["raw"] = '"'  # a string over lines
                return "".join(out)
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def without_tests(lines):
    """Drops a trailing `#[cfg(test)] mod tests { .. }` block."""
    for k, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and k + 1 < len(lines) and re.match(r"\s*mod \w+ \{", lines[k + 1]):
            return lines[:k]
    return lines


def functions(lines):
    state = {}
    open_fns = []  # (name, start line, depth at start)
    depth = 0
    found = []
    for n, line in enumerate(lines, 1):
        m = FN.match(line)
        code = strip_code(line, state)
        if m and not state.get("block"):
            open_fns.append((m.group(5), n, depth))
        for c in code:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                while open_fns and depth == open_fns[-1][2]:
                    name, start, _ = open_fns.pop()
                    found.append((n - start + 1, name, start))
        # A declaration without a body (`fn f();` in a trait).
        if open_fns and open_fns[-1][1] == n and code.rstrip().endswith(";") and "{" not in code:
            open_fns.pop()
    return found


def main() -> int:
    files, fns = [], []
    for crate in sorted((ROOT / "crates").iterdir()):
        if not (crate / "Cargo.toml").exists() or not published(crate):
            continue
        for path in sorted((crate / "src").rglob("*.rs")):
            if path.name == "tests.rs" or "tests" in path.relative_to(crate / "src").parts[:-1]:
                continue
            lines = without_tests(path.read_text().splitlines())
            rel = path.relative_to(ROOT)
            files.append((len(lines), str(rel)))
            for size, name, start in functions(lines):
                fns.append((size, f"{rel}:{start} {name}"))
    files.sort(reverse=True)
    fns.sort(reverse=True)
    print(f"largest product files (limit {MAX_FILE} lines):")
    for size, name in files[:8]:
        print(f"  {size:5} {name}")
    print(f"largest product functions (limit {MAX_FN} lines):")
    for size, name in fns[:8]:
        print(f"  {size:5} {name}")
    bad = [f for f in files if f[0] > MAX_FILE] + [f for f in fns if f[0] > MAX_FN]
    for size, name in bad:
        print(f"over the limit: {name} ({size} lines)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
