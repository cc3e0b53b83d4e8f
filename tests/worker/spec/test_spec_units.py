"""Small parts of speculative decoding: the n-gram index, the acceptance rule, adaptive k."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import pytest

from protocol.messages import SamplingParams
from worker.engine.sampling import RowSampler
from worker.spec.controller import COOLDOWN_STEPS, Speculator
from worker.spec.ngram import NgramDrafter
from worker.spec.verify import verify


@dataclass(eq=False)
class Row:
    """What the drafter and the speculator read of a request."""

    tokens: list[int]
    sampler: RowSampler = field(default_factory=lambda: RowSampler(SamplingParams(temperature=0)))
    grammar: Any = None
    vision: Any = None
    generated: int = 2


def brute(tokens: list[int], k: int, max_n: int = 4, min_n: int = 2) -> list[int]:
    """The longest suffix (MAX_N..MIN_N) found earlier, latest occurrence: what followed it
    (periodically continued past the end)."""
    for n in range(max_n, min_n - 1, -1):
        if len(tokens) < n:
            continue
        suffix = tokens[-n:]
        for e in range(len(tokens) - 1, n - 1, -1):
            if tokens[e - n : e] == suffix:
                return [tokens[e + i % (len(tokens) - e)] for i in range(k)]
    return []


def test_ngram_matches_brute_force_as_rows_grow() -> None:
    rng = random.Random(0)
    drafter = NgramDrafter()
    for _ in range(20):
        row = Row([rng.randrange(5) for _ in range(rng.randrange(1, 12))])
        for _ in range(30):
            assert drafter.propose([row], [4]) == [brute(row.tokens, 4)]
            row.tokens += [rng.randrange(5) for _ in range(rng.randrange(1, 4))]
        drafter.release(row)
    assert drafter.propose([Row([1, 2, 3, 9, 1, 2])], [0]) == [[]]


def test_greedy_rule_accepts_the_matching_prefix() -> None:
    logits = mx.log(mx.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]]))
    greedy = RowSampler(SamplingParams(temperature=0))
    accept, token, _ = verify(logits, [greedy] * 3, [1, 2, -1])
    assert accept.tolist() == [True, False, False] and token.tolist() == [1, 0, 2]


def test_rejection_rule_keeps_the_target_distribution() -> None:
    """One position: a deterministic draft (one-hot q on a token of p=0.2), or drafts sampled
    from a given q: the kept token is distributed as p in both cases."""
    p = mx.array([0.5, 0.2, 0.3])
    sampler = RowSampler(SamplingParams(temperature=1.0))
    n = 20000
    logits = mx.broadcast_to(mx.log(p)[None], (n, 3))
    q = mx.array([0.1, 0.6, 0.3])
    mx.random.seed(3)
    sampled: list[int] = mx.random.categorical(mx.log(q), num_samples=n).tolist()  # type: ignore[assignment]
    for drafts, qs in (([1] * n, None), (sampled, [q] * n)):
        accept, token, _ = verify(logits, [sampler] * n, drafts, qs)
        kept = mx.where(accept, mx.array(drafts), token)
        counts = Counter(kept.tolist())
        for t, want in enumerate(p.tolist()):
            assert abs(counts[t] / n - want) < 0.015, (qs is None, counts)


def test_adaptive_k_grows_shrinks_and_rests() -> None:
    spec = Speculator(NgramDrafter(), num_draft=6)
    row = Row([1, 2, 3, 1, 2])
    assert spec.active([row]) and spec.state(row).k == 6
    spec.observe(row, 6, 1)
    assert spec.state(row).k == 2
    spec.observe(row, 2, 2)
    assert spec.state(row).k == 4
    for _ in range(5):
        spec.observe(row, 4, 0)
    assert spec.state(row).rest == COOLDOWN_STEPS and not spec.active([row])
    for _ in range(COOLDOWN_STEPS):
        spec.tick([row])
    assert spec.active([row]) and spec.state(row).k == 1  # probes again
    seeded = Row([1, 2], RowSampler(SamplingParams(temperature=0.7, seed=1)))
    assert not spec.eligible(seeded)
    assert not spec.active([row] * 9)  # a big batch: compute-bound, no drafts


def test_speculation_pauses_when_it_costs_more_than_plain_steps() -> None:
    from worker.spec.controller import MIN_SAMPLES, PAUSE_STEPS

    spec = Speculator(NgramDrafter(), num_draft=4)
    row = Row([1, 2, 3, 1, 2])
    for _ in range(MIN_SAMPLES):
        spec.record(False, 1, 1, 0.010)  # plain: 10 ms per token
        spec.record(True, 1, 3, 0.020)  # drafts: 3 tokens in 20 ms, paying
    assert spec.active([row]) and not spec.pauses
    for _ in range(40):
        spec.record(True, 1, 1, 0.015)  # drafts all rejected: 15 ms per token
        if spec.paused:
            break
    assert spec.pauses == 1 and not spec.active([row])
    for _ in range(PAUSE_STEPS):
        spec.tick([row])
    assert spec.active([row])  # measured afresh
    spec.record(True, 32, 32, 1.0)  # beyond the speculating batch size: not counted
    assert spec._cost[True][1] == 0


def test_rows_whose_drafts_do_not_pay_at_the_measured_costs_stop_drafting() -> None:
    from worker.spec.controller import JUDGED_AFTER, MIN_SAMPLES

    spec = Speculator(NgramDrafter(), num_draft=4)
    good, bad = Row([1, 2, 3, 1, 2]), Row([1, 2, 3, 1, 2])
    for _ in range(MIN_SAMPLES):
        spec.record(False, 1, 1, 0.010)  # plain: 10 ms per token
        spec.tick([])
        spec._step_draft, spec._step_k = 0.004, 4  # drafting: 1 ms per draft position
        spec.record(True, 1, 3, 0.020)  # verifying: 16 ms a step
    assert spec.active([bad])  # not judged before its first verifications
    for _ in range(JUDGED_AFTER):
        spec.observe(good, 4, 4)
        spec.observe(bad, 4, 0)
    # acceptance ~0.36 (above the resting floor): at most 1.5 tokens per 17-20 ms step, slower
    # than plain (1 token per 10 ms)
    assert not spec.active([bad]) and spec.state(bad).rest == COOLDOWN_STEPS
    assert spec.active([good]) and spec.active([good, bad])  # near-full acceptance pays
    assert spec.propose([good, bad], [4, 4])[1] == ([], None)  # the resting row drafts nothing
    off = Speculator(NgramDrafter(), num_draft=4, pause=False)  # no cost rules at all
    off._cost, off._verify, off._draft = spec._cost, spec._verify, spec._draft
    off.observe(bad, 4, 0)
    off.observe(bad, 4, 0)
    assert off.active([bad])


def test_the_registry_refuses_what_it_cannot_build() -> None:
    from types import SimpleNamespace

    from worker.model.fetch import CannotLoad
    from worker.spec.registry import build_speculator

    loaded = SimpleNamespace(path="m", tokenizer=None)
    kw = {"num_draft": 4, "draft_model": None, "max_batch": 4, "context_length": 64}
    assert build_speculator("none", loaded, **kw) is None  # type: ignore[arg-type]
    assert build_speculator("ngram", loaded, **kw) is not None  # type: ignore[arg-type]
    for kind, says in (("draft", "needs a draft model"), ("mtp", "supports next-n layers"), ("x", "unknown")):
        with pytest.raises(CannotLoad, match=says):
            build_speculator(kind, loaded, **kw)  # type: ignore[arg-type]


def test_an_ngram_speculator_drafts_eight_tokens_unless_told() -> None:
    """n-gram proposals are free: without --num-draft-tokens it verifies up to 8 per step (a
    draft model, which pays a forward per token, keeps 4); a given count is kept as given."""
    from types import SimpleNamespace

    from worker.spec.registry import build_speculator, default_draft_tokens

    loaded = SimpleNamespace(path="m", tokenizer=None)
    kw = {"draft_model": None, "max_batch": 4, "context_length": 64}
    spec = build_speculator("ngram", loaded, num_draft=None, **kw)  # type: ignore[arg-type]
    assert spec is not None and spec.num_draft == 8
    spec = build_speculator("ngram", loaded, num_draft=3, **kw)  # type: ignore[arg-type]
    assert spec is not None and spec.num_draft == 3
    assert default_draft_tokens("draft") == default_draft_tokens("mtp") == 4
    assert build_speculator("none", loaded, num_draft=None, **kw) is None  # type: ignore[arg-type]


def test_a_row_drafts_from_its_second_decode_step() -> None:
    """The first decode step after the prompt runs plain (its text is often the first visible)."""
    spec = Speculator(NgramDrafter(), num_draft=4)
    row = Row([1, 2, 3, 1, 2], generated=1)
    assert spec.propose([row], [4]) == [([], None)]
    row.generated = 2
    assert spec.propose([row], [4])[0][0] == [3, 1, 2, 3]
