#!/usr/bin/env python3
"""Lists the import circles between the modules of each crate (issue 35).

A module is one source file. Module A depends on module B when A names a path into B
(`use crate::b::…`, `crate::b::…`, `super::b::…`, `self::b::…`, or a child's
`b::…`, in a `use` or any expression; unit tests aside). A module and the modules
inside it are one unit (the parent is their facade), so paths between a module and its
own ancestors or descendants are not counted; every other path is. Prints each circle
(a strongly connected component of more than one module) and exits 1 if there is any.

Usage: scripts/module-cycles.py [CRATE_SRC_DIR…]   (default: every crate's src)
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)
USE_REL_GROUP = re.compile(r"\buse\s+([a-z_][a-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)
REL = re.compile(r"(?<![:\w])([a-z_][a-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
COMMENT = re.compile(r"//[^\n]*")
CFG_TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{", re.S)


def modules(src):
    """Maps module paths (tuples) to files."""
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(root, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            if rel and rel[0] == "bin":
                continue
            if rel and rel[-1] == "tests":
                continue  # unit tests may import anything
            out[tuple(rel)] = full
    return out


def strip_tests(text):
    m = CFG_TEST_MOD.search(text)
    return text[: m.start()] if m else text


def resolve(mods, here, head, segs):
    """The module a path `head::segs` from module `here` lands in (longest prefix)."""
    if head == "crate":
        base = ()
    elif head == "self":
        base = here
    else:  # super, possibly repeated
        base = here[:-1]
        while segs and segs[0] == "super":
            base = base[:-1]
            segs = segs[1:]
    path = base
    best = base if base in mods else None
    for s in segs:
        path = path + (s,)
        if path in mods:
            best = path
        else:
            break
    return best


def split_top(body):
    """Splits a use-group's body at its top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def expand(body):
    """The paths a use-group's body names: `a::{b, c::d}` gives [a, b], [a, c, d]."""
    out = []
    for item in split_top(body):
        item = re.sub(r"\s+as\s+\w+$", "", item)
        if "{" in item:
            head, _, rest = item.partition("{")
            segs = [s for s in head.split("::") if s]
            for sub in expand(rest.rsplit("}", 1)[0]):
                out.append(segs + sub)
        else:
            out.append([s for s in item.split("::") if s and s != "self" and s != "*"])
    return out


def along(a, b):
    """Whether one module lies inside the other (or is it): a module and its own
    submodules are one unit, whose parent is their facade."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def graph(src):
    mods = modules(src)
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        text = COMMENT.sub("", strip_tests(open(f, encoding="utf-8").read()))
        refs = []
        for g in USE_GROUP.finditer(text):
            head, prefix, body = g.group(1), g.group(2), g.group(3)
            segs = [s for s in prefix.split("::") if s]
            for path in expand(body):
                refs.append((head, segs + path))
        # `use child::{…}` and `child::…`: paths relative to this module.
        children = {k[-1] for k in mods if len(k) == len(m) + 1 and k[: len(m)] == m}
        for g in USE_REL_GROUP.finditer(text):
            if g.group(1) in children:
                segs = [g.group(1)] + [s for s in g.group(2).split("::") if s]
                for path in expand(g.group(3)):
                    refs.append(("self", segs + path))
        text = USE_GROUP.sub("", text)
        for p in PATH.finditer(text):
            refs.append((p.group(1), [s for s in p.group(2).split("::") if s]))
        for p in REL.finditer(text):
            if p.group(1) in children:
                refs.append(("self", [p.group(1)] + [s for s in p.group(2).split("::") if s]))
        for head, segs in refs:
            target = resolve(mods, m, head, segs)
            if target is not None and not along(m, target):
                edges[m].add(target)
    return mods, edges


def sccs(edges):
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def unit_name(mods, src, root, m):
    """A module's file, or a unit's folder (`web/src/api/`)."""
    if m in mods and not any(len(k) > len(m) and k[: len(m)] == m for k in mods):
        return os.path.relpath(mods[m], root)
    return os.path.relpath(os.path.join(src, *m), root) + "/"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    srcs = sys.argv[1:] or [
        os.path.join(root, c, "src") for c in ("core", "wasm", "web", "web/host", "local-agent", "tests")
    ]
    found = 0
    for src in srcs:
        mods, edges = graph(src)
        seen = set()
        # Each module on its own, then each unit (a module with everything inside it)
        # at every depth: `a/` and `b/` in a circle through any of their modules is one.
        depth = max((len(m) for m in mods), default=0)
        for d in [None] + list(range(depth, 0, -1)):
            cut = (lambda m: m) if d is None else (lambda m, d=d: m[:d])
            collapsed = {}
            for m, targets in edges.items():
                for t in targets:
                    a, b = cut(m), cut(t)
                    if not along(a, b):
                        collapsed.setdefault(a, set()).add(b)
                        collapsed.setdefault(b, set())
            for comp in sccs(collapsed):
                key = frozenset(comp)
                if key in seen:
                    continue
                seen.add(key)
                found += 1
                names = sorted(unit_name(mods, src, root, m) for m in comp)
                print("circle: " + " <-> ".join(names))
    if found:
        print(f"{found} import circle(s)")
        return 1
    print("no import circles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
