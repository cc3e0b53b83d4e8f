"""A model's float32 Linear layers and tied LM head on few rows through worker/cpu/native's gemv
primitive: OpenBLAS's one-row sgemm sums without its packing, for every row.

MLX's CPU matmul runs ``x @ W.T`` through ``cblas_sgemm`` even for one row, and OpenBLAS then
copies (packs) all of W before its micro-kernel runs: on the Qwen3 bench model a one-row step
spends most of its time there (bench/README.md, "What we learned"), and its products of 4-32
rows run at half the kernel's speed or less. worker/cpu/native/gemv.cpp sums each row of x
as the preloaded OpenBLAS's sgemm sums a lone row (its K blocks of GEMM_Q, one FMA chain per
block) straight from W, whatever the rows beside it: for 1-3 rows those are sgemm's own bits;
for 4-32 rows (weights of MIN_WEIGHTS_MANY_ROWS elements or more) each row has the bits it
would have alone, where sgemm would sum the rows in 4-row tiles (two chains), so logits there
differ from MLX's by float rounding and do not depend on what else is in the batch. The orders
were measured on Debian's OpenBLAS 0.3.21 (bench/README.md, "OpenBLAS packing"): its Zen/Haswell
cores and its SkylakeX cores (AVX-512 Xeons) sum differently (``ORDERS``), so ``wrap_gemv`` first
runs the primitive in each known order against ``mx.matmul`` on 1-3 random rows times each of
the model's own weight matrices, at the OpenBLAS thread count in force, and enables it in the
first order whose every bit matches (one log line either way).
The wrapped modules use it only inside our forwards (``running``) where ``fits`` says so; every
other call is MLX's matmul, as before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import mlx.core as mx
import mlx.nn
import numpy as np

from worker.cpu.native import load

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
# overrides MAX_ROWS (benches). Routing the layers' 4-32 rows once served slower:
# their outputs changed the timing of the KV writes, which then copied whole page arrays;
# worker/kv/rows.py's in-place writes ended that.
MAX_ROWS = _rows_setting("RAPID_MLX_GEMV_MAX_ROWS", 32)
CHECK_ROWS = 3  # the check's rows against mx.matmul: sgemm sums 1-3 rows alone
MIN_WEIGHTS_MANY_ROWS = 1 << 16  # smaller weights (stories260K's): sgemm as fast
# threads summing one product of 2^22+ weight elements (gemv.cpp's kSplitMin: a large LM head)
# in its two halves of weight rows, the same bits: the stream's thread and one helper. A
# one-row step leaves the second core idle and the head's product is memory-bound
# (measured). RAPID_MLX_GEMV_THREADS=1 keeps one
THREADS = min(_rows_setting("RAPID_MLX_GEMV_THREADS", 2), 2, os.cpu_count() or 1) or 1
_loaded: dict[str, Any] = {}


class Order(NamedTuple):
    """One OpenBLAS build's summation order: the kernel's ``order`` code and its GEMM_Q."""

    name: str
    code: int  # gemv.cpp's ORDER_*
    q: int  # SGEMM_DEFAULT_Q: the K blocks of the regular path


# Debian's OpenBLAS 0.3.21: Zen/Haswell cores (sgemm_kernel_16x4_haswell, GEMM_Q 320)
# and SkylakeX cores (sgemm_kernel_16x4_skylakex_3 with GEMM_Q 448, and its small-matrix TN
# kernel for small products), and Zen 4 EPYCs, which it runs as Cooperlake (the SkylakeX
# kernels with GEMM_Q 320). Other cores: MLX's matmul (the check fails)
ORDERS = (Order("haswell", 0, 320), Order("skylakex", 1, 448), Order("cooperlake", 1, 320))
# the probe shapes of ``detect`` (tests, benches): both blocking rules, small and large products
PROBE_SHAPES = ((512, 512), (256, 512), (1536, 512), (512, 1536), (4096, 192), (64, 1000))


class GemvState:
    """What a model's wrapped modules share: the kernel in its order, and whether one of our
    forwards is running."""

    def __init__(self, module: Any, order: Order) -> None:
        self.module = module
        self.order = order
        self.active = False
        self.calls = 0  # products routed to the kernel (tests check the path ran)

    def matmul_t(self, x: mx.array, w: mx.array) -> mx.array:
        """x @ w.T with sgemm's bits for 1-4 rows of x, in this order."""
        out: mx.array = self.module.matmul_t(x, w, self.order.q, self.order.code)
        return out

    def matmul_rows(self, x: mx.array, w: mx.array, threads: int = 1) -> mx.array:
        """x @ w.T with every row summed as sgemm sums it alone, in this order (THREADS 2: a
        large product's halves on two threads, the same bits)."""
        out: mx.array = self.module.matmul_rows(x, w, self.order.q, self.order.code, threads)
        return out


