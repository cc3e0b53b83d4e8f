"""Fewer CPU kernels for mlx-lm's RoPE and RMSNorm inside our forwards, with the same bits.

On the CPU ``mx.fast.rope`` and ``mx.fast.rms_norm`` have no kernel: each call runs MLX's
fallback (mlx/fast.cpp) as separate ops. A rope call computes its positions, inverse
frequencies, their product and its cos and sin (about a dozen ops), then rotates (six
element-wise ops and a concatenation); mlx-lm's attention layers make two such calls per layer
with the same offsets, so a stories260K decode step computed the same cos/sin ten times. A norm
is seven ops (square, sum, scale, add, rsqrt, two products).

``wrap_fast_ops`` turns a model's plain ``nn.RoPE`` and ``nn.RMSNorm`` modules into subclasses
(same parameters, same module tree) that, while a ``Forward`` runs one of our batches
(``FastOps.use``), compute exactly the fallback's ops on the same values, only fewer times or
fused: the rope's cos/sin once per forward (for the calls given that forward's offset array),
its rotation and the norm's element-wise tail through ``mx.compile`` (float32 only). Fused
element-wise kernels evaluate each op in its dtype as the separate kernels do, so the results
are the same bits (``tests/worker/cpu/test_fast_ops.py`` compares them with ``mx.fast``). Every other
call (outside our forwards: an mlx-lm peer on the same model; an int offset; other dtypes,
variants or a GPU) goes to ``mx.fast`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
import mlx.nn
import numpy as np

nn: Any = mlx.nn  # mlx.nn ships no type information mypy can follow

ENABLED = True  # tests and benches compare against mx.fast with this off


class FastOps:
    """What a model's wrapped modules share: the running forward's offsets and rope tables."""

    def __init__(self) -> None:
        self.active = False  # a forward of ours is running
        self.offset: mx.array | None = None  # its offset array (B,), when it has one
        self.made: dict[tuple[Any, ...], tuple[mx.array, mx.array]] = {}

    def use(self, offset: Any, active: bool = True) -> None:
        """A forward over rows at OFFSET (an int or an array of row positions) starts;
        ``active=False``: it ended."""
        self.active = active and ENABLED
        self.offset = offset if self.active and isinstance(offset, mx.array) else None
        self.made = {}

    def tables(self, rope: Any, offset: mx.array, steps: int, dtype: mx.Dtype
               ) -> tuple[mx.array, mx.array]:
        """(cos, sin) of ROPE at OFFSET + 0..STEPS, made by the forward's first call."""
        key = (rope.dims, float(rope.base), float(rope.scale), steps, dtype)
        made = self.made.get(key)
        if made is None:
            made = self.made[key] = _tables(offset, steps, rope.dims, float(rope.base),
                                            float(rope.scale), dtype)
        return made


def _tables(offset: mx.array, steps: int, dims: int, base: float, scale: float, dtype: mx.Dtype
            ) -> tuple[mx.array, mx.array]:
    """MLX's rope fallback's cos/sin: the same ops, in the same order, with the same constants."""
    half = dims // 2
    if offset.size > 1:
        offset = mx.expand_dims(offset, (-1, -2))
    positions = (mx.arange(steps, dtype=mx.float32) + offset) * mx.array(scale, mx.float32)
    theta = mx.expand_dims(positions, -1) * _inv_freqs(half, base)
    return mx.cos(theta).astype(dtype), mx.sin(theta).astype(dtype)


_freqs: dict[tuple[int, float], mx.array] = {}  # evaluated when the modules are wrapped


def _inv_freqs(half: int, base: float) -> mx.array:
    """The fallback's inverse frequencies (HALF,): kept ones (made outside any compiled trace
    by ``wrap_fast_ops``), else made by its ops."""
    freqs = _freqs.get((half, base))
    if freqs is None:
        step = float(np.float32(np.log(np.float32(base))) / np.float32(half))  # log(float) / int
        freqs = mx.exp(mx.arange(0, -half, -1, dtype=mx.float32) * mx.array(step, mx.float32))
    return freqs


