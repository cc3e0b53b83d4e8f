"""The project's import graph read with `ast`: every import (module level, in functions, under
`if TYPE_CHECKING:`) is an edge; `python -m tests.import_graph [package ...]` prints its cycles."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_files(packages: Iterable[str]) -> dict[str, Path]:
    """Map each module name under `packages` to its file."""
    found: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if any(p.startswith(".") for p in parts):
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name `path` imports anywhere in its body, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_pkg = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                if not is_pkg:
                    anchor.pop()
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def graph(packages: Iterable[str]) -> dict[str, set[str]]:
    """Edges between the modules of `packages` (an import of `a.b.X` counts as `a.b.X` when
    that is a module, else as `a.b`)."""
    files = module_files(packages)
    edges: dict[str, set[str]] = {}
    for mod, path in files.items():
        targets = set()
        for name in imported_names(path, mod):
            if name in files and name != mod:
                targets.add(name)
        edges[mod] = targets
    return edges


def external_imports(packages: Iterable[str]) -> dict[str, set[str]]:
    """Each module's imported top-level package names (any import anywhere in the file)."""
    files = module_files(packages)
    return {mod: {n.split(".")[0] for n in imported_names(path, mod) if n}
            for mod, path in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def main(argv: list[str]) -> int:
    """Print the import cycles among the given packages; exit 1 when there are any."""
    packages = argv or ["gateway", "protocol", "parsers"]
    edges = graph(packages)
    found = cycles(edges)
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} imports, "
          f"{len(found)} cycles in {', '.join(packages)}")
    for comp in found:
        inner = set(comp)
        print("cycle: " + ", ".join(comp))
        for mod in comp:
            for target in sorted(edges[mod] & inner):
                print(f"    {mod} -> {target}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
