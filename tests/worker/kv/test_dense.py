"""The dense decode cache (worker/kv/dense.py) gives the page gather's logits, bit for bit."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

import worker.engine.core as eng
import worker.engine.executor as executor
import worker.engine.sampling as sampling
import worker.kv.dense as kv_dense
from protocol.messages import SamplingParams
from tests.conftest import shared_model
from tests.worker.engine.test_engine import PROMPTS, make_engine
from worker.engine.compile_mode import ROWS_ENV
from worker.kv.dense import DenseCache, dense_status


@pytest.fixture(scope="module", params=["stories260K", "stories260K-hd32"])
def model(request: pytest.FixtureRequest) -> tuple[str, Any, Any]:
    mdl, tok = load(str(shared_model(request.param)))[:2]
    return ("none" if request.param == "stories260K" else "k8v4"), mdl, tok


def _prompts(tok: Any, rows: int, shared: bool) -> dict[str, list[int]]:
    system = " ".join(PROMPTS[:4]) + " " if shared else ""  # >= 2 shared pages: cascade
    return {f"r{i}": tok.encode(system + PROMPTS[i % len(PROMPTS)] + " x" * (i // len(PROMPTS)))
            for i in range(rows)}


def _run(engine: eng.Engine, prompts: dict[str, list[int]], late: int,
         monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, list[int]], list[np.ndarray]]:
    """Greedy tokens and every sampled logits array; rows leave at staggered lengths and the
    last LATE prompts join while the others decode."""
    seen: list[np.ndarray] = []
    original = sampling.sample  # what the executor imported

    def recording(logits: mx.array, rows: Any) -> Any:
        seen.append(np.array(logits.astype(mx.float32)))
        return original(logits, rows)

    monkeypatch.setattr(executor, "sample", recording)
    items = list(prompts.items())
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    early = items[: len(items) - late]
    for i, (rid, ids) in enumerate(early):
        engine.add(rid, ids, SamplingParams(max_tokens=24 + 5 * (i % 5), temperature=0.0,
                                            ignore_eos=True))
    steps = 0
    for _ in range(5_000):
        if steps == 6:
            for rid, ids in items[len(early):]:
                engine.add(rid, ids, SamplingParams(max_tokens=20, temperature=0.0,
                                                    ignore_eos=True))
        if not engine.has_work and steps > 6:
            break
        for out in engine.step():
            got[out.request_id].extend(out.token_ids)
        steps += 1
    monkeypatch.setattr(executor, "sample", original)
    return got, seen


def _compare(model: tuple[str, Any, Any], rows: int, monkeypatch: pytest.MonkeyPatch,
             shared: bool = False, small_pool: bool = False, compile_decode: str = "off"
             ) -> eng.Engine:
    kind, mdl, tok = model
    prompts = _prompts(tok, rows, shared)
    late = rows // 4
    results = []
    engine = None
    monkeypatch.setattr(kv_dense, "CHUNK", 16)  # the cache grows (pads) many times
    monkeypatch.setattr(kv_dense, "MIN_ROWS", 1)  # every batch size reads the cache
    for enabled in (False, True):
        monkeypatch.setattr(kv_dense, "ENABLED", enabled)
        kw: dict[str, Any] = {"compile_decode": compile_decode}
        if small_pool:
            engine = make_engine(mdl, tok, kind=kind, memory="1", page_size=8, max_batch=rows,
                                 **kw)
            pool = engine.kv.pool  # re-made in place: far too few pages for every row
            type(pool).__init__(pool, engine.kv.pages_for(max(map(len, prompts.values())) + 40) * 3)
        else:
            # room for the K8V4 working set of every row's whole context and the dense cache
            engine = make_engine(mdl, tok, kind=kind, memory="256MiB", page_size=8,
                                 max_batch=rows, **kw)
        assert engine.kv.store.fmt.kind == kind
        results.append((_run(engine, prompts, late, monkeypatch), engine.stats.preemptions))
    (tokens_off, logits_off), pre_off = results[0]
    (tokens_on, logits_on), pre_on = results[1]
    assert tokens_on == tokens_off
    assert pre_on == pre_off
    assert len(logits_on) == len(logits_off)
    for a, b in zip(logits_on, logits_off, strict=True):
        assert a.shape == b.shape and np.array_equal(a, b)
    assert engine is not None
    cache = _cache(engine)
    assert cache.steps > 0 and cache.refilled > 0
    if kind == "k8v4":  # filled pages were re-read from their float copies
        assert cache.pages_refreshed > 0
    # idle: the arrays are freed; the status kept their most
    assert cache.rows == 0 and cache.k == [None] * len(cache.k) and cache.nbytes == 0
    status = dense_status(_caches(engine))
    assert status["kv_dense_cache_bytes"] == 0 and status["kv_dense_cache_peak_bytes"] > 0
    assert status["kv_dense_cache_steps"] == cache.steps
    return engine


def _caches(engine: eng.Engine) -> list[DenseCache]:
    """The dense decode caches of the engine's forwards (target's, a draft model's)."""
    return [f.dense for f in engine.forwards().values() if f.dense is not None]


def _cache(engine: eng.Engine) -> DenseCache:
    """The engine's target dense decode cache."""
    cache = engine.executor.forward.dense
    assert cache is not None and _caches(engine) == [cache]
    return cache


