"""What a benchmark run does (Plan) and what it found for one model (ModelRun)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_TOKENS = 128
REQUESTS_PER_CONC = {1: 4}  # otherwise 2 * concurrency (two waves of the closed loop); x4 for stories


@dataclass
class Plan:
    quick: bool
    concurrency: list[int]
    repeats: int
    shared_requests: int
    shared_concurrency: int = 8
    shared_repeats: int = 5
    shared_target: int = 1000
    max_tokens: int = MAX_TOKENS
    workloads: tuple[str, ...] = ("chat", "shared", "edit")
    edit_concurrency: tuple[int, ...] = (1,)
    edit_target: int = 160  # paragraph tokens of the edit workload (less when the context is short)

    def n_requests(self, c: int, scale: int = 1) -> int:
        """Requests per throughput batch; ``scale`` lengthens batches of very fast models."""
        if self.quick:
            return max(2, c) * scale
        return REQUESTS_PER_CONC.get(c, 2 * c) * scale


@dataclass
class ModelRun:
    name: str
    path: str
    config: dict[str, Any]
    servers: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    shared: list[dict[str, Any]] = field(default_factory=list)
    # who is who: {"peers": [...], "ours": default server, "k8v4_off": name|None, "variants": {name: flags}}
    roles: dict[str, Any] = field(default_factory=dict)
    shared_prompt_tokens: int = 0
    kv: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    loadavg: list[str] = field(default_factory=list)
