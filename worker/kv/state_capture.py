"""Per-position recurrent states of a speculative verify forward, so that rejected drafts roll a
hybrid model's Gated DeltaNet states back.

A verify forward feeds each row its last token and its drafts; attention layers keep only the
accepted positions by moving ``computed`` back (their pages beyond are ignored), but a recurrent
layer's state after the forward has absorbed every fed token. While a verify forward is built,
``capturing`` records, per recurrent layer, the conv layer's input (the previous conv state and
the new tokens' projections) and the SSM state after every fed position (the sequential loop of
mlx-lm's ``gated_delta_ops``, whose steps are the ones a plain decode step runs: the same bits).
Once acceptance is known, ``roll_back`` writes each row's states at its last kept position into
its slot. The hooks wrap mlx-lm's module globals once (``install``) and pass every other call
through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import mlx.nn

from worker.kv.request_pages import RequestPages
from worker.kv.state_pool import StatePool

nn: Any = mlx.nn  # mlx.nn ships no type information mypy can follow


@dataclass
class Capture:
    """One verify forward's rows and, per recurrent layer, what rolling back needs."""

    pool: StatePool
    kvs: list[RequestPages]
    slots: mx.array
    conv_inputs: dict[int, mx.array] = field(default_factory=dict)  # (B, K - 1 + T, C)
    states: dict[int, mx.array] = field(default_factory=dict)  # (B, T, H, Dv, Dk)
    layer: int = -1  # the recurrent layer being called (its view was read last)


_active: list[Capture] = []


def current() -> Capture | None:
    """The capture of the verify forward being built, if any."""
    return _active[-1] if _active else None


@contextmanager
def capturing(capture: Capture | None) -> Iterator[None]:
    """Record CAPTURE's layers while the block builds its forward (None: nothing to record)."""
    if capture is None:
        yield
        return
    _active.append(capture)
    try:
        yield
    finally:
        _active.pop()
        capture.pool.capture = capture


def roll_back(pool: StatePool, kept: dict[int, int]) -> None:
    """Rows of the pool's last verify forward keep their states after KEPT[id(row's pages)]
    fed positions (rows not named keep all of them)."""
    capture = pool.capture
    if capture is None or not kept:
        return
    pool.capture = None
    counts = [kept.get(id(kv), 0) for kv in capture.kvs]
    rows = [b for b, c in enumerate(counts) if c > 0]
    if not rows:
        return
    index = mx.array(rows)
    at = mx.array([counts[b] for b in rows])
    slots = capture.slots[index]
    for layer, conv_input in capture.conv_inputs.items():
        width = pool.layout.shapes[0][0][0]  # K - 1 conv positions
        positions = (at[:, None] + mx.arange(width))[..., None]
        pool.write(layer, 0, slots, mx.take_along_axis(conv_input[index], positions, axis=1))
        states = capture.states[layer][index]
        pool.write(layer, 1, slots, mx.take_along_axis(
            states, (at - 1).reshape(-1, 1, 1, 1, 1), axis=1)[:, 0])


class CapturingConv1d(nn.Conv1d):  # type: ignore[misc]
    """A recurrent layer's conv whose input a capture records."""

    def __call__(self, x: mx.array) -> mx.array:
        """``nn.Conv1d.__call__``; the input kept for the capture in progress."""
        capture = current()
        if capture is not None:
            capture.conv_inputs[capture.layer] = x
        return super().__call__(x)  # type: ignore[no-any-return]


def _stepwise(step: Callable[..., tuple[mx.array, mx.array]], capture: Capture,
              q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array,
              state: mx.array | None, mask: mx.array | None) -> tuple[mx.array, mx.array]:
    """mlx-lm's ``gated_delta_ops`` loop, every step's state kept for CAPTURE."""
    b, t, hk, dk = q.shape
    hv, dv = v.shape[-2:]
    if state is None:
        state = mx.zeros((b, hv, dv, dk), dtype=mx.float32)
    if (repeat := hv // hk) > 1:
        q, k = mx.repeat(q, repeat, -2), mx.repeat(k, repeat, -2)
    ys, states = [], []
    for i in range(t):
        y, state = step(q[:, i], k[:, i], v[:, i], g[:, i], beta[:, i], state,
                        None if mask is None else mask[:, i])
        ys.append(y)
        states.append(state)
    capture.states[capture.layer] = mx.stack(states, axis=1)
    return mx.stack(ys, axis=1), state


def _hooked(original: Callable[..., Any], step: Callable[..., Any]) -> Callable[..., Any]:
    def run(q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array,
            state: mx.array | None = None, mask: mx.array | None = None) -> Any:
        capture = current()
        if capture is None:
            return original(q, k, v, g, beta, state, mask)
        return _stepwise(step, capture, q, k, v, g, beta, state, mask)

    run.captures = True  # type: ignore[attr-defined]
    return run


def install(model: Any) -> None:
    """Hook MODEL's recurrent layers' convs and mlx-lm's gated delta loops (once)."""
    from mlx_lm.models import gated_delta

    step = gated_delta._gated_delta_step_ops
    for name in ("gated_delta_ops", "gated_delta_kernel"):
        fn = getattr(gated_delta, name, None)
        if fn is not None and not getattr(fn, "captures", False):
            setattr(gated_delta, name, _hooked(fn, step))
    for layer in getattr(model, "layers", []):
        conv = getattr(getattr(layer, "linear_attn", None), "conv1d", None)
        if conv is not None and type(conv) is nn.Conv1d:
            conv.__class__ = CapturingConv1d
