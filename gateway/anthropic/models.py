"""--anthropic-model-map: client model names (claude-...) mapped to served aliases by glob."""

from __future__ import annotations

from collections.abc import Collection
from fnmatch import fnmatchcase


def parse_model_map(values: list[str], served: set[str]) -> list[tuple[str, str]]:
    """PATTERN=ALIAS entries (PATTERN a glob such as claude-*; ALIAS alone means '*'), in order.

    Raises ValueError naming the entry when it is malformed or its alias is not served.
    """
    out: list[tuple[str, str]] = []
    for value in values:
        pattern, _, alias = value.rpartition("=")
        pattern, alias = (pattern.strip() or "*"), alias.strip()
        if alias not in served:
            names = ", ".join(sorted(served))
            raise ValueError(f"'{value}': '{alias}' is not a served alias ({names})")
        out.append((pattern, alias))
    return out


def resolve_model(name: str, served: Collection[str],
                  model_map: list[tuple[str, str]]) -> str:
    """NAME if it is served, else the alias of the first pattern it matches, else NAME."""
    if name in served:
        return name
    return next((alias for pattern, alias in model_map if fnmatchcase(name, pattern)), name)
