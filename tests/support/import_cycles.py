#!/usr/bin/env python3
"""Import cycles between the top-level modules of Rust crates.

usage: import_cycles.py CRATE_SRC_DIR...   (e.g. backend/brick/src)

A crate's top-level modules are the files and folders directly in its src/ (`store.rs`,
`csum/`, ...; lib.rs and main.rs are the root, not a module). Module A depends on module B
when a file of A names `crate::B` anywhere outside comments: a `use crate::B::...`, a
`use crate::{B, ...}` group, a path in an expression or type, or `super::` leading to
B. Every strongly connected component of more than one module is a cycle: printed with
the lines that make each of its edges, and the exit status is 1. 0: no cycle.

What it cannot see: a call of a method that another module defines in an `impl` block of
a type (module A calls `x.m()`, `m` defined in B's `impl X`) names no path. Keep such
blocks in the module of the type or in a module above it (as `dispatch` is above
`store` in the brick), and the paths tell the whole story.
"""
import os
import re
import sys


def modules(src):
    """{module name: [files]} for the top-level modules of the crate at src."""
    mods = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry.endswith(".rs") and os.path.isfile(path):
            name = entry[:-3]
            if name in ("lib", "main"):
                continue
            mods.setdefault(name, []).append(path)
        elif os.path.isdir(path) and entry != "bin":
            for root, _, files in os.walk(path):
                for f in sorted(files):
                    if f.endswith(".rs"):
                        mods.setdefault(entry, []).append(os.path.join(root, f))
    return mods


def strip_comments(text):
    """The text with // and /* */ comments blanked (string literals kept as they are,
    line numbers kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def module_path(src, file):
    """Module path of a file relative to the crate root: src/csum/table.rs -> [csum, table]."""
    rel = os.path.relpath(file, src)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    return rel


def targets(src, file, text):
    """(top-level module, line number, line) for each path in `text` that names one."""
    here = module_path(src, file)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        # `use crate::{a, b::c}` groups: every first segment inside the braces
        for m in re.finditer(r"\bcrate::\{([^}]*)\}", line):
            for part in m.group(1).split(","):
                seg = part.strip().split("::")[0].strip()
                if seg and seg != "self":
                    out.append((seg, n, line.strip()))
        for m in re.finditer(r"\bcrate::([A-Za-z_][A-Za-z0-9_]*)", line):
            out.append((m.group(1), n, line.strip()))
        # super::super::x from a nested file: resolve against the file's module path
        for m in re.finditer(r"\b((?:super::)+)([A-Za-z_][A-Za-z0-9_]*)", line):
            ups = m.group(1).count("super")
            # the file's module is `here`; super once = its parent
            base = here[: len(here) - ups]
            path = base + [m.group(2)]
            out.append((path[0], n, line.strip()))
    return out


def sccs(graph):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check(src):
    """Print the crate's module graph's cycles; return how many there are."""
    mods = modules(src)
    graph = {m: set() for m in mods}
    why = {}
    for m, files in mods.items():
        for f in files:
            with open(f, encoding="utf-8") as fh:
                text = strip_comments(fh.read())
            for t, n, line in targets(src, f, text):
                if t in mods and t != m:
                    graph[m].add(t)
                    why.setdefault((m, t), f"{os.path.relpath(f, src)}:{n}: {line}")
    cycles = [c for c in sccs(graph) if len(c) > 1]
    for c in cycles:
        print(f"{src}: import cycle between {', '.join(c)}:")
        for a in c:
            for b in sorted(graph[a]):
                if b in c:
                    print(f"  {a} -> {b}   ({why[(a, b)]})")
    if not cycles:
        edges = sum(len(v) for v in graph.values())
        print(f"{src}: no import cycle ({len(mods)} modules, {edges} edges)")
    return len(cycles)


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = 0
    for src in argv[1:]:
        if not os.path.isdir(src):
            print(f"{src}: not a directory", file=sys.stderr)
            return 2
        bad += check(src)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
