"""One request's grammar state: which tokens may come next, advance, finished."""

from __future__ import annotations

from typing import Any

from worker.grammar import budget
from worker.grammar.runaway import NumberGuard


class GrammarRefused(RuntimeError):
    """A constrained request's matcher failed mid-answer (a resource limit, a refused token)."""


class Constraint:
    """A request's matcher; every method is cheap except the mask fill (done in batches).

    With THINK = (open, close) token ids, a reasoning section may come first and is free: the
    first token may be ``open`` (or the prompt opened it: ``begin(True)``), and the grammar
    starts after ``close``. GUARD, for JSON output, keeps numbers from running on forever.
    """

    def __init__(self, matcher: Any, think: tuple[int, int] | None = None,
                 guard: NumberGuard | None = None) -> None:
        self.matcher = matcher
        self.guard = guard
        self.consumed = 0  # tokens advanced so far
        self.think = think
        self.state = "may_think" if think else "grammar"  # or "thinking"
        self.mask_s = 0.0  # seconds of mask work spent on this request (budget.py)
        self.suspect = True  # its masks are timed alone (until one shows they are cheap)
        self.refused: str | None = None  # why it was stopped (over its budget), or None

    def charge(self, seconds: float) -> None:
        """Count SECONDS of mask work; past the budget the request is refused."""
        self.mask_s += seconds
        if self.refused is None and budget.over(self.mask_s, self.consumed):
            self.refused = budget.refusal(self.mask_s, self.consumed)

    def begin(self, think_opened: bool) -> None:
        """Start in the reasoning section when the prompt opened it."""
        if self.think is not None and think_opened:
            self.state = "thinking"

    @property
    def free(self) -> bool:
        """True while the reasoning section runs: any token may come."""
        return self.state == "thinking"

    @property
    def finished(self) -> bool:
        """True when the grammar is complete: nothing but the end may follow."""
        return self.state == "grammar" and bool(self.matcher.is_stopped())

    @property
    def accepting(self) -> bool:
        """True when the text so far is a complete match (it may still go on)."""
        return self.state == "grammar" and bool(self.matcher.is_accepting())

    @property
    def error(self) -> str | None:
        """Why the matcher failed (a token it refused, a resource limit, the mask budget), or
        None."""
        if self.refused is not None:
            return self.refused
        return str(self.matcher.get_error()) if self.matcher.is_error() else None

    def advance(self, token: int) -> bool:
        """Consume the sampled TOKEN; False (and an error state) when the grammar refuses it
        (or the request is over its mask budget)."""
        if self.refused is not None:
            return False
        if self.think is not None and self.state != "grammar":
            if self.state == "thinking":
                self.state = "grammar" if token == self.think[1] else "thinking"
                return True
            self.state = "grammar"
            if token == self.think[0]:
                self.state = "thinking"
                return True
        if self.matcher.is_stopped():
            return True  # the end token after a complete match: nothing left to check
        ok = bool(self.matcher.consume_token(token))
        self.consumed += ok
        if ok and self.guard is not None:
            self.guard.feed(token)
        return ok