def _turn(x1: mx.array, x2: mx.array, cos: mx.array, sin: mx.array) -> tuple[mx.array, mx.array]:
    return x1 * cos - x2 * sin, x1 * sin + x2 * cos


_turn_fused = mx.compile(_turn, shapeless=True)


def _rotate(x: mx.array, dims: int, cos: mx.array, sin: mx.array) -> mx.array:
    """The fallback's non-traditional forward rotation of X (B, N, T, D) with the tables."""
    half = dims // 2
    turn = _turn_fused if x.dtype == mx.float32 else _turn
    outs = list(turn(x[..., :half], x[..., half:dims], cos, sin))
    if dims < x.shape[-1]:
        outs.append(x[..., dims:])
    return mx.concatenate(outs, axis=-1)


class TableRoPE(nn.RoPE):  # type: ignore[misc]
    """``nn.RoPE`` that, inside our forwards, rotates with the forward's shared tables."""

    _fast_ops: FastOps

    def __call__(self, x: mx.array, offset: Any = 0) -> mx.array:
        """``nn.RoPE.__call__``; the forward's tables when OFFSET is its offset array."""
        ops = self._fast_ops
        if (ops.offset is None or offset is not ops.offset or x.ndim != 4 or offset.ndim != 1
                or offset.dtype.size != 4 or self.traditional):
            return super().__call__(x, offset)  # type: ignore[no-any-return]
        cos, sin = ops.tables(self, offset, x.shape[2], x.dtype)
        return _rotate(x, self.dims, cos, sin)


_norms: dict[float, Callable[[mx.array, mx.array], mx.array]] = {}


def _norm(eps: float) -> Callable[[mx.array, mx.array], mx.array]:
    """The rms_norm fallback for float32 inputs and weight, compiled (one per EPS)."""
    fn = _norms.get(eps)
    if fn is None:
        def norm(x: mx.array, weight: mx.array) -> mx.array:
            x = x * mx.rsqrt(mx.mean(mx.square(x), axis=-1, keepdims=True)
                             + mx.array(eps, mx.float32))
            return x * weight
        fn = _norms[eps] = mx.compile(norm, shapeless=True)
    return fn


class FusedRMSNorm(nn.RMSNorm):  # type: ignore[misc]
    """``nn.RMSNorm`` that, inside our forwards, runs its fallback compiled (float32)."""

    _fast_ops: FastOps

    def __call__(self, x: mx.array) -> mx.array:
        """``nn.RMSNorm.__call__``; compiled inside our forwards."""
        weight = self["weight"]
        if not self._fast_ops.active or x.dtype != mx.float32 or weight.dtype != mx.float32:
            return super().__call__(x)  # type: ignore[no-any-return]
        return _norm(float(self.eps))(x, weight)


def wrap_fast_ops(model: Any) -> FastOps | None:
    """Give MODEL's plain RoPE and RMSNorm modules the subclasses above (CPU only).

    Their shared ``FastOps`` (the one of an earlier call on the same model), or None when the
    model has neither. Parameters and the module tree do not change.
    """
    if mx.default_device() != mx.cpu or not isinstance(model, nn.Module):
        return None
    modules = list(model.modules())
    ops = next((m._fast_ops for m in modules if isinstance(m, (TableRoPE, FusedRMSNorm))), None)
    for m in modules:
        cls = {nn.RoPE: TableRoPE, nn.RMSNorm: FusedRMSNorm}.get(type(m))
        if cls is not None:
            ops = ops or FastOps()
            m.__class__ = cls
            m._fast_ops = ops
        if cls is TableRoPE and (m.dims // 2, float(m.base)) not in _freqs:
            freqs = _inv_freqs(m.dims // 2, float(m.base))
            mx.eval(freqs)
            _freqs[(m.dims // 2, float(m.base))] = freqs
    return ops
