"""The packages' import rules, read from the source (every import, in functions and under
TYPE_CHECKING too): no cycles, and each package imports only what its layer may."""

from __future__ import annotations

import sys

from tests.import_graph import cycles, external_imports, graph

LAYERS = ("gateway", "protocol", "parsers")


def _imports(pkg: str) -> dict[str, set[str]]:
    return external_imports([pkg])


def test_no_import_cycles() -> None:
    assert cycles(graph(LAYERS)) == []


def test_gateway_imports_neither_worker_nor_mlx() -> None:
    banned = {"worker", "mlx", "mlx_lm", "cache"}
    bad = {m: names & banned for m, names in _imports("gateway").items()}
    assert not {m: n for m, n in bad.items() if n}


def test_protocol_imports_neither_mlx_nor_starlette_nor_the_other_packages() -> None:
    allowed = set(sys.stdlib_module_names) | {"protocol", "msgspec", "__future__"}
    bad = {m: names - allowed for m, names in _imports("protocol").items()}
    assert not {m: n for m, n in bad.items() if n}


def test_parsers_are_pure_python() -> None:
    allowed = set(sys.stdlib_module_names) | {"parsers", "__future__"}
    bad = {m: names - allowed for m, names in _imports("parsers").items()}
    assert not {m: n for m, n in bad.items() if n}
