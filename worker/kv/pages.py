"""K8V4 page completions in one graph node per layer (worker/cpu/native's ``complete_pages``).

When a decode step fills a row's page, ``PagedKVStore.requantize`` quantizes the page's tail
rows into the pool and writes their read-back floats into the working set: in MLX ops ~35 graph
nodes per layer (gathers, quantizes, casts, dequantize chains, eight row writes), and at 8-32
rows some row fills a page on most steps; each node costs the worker's main thread (building,
encoding) and MLX's stream thread a few microseconds. worker/cpu/native/pages.cpp does the same in
one node, with MLX's CPU quantize algorithm, writing the eight arrays in place. A compiled
decode step's completions (after the step: the tail arrays are its outputs, and the next step
loads the filled pages' copies) quantize into the pool only, one node per layer too (was 14 MLX
ops: gathers, quantizes, casts, six row writes). ``completer``
gives the store that function when the extension loads, MLX runs on the CPU and a bit-comparison
with MLX's own ops passes (at first use); else None, and the store keeps MLX's ops.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from worker.cpu.native import load_checked
from worker.kv.paged_kv import CompletePages, dequantize, requantized

ENABLED = True  # tests and benches compare against MLX's ops with this off
_loaded: dict[str, Any] = {}


def native() -> Any | None:
    """The extension module once it has passed its check (loaded once), else None."""
    if "module" not in _loaded:
        _loaded["module"] = load_checked("_pages", "K8V4 page completions", "MLX's ops", check,
                                         fma=False)
    return _loaded["module"]


class NativePages:
    """The store's ``CompletePages``: ``complete_pages`` and ``load_pages``."""

    def __call__(self, k_tail: mx.array, v_tail: mx.array, tail_rows: mx.array,
                 keys: list[mx.array], values: list[mx.array], pool_rows: mx.array,
                 copy_rows: mx.array | None, group_size: int) -> list[mx.array] | None:
        """``complete_pages``."""
        return complete_pages(k_tail, v_tail, tail_rows, keys, values, pool_rows, copy_rows,
                              group_size)

    def load(self, k_tail: mx.array, v_tail: mx.array, keys: list[mx.array],
             values: list[mx.array], pool_rows: mx.array, copy_rows: mx.array,
             group_size: int) -> list[mx.array] | None:
        """``load_pages``."""
        return load_pages(k_tail, v_tail, keys, values, pool_rows, copy_rows, group_size)


def completer() -> CompletePages | None:
    """The native page ops for the store on the CPU with the extension usable, else None."""
    if not ENABLED or mx.default_device() != mx.cpu or native() is None:
        return None
    return NativePages()


def complete_pages(k_tail: mx.array, v_tail: mx.array, tail_rows: mx.array,
                   keys: list[mx.array], values: list[mx.array], pool_rows: mx.array,
                   copy_rows: mx.array | None, group_size: int) -> list[mx.array] | None:
    """(kw, ks, kb, vw, vs, vb, k_tail, v_tail) after quantizing the tail rows TAIL_ROWS into
    the pool rows POOL_ROWS and writing their read-back floats at COPY_ROWS (without COPY_ROWS
    the six pool arrays: the tails only read); None when these arrays are not the extension's
    case (float32 tails), for MLX's ops."""
    module = native()
    if module is None or k_tail.dtype != mx.float32 or v_tail.dtype != mx.float32:
        return None
    out: list[mx.array] = module.complete_pages(k_tail, v_tail, tail_rows, keys, values,
                                                pool_rows, copy_rows, group_size)
    return out


