"""Modules stay small: each of the project's Python files holds under 500 lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

MAX_LINES = 500
ROOT = Path(__file__).resolve().parents[1]


def test_every_module_is_under_500_lines() -> None:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    assert files
    long = {f: n for f in files if (path := ROOT / f).exists()
            and (n := len(path.read_text(encoding="utf-8").splitlines())) >= MAX_LINES}
    assert not long, f"split these modules (one concept each): {long}"
