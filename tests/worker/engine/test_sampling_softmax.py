"""Sampling's top-p and min-p softmax runs the native FMA kernel (worker/cpu/softmax.py) with
MLX's bits: the same probabilities, filtered logits and tokens as ``mx.softmax``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

import worker.cpu.softmax as cpu_softmax
from protocol.messages import SamplingParams
from tests.worker.cpu.native_helpers import bits, fma_cpu
from worker.engine.sampling import RowSampler, prepare, sample, scaled

pytestmark = pytest.mark.skipif(not fma_cpu(), reason="built and used on x86-64 with FMA only")


class _Counting:
    """The extension module, counting its softmax calls."""

    def __init__(self, module: Any) -> None:
        self.module, self.calls = module, 0

    def softmax(self, *args: Any) -> Any:
        self.calls += 1
        return self.module.softmax(*args)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Counting]:
    module = cpu_softmax.native()
    assert module is not None, "worker/cpu/native not built or failed its check (make install)"
    spy = _Counting(module)
    monkeypatch.setitem(cpu_softmax._loaded, "module", spy)
    yield spy


def _logits(rows: int, vocab: int, seed: int) -> mx.array:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, vocab)) * rng.choice([0.5, 4.0, 30.0], (rows, 1)))
    x = x.astype(np.float32)
    x[0, :3] = [-np.inf, 88.5, -88.5]  # masked tokens (a logit_bias of -inf) and large ones
    return mx.array(x)


@pytest.mark.parametrize("shape", [(1, 512), (3, 513), (8, 32000), (2, 7)])
def test_softmax_is_mx_softmax(counting: _Counting, shape: tuple[int, int]) -> None:
    x = _logits(*shape, seed=shape[1])
    order = mx.argsort(-x, axis=-1)
    for v in (x, mx.take_along_axis(x, order, axis=-1), x.T):  # plain, gathered, strided
        assert np.array_equal(bits(cpu_softmax.softmax(v)), bits(mx.softmax(v, axis=-1)))
    assert counting.calls == 3


def test_softmax_off_or_not_float32_is_mx_softmax(counting: _Counting,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    x = _logits(2, 64, seed=1)
    got = cpu_softmax.softmax(x.astype(mx.bfloat16))
    assert got.dtype == mx.bfloat16 and mx.array_equal(got, mx.softmax(x.astype(mx.bfloat16), axis=-1))
    monkeypatch.setattr(cpu_softmax, "ENABLED", False)
    assert np.array_equal(bits(cpu_softmax.softmax(x)), bits(mx.softmax(x, axis=-1)))
    assert counting.calls == 0


PARAMS = [SamplingParams(temperature=0.8, top_p=0.9, seed=3),
          SamplingParams(temperature=1.3, min_p=0.05, seed=4),
          SamplingParams(temperature=0.7, top_k=40, top_p=0.5, min_p=0.1, seed=5),
          SamplingParams(temperature=0.0)]


def test_sampling_routes_top_p_and_min_p(counting: _Counting,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The scaled logits keep their bits and the seeded draws their tokens; both softmaxes
    (top-p over the sorted logits, min-p) went through the kernel."""
    logits = _logits(len(PARAMS), 512, seed=9)

    def run() -> tuple[np.ndarray, list[int]]:
        rows = [RowSampler(p) for p in PARAMS]
        prepared, _ = prepare(logits, rows)
        filtered = bits(scaled(prepared, rows))
        tokens = [t for _ in range(20) for t in sample(logits, rows)[0].tolist()]  # type: ignore[union-attr]
        return filtered, tokens

    routed = run()
    assert counting.calls == 2 * 21
    monkeypatch.setattr(cpu_softmax, "ENABLED", False)
    plain = run()
    assert counting.calls == 2 * 21
    assert np.array_equal(routed[0], plain[0]) and routed[1] == plain[1]
