"""Modules stay small: each of the project's Python and C++ files holds under 500 lines."""

from __future__ import annotations

from pathlib import Path

MAX_LINES = 500
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("protocol", "parsers", "gateway", "worker", "bench", "tools", "tests")
SOURCES = ("*.py", "*.cpp", "*.h")


def test_every_module_is_under_500_lines() -> None:
    files = [f for pkg in PACKAGES for pattern in SOURCES for f in (ROOT / pkg).rglob(pattern)
             if not any(part.startswith(".") for part in f.relative_to(ROOT).parts)]
    assert len(files) > 100
    assert any(f.suffix == ".cpp" for f in files)
    long = {str(f.relative_to(ROOT)): n for f in files
            if (n := len(f.read_text(encoding="utf-8").splitlines())) >= MAX_LINES}
    assert not long, f"split these modules (one concept each): {long}"
