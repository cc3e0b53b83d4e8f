"""What passes between the engine's stages: the scheduler's plan, the executor's result, the rows at risk."""

from __future__ import annotations

import mlx.core as mx

from protocol.messages import RequestOutput
from worker.engine.request import Inflight, Request
from worker.spec.controller import Tokens

Drafts = dict[int, tuple[Tokens, mx.array | None]]  # id(row) -> (draft tokens, q or None)


class StepPlan:
    """One step's work: an overlapped decode of DECODES (every running row), or a synchronous
    step of DECODES, PREFILLS (row, tokens) chunks and DRAFTS (the rows that speculate)."""

    __slots__ = ("decodes", "drafts", "overlapped", "prefills")

    def __init__(self, decodes: list[Request], prefills: list[tuple[Request, int]] | None = None,
                 drafts: Drafts | None = None, overlapped: bool = False) -> None:
        self.decodes = decodes
        self.prefills: list[tuple[Request, int]] = prefills if prefills is not None else []
        self.drafts: Drafts = drafts if drafts is not None else {}
        self.overlapped = overlapped

    @property
    def empty(self) -> bool:
        """True when the step runs no forward (nothing decodes, nothing prefills)."""
        return not self.decodes and not self.prefills


class StepResult:
    """What the executor made of a plan: outputs so far, tokens to read back late, timings."""

    __slots__ = ("late", "outputs", "t0", "t1", "t2", "verified")

    def __init__(self, outputs: list[RequestOutput], late: Inflight | None = None,
                 t0: float = 0.0, t1: float = 0.0, t2: float = 0.0, verified: int = 0) -> None:
        self.outputs = outputs  # the outputs made during the forward (not yet sent ones)
        self.late = late  # an overlapped step: the previous step's tokens, read back after it
        self.t0, self.t1, self.t2 = t0, t1, t2  # started, decode forward built, prefills built
        self.verified = verified  # rows whose drafts this step verified

    @property
    def prefill_seconds(self) -> float:
        """Seconds the prefill chunks' forwards took (not a decode cost)."""
        return self.t2 - self.t1


class AtRisk:
    """The rows the current step has put at risk: a failure now fails these (and no others)."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[Request] = []
