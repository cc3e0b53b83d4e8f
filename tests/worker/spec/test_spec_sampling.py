"""Speculative sampling is lossless in distribution: a chi-square test cannot tell it from plain,
and the same test does catch a wrong acceptance rule."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import make_engine
from tests.worker.spec.spec_helpers import run, spec_engine, tiny_vocab_model
from worker.engine.core import Engine
from worker.spec import step as spec_step
from worker.spec import verify as spec_verify

pytestmark = pytest.mark.slow

PROMPT = [1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 0]  # 1-gram lookup drafts after any token
PARAMS = SamplingParams(max_tokens=4, temperature=0.9, top_k=6, ignore_eos=True)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    return load(str(tiny_vocab_model(tmp_path_factory.mktemp("spec"))))[:2]


def pairs(engine: Engine, n: int) -> Counter[tuple[int, int]]:
    """Counts of (2nd, 3rd) generated tokens over N requests (the first decoded ones: the 1st
    comes from the prompt's forward, which never carries drafts)."""
    mx.random.seed(1234)
    got = run(engine, {str(i): PROMPT for i in range(n)}, PARAMS)
    counts: Counter[tuple[int, int]] = Counter()
    for outs in got.values():
        toks = [t for o in outs for t in o.token_ids]
        assert len(toks) == PARAMS.max_tokens
        counts[(toks[1], toks[2])] += 1
    return counts


def homogeneity_p(a: Counter[tuple[int, int]], b: Counter[tuple[int, int]]) -> float:
    """p-value of a chi-square test that A and B come from one distribution (Wilson-Hilferty)."""
    na, nb = sum(a.values()), sum(b.values())
    cells = [c for c in set(a) | set(b) if a[c] + b[c] >= 5]  # sparse cells pooled away
    stat = 0.0
    for c in cells:
        total = a[c] + b[c]
        ea, eb = total * na / (na + nb), total * nb / (na + nb)
        stat += (a[c] - ea) ** 2 / ea + (b[c] - eb) ** 2 / eb
    k = max(len(cells) - 1, 1)
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_joint_distribution_of_two_tokens_is_unchanged(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    plain = pairs(make_engine(mdl, tok, max_batch=8, max_waiting=6000), 5000)
    engine = spec_engine(mdl, tok, k=3, min_n=1, pause=False, max_batch=8,
                         max_waiting=6000)
    spec = pairs(engine, 5000)
    assert engine.stats.drafted_tokens > 4000
    assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens  # both paths taken
    assert homogeneity_p(plain, spec) > 1e-3, (plain.most_common(8), spec.most_common(8))


def test_the_test_catches_an_always_accept_rule(model: tuple[Any, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def always(logits: mx.array, samplers: list[Any], drafts: list[int],
               qs: list[mx.array | None] | None = None) -> tuple[mx.array, mx.array, Any]:
        _, token, logprobs = spec_verify.verify(logits, samplers, drafts, qs)
        return mx.array([d >= 0 for d in drafts]), token, logprobs

    mdl, tok = model
    plain = pairs(make_engine(mdl, tok, max_batch=8, max_waiting=6000), 1500)
    monkeypatch.setattr(spec_step, "verify", always)
    wrong = pairs(spec_engine(mdl, tok, k=3, min_n=1, pause=False, max_batch=8,
                         max_waiting=6000), 1500)
    assert homogeneity_p(plain, wrong) < 1e-6


def test_greedy_rows_beside_sampled_rows(model: tuple[Any, Any]) -> None:
    """A batch mixing greedy and sampled speculating rows: the greedy ones stay exact."""
    mdl, tok = model
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    ref = run(make_engine(mdl, tok), {"g": PROMPT}, greedy)["g"]
    engine = spec_engine(mdl, tok, min_n=1, max_batch=8)
    for i in range(4):
        engine.add(f"s{i}", PROMPT, PARAMS)
    got = run(engine, {"g": PROMPT}, greedy)["g"]
    assert [t for o in got for t in o.token_ids] == [t for o in ref for t in o.token_ids]
    assert engine.stats.drafted_tokens > 0


def test_homogeneity_p_sanity() -> None:
    same = Counter({(0, 0): 500, (0, 1): 300, (1, 1): 200})
    assert homogeneity_p(same, same) > 0.5
    assert homogeneity_p(same, Counter({(0, 0): 300, (0, 1): 300, (1, 1): 400})) < 1e-6


def test_model_folder_is_real(tmp_path: Path) -> None:
    mdl, tok = load(str(tiny_vocab_model(tmp_path)))[:2]
    assert tok.encode("w1 w2") == [1, 2] and mdl.args.vocab_size == 8
