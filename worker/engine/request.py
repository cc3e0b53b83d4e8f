"""What the engine keeps per request, its counters, and the errors it raises on intake."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from protocol.messages import SamplingParams
from worker.engine.sampling import RowSampler
from worker.engine.stops import StopMatcher
from worker.kv.request_pages import RequestPages


@dataclass(eq=False)
class Request:
    """One generation in the engine (compared by identity)."""

    id: str
    prompt_len: int
    tokens: list[int]  # prompt followed by generated tokens
    params: SamplingParams
    sampler: RowSampler
    detok: Any
    stop: StopMatcher
    kv: RequestPages = field(default_factory=RequestPages)
    computed: int = 0  # positions whose KV is in the pages
    cached_tokens: int = 0
    arrival: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    scheduled_at: float | None = None
    finish_reason: str | None = None
    think_opened: bool = False
    preemptions: int = 0
    grammar: Any = None  # a worker.grammar Constraint when the answer must match a grammar
    vision: Any = None  # a worker.kinds.vision VisionInput when the prompt holds images
    embeds: mx.array | None = None  # the prompt's input embeddings while its prefill needs them
    cache_salt: str = ""  # the prefix-cache namespace: a tenant's (set by the gateway); "": shared

    @property
    def generated(self) -> int:
        """Tokens generated so far."""
        return len(self.tokens) - self.prompt_len

    @property
    def need(self) -> int:
        """Positions that must have KV before the next token can be sampled or fed."""
        return self.prompt_len if not self.generated else len(self.tokens) - 1

    @property
    def prefilling(self) -> bool:
        """True while prompt (or, after preemption, recomputed) tokens remain."""
        return self.computed < self.need

    @property
    def phase(self) -> str:
        """Prefill or decode, for status reports."""
        return "prefill" if self.prefilling else "decode"


@dataclass
class EngineStats:
    """Counters the worker reports in heartbeats and status."""

    steps: int = 0
    overlapped_steps: int = 0  # decode steps built on the previous step's unread tokens
    sync_seconds: float = 0.0  # wall time of the other (synchronous) steps
    prompt_tokens_computed: int = 0
    generated_tokens: int = 0
    decode_rows: int = 0  # tokens decode steps produced (a row with kept drafts: more than 1)
    finished: int = 0
    preemptions: int = 0
    last_step_at: float = 0.0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    mask_seconds: float = 0.0  # filling grammar masks (overlapped with the forward pass)
    images_encoded: int = 0  # images run through a vision tower
    drafted_tokens: int = 0  # speculative decoding: draft tokens verified
    accepted_tokens: int = 0  # of those, kept


@dataclass
class Inflight:
    """Tokens sampled by an overlapped step, not yet read back."""

    rows: list[Request]
    tokens: mx.array
    logprobs: mx.array | None


class QueueFull(Exception):
    """The wait queue is at its bound."""


class KVTooSmall(ValueError):
    """A request could never fit in the KV pool."""
