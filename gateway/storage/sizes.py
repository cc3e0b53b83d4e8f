"""Byte sizes as the command line writes them: '1GiB', '512MiB', '100MB', '65536'."""

from __future__ import annotations

UNITS = {"gib": 2**30, "gb": 10**9, "mib": 2**20, "mb": 10**6, "kib": 2**10, "kb": 10**3,
         "b": 1}


def parse_size(spec: str) -> int:
    """Bytes from SPEC (a whole number with an optional unit); ValueError when it is not one."""
    s = spec.strip().lower()
    unit = next((u for u in UNITS if s.endswith(u)), "")
    value = float(s[: -len(unit)]) if unit else float(int(s))
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{spec!r} is not a size in bytes")
    return int(value * UNITS.get(unit, 1))
