"""The draft-model drafter on the demo model's trained draft: its proposals are the draft's own
greedy continuation (mlx-lm generate), after rollback too, batched the same as one by one."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step

from protocol.messages import SamplingParams
from tests.conftest import shared_model
from worker.engine.attention import install
from worker.engine.core import model_dtype
from worker.engine.request import Request
from worker.engine.sampling import RowSampler
from worker.engine.stops import StopMatcher
from worker.spec.draft_load import DraftMismatch, check_tokenizers, draft_store, load_draft
from worker.spec.draft_model import DraftModelDrafter
from worker.spec.drafter import ProbDrafter

QUESTIONS = ["Hello!", "What is the weather in Paris?", "Who are you?", "Thanks!",
             "What time is it in Tokyo?", "Good morning!", "How are you?", "Add 12 and 30."]


@pytest.fixture(scope="module")
def draft() -> Any:
    install()
    return load_draft("demo-draft", load("worker/model/demo/weights")[1])


def prompts(tok: Any) -> list[list[int]]:
    return [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
            for q in QUESTIONS]


def row(ids: list[int], temperature: float = 0.0, **kw: Any) -> Request:
    params = SamplingParams(temperature=temperature, max_tokens=64, **kw)
    return Request(id=str(id(ids)), prompt_len=len(ids), tokens=list(ids), params=params,
                   sampler=RowSampler(params), detok=None, stop=StopMatcher([]))


def drafter(d: Any, memory: str = "16MiB", page_size: int = 16, max_batch: int = 8
            ) -> DraftModelDrafter:
    dtype = model_dtype(d.model)
    store = draft_store(d.model, dtype, max_batch=max_batch, context_length=512, page_size=page_size,
                        memory=memory)
    return DraftModelDrafter(d.model, store, dtype)


def greedy(model: Any, ids: list[int], n: int) -> list[int]:
    """mlx-lm's greedy continuation of IDS by MODEL (no EOS stop: the drafter has none)."""
    return [int(t) for t, _ in generate_step(mx.array(ids), model, max_tokens=n)]


def test_proposals_are_the_drafts_greedy_continuation_batched_and_alone(draft: Any) -> None:
    ids = prompts(draft.tokenizer)
    ks = [4, 1, 3, 5, 2, 4, 6, 3]
    want = [greedy(draft.model, p, k) for p, k in zip(ids, ks, strict=True)]
    dr = drafter(draft)
    rows = [row(p) for p in ids]
    assert dr.propose(rows, ks) == want
    for r in rows:
        dr.release(r)
    alone = [drafter(draft).propose([row(p)], [k])[0] for p, k in zip(ids, ks, strict=True)]
    assert alone == want
    assert dr.kv.pool.num_used == 0


def test_rollback_after_partial_acceptance(draft: Any) -> None:
    """Accept some drafts, correct the next token, propose again: as if computed from scratch."""
    ids = prompts(draft.tokenizer)
    dr = drafter(draft, page_size=4)  # small pages: rollbacks cross page boundaries
    rows = [row(p) for p in ids]
    for rnd in range(4):
        ks = [5] * len(rows)
        got = dr.propose(rows, ks)
        for b, (r, drafts) in enumerate(zip(rows, got, strict=True)):
            assert drafts == greedy(draft.model, r.tokens, 5), (rnd, b)
            keep = (b + rnd) % 6  # 0..5 accepted; the target's token differs at the first reject
            fix = [] if keep == 5 else [(drafts[keep] + 1 + b) % 4000]
            r.tokens.extend(drafts[:keep] + fix)
            dr.verified(r, keep, len(drafts))
            d = dr.rows[id(r)]
            assert d.tokens == r.tokens[:d.computed]
            assert len(d.kv.pages) == dr.kv.pages_for(d.computed)
    for r in rows:
        dr.release(r)
    assert dr.kv.pool.num_used == 0 and not dr.rows
    dr.kv.check()


