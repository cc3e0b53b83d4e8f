"""Speculative decoding with a checkpoint's own MTP (next-n) layer is lossless, on a tiny random
GLM-4.5 (glm4_moe) checkpoint that carries one: greedy output is token-identical to plain
decoding alone, 8 at a time, after a prefix hit and under preemption, K8V4 on and off; the
drafter's proposals equal a dense (unpaged) computation of the layer; sampled rows keep the
target's distribution."""

from __future__ import annotations

import json
import types
from collections import Counter
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.mtp_model import glm_mtp_model
from tests.worker.engine.test_engine import make_engine
from tests.worker.spec.spec_helpers import PROMPTS, run, tokens
from tests.worker.spec.test_spec_sampling import PARAMS, PROMPT, homogeneity_p
from worker.engine.core import Engine
from worker.model.embedded import embedded_model_path
from worker.model.fetch import CannotLoad
from worker.spec.controller import Speculator
from worker.spec.mtp import MTPDrafter
from worker.spec.mtp_load import mtp_drafter
from worker.spec.registry import build_speculator

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(max_tokens=40, temperature=0.0)
Model = tuple[Any, Any, Path]


def _model(root: Path, **kw: Any) -> Model:
    path = glm_mtp_model(root, **kw)
    mdl, tok = load(str(path))[:2]
    return mdl, tok, path


@pytest.fixture(scope="module")
def agree(tmp_path_factory: pytest.TempPathFactory) -> Model:
    """A model whose next-n layer mostly agrees with it (drafts get accepted)."""
    return _model(tmp_path_factory.mktemp("mtp") / "agree", agree=True)


@pytest.fixture(scope="module")
def rand(tmp_path_factory: pytest.TempPathFactory) -> Model:
    """Random weights everywhere (the next-n layer reads the target's hidden states)."""
    return _model(tmp_path_factory.mktemp("mtp") / "random")


def loaded(m: Model) -> Any:
    """What build_speculator needs of a loaded model."""
    mdl, tok, path = m
    return types.SimpleNamespace(model=mdl, tokenizer=tok, path=path,
                                 config=json.loads((path / "config.json").read_text()))


def mtp_engine(m: Model, k: int = 4, **kw: Any) -> Engine:
    """An engine drafting with the model's next-n layer (no timing pause: drafts are counted)."""
    drafter = mtp_drafter(loaded(m), max_batch=8, context_length=512, memory="16MiB")
    return make_engine(m[0], m[1], spec=Speculator(drafter, k, pause=False, first_draft_at=1), **kw)


def drafter_of(engine: Engine) -> MTPDrafter:
    assert engine.spec is not None and isinstance(engine.spec.drafter, MTPDrafter)
    return engine.spec.drafter


def all_free(engine: Engine) -> bool:
    """The drafter holds no row state and no pages once every request is done."""
    d = drafter_of(engine)
    return not d.rows and d.kv.pool.num_free == d.kv.store.num_pages - 1


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_alone_and_batched_equal_plain(agree: Model, kind: str) -> None:
    mdl, tok, _ = agree
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    plain = tokens(run(make_engine(mdl, tok, kind=kind), prompts, GREEDY))
    accepted = 0
    for rid, ids in prompts.items():
        engine = mtp_engine(agree, kind=kind)
        assert tokens(run(engine, {rid: ids}, GREEDY))[rid] == plain[rid], f"prompt {rid} alone"
        accepted += engine.stats.accepted_tokens
        assert all_free(engine)
    engine = mtp_engine(agree, kind=kind, prefill_budget=64)
    assert tokens(run(engine, prompts, GREEDY)) == plain
    assert accepted > 0 and engine.stats.accepted_tokens > 0  # drafts really were kept
    assert engine.stats.drafted_tokens > engine.stats.accepted_tokens  # and some rejected
    assert all_free(engine)


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_random_weights_equal_plain(rand: Model, kind: str) -> None:
    mdl, tok, _ = rand
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    plain = tokens(run(make_engine(mdl, tok, kind=kind), prompts, GREEDY))
    engine = mtp_engine(rand, kind=kind, prefill_budget=64)
    assert tokens(run(engine, prompts, GREEDY)) == plain
    assert engine.stats.drafted_tokens > 0


def test_after_a_prefix_hit(agree: Model) -> None:
    mdl, tok, _ = agree
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    plain = tokens(run(make_engine(mdl, tok), prompts, GREEDY))
    engine = mtp_engine(agree)
    run(engine, {"warm": tok.encode(PROMPTS[0])}, GREEDY)
    hits, accepted = engine.kv.stats.hits, engine.stats.accepted_tokens
    assert tokens(run(engine, prompts, GREEDY)) == plain
    assert engine.kv.stats.hits > hits
    assert engine.stats.accepted_tokens > accepted  # rows after a hit draft from later context
    assert all_free(engine)


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_under_preemption(agree: Model, kind: str) -> None:
    mdl, tok, _ = agree
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    plain_engine = make_engine(mdl, tok, kind=kind, memory="1", page_size=8)
    plain_engine.kv.pool.__init__(60)  # type: ignore[misc]  # 59 usable pages: 2-3 rows fit
    plain = tokens(run(plain_engine, prompts, GREEDY))
    engine = mtp_engine(agree, kind=kind, memory="1", page_size=8)
    engine.kv.pool.__init__(60)  # type: ignore[misc]
    assert tokens(run(engine, prompts, GREEDY)) == plain
    assert engine.stats.preemptions > 0 and engine.stats.accepted_tokens > 0
    assert all_free(engine)


