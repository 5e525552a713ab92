#!/usr/bin/env python3
"""Import cycles between the modules of one crate.

    python3 tools/modcycles.py CRATE/src [DEPTH]

A module is a top-level module of `src/` (DEPTH 1, the default) or a file below
it (DEPTH 2: `engine::execute`). An edge A -> B is any `crate::B` path in A
(comments and `#[cfg(test)] mod tests` excluded) and, at depth 2, any `super::B`.
Prints each cycle (a strongly connected component of more than one module) with
its edges, then `N cycles`. `.ci/run` requires 0 for every crate at both depths.
"""
import os
import re
import sys
from collections import defaultdict


def module_of(src, path, depth):
    parts = os.path.relpath(path, src)[:-3].split(os.sep)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return "::".join(parts[:depth]) or "crate"


def edges_of(src, depth):
    edges = defaultdict(set)
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            here = module_of(src, path, depth)
            text = open(path, encoding="utf-8").read()
            text = re.sub(r"//[^\n]*", "", text)
            text = re.sub(r"#\[cfg\(test\)\]\s*mod tests \{.*", "", text, flags=re.S)
            for hit in re.finditer(r"crate::([a-z_]+(?:::[a-z_]+)*)", text):
                there = "::".join(hit.group(1).split("::")[:depth])
                related = there == here or here.startswith(there + "::") or there.startswith(here + "::")
                if not related:
                    edges[here].add(there)
            if depth > 1:
                parent = here.split("::")[:-1]
                for hit in re.finditer(r"\bsuper::([a-z_]+)", text):
                    if parent:
                        there = "::".join(parent + [hit.group(1)])
                        if there != here:
                            edges[here].add(there)
    return edges


def cycles(edges):
    """Tarjan's strongly connected components, those of size > 1."""
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return found


def main():
    src = sys.argv[1]
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    edges = edges_of(src, depth)
    found = cycles(edges)
    for component in found:
        print("cycle:", " ".join(component))
        for a in component:
            print("   ", a, "->", ", ".join(sorted(t for t in edges[a] if t in component)))
    print(len(found), "cycles")


if __name__ == "__main__":
    main()
