"""The gated delta rule (Gated DeltaNet layers) over a prefill chunk in chunked form, on the CPU.

mlx-lm's ``gated_delta_update`` runs a Metal kernel on a GPU and, anywhere else, ``gated_delta_ops``:
a Python loop over time steps, several graph nodes per token and layer, so on the CPU a prefill of
T tokens costs T sequential steps of graph building and tiny kernels. ``chunked_gated_delta`` is
the chunkwise (WY / UT-transform) form of flash-linear-attention's ``chunk_gated_delta_rule``:
within chunks of C tokens the recurrence becomes matrix products, one triangular inverse per
chunk (``mx.linalg.tri_inv``, a LAPACK call) and a short loop over chunks for the state.

For one head, state S (Dv, Dk), per-step decay g_t and beta_t, the recurrence
``S_t = g_t S_{t-1} + beta_t (v_t - g_t S_{t-1} k_t) k_t^T``, ``y_t = S_t q_t`` over a chunk with
cumulative log-decay G_t (gamma_t = exp(G_t)) and initial state S0 is, with
``A[t, s] = beta_t exp(G_t - G_s) k_t.k_s`` (s < t) and ``T = (I + A)^-1``:
``U = T (beta v) - T (beta gamma k) S0^T`` (the deltas), ``Y = (gamma q) S0^T + P U`` with
``P[t, s] = exp(G_t - G_s) q_t.k_s`` (s <= t), and ``S_C = gamma_C S0 + U^T (exp(G_C - G_s) k_s)``.
Masked (right-padded) steps get beta 0 and decay 1: they leave the state as it was (their outputs
are not used; mlx-lm's masked steps also output a value nobody reads).

``install()`` routes the name ``gated_delta_update`` in every loaded mlx-lm model module that
imported it: calls made inside one of our forwards (``running()``), on the CPU, with a scalar gate
and at least ``MIN_TOKENS`` steps take the chunked form; everything else (decode, a GPU, vector
gates, mlx-lm's own generation) calls mlx-lm's function unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx

from worker.kv.state_capture import current as capture_in_progress

CHUNK = 32  # tokens per chunk
MIN_TOKENS = 16  # shorter calls (decode, speculation's verify) keep mlx-lm's sequential steps
ENABLED = True  # the chunked form is used where it applies (False: mlx-lm's path everywhere)

_state = {"active": 0, "chunked_calls": 0}
_installed: dict[str, Any] = {}


@contextmanager
def running() -> Iterator[None]:
    """One of our forwards runs: its Gated DeltaNet calls may take the chunked form."""
    _state["active"] += 1
    try:
        yield
    finally:
        _state["active"] -= 1


def chunked_calls() -> int:
    """How many calls took the chunked form so far (in this process)."""
    return _state["chunked_calls"]


def log_decay(a: mx.array, A_log: mx.array, dt_bias: mx.array,
              lower_bound: float | None = None) -> mx.array:
    """log g of mlx-lm's ``compute_g`` (or ``compute_lower_bound_g``), computed without the exp:
    a decay that underflows to 0 in float32 keeps a finite logarithm."""
    rate = mx.exp(A_log.astype(mx.float32))
    out: mx.array
    if lower_bound is None:
        out = -rate * mx.logaddexp((a + dt_bias).astype(mx.float32), 0.0)  # nn.softplus
    else:
        out = lower_bound * mx.sigmoid(rate * (a.astype(mx.float32) + dt_bias))
    return out


def _chunks(x: mx.array, n: int, c: int) -> mx.array:
    """(B, T, H, ...) padded to n * c steps -> (B, H, n, c, ...)."""
    b, t, h = x.shape[:3]
    if n * c > t:
        x = mx.pad(x, [(0, 0), (0, n * c - t)] + [(0, 0)] * (x.ndim - 2))
    x = x.reshape(b, n, c, h, *x.shape[3:])
    return mx.moveaxis(x, 3, 1)


def chunked_gated_delta(q: mx.array, k: mx.array, v: mx.array, log_g: mx.array, beta: mx.array,
                        state: mx.array | None = None, mask: mx.array | None = None,
                        chunk: int = CHUNK) -> tuple[mx.array, mx.array]:
    """The gated delta rule over T steps in chunks: what mlx-lm's ``gated_delta_ops`` computes.

    q, k (B, T, Hk, Dk); v (B, T, Hv, Dv); LOG_G and BETA (B, T, Hv) (scalar gates, log g);
    STATE (B, Hv, Dv, Dk) or None (zeros); MASK (B, T) True at fed steps. Returns y (B, T, Hv, Dv)
    in q's dtype and the final state (float32)."""
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[-2:]
    f32 = mx.float32
    if Hv // Hk > 1:
        q = mx.repeat(q, Hv // Hk, -2)
        k = mx.repeat(k, Hv // Hk, -2)
    log_g, beta = log_g.astype(f32), beta.astype(f32)
    if mask is not None:
        fed = mask[..., None]
        beta = mx.where(fed, beta, 0.0)
        log_g = mx.where(fed, log_g, 0.0)
    c = min(chunk, T)
    n = -(-T // c)
    qc, kc, vc = (_chunks(x.astype(f32), n, c) for x in (q, k, v))  # (B, H, n, c, D)
    bc, G = _chunks(beta, n, c), mx.cumsum(_chunks(log_g, n, c), axis=-1)  # (B, H, n, c)
    idx = mx.arange(c)
    causal = idx[:, None] >= idx[None, :]
    decay = mx.exp(mx.where(causal, G[..., :, None] - G[..., None, :], -mx.inf))
    strict = idx[:, None] > idx[None, :]
    a = mx.where(strict, bc[..., None] * decay * (kc @ mx.swapaxes(kc, -1, -2)), 0.0)
    inv = mx.linalg.tri_inv(a + mx.eye(c, dtype=f32))  # (I + A)^-1, lower triangular
    gamma = mx.exp(G)
    w = inv @ ((bc * gamma)[..., None] * kc)  # (B, H, n, c, Dk)
    u0 = inv @ (bc[..., None] * vc)  # (B, H, n, c, Dv)
    p = decay * (qc @ mx.swapaxes(kc, -1, -2))  # (B, H, n, c, c)
    qg = gamma[..., None] * qc
    kd = mx.exp(G[..., -1:] - G)[..., None] * kc  # keys decayed to the chunk's end
    g_end = gamma[..., -1, None, None]  # (B, H, n, 1, 1)
    s = mx.zeros((B, Hv, Dv, Dk), dtype=f32) if state is None else state.astype(f32)
    ys = []
    for i in range(n):
        st = mx.swapaxes(s, -1, -2)  # (B, H, Dk, Dv)
        u = u0[:, :, i] - w[:, :, i] @ st
        ys.append(qg[:, :, i] @ st + p[:, :, i] @ u)
        s = g_end[:, :, i] * s + mx.swapaxes(u, -1, -2) @ kd[:, :, i]
    y = mx.stack(ys, axis=2).reshape(B, Hv, n * c, Dv)
    return mx.moveaxis(y, 1, 2)[:, :T].astype(q.dtype), s


def _applies(q: mx.array, a: mx.array) -> bool:
    # a speculative verify's per-position states are captured by mlx-lm's own steps
    # (worker/kv/state_capture.py), however many drafts it feeds
    return (ENABLED and _state["active"] > 0 and q.shape[1] >= MIN_TOKENS
            and a.ndim == 3 and mx.default_device() == mx.cpu and capture_in_progress() is None)


def _router(original: Any) -> Any:
    def gated_delta_update(q: mx.array, k: mx.array, v: mx.array, a: mx.array, b: mx.array,
                           A_log: mx.array, dt_bias: mx.array, state: mx.array | None = None,
                           mask: mx.array | None = None, *, use_kernel: bool = True,
                           lower_bound: float | None = None, allow_neg_eigval: bool = False
                           ) -> tuple[mx.array, mx.array]:
        """mlx-lm's ``gated_delta_update``; long calls in our forwards on the CPU chunked."""
        if not _applies(q, a):
            out: tuple[mx.array, mx.array] = original(
                q, k, v, a, b, A_log, dt_bias, state, mask, use_kernel=use_kernel,
                lower_bound=lower_bound, allow_neg_eigval=allow_neg_eigval)
            return out
        _state["chunked_calls"] += 1
        beta = mx.sigmoid(b)
        if allow_neg_eigval:
            beta = beta * 2.0
        return chunked_gated_delta(q, k, v, log_decay(a, A_log, dt_bias, lower_bound), beta,
                                   state, mask)

    return gated_delta_update


def install() -> None:
    """Route ``gated_delta_update`` in every loaded mlx-lm model module that imported it."""
    import mlx_lm.models.gated_delta as mlx_gated_delta

    original = _installed.setdefault("original", mlx_gated_delta.gated_delta_update)
    routed = _installed.setdefault("routed", _router(original))
    for name, module in list(sys.modules.items()):
        if name.startswith("mlx_lm.models.") and getattr(
                module, "gated_delta_update", None) is original and module is not mlx_gated_delta:
            module.gated_delta_update = routed  # type: ignore[attr-defined]
