"""The boot warm-up runs the compiled decode step once and leaves no trace in counters or cache."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import make_engine
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.kv.setup import plan_kv
from worker.model.embedded import embedded_model_path
from worker.serve.warmup import warm_up


@pytest.mark.parametrize("page_size", [4, 16])
def test_warm_up_compiles_and_forgets(page_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAPID_MLX_COMPILE_DECODE", raising=False)
    mdl, tok = load(str(embedded_model_path()))[:2]
    engine: Any = make_engine(mdl, tok, page_size=page_size)
    assert warm_up(engine) > 0
    assert {key[2][0] for key in engine.compiled.fns} == {1, 2}  # rows of its steps
    assert len(engine.compiled.fns) >= 4  # one page and several
    assert engine.stats.steps == 0 and engine.stats.generated_tokens == 0
    assert engine.kv.stats.queries == 0 and engine.kv.radix.num_pages == 0
    assert engine.kv.pool.num_used == 0 and not engine.running and not engine.waiting
    engine.add("r", tok.encode("Once upon a time"), SamplingParams(max_tokens=8, temperature=0.0))
    while engine.running or engine.waiting:
        engine.step()
    assert engine.stats.generated_tokens > 0 and engine.kv.stats.queries > 0


def test_warm_up_fits_a_short_context() -> None:
    mdl, tok = load(str(embedded_model_path()))[:2]
    install()
    plan = plan_kv(mdl, model_dtype(mdl), kind="none", memory="16MiB", page_size=16,
                   group_size=32, max_batch=4, context_length=12)
    engine: Any = Engine(mdl, tok, plan.store, context_length=12, max_batch=4)
    warm_up(engine)
    assert {key[2][0] for key in engine.compiled.fns} == {1, 2}
    assert engine.stats.steps == 0 and not engine.running


@pytest.mark.slow
def test_warm_up_with_a_drafter_leaves_nothing_to_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drafting worker warms its verify and draft shapes: a short chat after it compiles no
    new function, answers as plain decoding does, and the speculator starts unmeasured."""
    from worker.serve.warmup import compiled_owners
    from worker.spec.controller import Speculator
    from worker.spec.draft_load import draft_drafter

    monkeypatch.delenv("RAPID_MLX_COMPILE_DECODE", raising=False)
    loaded: Any = load(str(embedded_model_path()))
    mdl, tok = loaded[:2]
    drafter = draft_drafter("demo-draft", tok, max_batch=8, context_length=512, memory="16MiB")
    spec = Speculator(drafter, 4)
    engine: Any = make_engine(mdl, tok, kind="k8v4", spec=spec)
    assert warm_up(engine) > 0
    owners = compiled_owners(engine)
    assert set(owners) == {"decode", "verify", "draft decode", "draft verify", "draft fused"}
    warmed = {name: set(o.fns) for name, o in owners.items()}
    assert all(warmed.values())
    fresh = Speculator(drafter, 4)
    assert spec.pauses == 0 and not spec._rows and spec._cost == fresh._cost
    assert (spec._verify, spec._draft, spec._spent, spec._made) == (
        fresh._verify, fresh._draft, fresh._spent, fresh._made)
    assert spec.num_draft == 4 and spec.pause
    assert engine.stats.steps == 0 and engine.stats.drafted_tokens == 0
    assert not drafter.rows and drafter.kv.pool.num_used == 0
    assert engine.kv.pool.num_used == 0 and engine.kv.radix.num_pages == 0
    prompt = tok.apply_chat_template([{"role": "user", "content": "tell me a story about a cat."}],
                                     add_generation_prompt=True)
    params = SamplingParams(max_tokens=40, temperature=0.0)
    got: list[int] = []
    engine.add("r", prompt, params)
    while engine.running or engine.waiting:
        for out in engine.step():
            got.extend(out.token_ids)
    assert engine.stats.drafted_tokens > 0  # the request drafted
    assert {name: set(o.fns) - warmed[name] for name, o in owners.items()} == dict.fromkeys(
        owners, set())  # nothing compiled on the first request
    plain: Any = make_engine(mdl, tok, kind="k8v4")
    plain.add("r", prompt, params)
    want: list[int] = []
    while plain.running or plain.waiting:
        for out in plain.step():
            want.extend(out.token_ids)
    assert got == want
