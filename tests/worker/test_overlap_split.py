"""An overlapped step is handed to MLX in two parts; the last step's tokens go out between them."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load

from protocol.messages import RequestOutput, SamplingParams
from tests.conftest import shared_model
from tests.worker.test_engine import PROMPTS, make_engine
from worker.embedded import embedded_model_path
from worker.engine import EARLY_TOKENS, Engine


@pytest.fixture(scope="module", params=["embedded", "stories260K"])
def model(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    path = embedded_model_path() if request.param == "embedded" else shared_model("stories260K")
    return load(str(path))[:2]


def _decode(engine: Engine, tok: Any, sender: bool, events: list[str]
            ) -> tuple[dict[str, list[int]], list[list[str]]]:
    """Greedy tokens of three prompts, and the EVENTS ("send", and what mx.async_eval was handed)
    of each steady overlapped step (every row past its first tokens)."""
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(PROMPTS[:3]):
        engine.add(str(i), tok.encode(p), params)
    got: dict[str, list[int]] = {str(i): [] for i in range(3)}

    def take(outputs: list[RequestOutput]) -> None:
        for o in outputs:
            got[o.request_id].extend(o.token_ids)

    def send(outputs: list[RequestOutput]) -> None:
        events.append("send")
        take(outputs)

    engine.on_outputs = send if sender else None
    steps = []
    while engine.has_work:
        steady = bool(engine.running) and all(r.generated > EARLY_TOKENS for r in engine.running)
        before, events[:] = engine.stats.overlapped_steps, []
        take(engine.step())
        if steady and engine.stats.overlapped_steps > before:
            steps.append(list(events))
    return got, steps


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_last_tokens_leave_between_the_two_parts_of_a_step(
        model: tuple[Any, Any], kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A steady overlapped step (not compiled) with a sender: mx.async_eval of the first layers'
    page writes, the previous step's tokens sent, then the rest; the same tokens as without."""
    mdl, tok = model
    events: list[str] = []
    plain, _ = _decode(make_engine(mdl, tok, kind=kind, compile_decode="off"), tok, False, events)
    engine = make_engine(mdl, tok, kind=kind, compile_decode="off")
    everything = len(engine.kv.store.arrays())
    original = mx.async_eval

    def traced(*arrays: mx.array) -> None:
        events.append("rest" if len(arrays) > everything else "first")
        original(*arrays)

    monkeypatch.setattr(mx, "async_eval", traced)
    got, steps = _decode(engine, tok, True, events)
    assert got == plain  # lossless: the same tokens with and without the split
    assert len(steps) >= 5
    assert all(s == ["first", "send", "rest"] for s in steps), steps


def test_a_compiled_step_is_handed_over_whole(model: tuple[Any, Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled decode step is one call: one async_eval, the last tokens sent after it."""
    mdl, tok = model
    engine = make_engine(mdl, tok, compile_decode="on")
    if engine.compiled is None:
        pytest.skip("this model does not compile its decode step")
    events: list[str] = []
    original = mx.async_eval
    monkeypatch.setattr(mx, "async_eval", lambda *a: (events.append("eval"), original(*a))[1])
    _, steps = _decode(engine, tok, True, events)
    assert steps and all(s == ["eval"] for s in steps), steps
