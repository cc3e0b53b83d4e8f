"""``mx.fast.rope`` compiled for one-token steps on the CPU.

On MLX's CPU backend ``mx.fast.rope`` has no kernel: each call builds its fallback from about 20
small ops (arange, exp, cos, sin, slices, products), and every op costs a dispatch. Compiled once
per shape, the same computation runs as a few fused kernels with bit-identical results, about
25 us less per call (2 calls per layer per decode step: 10% of a stories260K step). Calls with
more than one position (prompt chunks, whose shapes vary) keep the original.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

_state: dict[str, Any] = {}


def _compiled(dims: int, traditional: bool, base: float | None, scale: float,
              with_freqs: bool) -> Any:
    key = (dims, traditional, base, scale, with_freqs)
    fn = _state.setdefault("compiled", {}).get(key)
    if fn is None:
        original = _state["original"]
        if with_freqs:
            def rope(x: mx.array, offset: mx.array, freqs: mx.array) -> mx.array:
                return original(x, dims, traditional=traditional, base=base, scale=scale,  # type: ignore[no-any-return]
                                offset=offset, freqs=freqs)
        else:
            def rope(x: mx.array, offset: mx.array) -> mx.array:  # type: ignore[misc]
                return original(x, dims, traditional=traditional, base=base, scale=scale,  # type: ignore[no-any-return]
                                offset=offset)
        fn = _state["compiled"][key] = mx.compile(rope)
    return fn


def _rope(a: mx.array, dims: int, *args: Any, traditional: bool = False,
          base: float | None = None, scale: float = 1.0, offset: Any = 0,
          freqs: mx.array | None = None, stream: Any = None) -> mx.array:
    original = _state["original"]
    if args or stream is not None or a.ndim < 2 or a.shape[-2] != 1:
        return original(a, dims, *args, traditional=traditional, base=base,  # type: ignore[no-any-return]
                        scale=scale, offset=offset, freqs=freqs, stream=stream)
    off = offset if isinstance(offset, mx.array) else mx.array(offset)
    fn = _compiled(dims, traditional, base, scale, freqs is not None)
    return fn(a, off, freqs) if freqs is not None else fn(a, off)  # type: ignore[no-any-return]


def install() -> None:
    """Route one-position ``mx.fast.rope`` calls to compiled ones (CPU only; once)."""
    if "original" in _state or mx.default_device() != mx.cpu:
        return
    _state["original"] = mx.fast.rope
    mx.fast.rope = _rope


def uninstall() -> None:
    """Give ``mx.fast.rope`` back (benchmarks of other loops in the same process)."""
    original = _state.pop("original", None)
    if original is not None:
        mx.fast.rope = original
