"""Where the gateway keeps its data: the data directory, private to the user who runs it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

RESPONSES_DB = "responses.sqlite3"


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/rapid-mlx`, else `~/.local/share/rapid-mlx`."""
    base = os.environ.get("XDG_DATA_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "rapid-mlx"


def prepare_data_dir(path: str | Path) -> Path:
    """Create PATH with mode 0700 (parents as needed), or narrow it to 0700 if it exists with
    group or other bits; raises OSError when that cannot be done."""
    p = Path(path).expanduser().resolve()
    p.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(p.stat().st_mode)
    if mode & 0o077:
        p.chmod(0o700)
    return p
