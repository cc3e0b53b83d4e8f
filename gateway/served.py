"""What the gateway serves: one entry per alias, with its parsers and model facts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class ServedModel:
    """An alias the gateway answers for, and how its output is parsed."""

    alias: str
    model: str
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    is_hybrid: bool = False
    is_moe: bool = False
    supports_spec_decode: bool = False
    context_length: int | None = None
    created: int = field(default_factory=lambda: int(time.time()))
