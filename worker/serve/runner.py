"""What the worker loop drives: a ``Runner`` (text generation, embeddings, speech...) and the
``Outlet`` it offers back. The loop moves messages; the runner does the work."""

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


class Outlet(Protocol):
    """What the loop offers its runner: outputs out now, a request's error, a bounded wait."""

    def send_outputs(self, outputs: list[m.RequestOutput]) -> None:
        """Send OUTPUTS (and any errors waiting) to the gateway now, in one StepOutputs frame."""

    def fail(self, request_id: str, message: str, code: str, param: str | None = None) -> None:
        """Answer REQUEST_ID with an error (sent with the next outputs)."""

    def wait(self, timeout_ms: int) -> bool:
        """Wait up to TIMEOUT_MS for a job (handled at once) or ``fd``; False once stopping."""

    def planned(self, tokens: int, pairs: int) -> None:
        """The running step's planned work (TOKENS computed, PAIRS of attention), for its deadline."""


class Runner(Protocol):
    """One model behind the worker loop: jobs in, one bounded step, outputs out."""

    facts: m.ModelFacts  # what Ready tells the gateway (kind, capabilities, ...)
    fd: int | None  # the loop polls it with the socket: readable when work done off the loop is in

    def attach(self, outlet: Outlet) -> None:
        """Called once by the loop before it runs (a runner that sends mid-step keeps OUTLET)."""

    def add(self, job: m.Work) -> None:
        """Take one request (raise QueueFull at the bound; raise ValueError for bad input)."""

    def abort(self, request_ids: list[str]) -> None:
        """Drop these requests (queued, preparing or running) and free what they hold."""

    def collect(self, woke: bool) -> None:
        """Before each step: take in work prepared off the loop (WOKE: ``fd`` was readable)."""
        # raising here ends the worker: the supervisor restarts it

    def step(self) -> list[m.RequestOutput]:
        """Do one bounded piece of work (one batch, one window); return every request's news."""

    @property
    def has_work(self) -> bool:
        """True while requests are queued or running (the loop steps instead of waiting)."""

    @property
    def busy(self) -> bool:
        """True while any request is queued, running or being prepared (a SIGTERM drains it)."""

    @property
    def steps(self) -> int:
        """The step number StepOutputs and Heartbeat carry."""

    @property
    def running(self) -> int:
        """Requests being worked on now."""

    @property
    def waiting(self) -> int:
        """Requests queued behind them."""

    def heartbeat(self) -> dict[str, Any]:
        """Heartbeat fields beyond step, running, waiting and draining (none: {})."""

    def status(self) -> dict[str, Any]:
        """This runner's part of the worker's status for /v1/workers."""

    def close(self) -> None:
        """Stop what runs off the loop (the loop has ended)."""


class BasicRunner:
    """Defaults for a runner that works only in ``step()``: no fd, nothing to collect, no extras."""

    facts: m.ModelFacts
    fd: int | None = None
    folder = ""  # the model's folder, for the status
    steps = 0  # the runner's step() counts them

    def attach(self, outlet: Outlet) -> None:
        """Nothing to keep: outputs go out when step() returns."""

    def add(self, job: m.Work) -> None:
        """Overridden by the runner."""
        raise NotImplementedError

    def abort(self, request_ids: list[str]) -> None:
        """Overridden by the runner."""
        raise NotImplementedError

    def collect(self, woke: bool) -> None:
        """Nothing is prepared off the loop."""

    def step(self) -> list[m.RequestOutput]:
        """Overridden by the runner (which counts ``steps``)."""
        raise NotImplementedError

    @property
    def has_work(self) -> bool:
        """Overridden by the runner."""
        raise NotImplementedError

    @property
    def busy(self) -> bool:
        """True while requests are queued or running."""
        return self.has_work

    @property
    def running(self) -> int:
        """Overridden by the runner."""
        raise NotImplementedError

    @property
    def waiting(self) -> int:
        """Overridden by the runner."""
        raise NotImplementedError

    def heartbeat(self) -> dict[str, Any]:
        """No extra heartbeat fields."""
        return {}

    def numbers(self) -> dict[str, Any]:
        """Kind-specific numbers for the status (batches, items, seconds)."""
        return {}

    def status(self) -> dict[str, Any]:
        """Kind, model, path, dtype, counts and steps, then ``numbers()``."""
        f = self.facts
        return {"kind": f.kind, "model": f.model, "path": self.folder, "dtype": f.dtype,
                "running": self.running, "waiting": self.waiting, "steps": self.steps,
                **self.numbers()}

    def close(self) -> None:
        """Nothing runs off the loop."""
