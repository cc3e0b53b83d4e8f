"""The import graph: no cycles anywhere, and each package imports only what its rules allow."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("protocol", "parsers", "gateway", "worker", "bench", "tools")
# package -> top-level modules it may never import (the house rules in README.md)
FORBIDDEN = {
    "protocol": {"mlx", "mlx_lm", "starlette", "gateway", "worker", "bench"},
    "parsers": {"mlx", "mlx_lm", "starlette", "gateway", "worker", "msgspec", "zmq"},
    "gateway": {"mlx", "mlx_lm", "mlx_vlm", "mlx_audio", "mlx_embeddings", "worker", "bench"},
    "worker": {"starlette", "uvicorn", "gateway", "bench", "tools"},
}


def module_name(path: Path) -> str:
    """The dotted name of a source file under ROOT (a package's __init__ is the package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    return {module_name(f): f for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module NAME imports anywhere in its source (functions and TYPE_CHECKING too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names
                         if f"{base}.{alias.name}" in known)
    return found


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    mods = project_modules()
    known = set(mods)
    return {name: {m for m in imports_of(name, path, known) if m in known and m != name}
            for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
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
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_back_through_others() -> None:
    edges = graph()
    assert len(edges) > 300
    assert not cycles(edges), f"import cycles (break each with a narrow Protocol): {cycles(edges)}"


def test_each_package_keeps_its_import_rules() -> None:
    mods = project_modules()
    known = set(mods)
    broken = []
    for name, path in mods.items():
        banned = FORBIDDEN.get(name.split(".")[0], set())
        for imported in imports_of(name, path, known):
            if imported.split(".")[0] in banned:
                broken.append(f"{name} imports {imported}")
    assert not broken, broken


def test_protocol_and_parsers_import_only_the_standard_library_and_their_own() -> None:
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    mods = project_modules()
    known = set(mods)
    broken = [f"{name} imports {imported}" for name, path in mods.items()
              if (top := name.split(".")[0]) in ("protocol", "parsers")
              for imported in imports_of(name, path, known)
              if imported.split(".")[0] not in allowed | {top} | ({"msgspec"} if top == "protocol"
                                                                else set())]
    assert not broken, broken


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
