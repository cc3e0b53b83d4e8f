"""Attention sinks (gpt-oss) in every paged attention path: full precision and K8V4, per row and
cascade, one query and several.

A sink is a logit with no value: with it the output is (1 - p_sink) times the output without it,
p_sink = e^sink / (e^sink + sum e^score). So the two outputs are proportional along the head
dimension, and two sink values s, s + 1 give ratios a, b with (1/b - 1) = e (1/a - 1). K8V4
stores values minus a center that attention adds back afterwards: that is only exact if the
sink is given the center's negative as its value, which the proportionality checks.
"""

from __future__ import annotations

import math

import mlx.core as mx
import pytest

from tests.worker.engine.test_attention import HQ, LENGTHS, _feed, _prefill_history, _store
from worker.engine.attention import _installed, paged_attention
from worker.kv.paged_batch import LayerKV

D = 32


def _attend(q: mx.array, kv: object, batch: object, sinks: mx.array | None) -> mx.array:
    """What the routed mlx-lm attention computes for this layer's cache output."""
    routed = _installed["routed"]
    if isinstance(kv, LayerKV):
        return routed(q, kv, kv, batch.views()[0], D**-0.5, batch.mask, sinks)  # type: ignore[attr-defined]
    keys, values = kv  # type: ignore[misc]
    return routed(q, keys, values, batch.views()[0], D**-0.5, batch.mask, sinks)  # type: ignore[attr-defined]


def _ratio(with_sink: mx.array, without: mx.array) -> mx.array:
    """Per (row, head, query) least-squares factor along D, asserting proportionality."""
    a = (with_sink * without).sum(axis=-1, keepdims=True) / (without * without).sum(
        axis=-1, keepdims=True)
    assert mx.allclose(with_sink, a * without, atol=3e-5).item(), "not proportional"
    return a


@pytest.mark.parametrize("kind", ["none", "k8v4"])
@pytest.mark.parametrize("cascade", [False, True])
@pytest.mark.parametrize("n", [1, 3])
def test_sinks_scale_the_output_by_one_minus_the_sink_weight(kind: str, cascade: bool,
                                                              n: int) -> None:
    store = _store(kind)
    _prefill_history(store)
    batch, kv = _feed(store, [0, 1, 2], LENGTHS, [n, n, n - 1 if n > 1 else 1], cascade, 9)
    assert batch.shared == (12 if cascade else 0)
    mx.random.seed(11)
    q = mx.random.normal((3, HQ, n, D))
    sinks = mx.array([0.5, -1.0, 2.0, 1.0])
    plain = _attend(q, kv, batch, None)
    a = _ratio(_attend(q, kv, batch, sinks), plain)
    b = _ratio(_attend(q, kv, batch, sinks + 1.0), plain)
    assert ((a > 0) & (a < 1)).all().item()
    valid = mx.array([[n, n, max(n - 1, 1)][r] > i for r in range(3) for i in range(n)]
                     ).reshape(3, 1, n, 1)  # padding queries (a short row) attend only padding
    got = mx.where(valid, 1 / b - 1, 0)
    want = mx.where(valid, math.e * (1 / a - 1), 0)
    assert mx.allclose(got, want, rtol=2e-3, atol=1e-5).item()  # 1/a - 1 cancels near 1


def test_full_precision_sinks_equal_the_fused_kernel() -> None:
    """Cascade with sinks equals MLX's fused kernel with sinks over the gathered pages."""
    store = _store("none")
    _prefill_history(store)
    batch, kv = _feed(store, [0, 1, 2], LENGTHS, [2, 2, 2], True, 9)
    assert isinstance(kv, LayerKV) and batch.shared == 12
    q = mx.random.normal((3, HQ, 2, D))
    sinks = mx.array([0.5, -1.0, 2.0, 1.0])
    got = paged_attention(q, kv, D**-0.5, batch.mask, sinks)
    keys, values = store.gather(0, batch.table, mx.float32)
    assert isinstance(keys, mx.array) and isinstance(values, mx.array)
    want = mx.fast.scaled_dot_product_attention(q, keys, values, scale=D**-0.5, mask=batch.mask,
                                                sinks=sinks)
    assert mx.allclose(got, want, atol=2e-5).item()