def load_pages(k_tail: mx.array, v_tail: mx.array, keys: list[mx.array],
               values: list[mx.array], pool_rows: mx.array, copy_rows: mx.array,
               group_size: int) -> list[mx.array] | None:
    """(k_tail, v_tail) with the float copies of the pool rows POOL_ROWS (what ``dequantize``
    gives) at COPY_ROWS, in one node; None when not the extension's case (float32 tails)."""
    module = native()
    if module is None or k_tail.dtype != mx.float32 or v_tail.dtype != mx.float32:
        return None
    out: list[mx.array] = module.load_pages(k_tail, v_tail, keys, values, pool_rows, copy_rows,
                                            group_size)
    return out


def page_status() -> dict[str, int]:
    """The worker status fields: native page-completion outputs so far written in place and
    into a copy (a growing copy count means the arrays are being copied)."""
    module = native() if ENABLED else None
    in_place, copied = module.counts() if module is not None else (0, 0)
    return {"kv_page_completions_in_place": int(in_place),
            "kv_page_completions_copied": int(copied)}


def check(module: Any, seed: int = 0) -> bool:
    """Bit-compare the extension with MLX's ops on rows with awkward groups (constant, zero,
    negative-dominated, huge, tiny) over group sizes 32 and 64."""
    rng = np.random.default_rng(seed)
    for group, d in ((32, 64), (64, 128), (32, 128)):
        rows, pool = 24, 40
        k = (rng.standard_normal((rows, d)) * rng.choice([1e-4, 1.0, 30.0, 3e4], (rows, 1))
             + rng.choice([0.0, 5.0, -7.0], (rows, 1))).astype(np.float32)
        v = (rng.standard_normal((rows, d)) * rng.choice([1e-3, 1.0, 50.0], (rows, 1))
             ).astype(np.float32)
        k[0], v[1] = 3.25, 0.0  # constant groups
        k[2, : group // 2] = -1e3  # one edge far out
        tail_k, tail_v = mx.array(np.concatenate([k, np.zeros_like(k)])), mx.array(
            np.concatenate([v, np.zeros_like(v)]))
        src = mx.array(np.arange(rows))
        dst = mx.array(rng.permutation(pool)[:rows])
        copy = mx.array(rows + np.arange(rows))
        arrays = [[mx.zeros((pool, d * bits // 32), dtype=mx.uint32),
                   mx.zeros((pool, d // group), dtype=mx.float16),
                   mx.zeros((pool, d // group), dtype=mx.float16)] for bits in (8, 4)]
        *parts, k_copy, v_copy = requantized(group, mx.float32)(tail_k[src], tail_v[src])
        want = []
        for a, part in zip((*arrays[0], *arrays[1]), parts, strict=True):
            w = mx.array(a)
            w[dst] = part
            want.append(w)
        for tail, part in ((tail_k, k_copy), (tail_v, v_copy)):
            w = mx.array(tail)
            w[copy] = part
            want.append(w)
        mx.eval(want)
        got = module.complete_pages(tail_k, tail_v, src, arrays[0], arrays[1], dst, copy, group)
        pool_only = module.complete_pages(tail_k, tail_v, src, arrays[0], arrays[1], dst, None,
                                          group)
        mx.eval(got, pool_only)
        if not all(mx.array_equal(g, w).item() for g, w in zip(got, want, strict=True)):
            return False
        if not all(mx.array_equal(g, w).item() for g, w in zip(pool_only, want[:6], strict=True)):
            return False
        # loads: the pool rows written read back as ``dequantize`` reads them, at other tail rows
        again = mx.array(rows + np.arange(rows)[::-1])
        loaded = module.load_pages(tail_k, tail_v, want[:3], want[3:6], dst, again, group)
        mx.eval(loaded)
        for side, width in ((0, 8), (1, 4)):
            pw, ps, pb = (a[dst] for a in want[3 * side: 3 * side + 3])
            read = dequantize(pw, ps.astype(mx.float32), pb.astype(mx.float32), group, width)
            tail = (tail_k, tail_v)[side]
            if not (mx.array_equal(loaded[side][again], read).item()
                    and mx.array_equal(loaded[side][:rows], tail[:rows]).item()):
                return False
    return True

