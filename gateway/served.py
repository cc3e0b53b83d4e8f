"""What the gateway serves: one entry per alias, with its parsers and model facts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


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
    sampling: dict[str, Any] = field(default_factory=dict)
    worker_args: list[str] = field(default_factory=list)  # the alias's own, after the CLI's
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.parsers_given = bool(self.tool_call_parser or self.reasoning_parser)
