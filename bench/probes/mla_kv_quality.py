"""What quantizing an MLA cache would cost: top-1 agreement with full precision, teacher-forced.

    python -m bench.probes.mla_kv_quality [--types deepseek_v3,glm4_moe_lite,qwen3] [--tokens 400]

Each tiny model (tools/tiny_models, built into a temporary folder) reads the calibration text
(worker/kv/calibrate.py, repeated) through mlx-lm's own KV cache: a 32-token prefill, then one
token at a time (MLA's absorbed decode form, the latent as key and value). Its cache rounds what
it stores through ``mx.quantize`` (affine, group 32) at the given bits for keys (MLA: the
compressed latent) and values (MLA: the RoPE part); no centering. A plain attention type beside
them gives the same measure for keys/values proper (8/4 is K8V4 without its centering).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import KVCache

from tools.tiny_models.build import build
from worker.kv.calibrate import CALIBRATION_TEXT

PREFILL = 32
BITS = ((8, 8), (8, 4), (4, 8))  # (keys, values); None: full precision


class RoundedCache(KVCache):
    """mlx-lm's KV cache storing keys and values rounded through group-wise quantization."""

    def __init__(self, key_bits: int | None, value_bits: int | None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.rounding = (key_bits, value_bits)  # not "bits": mlx-lm reads that as its quantized cache

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Store the rounded keys and values; return everything stored."""
        keys, values = (_rounded(x, b) for x, b in zip((keys, values), self.rounding, strict=True))
        out: tuple[mx.array, mx.array] = super().update_and_fetch(  # type: ignore[no-untyped-call]
            keys, values)
        return out


def _rounded(x: mx.array, bits: int | None) -> mx.array:
    if bits is None:
        return x
    w, s, b = mx.quantize(x, group_size=32, bits=bits)
    return mx.dequantize(w, s, b, group_size=32, bits=bits)


def top1(model: Any, ids: mx.array, bits: tuple[int | None, int | None]) -> mx.array:
    """Greedy next-token choices at every position (prefill, then one token per step)."""
    caches = [RoundedCache(*bits) for _ in model.layers]
    outs = [model(ids[:, :PREFILL], cache=caches)[0]]
    for i in range(PREFILL, ids.shape[1]):
        outs.append(model(ids[:, i : i + 1], cache=caches)[0])
    return mx.concatenate(outs).argmax(-1)


def main() -> None:
    """Command line: one line per model type and bit pair."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--types", default="deepseek_v3,glm4_moe_lite,qwen3")
    parser.add_argument("--tokens", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in args.types.split(","):
            model, tok = load(str(build(model_type, Path(tmp) / model_type)))[:2]
            ids = mx.array([tok.encode(CALIBRATION_TEXT * 4)[: args.tokens]])
            ref = top1(model, ids, (None, None))
            for bits in BITS:
                agree = float((top1(model, ids, bits) == ref).mean())
                print(f"{model_type}: keys {bits[0]}-bit, values {bits[1]}-bit: "
                      f"top-1 agreement {agree:.3f}")


if __name__ == "__main__":
    main()
