"""The engine on real MLX models: greedy output equals mlx_lm.generate alone and batched."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step

from protocol.messages import SamplingParams
from tests.conftest import shared_model
from worker.engine.attention import install
from worker.engine.core import Engine, QueueFull, model_dtype
from worker.engine.failures import SendFailed
from worker.kv.setup import plan_kv
from worker.model.embedded import embedded_model_path

PROMPTS = [
    "Once upon a time", "The cat sat", "Lily and Tom went to the", "One day, a big dog",
    "The sun was", "She wanted to", "In the park there was", "Mom said",
    "A little bird", "He ran to the", "They played with", "The tree was very",
    "Ben had a red", "It was a rainy", "The girl smiled and", "At night the moon",
]


def make_engine(model: Any, tok: Any, kind: str = "none", memory: str = "64MiB",
                prefix_cache: bool = True, page_size: int = 16, **kw: Any) -> Engine:
    """An engine over a fresh paged KV pool."""
    install()
    plan = plan_kv(model, model_dtype(model), kind=kind, memory=memory, page_size=page_size,
                   group_size=32, max_batch=kw.get("max_batch", 32), context_length=512)
    return Engine(model, tok, plan.store, context_length=512, prefix_cache=prefix_cache, **kw)


@pytest.fixture(scope="module", params=["embedded", "stories260K"])
def model(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    path = embedded_model_path() if request.param == "embedded" else shared_model("stories260K")
    return load(str(path))[:2]


def _reference(model: Any, tok: Any, prompt: list[int], n: int) -> list[int]:
    """mlx-lm's own greedy decode, token ids, stopping at EOS like the engine."""
    out = []
    for token, _ in generate_step(mx.array(prompt), model, max_tokens=n):
        t = int(token)
        out.append(t)
        if t in tok.eos_token_ids:
            break
    return out


def _run(engine: Engine, prompts: dict[str, list[int]], params: SamplingParams) -> dict[str, list[int]]:
    for rid, ids in prompts.items():
        engine.add(rid, ids, params)
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    for _ in range(50_000):  # a stuck engine fails fast instead of spinning until the timeout
        if not engine.has_work:
            return got
        for out in engine.step():
            got[out.request_id].extend(out.token_ids)
    raise AssertionError(f"engine stuck: {len(engine.running)} running, {len(engine.waiting)} waiting")


