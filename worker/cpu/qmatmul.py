"""A model's affine-quantized layers on the CPU through worker/cpu/native's qmatmul primitive.

MLX's CPU ``quantized_matmul`` is many times slower than a float matmul of the same shape on
x86 (measured here: a 3072 x 1024 4-bit layer, one row 4.7 ms against the kernel's 1.8 ms, 8
rows 78 ms against 7.8 ms, 512 rows 6.6 s). ``wrap_quantized`` gives every ``QuantizedLinear``
(affine mode) and a quantized tied LM head (``QuantizedEmbedding.as_linear``) a product that
runs float32 inputs of up to ``KERNEL_ROWS`` rows through the kernel (weights unpacked, scaled
and offset in registers, every row its own float32 FMA chain, so a row's bits do not depend on
the rows beside it) and larger inputs (prompt chunks) as one dequantization and a float matmul
(OpenBLAS). Results differ from MLX's kernel by float rounding only (tests compare with a
tolerance). Other dtypes, devices and modes (mxfp4) keep MLX's own kernel; on Metal nothing is
wrapped.
"""

from __future__ import annotations

import logging
from typing import Any

import mlx.core as mx
import mlx.nn

from worker.cpu.native import load

nn: Any = mlx.nn  # mlx.nn ships no type information mypy can follow
log = logging.getLogger("rapid_mlx.worker")

ENABLED = True  # tests and benches compare against MLX's kernel with this off
KERNEL_ROWS = 32  # more rows: dequantize once and multiply as floats (measured faster there)
THREADS = 2  # a product of 2^20+ weight elements splits its weight rows over two threads
_loaded: dict[str, Any] = {}


def native() -> Any | None:
    """The extension module (loaded once), or None with one log line why not."""
    if "module" not in _loaded:
        _loaded["module"] = load("_qmatmul", "quantized products", "MLX's quantized_matmul")
    return _loaded["module"]


def product(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array, group: int,
            bits: int) -> mx.array | None:
    """x @ dequantize(w).T for float32 X on the CPU (None: MLX's own kernel applies)."""
    module = native() if ENABLED else None
    if (module is None or x.dtype != mx.float32 or mx.default_device() != mx.cpu
            or x.ndim < 1 or x.shape[-1] == 0 or bits not in (4, 8)):
        return None
    rows = x.size // x.shape[-1]
    if rows <= KERNEL_ROWS:
        out: mx.array = module.qmatmul(x, w, scales, biases, group, bits, THREADS)
        return out
    weights = mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32),
                            group_size=group, bits=bits)
    return x @ weights.T


class FastQuantizedLinear(nn.QuantizedLinear):  # type: ignore[misc]
    """``nn.QuantizedLinear`` whose float32 CPU products run through ``product``."""

    def __call__(self, x: mx.array) -> mx.array:
        """``nn.QuantizedLinear.__call__`` with the native product where it applies."""
        if getattr(self, "mode", "affine") != "affine":
            return super().__call__(x)  # type: ignore[no-any-return]
        out = product(x, self["weight"], self["scales"], self["biases"], self.group_size,
                      self.bits)
        if out is None:
            return super().__call__(x)  # type: ignore[no-any-return]
        return out + self["bias"] if "bias" in self else out


class FastQuantizedEmbedding(nn.QuantizedEmbedding):  # type: ignore[misc]
    """``nn.QuantizedEmbedding`` whose ``as_linear`` (a tied LM head) runs through ``product``."""

    def as_linear(self, x: mx.array) -> mx.array:
        """``nn.QuantizedEmbedding.as_linear`` with the native product where it applies."""
        if getattr(self, "mode", "affine") == "affine":
            out = product(x, self["weight"], self["scales"], self["biases"], self.group_size,
                          self.bits)
            if out is not None:
                return out
        return super().as_linear(x)  # type: ignore[no-any-return]


def wrap_quantized(model: Any) -> int:
    """Give MODEL's affine-quantized layers the native product on the CPU; how many were
    wrapped (0 on other devices or without the extension)."""
    if not ENABLED or mx.default_device() != mx.cpu or native() is None:
        return 0
    count = 0
    for _, module in model.named_modules():
        if type(module) is nn.QuantizedLinear and getattr(module, "mode", "affine") == "affine":
            module.__class__ = FastQuantizedLinear
            count += 1
        elif (type(module) is nn.QuantizedEmbedding
              and getattr(module, "mode", "affine") == "affine"):
            module.__class__ = FastQuantizedEmbedding
            count += 1
    if count:
        log.info("quantized layers: %d run native products on the CPU", count)
    return count
