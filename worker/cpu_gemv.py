"""A model's float32 Linear layers and tied LM head on few rows through worker/native's gemv
primitive: OpenBLAS's one-row sgemm sums without its packing, for every row.

MLX's CPU matmul runs ``x @ W.T`` through ``cblas_sgemm`` even for one row, and OpenBLAS then
copies (packs) all of W before its micro-kernel runs: on the Qwen3 bench model a one-row step
spends most of its time there (bench/README.md, session 8), and its products of 4-32 rows run
at half the kernel's speed or less (sessions 18-19). worker/native/gemv.cpp sums each row of x
as the preloaded OpenBLAS's sgemm sums a lone row (its K blocks of GEMM_Q, one FMA chain per
block) straight from W, whatever the rows beside it: for 1-3 rows those are sgemm's own bits;
for 4-32 rows (weights of MIN_WEIGHTS_MANY_ROWS elements or more) each row has the bits it
would have alone, where sgemm would sum the rows in 4-row tiles (two chains), so logits there
differ from MLX's by float rounding and do not depend on what else is in the batch. The one-row
order was measured on one OpenBLAS build and CPU (bench/README.md, session 16), so
``wrap_gemv`` first runs the primitive against
``mx.matmul`` on 1-3 random rows times each of the model's own weight matrices, at the OpenBLAS
thread count in force, and enables it only when every bit matches (one log line either way).
The wrapped modules use it only inside our forwards (``running``) where ``fits`` says so; every
other call is MLX's matmul, as before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx
import mlx.nn
import numpy as np

from worker.native import load

nn: Any = mlx.nn  # mlx.nn ships no type information mypy can follow
log = logging.getLogger("rapid_mlx.worker")


def _rows_setting(name: str, default: int) -> int:
    """The environment's NAME as a row count, or DEFAULT (one log line when it is not one)."""
    value = os.environ.get(name, str(default))
    try:
        return max(int(value), 0)
    except ValueError:
        log.warning("%s=%r is not a row count; %d", name, value, default)
        return default


ENABLED = True  # tests and benches compare against MLX's matmul with this off
# rows of x routed to the kernel's per-row products (``matmul_rows``): up to 3 for every
# product (there they are sgemm's bits), up to MAX_ROWS for weights of at least
# MIN_WEIGHTS_MANY_ROWS elements (the Qwen3 bench model's layers and LM head). Larger products
# (prefill chunks) are OpenBLAS's, whose packing pays off there. RAPID_MLX_GEMV_MAX_ROWS
# overrides MAX_ROWS (benches). Session 18 routed the layers' 4-32 rows too and served slower:
# their outputs changed the timing of the KV writes, which then copied whole page arrays;
# worker/kv_rows.py's in-place writes ended that (bench/README.md, session 19).
MAX_ROWS = _rows_setting("RAPID_MLX_GEMV_MAX_ROWS", 32)
CHECK_ROWS = 3  # the check's rows against mx.matmul: sgemm sums 1-3 rows alone
MIN_WEIGHTS_MANY_ROWS = 1 << 16  # smaller weights (stories260K's): sgemm as fast
GEMM_Q = 320  # OpenBLAS's SGEMM_DEFAULT_Q for its Zen/Haswell cores (the check confirms it)
_loaded: dict[str, Any] = {}


class GemvState:
    """What a model's wrapped modules share: whether one of our forwards is running."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.active = False
        self.calls = 0  # products routed to the kernel (tests check the path ran)


def native() -> Any | None:
    """The extension module (loaded once), or None with one log line why not."""
    if "module" not in _loaded:
        _loaded["module"] = _load()
    return _loaded["module"]


def _load() -> Any | None:
    return load("_gemv", "gemv", "MLX's matmul")


def same_bits(module: Any, weights: list[mx.array], rows: int = CHECK_ROWS, q: int = GEMM_Q,
              seed: int = 0) -> bool:
    """True when MODULE's products with each of WEIGHTS (N, K) equal ``mx.matmul``'s bit for
    bit for 1..ROWS random rows (three magnitudes), and its per-row products equal them too
    (``matmul_rows``, up to 3 rows: there sgemm sums each row as one row alone)."""
    rng = np.random.default_rng(seed)
    for w in weights:
        k = w.shape[1]
        for m in range(1, rows + 1):
            x = rng.standard_normal((m, k)).astype(np.float32)
            x *= np.float32(10.0) ** rng.integers(-3, 4, (m, 1)).astype(np.float32)
            xs = mx.array(x)
            want = mx.view(xs @ w.T, mx.uint32)
            got = [module.matmul_t(xs, w, q)] + ([module.matmul_rows(xs, w, q)] if m <= 3 else [])
            if not all(mx.array_equal(want, mx.view(g, mx.uint32)).item() for g in got):
                return False
    return True


class GemvLinear(nn.Linear):  # type: ignore[misc]
    """``nn.Linear`` without bias that, inside our forwards, runs few rows through the kernel."""

    _gemv: GemvState

    def __call__(self, x: mx.array) -> mx.array:
        """``nn.Linear.__call__``; the kernel's product where ``fits`` says so."""
        if not fits(self._gemv, x, self["weight"]) or "bias" in self:
            return super().__call__(x)  # type: ignore[no-any-return]
        self._gemv.calls += 1
        out: mx.array = self._gemv.module.matmul_rows(x, self["weight"], GEMM_Q)
        return out


