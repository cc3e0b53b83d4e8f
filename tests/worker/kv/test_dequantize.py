"""worker.kv.paged_kv.dequantize gives mx.dequantize's floats, bit for bit."""

from __future__ import annotations

import mlx.core as mx
import pytest

from worker.kv.paged_kv import dequantize


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
@pytest.mark.parametrize("shape", [(96, 64), (2, 3, 5, 32)])
def test_dequantize_matches_mlx_bit_for_bit(bits: int, dtype: mx.Dtype, shape: tuple[int, ...]
                                             ) -> None:
    mx.random.seed(bits + len(shape))
    x = (3 * mx.random.normal(shape) + 1.5).astype(dtype)
    w, s, b = mx.quantize(x, group_size=32, bits=bits)
    s, b = s.astype(mx.float16).astype(dtype), b.astype(mx.float16).astype(dtype)
    want = mx.dequantize(w, s, b, group_size=32, bits=bits)
    got = dequantize(w, s, b, 32, bits)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert mx.array_equal(got, want).item()


def test_other_bit_widths_fall_back_to_mlx() -> None:
    x = mx.random.normal((8, 64))
    w, s, b = mx.quantize(x, group_size=64, bits=3)
    assert mx.array_equal(dequantize(w, s, b, 64, 3),
                          mx.dequantize(w, s, b, group_size=64, bits=3)).item()
