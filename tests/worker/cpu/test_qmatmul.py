"""worker/cpu/qmatmul.py: quantized layers' products against MLX's own quantized_matmul."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import pytest

from worker.cpu import qmatmul

pytestmark = pytest.mark.skipif(qmatmul.native() is None,
                                reason="worker/cpu/native's _qmatmul is not built: "
                                       "python -m worker.cpu.native.build")


def _close(got: mx.array, want: mx.array) -> None:
    scale = mx.abs(want).max().item() or 1.0
    assert got.dtype == mx.float32 and got.shape == want.shape
    assert (mx.abs(got - want.astype(mx.float32)).max().item() / scale) < 1e-5


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16])
def test_products_match_mlx_within_rounding(bits: int, group: int, dtype: mx.Dtype) -> None:
    mx.random.seed(bits * group)
    w, s, b = mx.quantize(mx.random.normal((96, 256)), group_size=group, bits=bits)
    s, b = s.astype(dtype), b.astype(dtype)
    for rows in (1, 3, 4, 5, 32, 33, 70):  # the kernel up to 32 rows, dequantize + matmul beyond
        x = mx.random.normal((rows, 256))
        got = qmatmul.product(x, w, s, b, group, bits)
        assert got is not None
        # MLX's kernel on the same scales as float32 (bfloat16 and float16 convert exactly)
        want = mx.quantized_matmul(x, w, s.astype(mx.float32), b.astype(mx.float32),
                                   transpose=True, group_size=group, bits=bits)
        _close(got, want)


def test_a_rows_bits_do_not_depend_on_the_rows_beside_it() -> None:
    mx.random.seed(1)
    w, s, b = mx.quantize(mx.random.normal((2048, 1024)), group_size=64, bits=4)  # split: 2^21
    x = mx.random.normal((9, 3, 1024))  # leading dims are rows too
    together = qmatmul.product(x, w, s, b, 64, 4)
    assert together is not None and together.shape == (9, 3, 2048)
    for i in (0, 4, 8):
        alone = qmatmul.product(x[i:i + 1, :1], w, s, b, 64, 4)
        assert alone is not None
        assert mx.array_equal(alone[0, 0], together[i, 0]).item()


def test_other_inputs_keep_mlx_s_kernel() -> None:
    w, s, b = mx.quantize(mx.random.normal((64, 128)), group_size=64, bits=4)
    assert qmatmul.product(mx.random.normal((1, 128)).astype(mx.bfloat16), w, s, b, 64, 4) is None
    assert qmatmul.product(mx.random.normal((1, 128)), w, s, b, 64, 3) is None


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(512, 128)
        self.proj = nn.Linear(128, 128, bias=True)
        self.fp4 = nn.Linear(128, 128, bias=False)


def test_wrapped_layers_answer_as_before() -> None:
    mx.random.seed(2)
    model: Any = _Tiny()
    nn.quantize(model, group_size=32, bits=4)
    model.fp4 = nn.QuantizedLinear(128, 128, bias=False, group_size=32, bits=4, mode="mxfp4")
    x = mx.random.normal((2, 128))
    before = (model.proj(x), model.embed.as_linear(x), model.fp4(x))
    assert qmatmul.wrap_quantized(model) == 2  # the affine linear and embedding, not mxfp4
    assert type(model.fp4) is nn.QuantizedLinear
    after = (model.proj(x), model.embed.as_linear(x), model.fp4(x))
    for a, b in zip(before, after, strict=True):
        _close(b, a)
    assert mx.array_equal(before[2], after[2]).item()
