"""A GGUF file's converted MLX folder, made once: `python -m worker.model.gguf.cache FILE` prints
the folder (converting first when the cache has none for the file's path, size and mtime).

The cache is $RAPID_MLX_GGUF_CACHE, else $XDG_CACHE_HOME/rapid-mlx/gguf (~/.cache/rapid-mlx/gguf);
each file gets KEY/STEM, so the served alias is the file's name without .gguf."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

FORMAT = "1"  # bumped when the converter's output changes: older folders are converted again


def cache_root() -> Path:
    """Where converted GGUF folders live."""
    explicit = os.environ.get("RAPID_MLX_GGUF_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rapid-mlx" / "gguf"


def cached_folder(gguf: str | Path) -> Path:
    """The folder GGUF converts into (whether or not it exists yet)."""
    path = Path(gguf).expanduser().resolve()
    st = path.stat()
    key = hashlib.sha256(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{FORMAT}".encode())
    stem = path.name[:-5] if path.name.lower().endswith(".gguf") else path.name
    return cache_root() / key.hexdigest()[:16] / stem


def ensure_converted(gguf: str | Path) -> Path:
    """GGUF's converted folder, converting it now if the cache has none."""
    folder = cached_folder(gguf)
    if (folder / "config.json").is_file():
        return folder
    from worker.model.gguf.convert import convert

    print(f"converting {gguf} into {folder} (once)", file=sys.stderr)
    summary = convert(gguf, folder)
    for note in summary["notes"]:
        print(f"  {note}", file=sys.stderr)
    return folder


def main(argv: list[str] | None = None) -> int:
    """Print FILE's converted folder (converting first if needed); exit 2 when it cannot be."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m worker.model.gguf.cache FILE.gguf", file=sys.stderr)
        return 2
    from worker.model.gguf.config import Unsupported

    try:
        print(ensure_converted(args[0]))
    except (Unsupported, OSError, ValueError) as exc:
        print(f"error: cannot convert {args[0]}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
