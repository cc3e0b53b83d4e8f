"""The compiled decode step: the same tokens as the plain step, pages written in place."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.conftest import shared_model
from tests.worker.engine.test_engine import PROMPTS, _run, make_engine
from worker.model.embedded import embedded_model_path

GREEDY = SamplingParams(max_tokens=40, temperature=0.0)


@pytest.fixture(scope="module", params=["embedded", "stories260K-hd32"])
def model(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    path = embedded_model_path() if request.param == "embedded" else shared_model(request.param)
    return load(str(path))[:2]


def _engine(mdl: Any, tok: Any, compiled: bool, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    monkeypatch.setenv("RAPID_MLX_COMPILE_DECODE", "1" if compiled else "0")
    engine = make_engine(mdl, tok, **kw)
    assert (engine.compiled is not None) == compiled
    return engine


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_compiled_greedy_matches_plain_alone_and_batched(
        model: tuple[Any, Any], kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mdl, tok = model
    prompts = {f"p{i}": tok.encode(p) for i, p in enumerate(PROMPTS[:8])}
    plain = _run(_engine(mdl, tok, False, monkeypatch, kind=kind), prompts, GREEDY)
    compiled = _engine(mdl, tok, True, monkeypatch, kind=kind)
    assert compiled.kv.store.fmt.kind == kind
    assert {"p3": _run(compiled, {"p3": prompts["p3"]}, GREEDY)["p3"]} == {"p3": plain["p3"]}
    assert _run(compiled, prompts, GREEDY) == plain
    fns = compiled.compiled.fns
    assert any(fn is not None for fn in fns.values()), "no step went through the compiled function"


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_every_compiled_step_equals_the_plain_step(kind: str, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    """Page tables (and K8V4's working-set plans) change under the compiled functions (8 rows,
    pages of 8): each call's logits are the plain step's on the same batch within float
    rounding (the padded keys change which score columns BLAS computes apart). A table or plan
    array frozen into a trace makes later calls of that function read the first call's."""
    import copy

    import worker.engine.attention as attention
    import worker.engine.compiled_decode as cd

    # every score array takes numpy's exp2 where the host may evaluate: not in a compiled trace
    monkeypatch.setattr(attention, "NUMPY_AT", 1)
    mdl, tok = load(str(embedded_model_path()))[:2]
    engine = _engine(mdl, tok, True, monkeypatch, kind=kind, page_size=8)
    calls: list[bool] = []
    original = cd.CompiledDecode.__call__

    def checked(self: Any, tokens: mx.array, batch: Any) -> mx.array:
        # the plain step first (it loads the plan's pages and completes filled ones itself;
        # the compiled call then repeats the same writes)
        plain = self.run(tokens, copy.copy(batch))
        mx.eval(plain, self.store.arrays())
        out = original(self, tokens, batch)
        assert out is not None
        same = mx.allclose(out, plain, rtol=0, atol=1e-4).item()
        calls.append(bool(same))
        return out

    monkeypatch.setattr(cd.CompiledDecode, "__call__", checked)
    _run(engine, {f"p{i}": tok.encode(p) for i, p in enumerate(PROMPTS[:8])}, GREEDY)
    assert len(calls) > 30 and all(calls), f"{calls.count(False)} of {len(calls)} steps differ"
    fns = engine.compiled.fns
    assert 1 < len(fns) < len(calls) / 3  # functions were reused across page tables
    if kind == "k8v4":
        assert engine.kv.store.work.loads > 0  # the steps read the working set's float copies


def _address(a: mx.array) -> int:
    mx.eval(a)
    return int(np.asarray(a, copy=False).__array_interface__["data"][0])


@pytest.mark.parametrize(("compiled", "kind"), [(False, "none"), (True, "none"), (True, "k8v4")])
def test_compiled_step_writes_pages_in_place(compiled: bool, kind: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The page arrays are the step's inputs and outputs: MLX reuses their buffers (K8V4: also
    across the page loads before and the page completions after the compiled function)."""
    mdl, tok = load(str(embedded_model_path()))[:2]
    engine = _engine(mdl, tok, compiled, monkeypatch, kind=kind, page_size=8)
    engine.add("a", tok.encode(PROMPTS[0]), GREEDY)
    for _ in range(4):  # prefill, then decode steps through the compiled function
        engine.step()
    store = engine.kv.store
    before = [_address(a) for a in store.arrays()]
    loads = store.work.loads
    for _ in range(10):  # pages of 8: at least one fills, and is loaded the step after
        engine.step()
    assert not compiled or engine.compiled.fns
    assert kind == "none" or store.work.loads > loads
    assert [_address(a) for a in store.arrays()] == before
