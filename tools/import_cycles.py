"""Print the import cycles of a package: strongly connected components of its module graph.

Every import counts: module level, function level, and under ``if TYPE_CHECKING:``.
``from pkg import name`` is an edge to pkg.name when that is a module, else to pkg.
Usage: ``python -m tools.import_cycles [ROOT] [PACKAGE]`` (defaults: . worker).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
pkg = sys.argv[2] if len(sys.argv) > 2 else "worker"
mods: dict[str, Path] = {}
for p in (root / pkg).rglob("*.py"):
    parts = list(p.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    mods[".".join(parts)] = p


def resolve(name: str) -> str | None:
    """The module NAME is, or the package holding it (None: outside the package)."""
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


graph: dict[str, set[str]] = {m: set() for m in mods}
for m, p in mods.items():
    is_pkg = p.name == "__init__.py"
    for node in ast.walk(ast.parse(p.read_text(), str(p))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = m.split(".") if is_pkg else m.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                full = f"{mod}.{a.name}"
                targets.append(full if full in mods else mod)
        for t in targets:
            r = resolve(t)
            if r is not None and r != m:
                graph[m].add(r)

index: dict[str, int] = {}
low: dict[str, int] = {}
stack: list[str] = []
on: set[str] = set()
sccs: list[list[str]] = []
counter = [0]
sys.setrecursionlimit(10000)


def visit(v: str) -> None:
    """Tarjan's step: number V, walk its edges, pop its component when V is its root."""
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in sorted(graph[v]):
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
        sccs.append(sorted(comp))


for v in sorted(graph):
    if v not in index:
        visit(v)
cyclic = [c for c in sccs if len(c) > 1]
print(f"{len(mods)} modules, {sum(len(e) for e in graph.values())} edges, "
      f"{len(cyclic)} import cycles (strongly connected components of more than one module)")
for c in sorted(cyclic, key=len, reverse=True):
    print(f"  {len(c)}: {', '.join(c)}")
    for member in c:
        print(f"      {member} -> {', '.join(sorted(b for b in graph[member] if b in c))}")
