"""The README's tool_choice lines name the families the code forces (every registered tool
parser with a call grammar), so the README cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from parsers.callgrammar import families
from parsers.registry import tool_parser_names

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_names_every_forced_family() -> None:
    text = " ".join(README.read_text().split())
    m = re.search(r"\(forced families: ([^)]*)\)", text)
    assert m, "the README's tool_choice paragraph lists the forced families"
    listed = re.findall(r"`([a-z0-9_]+)`", m.group(1))
    assert listed == sorted(families())
    assert set(tool_parser_names()) == set(families())  # every tool parser has a call grammar
    assert "the call is not forced" not in text
