"""Anthropic's server-sent events: an `event:` line naming the event, then its JSON data."""

from __future__ import annotations

from typing import Any

import msgspec


def event(name: str, data: dict[str, Any]) -> bytes:
    """One `event: NAME` / `data: {...}` frame."""
    return b"event: " + name.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"