@pytest.mark.parametrize("rows", [1, 8, 32])
@pytest.mark.parametrize("compiled", [0, 32])
def test_dense_decode_logits_are_the_gathers(model: tuple[str, Any, Any], rows: int,
                                             compiled: int, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    """Plain steps, and compiled steps up to COMPILED rows."""
    monkeypatch.setenv(ROWS_ENV, str(compiled))
    engine = _compare(model, rows, monkeypatch, compile_decode="auto")
    if compiled:  # compiled steps took the dense arrays in (the last item of their key)
        assert engine.compiled is not None and any(key[-1] for key in engine.compiled.fns)


@pytest.mark.parametrize("rows", [8, 32])
@pytest.mark.parametrize("compiled", [0, 32])
def test_dense_decode_with_a_shared_prefix(model: tuple[str, Any, Any], rows: int,
                                           compiled: int, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv(ROWS_ENV, str(compiled))
    _compare(model, rows, monkeypatch, shared=True, compile_decode="auto")


def test_dense_decode_under_preemption(model: tuple[str, Any, Any],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _compare(model, 16, monkeypatch, small_pool=True)
    assert engine.stats.preemptions > 0


def test_dense_decode_beside_compiled_steps(model: tuple[str, Any, Any],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches shrink below the compiled step's rows and grow past them again."""
    _compare(model, 12, monkeypatch, compile_decode="auto")


def test_large_models_gather_pages(model: tuple[str, Any, Any],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Above MAX_WEIGHT_BYTES (the Qwen3 bench model, where it did not pay) steps gather."""
    kind, mdl, tok = model
    monkeypatch.setattr(kv_dense, "MAX_WEIGHT_BYTES", 0)
    engine = make_engine(mdl, tok, kind=kind, page_size=8, max_batch=8, compile_decode="off")
    assert engine.executor.forward.dense is None and not _caches(engine)
    _run(engine, _prompts(tok, 8, False), 2, monkeypatch)
    assert dense_status(_caches(engine))["kv_dense_cache_steps"] == 0


def test_small_batches_gather_pages(model: tuple[str, Any, Any],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Below MIN_ROWS rows (where the gather is the cheaper) steps gather; from it, the cache."""
    kind, mdl, tok = model
    for rows, used in ((kv_dense.MIN_ROWS - 1, False), (kv_dense.MIN_ROWS, True)):
        engine = make_engine(mdl, tok, kind=kind, page_size=8, max_batch=rows,
                             compile_decode="off")
        _run(engine, _prompts(tok, rows, False), 0, monkeypatch)
        assert (_cache(engine).steps > 0) == used, rows


def test_a_draft_models_cache_is_the_engines_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft model's decode steps keep their own dense cache: the engine reports it and frees
    it with the target's when no row runs."""
    from tests.worker.spec.test_draft_model import QUESTIONS
    from worker.spec.controller import Speculator
    from worker.spec.draft_load import draft_drafter

    monkeypatch.setattr(kv_dense, "MIN_ROWS", 1)
    mdl, tok = load("worker/model/demo/weights")[:2]
    drafter = draft_drafter("demo-draft", tok, max_batch=8, context_length=512, memory="16MiB")
    engine = make_engine(mdl, tok, kind="none", max_batch=8, compile_decode="off",
                         spec=Speculator(drafter, 3))
    assert drafter.forward.dense is not None and _caches(engine) == [
        engine.executor.forward.dense, drafter.forward.dense]
    for i, q in enumerate(QUESTIONS[:6]):
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        engine.add(f"r{i}", ids, SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))
    held = []
    while engine.has_work:
        engine.step()
        held.append(dense_status(_caches(engine))["kv_dense_cache_bytes"])
    assert drafter.forward.dense.steps > 0 and max(held) > 0
    assert all(c.rows == 0 and c.nbytes == 0 for c in _caches(engine))


@pytest.mark.parametrize("memory", ["2MiB", "12MiB", "64MiB"])
def test_the_dense_cache_stays_within_kv_cache_memory(model: tuple[str, Any, Any], memory: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages and the dense decode cache together hold at most --kv-cache-memory: the cache gets
    what the pool leaves; a step whose cache would not fit there gathers pages (same tokens)."""
    from worker.kv.setup import parse_memory

    kind, mdl, tok = model
    monkeypatch.setattr(kv_dense, "MIN_ROWS", 1)
    engine = make_engine(mdl, tok, kind=kind, memory=memory, page_size=16, max_batch=8,
                         compile_decode="off")
    store, cache = engine.kv.store, _cache(engine)
    assert cache.budget == store.spare_bytes
    got, _ = _run(engine, _prompts(tok, 8, False), 2, monkeypatch)
    assert store.nbytes() + cache.peak_bytes <= parse_memory(memory)
    status = dense_status(_caches(engine))
    assert status["kv_dense_cache_budget_bytes"] == cache.budget
    if memory == "64MiB":  # room to spare: the cache served the steps
        assert cache.steps > 0
    if memory == "2MiB":  # the pool takes it all
        assert cache.steps == 0 and cache.budget < store.fmt.bytes_per_page()
    reference = make_engine(mdl, tok, kind=kind, page_size=16, max_batch=8, compile_decode="off")
    monkeypatch.setattr(kv_dense, "ENABLED", False)
    assert _run(reference, _prompts(tok, 8, False), 2, monkeypatch)[0] == got
