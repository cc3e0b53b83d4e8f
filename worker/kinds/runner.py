"""What a non-generate worker kind provides to the loop: the same step-function shape as Engine."""

from __future__ import annotations

from typing import Any, Protocol

from protocol import messages as m


class QueueFull(Exception):
    """The runner's queue is at its bound: the request is refused (503), nothing else changes."""


class BadInput(ValueError):
    """A request's input the runner refuses (400), naming the request field it is about."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class Runner(Protocol):
    """One model of one kind behind the worker loop: jobs in, one bounded step, outputs out."""

    facts: m.ModelFacts  # what Ready tells the gateway (kind, capabilities, ...)

    def add(self, job: m.Work) -> None:
        """Queue one request (raise QueueFull at the bound; raise ValueError for bad input)."""

    def abort(self, request_ids: list[str]) -> None:
        """Drop these requests (queued or running) and free what they hold."""

    def step(self) -> list[m.RequestOutput]:
        """Do one bounded piece of work (one batch, one window); return every request's news."""

    @property
    def has_work(self) -> bool:
        """True while requests are queued or running."""

    @property
    def running(self) -> int:
        """Requests being worked on now."""

    @property
    def waiting(self) -> int:
        """Requests queued behind them."""

    def status(self) -> dict[str, Any]:
        """Kind-specific numbers for /v1/workers (batches, items, seconds)."""