def native() -> Any | None:
    """The extension module (loaded once), or None with one log line why not."""
    if "module" not in _loaded:
        _loaded["module"] = _load()
    return _loaded["module"]


def _load() -> Any | None:
    return load("_gemv", "gemv", "MLX's matmul")


def same_bits(module: Any, weights: list[mx.array], rows: int = CHECK_ROWS,
              order: Order = ORDERS[0], seed: int = 0) -> bool:
    """True when MODULE's products in ORDER with each of WEIGHTS (N, K) equal ``mx.matmul``'s
    bit for bit for 1..ROWS random rows (three magnitudes), and its per-row products of up to 3
    rows equal ``mx.matmul``'s of each row alone (``matmul_rows``)."""
    if not module.runs(order.code):
        return False
    kernel = GemvState(module, order)
    rng = np.random.default_rng(seed)
    for w in weights:
        k = w.shape[1]
        for m in range(1, rows + 1):
            x = rng.standard_normal((m, k)).astype(np.float32)
            x *= np.float32(10.0) ** rng.integers(-3, 4, (m, 1)).astype(np.float32)
            xs = mx.array(x)
            want = mx.view(xs @ w.T, mx.uint32)
            if not mx.array_equal(want, mx.view(kernel.matmul_t(xs, w), mx.uint32)).item():
                return False
            if m > 3:
                continue
            alone = mx.view(mx.concatenate([xs[i:i + 1] @ w.T for i in range(m)]), mx.uint32)
            if not mx.array_equal(alone, mx.view(kernel.matmul_rows(xs, w), mx.uint32)).item():
                return False
    return True


def order_for(module: Any, weights: list[mx.array]) -> Order | None:
    """The first of ``ORDERS`` in which MODULE reproduces ``mx.matmul`` on WEIGHTS, or None."""
    return next((o for o in ORDERS if same_bits(module, weights, order=o)), None)


def detect(module: Any) -> Order | None:
    """The order of the preloaded OpenBLAS on ``PROBE_SHAPES`` (tests and benches), or None."""
    rng = np.random.default_rng(11)
    weights = [mx.array(rng.standard_normal(s).astype(np.float32)) for s in PROBE_SHAPES]
    return order_for(module, weights)


class GemvLinear(nn.Linear):  # type: ignore[misc]
    """``nn.Linear`` without bias that, inside our forwards, runs few rows through the kernel."""

    _gemv: GemvState

    def __call__(self, x: mx.array) -> mx.array:
        """``nn.Linear.__call__``; the kernel's product where ``fits`` says so."""
        if not fits(self._gemv, x, self["weight"]) or "bias" in self:
            return super().__call__(x)  # type: ignore[no-any-return]
        self._gemv.calls += 1
        return self._gemv.matmul_rows(x, self["weight"], THREADS)


class GemvEmbedding(nn.Embedding):  # type: ignore[misc]
    """``nn.Embedding`` whose ``as_linear`` (a tied LM head) uses the kernel like GemvLinear."""

    _gemv: GemvState

    def as_linear(self, x: mx.array) -> mx.array:
        """``nn.Embedding.as_linear``; the kernel's product where ``fits`` says so."""
        if not fits(self._gemv, x, self["weight"]):
            return super().as_linear(x)  # type: ignore[no-any-return]
        self._gemv.calls += 1
        return self._gemv.matmul_rows(x, self["weight"], THREADS)


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
        order = order_for(module, list(shapes.values()))
    except Exception as exc:  # an ABI mismatch with this MLX shows up here: keep MLX's matmul
        log.warning("native gemv failed its check (%r); MLX's matmul", exc)
        return None
    if order is None:
        log.warning("native gemv's sums differ from this OpenBLAS's sgemm on the model's "
                    "shapes in every known order (%s); MLX's matmul",
                    ", ".join(o.name for o in ORDERS))
        return None
    state = GemvState(module, order)
    for m in chosen:
        m.__class__ = classes[type(m)]
        m._gemv = state
    log.info("native gemv in use for float32 products of up to %d rows (weights of %d elements "
             "or more: %d), each row summed as alone in OpenBLAS's %s order (%d weight shapes "
             "checked bit for bit)", CHECK_ROWS, MIN_WEIGHTS_MANY_ROWS, MAX_ROWS, order.name,
             len(shapes))
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
