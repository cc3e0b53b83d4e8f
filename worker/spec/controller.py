"""Which rows speculate, with how many draft tokens (adaptive per row), and the drafter calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mlx.core as mx

from worker.spec.drafter import Drafter, has_probs, hopeful

if TYPE_CHECKING:
    from worker.request import Request

MAX_SPEC_BATCH = 8  # more running rows: the forward is compute-bound, drafts stop paying
COOLDOWN_STEPS = 16  # a row whose drafts keep failing rests this many steps, then probes
LOW_ACCEPTANCE = 0.2  # below this (smoothed) acceptance a row rests
EMPTY_LIMIT = 4  # proposals in a row that came back empty before a row rests
PAUSE_STEPS = 64  # speculation slower than plain decoding: everyone decodes plainly this long
MIN_SAMPLES = 16  # steps of each kind measured before comparing them
SLOWER = 1.2  # speculative steps this much slower per row-token than plain ones: pause


@dataclass
class RowState:
    """A row's adaptive draft length and its smoothed acceptance."""

    k: int
    ema: float = 1.0
    rest: int = 0  # steps left without drafts
    empty: int = 0  # proposals in a row that came back empty


class Speculator:
    """Plans draft tokens per row and learns each row's k (0..num_draft) from its acceptance.

    Rows speculate only where verification is exact and cheap to keep exact: no grammar, no
    penalties, no seed on a sampled row, no images, at most MAX_SPEC_BATCH rows running.
    """

    def __init__(self, drafter: Drafter, num_draft: int = 4,
                 max_batch: int = MAX_SPEC_BATCH, pause: bool = True) -> None:
        self.drafter = drafter
        self.num_draft = max(0, num_draft)
        self.max_batch = max_batch
        self._rows: dict[int, RowState] = {}
        self.pause = pause  # pause drafting for everyone when it measures slower than plain
        self.paused = 0  # steps left with speculation off for the whole batch
        self.pauses = 0
        self._cost: dict[bool, tuple[float, int]] = {True: (0.0, 0), False: (0.0, 0)}

    @property
    def name(self) -> str:
        """The drafter's name."""
        return self.drafter.name

    def eligible(self, r: Request) -> bool:
        """True when drafts for r can be verified exactly (see the class docstring)."""
        s = r.sampler
        return (r.grammar is None and r.vision is None and not s.penalized
                and (s.key is None or s.greedy))

    def state(self, r: Request) -> RowState:
        """r's adaptive state (created on first use)."""
        st = self._rows.get(id(r))
        if st is None:
            st = self._rows[id(r)] = RowState(k=self.num_draft)
        return st

    def active(self, rows: list[Request]) -> bool:
        """True when this step should speculate (then it runs synchronously)."""
        if not self.num_draft or not rows or len(rows) > self.max_batch or self.paused:
            return False
        return any(self.eligible(r) and not self.state(r).rest and hopeful(self.drafter, r)
                   for r in rows)

    def tick(self, rows: list[Request]) -> None:
        """One engine step passed: resting rows come closer to their next probe."""
        if self.paused:
            self.paused -= 1
        for r in rows:
            st = self._rows.get(id(r))
            if st is not None and st.rest:
                st.rest -= 1
                if not st.rest:
                    st.k, st.ema, st.empty = 1, 0.5, 0

    def propose(self, rows: list[Request], caps: list[int]
                ) -> list[tuple[list[int], mx.array | None]]:
        """Draft tokens (at most caps[i] and the row's k) and their q (None: one-hot) per row."""
        ks = [min(c, self.state(r).k) if self.eligible(r) and not self.state(r).rest else 0
              for r, c in zip(rows, caps, strict=True)]
        out: list[tuple[list[int], mx.array | None]] = [([], None) for _ in rows]
        want = [i for i, k in enumerate(ks) if k > 0]
        if not want:
            return out
        sampled = [i for i in want if not rows[i].sampler.greedy]
        plain = [i for i in want if rows[i].sampler.greedy or not has_probs(self.drafter)]
        if plain:
            for i, toks in zip(plain, self.drafter.propose([rows[i] for i in plain],
                                                           [ks[i] for i in plain]), strict=True):
                out[i] = (list(toks)[: ks[i]], None)
        probs = [i for i in sampled if i not in set(plain)]
        if probs:
            toks_q = self.drafter.propose_with_probs(  # type: ignore[attr-defined]
                [rows[i] for i in probs], [ks[i] for i in probs])
            for i, toks, q in zip(probs, *toks_q, strict=True):
                n = min(len(toks), ks[i])
                out[i] = (list(toks)[:n], q[:n] if q is not None else None)
        for i in want:
            if not out[i][0]:
                self._empty(rows[i])
        return out

    def observe(self, r: Request, drafted: int, accepted: int) -> None:
        """Learn from one verification: grow k while all drafts pass, shrink it when they fail."""
        self.drafter.verified(r, accepted, drafted)
        st = self.state(r)
        st.empty = 0
        st.ema = 0.6 * st.ema + 0.4 * (accepted / drafted)
        st.k = min(self.num_draft, st.k + 2) if accepted == drafted else max(1, accepted + 1)
        if st.ema < LOW_ACCEPTANCE:
            st.rest = COOLDOWN_STEPS

    def record(self, speculative: bool, rows: int, tokens: int, seconds: float) -> None:
        """Time one decode step (ROWS rows made TOKENS tokens); pause when drafting stops paying.

        Both kinds are compared per row-token (a small batch's step costs about the same for
        any row count), only at batch sizes where speculation may run.
        """
        if not self.pause or tokens <= 0 or rows <= 0 or rows > self.max_batch:
            return
        cost = seconds * rows / tokens
        mean, n = self._cost[speculative]
        self._cost[speculative] = (cost if not n else 0.9 * mean + 0.1 * cost, n + 1)
        (spec, ns), (plain, np_) = self._cost[True], self._cost[False]
        if speculative and ns >= MIN_SAMPLES and np_ >= MIN_SAMPLES and spec > SLOWER * plain:
            self.paused, self.pauses = PAUSE_STEPS, self.pauses + 1
            self._cost[True] = (0.0, 0)  # measured afresh after the pause

    def release(self, r: Request) -> None:
        """Forget r (finished, aborted or preempted)."""
        self._rows.pop(id(r), None)
        self.drafter.release(r)

    def _empty(self, r: Request) -> None:
        st = self.state(r)
        st.empty += 1
        if st.empty >= EMPTY_LIMIT:
            st.rest, st.empty = COOLDOWN_STEPS, 0
