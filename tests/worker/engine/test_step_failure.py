"""An exception inside engine.step() fails the rows it concerns; the rest finish unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import RequestOutput, SamplingParams
from tests.conftest import shared_model
from tests.worker.engine.test_engine import PROMPTS, _reference, make_engine
from worker.engine import recovery
from worker.engine.core import Engine, EngineBroken
from worker.engine.failures import verify


@pytest.fixture(scope="module")
def model() -> tuple[Any, Any]:
    return load(str(shared_model("stories260K")))[:2]


def _assert_idle(engine: Engine) -> None:
    kv = engine.kv
    kv.check()
    assert kv.pool.num_free + kv.pool.num_used == kv.pool.total
    assert kv.pool.num_used == (kv.radix.num_pages if kv.radix else 0)
    verify(kv, [])  # every prefix lock released (the root keeps its own)
    if kv.radix is not None:
        assert kv.radix.root.lock_ref == 1
    assert engine.executor.inflight is None


def _drive(engine: Engine, got: dict[str, list[int]], errors: dict[str, RequestOutput],
           steps: int = 50_000) -> None:
    for _ in range(steps):
        if not engine.has_work:
            return
        for out in engine.step():
            if out.error is not None:
                assert out.request_id not in errors, "two terminal errors for one request"
                errors[out.request_id] = out
            else:
                got[out.request_id].extend(out.token_ids)
    raise AssertionError("engine stuck")


class _FailOnce:
    """Wraps Forward: the first call whose rows include VICTIM raises; records who was in it."""

    def __init__(self, engine: Engine, victim: str, method: str = "__call__") -> None:
        self.engine, self.victim, self.method = engine, victim, method
        self.inner = engine.executor.forward
        self.failed_with: set[str] = set()

    def __getattr__(self, name: str) -> Any:  # the rest of Forward (idle, compiled, ...)
        return getattr(self.inner, name)

    def _ids(self, kvs: list[Any]) -> set[str]:
        owners = {id(r.kv): r.id for r in self.engine.running}
        return {owners[id(kv)] for kv in kvs}

    def __call__(self, rows: Any, kvs: list[Any], *args: Any) -> Any:
        ids = self._ids(kvs)
        if self.method == "__call__" and self.victim in ids and not self.failed_with:
            self.failed_with = ids
            raise RuntimeError("injected forward failure")
        return self.inner(rows, kvs, *args)

    def decode_lazy(self, tokens: Any, kvs: list[Any], starts: list[int]) -> Any:
        ids = self._ids(kvs)
        if self.method == "decode_lazy" and self.victim in ids and not self.failed_with:
            self.failed_with = ids
            raise RuntimeError("injected decode failure")
        return self.inner.decode_lazy(tokens, kvs, starts)


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_failing_prefill_call_fails_its_rows_only(model: tuple[Any, Any], kind: str) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS[:10])}
    ref = {rid: _reference(mdl, tok, ids, 20) for rid, ids in prompts.items()}
    params = SamplingParams(max_tokens=20, temperature=0.0)
    engine = make_engine(mdl, tok, kind=kind, prefill_budget=6)
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    errors: dict[str, RequestOutput] = {}
    for rid in list(prompts)[:4]:
        engine.add(rid, prompts[rid], params)
    for _ in range(6):  # the first four are prefilled and decoding
        for out in engine.step():
            got[out.request_id].extend(out.token_ids)
    flaky = _FailOnce(engine, victim="7")
    engine.executor.forward = flaky  # type: ignore[assignment]
    for rid in list(prompts)[4:]:
        engine.add(rid, prompts[rid], params)
    _drive(engine, got, errors)
    assert "7" in flaky.failed_with and set(errors) == flaky.failed_with
    assert not flaky.failed_with & {"0", "1", "2", "3"}, "decoding rows were not in that call"
    for out in errors.values():
        assert out.finish_reason == "error" and out.error_code == "internal_error"
    for rid in set(prompts) - set(errors):
        assert got[rid] == ref[rid], f"request {rid} changed by another's failure"
    _assert_idle(engine)
    assert engine.failed_steps == 0  # later steps succeeded


def test_failing_overlapped_decode_fails_that_batch_keeps_the_queue(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS[:6])}
    ref = {rid: _reference(mdl, tok, ids, 16) for rid, ids in prompts.items()}
    params = SamplingParams(max_tokens=16, temperature=0.0)
    engine = make_engine(mdl, tok, max_batch=3)
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    errors: dict[str, RequestOutput] = {}
    for rid, ids in list(prompts.items())[:3]:
        engine.add(rid, ids, params)
    flaky = _FailOnce(engine, victim="1", method="decode_lazy")
    engine.executor.forward = flaky  # type: ignore[assignment]
    for _ in range(8):  # the three running requests reach overlapped decoding, which fails
        for out in engine.step():
            if out.error is not None:
                errors[out.request_id] = out
            else:
                got[out.request_id].extend(out.token_ids)
    assert flaky.failed_with == {"0", "1", "2"} and set(errors) == flaky.failed_with
    for rid, ids in list(prompts.items())[3:]:
        engine.add(rid, ids, params)
    _drive(engine, got, errors)
    assert set(errors) == {"0", "1", "2"}
    for rid in ("3", "4", "5"):
        assert got[rid] == ref[rid]
    _assert_idle(engine)


def test_a_row_failing_on_its_token_fails_alone(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS[:4])}
    ref = {rid: _reference(mdl, tok, ids, 12) for rid, ids in prompts.items()}
    engine = make_engine(mdl, tok)
    for rid, ids in prompts.items():
        engine.add(rid, ids, SamplingParams(max_tokens=12, temperature=0.0))
    victim = next(r for r in engine.waiting if r.id == "2")
    real = victim.detok
    seen: list[int] = []

    class Breaks:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def add_token(self, t: int) -> None:
            seen.append(t)
            if len(seen) == 3:
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected")
            real.add_token(t)

    victim.detok = Breaks()
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    errors: dict[str, RequestOutput] = {}
    _drive(engine, got, errors)
    assert set(errors) == {"2"} and got["2"] == ref["2"][:2]
    for rid in ("0", "1", "3"):
        assert got[rid] == ref[rid]
    _assert_idle(engine)


def test_steps_failing_in_a_row_or_torn_books_end_the_engine(model: tuple[Any, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    mdl, tok = model
    engine = make_engine(mdl, tok)

    def broken(*_: Any) -> Any:
        raise RuntimeError("device lost")

    monkeypatch.setattr(engine.executor.forward, "_build", broken)  # every prefill call fails
    for i in range(3):
        engine.add(str(i), tok.encode(PROMPTS[i]), SamplingParams(max_tokens=4))
    outs = [o for _ in range(3) for o in engine.step()]
    assert {o.request_id for o in outs if o.error} == {"0", "1", "2"} and not engine.has_work
    _assert_idle(engine)
    monkeypatch.setattr(recovery, "MAX_FAILED_STEPS", engine.failed_steps + 1)
    engine.add("3", tok.encode(PROMPTS[3]), SamplingParams(max_tokens=4))
    with pytest.raises(EngineBroken):
        engine.step()
    leaked = engine.kv.pool.alloc(1)  # a page nobody holds
    with pytest.raises(EngineBroken):
        verify(engine.kv, engine.running)
    engine.kv.pool.free(leaked)
