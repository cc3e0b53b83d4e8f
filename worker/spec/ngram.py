"""Prompt-lookup drafting: propose what followed the latest earlier match of the row's suffix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.engine.request import Request


@dataclass
class _Index:
    """Per row: for each n, n-gram -> end of its latest occurrence (before the current end)."""

    grams: dict[int, dict[tuple[int, ...], int]] = field(default_factory=dict)
    upto: int = 0  # n-grams ending before this position are indexed


class NgramDrafter:
    """Deterministic drafter with no model: longest suffix match (MAX_N down to MIN_N tokens).

    The proposal is what followed the latest earlier occurrence of the suffix; when that runs
    into the row's end it continues periodically (a loop "a b a b" drafts "a b a b ...").

    The index grows incrementally with the row (each position is indexed once), so a proposal
    costs O(MAX_N) dictionary lookups however long the row is.
    """

    name = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 2) -> None:
        self.max_n, self.min_n = max_n, min_n
        self._rows: dict[int, _Index] = {}

    def propose(self, rows: list[Request], ks: list[int]) -> list[list[int]]:
        """Up to ks[i] tokens that followed the latest earlier occurrence of rows[i]'s suffix."""
        return [self._one(r.tokens, k, self._index(r)) if k > 0 else []
                for r, k in zip(rows, ks, strict=True)]

    def hopeful(self, row: Request) -> bool:
        """True when the row's suffix has an earlier match now (a draft is likely next step)."""
        return bool(self._one(row.tokens, 1, self._index(row)))

    def verified(self, row: Request, accepted: int, drafted: int) -> None:
        """Nothing to learn: the index follows row.tokens."""

    def release(self, row: Request) -> None:
        """Forget the row's index."""
        self._rows.pop(id(row), None)

    def _index(self, r: Request) -> _Index:
        ix = self._rows.get(id(r))
        if ix is None or ix.upto > len(r.tokens):
            ix = self._rows[id(r)] = _Index({n: {} for n in range(self.min_n, self.max_n + 1)})
        return ix

    def _one(self, tokens: list[int], k: int, ix: _Index) -> list[int]:
        end = len(tokens)
        for e in range(max(ix.upto, self.min_n), end):  # n-grams ending at e (exclusive), e < end
            for n, table in ix.grams.items():
                if e >= n:
                    table[tuple(tokens[e - n : e])] = e
        ix.upto = max(ix.upto, end)
        for n in range(self.max_n, self.min_n - 1, -1):
            if end < n:
                continue
            at = ix.grams[n].get(tuple(tokens[end - n :]))
            if at is not None:  # a match ending at `at` makes the row periodic with end - at
                period = end - at
                return [tokens[at + i % period] for i in range(k)]
        return []