def test_greedy_matches_mlx_lm_alone_and_batched(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    ref = {rid: _reference(mdl, tok, ids, 24) for rid, ids in prompts.items()}
    params = SamplingParams(max_tokens=24, temperature=0.0)
    for rid, ids in list(prompts.items())[:8]:
        alone = _run(make_engine(mdl, tok), {rid: ids}, params)
        assert alone[rid] == ref[rid], f"prompt {rid} alone"
    engine = make_engine(mdl, tok, prefill_budget=7)
    batched = _run(engine, prompts, params)
    assert batched == ref
    # 16 requests shared decode steps: far fewer steps than generated tokens
    assert engine.stats.steps < engine.stats.generated_tokens / 4


def test_chunked_prefill_interleaves_with_decode(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    engine = make_engine(mdl, tok, prefill_budget=4)
    engine.add("short", tok.encode("Hi"), SamplingParams(max_tokens=40, temperature=0.0))
    engine.step()
    engine.step()
    long_prompt = tok.encode(" ".join(PROMPTS))
    engine.add("long", long_prompt, SamplingParams(max_tokens=2, temperature=0.0))
    short_tokens_during_prefill = 0
    while any(r.id == "long" and (r.prefilling or not r.generated)
              for r in [*engine.waiting, *engine.running]):
        short_tokens_during_prefill += sum(1 for o in engine.step() if o.request_id == "short")
    assert short_tokens_during_prefill >= 3  # the long prompt did not stall the decode


def test_max_tokens_stop_strings_and_abort(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    engine = make_engine(mdl, tok)
    got = _run(engine, {"a": tok.encode("Once upon a time")}, SamplingParams(max_tokens=5,
                                                                             temperature=0.0))
    assert len(got["a"]) <= 5
    engine.add("b", tok.encode("Once upon a time"), SamplingParams(max_tokens=50, temperature=0))
    engine.step()
    engine.abort(["b"])
    assert not engine.has_work


def test_stop_string_truncates_text() -> None:
    mdl, tok = load(str(shared_model("stories260K")))[:2]
    engine = make_engine(mdl, tok)
    engine.add("s", tok.encode("Once upon a time"), SamplingParams(max_tokens=60, temperature=0.0,
                                                                   stop=["Lily"]))
    text, reason = "", None
    while engine.has_work:
        for o in engine.step():
            text += o.text
            reason = o.finish_reason or reason
    assert reason == "stop" and "Lily" not in text and text.endswith("named ")


def test_seeded_sampling_is_reproducible(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    params = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, top_k=50, seed=1234)
    ids = tok.encode("Once upon a time")
    a = _run(make_engine(mdl, tok), {"x": ids}, params)["x"]
    b = _run(make_engine(mdl, tok), {"x": ids, "noise": ids[:2]}, params)["x"]
    assert a == b


def test_logprobs_are_normalized(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    engine = make_engine(mdl, tok)
    engine.add("l", tok.encode("The cat"), SamplingParams(max_tokens=3, temperature=0.0,
                                                          logprobs=True, top_logprobs=3))
    outs = []
    while engine.has_work:
        outs.extend(engine.step())
    for o in outs:
        lp = o.logprobs[0]
        assert lp.logprob <= 0.0 and len(lp.top) == 3
        assert lp.top[0][1] == lp.token_id  # greedy picks the top token
        assert lp.top[0][2] >= lp.top[1][2] >= lp.top[2][2]


def test_queue_bound(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    engine = make_engine(mdl, tok, max_waiting=2)
    engine.add("1", [1, 2], SamplingParams())
    engine.add("2", [1, 2], SamplingParams())
    with pytest.raises(QueueFull):
        engine.add("3", [1, 2], SamplingParams())


def test_overlapped_decode_steps_deliver_the_same_tokens(model: tuple[Any, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps built on the previous step's unevaluated tokens change nothing but timing."""
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS[:4])}
    kinds = [SamplingParams(max_tokens=24, temperature=0.0),
             SamplingParams(max_tokens=24, temperature=0.9, seed=5),
             SamplingParams(max_tokens=24, temperature=0.0, logprobs=True, top_logprobs=2),
             SamplingParams(max_tokens=24, temperature=0.7, top_p=0.9, seed=11)]
    results = []
    for overlap, early in ((False, False), (True, False), (True, True)):
        engine = make_engine(mdl, tok, overlap=overlap)
        overlapped: list[int] = []
        original = engine.executor.overlapped
        monkeypatch.setattr(engine.executor, "overlapped",
                            lambda plan, o=overlapped, f=original: o.append(1) or f(plan))
        for (rid, ids), params in zip(prompts.items(), kinds, strict=True):
            engine.add(rid, ids, params)
        got: dict[str, list[Any]] = {rid: [] for rid in prompts}
        sent: list[int] = []

        def take(outputs: list[Any], got: dict[str, list[Any]] = got) -> None:
            for out in outputs:
                got[out.request_id].append((out.token_ids, out.text, out.finish_reason,
                                            [(lp.token_id, round(lp.logprob, 4)) for lp in out.logprobs]))

        def send(outputs: list[Any], sent: list[int] = sent) -> None:
            sent.append(len(outputs))
            take(outputs)

        if early:  # the worker loop's sender: outputs leave mid-step, never twice
            engine.on_outputs = send
        while engine.has_work:
            take(engine.step())
        assert bool(overlapped) == overlap
        assert engine.stats.overlapped_steps == len(overlapped)  # reported in /v1/workers
        assert bool(sent) == early  # overlapped steps send the previous step's tokens at once
        results.append(got)
    assert results[0] == results[1] == results[2]


def test_a_sender_failing_mid_step_leaves_the_step_without_failing_rows(model: tuple[Any, Any]
                                                                         ) -> None:
    """A socket error in on_outputs is the loop's, as after a step: no row gets an error output."""
    mdl, tok = model
    engine = make_engine(mdl, tok, overlap=True)
    engine.add("a", tok.encode(PROMPTS[0]), SamplingParams(max_tokens=24, temperature=0.0))

    def broken(outputs: list[Any]) -> None:
        raise OSError("socket closed")

    engine.on_outputs = broken
    with pytest.raises(SendFailed):
        while engine.has_work:
            engine.step()
    assert engine.failed_steps == 0 and [r.id for r in engine.running] == ["a"]
