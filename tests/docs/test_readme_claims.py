"""README lines that state what the code does are held to the code: the tool_choice families the
code forces (every registered tool parser with a call grammar), the OpenAI voice table."""

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


def test_readme_voice_table_is_the_code_table() -> None:
    """README's OpenAI voice table lists gateway/audio/openai_voices.py's pairs, all of them."""
    from gateway.audio.openai_voices import OPENAI_VOICES

    text = README.read_text()
    rows = [ln for ln in text.splitlines() if ln.strip().startswith("| `alloy`")
            or ln.strip().startswith(("| `ash`", "| `ballad`", "| `nova`"))]
    pairs = dict(re.findall(r"`([a-z]+)` \| `([a-z_]+)`", " ".join(rows)))
    assert pairs == OPENAI_VOICES
