"""The alias -> model_type table covers every built-in alias, has a tiny config for every type the
engine serves, and README.md's table is generated from it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.e2e.test_every_alias import NOT_SERVED_YET
from tools.tiny_models.aliases import (
    OTHER_ALIASES,
    TEXT_ALIASES,
    VISION_ALIASES,
    readme_table,
    text_model_types,
)
from tools.tiny_models.configs import CONFIGS

ROOT = Path(__file__).resolve().parents[2]
START, END = "<!-- alias-architectures:start", "<!-- alias-architectures:end -->"


def test_every_built_in_alias_is_in_exactly_one_table() -> None:
    """An alias added to aliases.toml without a model_type here fails (and a stale one)."""
    built_in = tomllib.loads((ROOT / "gateway/data/aliases.toml").read_text())
    tables = [set(TEXT_ALIASES), set(VISION_ALIASES), set(OTHER_ALIASES)]
    assert sorted(a for t in tables for a in t) == sorted(built_in)


def test_every_served_type_has_a_tiny_config() -> None:
    """The e2e test builds each served type from tools/tiny_models/configs.py."""
    served = set(text_model_types()) - NOT_SERVED_YET
    assert served and served <= set(CONFIGS), served - set(CONFIGS)
    assert NOT_SERVED_YET <= set(text_model_types())  # no stale entries


def test_readme_table_is_the_generated_one() -> None:
    """README.md's architecture table equals readme_table(NOT_SERVED_YET)."""
    readme = (ROOT / "README.md").read_text()
    body = readme.split(START, 1)[1].split("\n", 1)[1].split(END, 1)[0]
    assert body == readme_table(NOT_SERVED_YET), "regenerate it:\n" + readme_table(NOT_SERVED_YET)
