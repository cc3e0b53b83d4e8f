"""Every file the packages need at run time is in the wheel: each non-Python file tracked under
gateway/, worker/, protocol/ and parsers/ matches pyproject.toml's package-data patterns (the
demo's weights, the alias table, native sources, Whisper's vocabularies...)."""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_data_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["*"]
    try:
        tracked = subprocess.run(["git", "ls-files", "gateway", "worker", "protocol", "parsers"],
                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    data = [p for p in tracked.splitlines() if not p.endswith(".py")]
    assert data
    missing = [p for p in data if not any(fnmatch.fnmatch(Path(p).name, pat) for pat in patterns)]
    assert not missing, f"add their patterns to [tool.setuptools.package-data]: {missing}"
