"""The drafter interface: what the engine asks of anything that proposes draft tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import mlx.core as mx

    from worker.engine.request import Request


@runtime_checkable
class Drafter(Protocol):
    """Proposes up to k tokens to follow each running row; told how many were kept.

    A deterministic drafter (n-gram lookup) implements ``propose`` only: the engine treats its
    proposals as one-hot draft distributions (q = 1 on the proposed token). A drafter that
    samples its proposals also implements ``ProbDrafter.propose_with_probs`` so sampled rows can
    use the exact rejection-sampling rule with its q.
    """

    name: str  # "ngram" | "draft" | "mtp"

    def propose(self, rows: list[Request], ks: list[int]) -> list[list[int]]:
        """Up to ks[i] draft tokens to follow rows[i].tokens (fewer or none is fine)."""
        ...

    def verified(self, row: Request, accepted: int, drafted: int) -> None:
        """After verification: ACCEPTED of DRAFTED proposals were kept (row.tokens updated)."""
        ...

    def release(self, row: Request) -> None:
        """The row finished, was aborted or preempted: drop its drafter state."""
        ...


@runtime_checkable
class ProbDrafter(Drafter, Protocol):
    """A drafter that samples its proposals from distributions q it can return."""

    def propose_with_probs(self, rows: list[Request], ks: list[int]
                           ) -> tuple[list[list[int]], list[mx.array | None]]:
        """Like ``propose``, plus per row the draft distributions q: an mx.array [len, vocab]
        (softmax probabilities, rows matching the proposed tokens) or None when it proposed
        greedily / deterministically (q is then one-hot on the proposed tokens).

        The engine calls this instead of ``propose`` when a row samples (temperature > 0);
        q must be the distribution the token was actually drawn from, after the row's own
        temperature/top-p/top-k if the drafter applies them (any q is exact as long as it is
        the one sampled from).
        """
        ...


def hopeful(drafter: Drafter, row: Request) -> bool:
    """The drafter's cheap guess whether it would propose for ROW (optional ``hopeful(row)``;
    True without one). Steps only go synchronous for drafts when some row is hopeful."""
    guess = getattr(drafter, "hopeful", None)
    return bool(guess(row)) if callable(guess) else True


def has_probs(drafter: Drafter) -> bool:
    """True when DRAFTER can return the distributions its proposals were sampled from."""
    return callable(getattr(drafter, "propose_with_probs", None))