class GemvEmbedding(nn.Embedding):  # type: ignore[misc]
    """``nn.Embedding`` whose ``as_linear`` (a tied LM head) uses the kernel like GemvLinear."""

    _gemv: GemvState

    def as_linear(self, x: mx.array) -> mx.array:
        """``nn.Embedding.as_linear``; the kernel's product where ``fits`` says so."""
        if not fits(self._gemv, x, self["weight"]):
            return super().as_linear(x)  # type: ignore[no-any-return]
        self._gemv.calls += 1
        out: mx.array = self._gemv.module.matmul_rows(x, self["weight"], GEMM_Q)
        return out


def fits(state: GemvState, x: mx.array, w: mx.array) -> bool:
    """True inside our forwards for float32 X on the CPU of at most CHECK_ROWS rows, or of at
    most MAX_ROWS rows when the weight W has MIN_WEIGHTS_MANY_ROWS elements."""
    if not (state.active and ENABLED and x.dtype == mx.float32 and x.ndim >= 1
            and x.shape[-1] > 0 and mx.default_device() == mx.cpu):
        return False
    rows = x.size // x.shape[-1]
    return rows <= CHECK_ROWS or (rows <= MAX_ROWS and w.size >= MIN_WEIGHTS_MANY_ROWS)


def wrap_gemv(model: Any) -> GemvState | None:
    """Give MODEL's float32 bias-free ``nn.Linear`` and ``nn.Embedding`` modules the
    subclasses above when the kernel reproduces ``mx.matmul`` on their weights (CPU only).

    Their ``GemvState``, or None (kept as it was) when there is nothing to wrap, the extension
    is not usable or the check fails. Call it after the OpenBLAS thread count is set.
    """
    if mx.default_device() != mx.cpu or not isinstance(model, nn.Module):
        return None
    modules = list(model.modules())
    done = next((m._gemv for m in modules if isinstance(m, (GemvLinear, GemvEmbedding))), None)
    if done is not None:
        return done
    classes = {nn.Linear: GemvLinear, nn.Embedding: GemvEmbedding}
    chosen = [m for m in modules if type(m) in classes and m["weight"].dtype == mx.float32
              and m["weight"].ndim == 2 and "bias" not in m]
    if not chosen:
        return None
    module = native()
    if module is None:
        return None
    shapes = {tuple(m["weight"].shape): m["weight"] for m in chosen}
    try:
        ok = same_bits(module, list(shapes.values()))
    except Exception as exc:  # an ABI mismatch with this MLX shows up here: keep MLX's matmul
        log.warning("native gemv failed its check (%r); MLX's matmul", exc)
        return None
    if not ok:
        log.warning("native gemv's sums differ from this OpenBLAS's sgemm on the model's "
                    "shapes; MLX's matmul")
        return None
    state = GemvState(module)
    for m in chosen:
        m.__class__ = classes[type(m)]
        m._gemv = state
    log.info("native gemv in use for float32 products of up to %d rows (weights of %d elements "
             "or more: %d), each row summed as alone (%d weight shapes checked bit for bit)",
             CHECK_ROWS, MIN_WEIGHTS_MANY_ROWS, MAX_ROWS, len(shapes))
    return state


@contextmanager
def running(state: GemvState | None) -> Iterator[None]:
    """One of our forwards runs: STATE's modules may use the kernel meanwhile."""
    if state is None:
        yield
        return
    state.active = True
    try:
        yield
    finally:
        state.active = False
