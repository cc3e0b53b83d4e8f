"""A short fingerprint of a model folder's weights: replicas of an alias must serve the same."""

from __future__ import annotations

import hashlib
from pathlib import Path

_FILES = ("config.json", "model.safetensors.index.json")


def fingerprint(path: Path) -> str:
    """sha256 (16 hex digits) of config.json, the safetensors index, and every weight file's
    name and size: cheap (no weight is read) and the same on every machine holding the same
    snapshot, whatever its folder."""
    h = hashlib.sha256()
    for name in _FILES:
        f = path / name
        if f.is_file():
            h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    for f in sorted(path.glob("*.safetensors")):
        h.update(f"{f.name}\0{f.stat().st_size}\0".encode())
    return h.hexdigest()[:16]
