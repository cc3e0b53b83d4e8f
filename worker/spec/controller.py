"""Which rows speculate, with how many draft tokens (adaptive per row), and the drafter calls."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import mlx.core as mx

from worker.spec.drafter import Drafter, has_probs, hopeful

if TYPE_CHECKING:
    from worker.engine.request import Request

Tokens = list[int] | mx.array  # a row's draft tokens: host ints, or an unevaluated (k,) array

MAX_SPEC_BATCH = 8  # more running rows: the forward is compute-bound, drafts stop paying
COOLDOWN_STEPS = 16  # a row whose drafts keep failing rests this many steps, then probes
LOW_ACCEPTANCE = 0.2  # below this (smoothed) acceptance a row rests
EMPTY_LIMIT = 4  # proposals in a row that came back empty before a row rests
PAUSE_STEPS = 64  # speculation slower than plain decoding: everyone decodes plainly this long
MIN_SAMPLES = 16  # steps of each kind measured before comparing them
SLOWER = 1.1  # speculative steps this much slower per row-token than plain ones: pause
STRIKES = 4  # speculative steps in a row measured slower than plain before a pause
JUDGED_AFTER = 2  # verifications of a row before its acceptance decides whether it drafts
# a row drafts from its second decode step on: its first visible text often comes with its
# second token (a think tag first), and the draft model's prompt catch-up would delay it
FIRST_DRAFT_AT = 2  # tokens a row has generated before it drafts


@dataclass
class RowState:
    """A row's adaptive draft length and its smoothed acceptance."""

    k: int
    ema: float = 1.0
    rest: int = 0  # steps left without drafts
    empty: int = 0  # proposals in a row that came back empty
    seen: int = 0  # verifications since the row started (or came back from a rest)