def dense_proposals(mdl: Any, drafter: MTPDrafter, toks: list[int], k: int) -> list[int]:
    """The next-n layer's greedy chain after TOKS, computed without pages over the whole context."""
    head = drafter.head
    hidden = mdl.model(mx.array([toks[:-1]]))  # the target's positions 0..N-2
    fed = list(toks[1:])
    out: list[int] = []
    for _ in range(k):
        g = head.hidden(mx.array([fed]), hidden, mx.arange(len(fed))[None], None)
        out.append(int(mx.argmax(head.logits(g[:, -1]), axis=-1).item()))
        hidden = mx.concatenate([hidden, g[:, -1:]], axis=1)
        fed.append(out[-1])
    return out


def test_proposals_equal_a_dense_computation(rand: Model) -> None:
    """The hidden states, positions and MTP KV line up: every proposal (prefill catch-up,
    after verified and rejected drafts, chained on the layer's own output) is the argmax a
    dense forward over the whole context gives."""
    mdl, tok, _ = rand
    engine = mtp_engine(rand, prefix_cache=False)
    drafter = drafter_of(engine)
    seen: list[tuple[list[int], int, list[int]]] = []
    propose = drafter.propose_with_probs

    def spy(rows: list[Any], ks: list[int]) -> tuple[list[list[int]], list[mx.array | None]]:
        got = propose(rows, ks)
        seen.extend((list(r.tokens), k, p) for r, k, p in zip(rows, ks, got[0], strict=True) if p)
        return got

    drafter.propose_with_probs = spy  # type: ignore[method-assign]
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS[:3])}
    run(engine, prompts, SamplingParams(max_tokens=24, temperature=0.0))
    assert len(seen) >= 6
    for toks, k, got in seen[:12]:
        assert got == dense_proposals(mdl, drafter, toks, k)[: len(got)]


def test_supports_only_checkpoints_with_nextn_layers(agree: Model, tmp_path: Path) -> None:
    spec = build_speculator("mtp", loaded(agree), num_draft=3, draft_model=None, max_batch=4,
                            context_length=256)
    assert spec is not None and spec.name == "mtp" and spec.num_draft == 3
    bare = _model(tmp_path / "bare", nextn=False)
    with pytest.raises(CannotLoad, match="has none"):
        build_speculator("mtp", loaded(bare), num_draft=3, draft_model=None, max_batch=4,
                         context_length=256)
    demo = load(str(embedded_model_path()))[:2]
    with pytest.raises(CannotLoad, match="not qwen3"):
        build_speculator("mtp", loaded((*demo, embedded_model_path())), num_draft=3,
                         draft_model=None, max_batch=4, context_length=256)


@pytest.fixture(scope="module")
def words(tmp_path_factory: pytest.TempPathFactory) -> Model:
    """An 8-word glm4_moe with a random next-n layer: broad distributions for statistics."""
    return _model(tmp_path_factory.mktemp("mtp") / "words", vocab=8)


def pairs(engine: Engine, n: int) -> Counter[tuple[int, int]]:
    """Counts of the (2nd, 3rd) generated tokens over N requests (as test_spec_sampling)."""
    mx.random.seed(1234)
    got = run(engine, {str(i): PROMPT for i in range(n)}, PARAMS)
    counts: Counter[tuple[int, int]] = Counter()
    for outs in got.values():
        toks = [t for o in outs for t in o.token_ids]
        counts[(toks[1], toks[2])] += 1
    return counts


def test_sampled_joint_distribution_is_unchanged(words: Model) -> None:
    mdl, tok, _ = words
    plain = pairs(make_engine(mdl, tok, max_batch=8, max_waiting=6000), 5000)
    engine = mtp_engine(words, k=3, max_batch=8, max_waiting=6000)
    spec = pairs(engine, 5000)
    assert engine.stats.drafted_tokens > 4000
    assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens
    assert homogeneity_p(plain, spec) > 1e-3, (plain.most_common(8), spec.most_common(8))


def test_greedy_rows_beside_sampled_rows(words: Model) -> None:
    """A batch mixing greedy and sampled speculating rows: the greedy one stays exact."""
    mdl, tok, _ = words
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    ref = tokens(run(make_engine(mdl, tok), {"g": PROMPT}, greedy))["g"]
    engine = mtp_engine(words, max_batch=8)
    for i in range(4):
        engine.add(f"s{i}", PROMPT, PARAMS)
    assert tokens(run(engine, {"g": PROMPT}, greedy))["g"] == ref
    assert engine.stats.drafted_tokens > 0
    assert all_free(engine)