def test_sampled_rows_get_their_q(draft: Any) -> None:
    ids = prompts(draft.tokenizer)[:3]
    dr = drafter(draft)
    assert isinstance(dr, ProbDrafter)
    rows = [row(ids[0]), row(ids[1], temperature=0.8, top_k=20), row(ids[2], temperature=1.5)]
    toks, qs = dr.propose_with_probs(rows, [3, 4, 2])
    assert qs[0] is None and [len(t) for t in toks] == [3, 4, 2]
    for t, q in zip(toks[1:], qs[1:], strict=True):
        assert q is not None and q.shape == (len(t), draft.model.args.vocab_size)
        assert mx.allclose(q.sum(axis=-1), mx.ones(len(t)), atol=1e-4).item()
        assert all(q[j, tok].item() > 0 for j, tok in enumerate(t))
    q1 = qs[1]
    assert q1 is not None and int((q1[0] > 0).sum().item()) <= 20  # top-k applied
    logits = draft.model(mx.array([ids[2]]))[0, -1]
    assert mx.allclose(qs[2][0], mx.softmax(logits / 1.5), atol=1e-4).item()  # type: ignore[index]


def test_full_pool_means_no_drafts_not_a_failure(draft: Any) -> None:
    ids = prompts(draft.tokenizer)
    dr = drafter(draft, memory="1KiB")  # the smallest pool: one row's context
    rows = [row((p * 40)[:400]) for p in ids[:3]]
    got = dr.propose(rows, [3, 3, 3])
    assert got[0] == greedy(draft.model, rows[0].tokens, 3)
    assert got[1:] == [[], []]
    dr.release(rows[0])
    assert dr.propose(rows[1:2], [2]) == [greedy(draft.model, rows[1].tokens, 2)]


def test_a_draft_with_another_tokenizer_is_refused(draft: Any) -> None:
    other = load(str(shared_model("stories260K")))[1]
    with pytest.raises(DraftMismatch, match="tokenizer differs"):
        check_tokenizers("stories260K", draft.tokenizer, other)


def test_sampled_proposals_are_drawn_from_their_q(draft: Any) -> None:
    """400 identical sampled rows in one call: their first proposals follow the q they report."""
    from scipy.stats import chisquare

    ids = prompts(draft.tokenizer)[0]
    dr = drafter(draft, memory="8MiB", max_batch=400)
    rows = [row(ids, temperature=6.0, top_k=4) for _ in range(400)]  # hot: the draft is peaked
    mx.random.seed(7)
    toks, qs = dr.propose_with_probs(rows, [1] * len(rows))
    q = qs[0]
    assert q is not None and all(x is not None and mx.allclose(x, q, atol=1e-5).item() for x in qs)
    support = [int(t) for t in mx.argsort(-q[0])[:4].tolist()]  # type: ignore[union-attr]
    counts = [sum(t == [s] for t in toks) for s in support]
    assert sum(counts) == len(rows)  # top-k: nothing outside the 4 most likely tokens
    probs = [q[0, s].item() for s in support]
    expected = [p / sum(probs) * len(rows) for p in probs]
    assert min(expected) > 5 and chisquare(counts, expected).pvalue > 1e-3, (counts, expected)


def test_shipped_draft_is_the_draft_preset_on_the_demo_tokenizer(draft: Any) -> None:
    """worker/model/demo/draft: train.py's --preset draft, a quarter of the demo's parameters."""
    from tools.demo_model.train import DRAFT_ARCH, n_params
    from worker.model.embedded import embedded_draft_path, embedded_model_path

    args = draft.model.args
    assert {k: getattr(args, k) for k in DRAFT_ARCH} == DRAFT_ARCH
    demo = load(str(embedded_model_path()))[0]
    assert n_params(demo) / n_params(draft.model) > 3.9  # 2,361,280 / 590,432
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (embedded_draft_path() / name).read_bytes() == (embedded_model_path() / name).read_bytes()