class Speculator:
    """Plans draft tokens per row and learns each row's k (0..num_draft) from its acceptance.

    Rows speculate only where verification is exact and cheap to keep exact: no grammar, no
    penalties, no seed on a sampled row, no images, at most MAX_SPEC_BATCH rows running.
    """

    def __init__(self, drafter: Drafter, num_draft: int = 4,
                 max_batch: int = MAX_SPEC_BATCH, pause: bool = True,
                 first_draft_at: int = FIRST_DRAFT_AT) -> None:
        self.drafter = drafter
        self.first_draft_at = first_draft_at  # tokens a row has generated before it drafts
        self.num_draft = max(0, num_draft)
        self.max_batch = max_batch
        self._rows: dict[int, RowState] = {}
        self.pause = pause  # pause drafting for everyone when it measures slower than plain
        self.reset()

    def reset(self) -> None:
        """Forget every row and measurement (acceptance, step costs, pauses): start afresh."""
        self._rows.clear()
        self.paused = 0  # steps left with speculation off for the whole batch
        self.pauses = 0
        self._cost: dict[bool, tuple[float, int]] = {True: (0.0, 0), False: (0.0, 0)}
        self._spent: dict[bool, tuple[float, int]] = {True: (0.0, 0), False: (0.0, 0)}
        self._made: dict[bool, tuple[float, int]] = {True: (0.0, 0), False: (0.0, 0)}
        self._verify: tuple[float, int] = (0.0, 0)  # a speculative step's seconds besides drafting
        self._draft: tuple[float, int] = (0.0, 0)  # drafting seconds per draft position
        self._step_draft, self._step_k = 0.0, 0  # this step's drafting seconds and its longest k
        self._step_once = 0.0  # this step's seconds a row pays once (not counted as step costs)
        self._strikes = 0  # speculative steps in a row measured slower than plain ones

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
        # a row too young to draft decodes in overlapped steps like plain ones (``_drafts``)
        return any(self._drafts(r) and hopeful(self.drafter, r) for r in rows)

    def _drafts(self, r: Request) -> bool:
        """True when r drafts this step: old enough, eligible, not resting, and worth it at
        measured costs."""
        if r.generated < self.first_draft_at or not self.eligible(r):
            return False
        st = self.state(r)
        if not st.rest and not self.worth(st):
            st.rest, st.empty = COOLDOWN_STEPS, 0
        return not st.rest

    def worth(self, st: RowState) -> bool:
        """True unless the measured costs say r's drafts make fewer tokens per second than plain.

        A speculative step costs V + D*k (V: verify and bookkeeping, D: the drafter's seconds per
        draft position, ~0 for n-gram lookup) and makes (1 - a^(k+1)) / (1 - a) tokens on average
        at acceptance a; a plain step costs P per token. The row drafts when some k <= its limit
        beats 1 / P. Rows are judged after JUDGED_AFTER verifications, costs after MIN_SAMPLES.
        """
        (plain, n_plain), (v, n_v), (d, _) = self._cost[False], self._verify, self._draft
        if not self.pause or st.seen < JUDGED_AFTER or n_plain < MIN_SAMPLES or n_v < MIN_SAMPLES:
            return True
        a = min(st.ema, 0.99)
        best = max((1 - a ** (k + 1)) / (1 - a) / (v + d * k) for k in range(1, self.num_draft + 1))
        return best * plain >= 1.0

    def hold(self, k: int) -> None:
        """Every known row drafts K tokens next step, whatever its acceptance (the warm-up)."""
        for st in self._rows.values():
            st.k, st.ema, st.rest, st.empty = k, 1.0, 0, 0

    def tick(self, rows: list[Request]) -> None:
        """One engine step passed: resting rows come closer to their next probe."""
        if self.paused:
            self.paused -= 1
        self._step_draft, self._step_k, self._step_once = 0.0, 0, 0.0
        for r in rows:
            st = self._rows.get(id(r))
            if st is not None and st.rest:
                st.rest -= 1
                if not st.rest:
                    st.k, st.ema, st.empty, st.seen = 1, 0.5, 0, 0

    def propose(self, rows: list[Request], caps: list[int]) -> list[tuple[Tokens, mx.array | None]]:
        """Draft tokens (at most caps[i] and the row's k) and their q (None: one-hot) per row.

        A drafter with ``propose_lazy`` (the draft model) gives unevaluated token arrays of
        exactly the asked lengths: the verify forward is built on them before anyone waits.
        """
        t0, once = time.perf_counter(), self._catch_up()
        ks = [min(c, self.state(r).k) if self._drafts(r) else 0
              for r, c in zip(rows, caps, strict=True)]
        try:
            return self._propose(rows, ks)
        finally:
            once = self._catch_up() - once
            self._step_once += once
            self._step_draft += time.perf_counter() - t0 - once
            self._step_k = max([self._step_k, *ks])

    def _catch_up(self) -> float:
        """The drafter's seconds so far that a row pays once (the draft model's prompt prefill)."""
        return float(getattr(self.drafter, "catch_up_seconds", 0.0))

    def _propose(self, rows: list[Request], ks: list[int]) -> list[tuple[Tokens, mx.array | None]]:
        out: list[tuple[Tokens, mx.array | None]] = [([], None) for _ in rows]
        want = [i for i, k in enumerate(ks) if k > 0]
        if not want:
            return out
        lazy = getattr(self.drafter, "propose_lazy", None)
        if callable(lazy):
            for i, (toks, q) in zip(want, lazy([rows[i] for i in want], [ks[i] for i in want]),
                                    strict=True):
                if toks is not None:
                    out[i] = (toks, q)
                else:
                    self._empty(rows[i])
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
        st.empty, st.seen = 0, st.seen + 1
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
        seconds = max(0.0, seconds - self._step_once)
        # seconds and tokens are averaged apart (their ratio is the cost): a step whose drafts
        # all failed weighs as one token, not as one sample of a per-token cost 5x the usual
        spent, made = _ema(self._spent[speculative], seconds * rows), _ema(self._made[speculative], tokens)
        self._spent[speculative], self._made[speculative] = spent, made
        self._cost[speculative] = (spent[0] / made[0] if made[0] > 0 else 0.0, spent[1])
        if speculative:
            self._verify = _ema(self._verify, max(0.0, seconds - self._step_draft))
            if self._step_k:
                self._draft = _ema(self._draft, self._step_draft / self._step_k)
        (spec, ns), (plain, np_) = self._cost[True], self._cost[False]
        if speculative and ns >= MIN_SAMPLES and np_ < MIN_SAMPLES and not self.paused:
            self.paused = MIN_SAMPLES + 2  # no plain steps to compare with yet: measure some
        elif speculative and ns >= MIN_SAMPLES and np_ >= MIN_SAMPLES:
            # a stall (another process, a page fault) must not pause everyone: only a cost that
            # stays above plain for STRIKES measured steps in a row does
            self._strikes = self._strikes + 1 if spec > SLOWER * plain else 0
            if self._strikes < STRIKES:
                return
            self.paused, self.pauses, self._strikes = PAUSE_STEPS, self.pauses + 1, 0
            self._cost[True] = self._spent[True] = self._made[True] = (0.0, 0)  # afresh after

    def release(self, r: Request) -> None:
        """Forget r (finished, aborted or preempted)."""
        self._rows.pop(id(r), None)
        self.drafter.release(r)

    def _empty(self, r: Request) -> None:
        st = self.state(r)
        st.empty += 1
        if st.empty >= EMPTY_LIMIT:
            st.rest, st.empty = COOLDOWN_STEPS, 0


def _ema(old: tuple[float, int], x: float) -> tuple[float, int]:
    """A running mean that follows recent values (0.1 weight each), and its sample count."""
    mean, n = old
    return (x if not n else 0.9 * mean + 0.1 * x, n + 1)
