"""Attention over paged KV: K8V4 pages, the full-precision tail, cascade over a shared prefix.

``install()`` routes mlx-lm's ``scaled_dot_product_attention`` to ``paged_attention`` whenever a
layer's cache returned a ``LayerKV``. Keys are split into segments: the prefix every row shares
(attended once, with all rows' queries stacked into one matrix product), each row's remaining
pages, and (K8V4) the row's current page in full precision. Segments are combined exactly by
their log-sum-exp. K8V4 pages are read with ``mx.quantized_matmul`` when there are few queries
and dequantized once for many (on CPU a dequantized GEMM is about 4x faster then). K8V4 decode
batches whose pages fit in the working set read float copies instead (``_working_set``, or the
dense decode cache), attended through the fused kernel like full-precision pages; on the CPU
their one-query rows get the value center back inside the kernel's last product (an addend
summed onto by it, ``PagedKVStore.value_addend``), one graph node per layer fewer.

Softmax runs in base 2 (scores scaled by log2(e), weights from ``mx.power(2, x)``, or numpy's
``exp2`` for large arrays on CPU): on MLX's CPU backend ``mx.exp`` is about 3x slower than
``mx.power`` and dominates attention time, so on CPU this hand-written softmax beats the fused
kernel (a fallback there) by 3x or more. On a GPU the fused kernel is used wherever no
log-sum-exp is needed. On the CPU, float32 calls of the fused kernel with a boolean mask or none
(``_fused``; mlx-lm's own call on gathered or dense full-precision pages, e.g. stories260K's
decode) run worker/cpu/softmax.py's native copy of its fallback instead: the same bits.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import mlx.core as mx
import numpy as np

from worker.cpu import softmax as cpu_softmax
from worker.engine import gated_delta, llama4_rows
from worker.kv.paged_batch import LayerKV, PagedBatch, PagedView
from worker.kv.paged_kv import PagedKVStore, QuantizedPages, dequantize

__all__ = ["PagedBatch", "PagedView", "install", "paged_attention", "routes_attention"]

DEQUANTIZE_AT = 4  # query rows per KV head from which pages are dequantized rather than multiplied
LOG2E = 1.4426950408889634
MASKED = -1e30
NUMPY_AT = 1 << 16  # CPU score arrays from this size get their exponentials from numpy
UNDERFLOW = -200.0  # 2^x is 0 in float32 well above this: such scores skip powf


class Sinks(NamedTuple):
    """Attention sinks: a logit per query head (Hq,), and (K8V4) the value (Hkv, D) the sink
    holds in the pages' centered space: minus the value center (0 before centering), so that
    adding the center back after the softmax stays exact though the keys' weights sum below one."""

    logits: mx.array
    value: mx.array | None


def _sinks(sinks: mx.array | None, store: PagedKVStore, layer: int) -> Sinks | None:
    if sinks is None:
        return None
    return Sinks(sinks, -store.v_center[layer].astype(mx.float32) if store.quantized else None)


class Segment(NamedTuple):
    """Keys and values (full precision or quantized) and the mask (B, 1, n, L) or None."""

    keys: mx.array | QuantizedPages
    values: mx.array | QuantizedPages
    mask: mx.array | None


def paged_attention(queries: mx.array, kv: LayerKV, scale: float, mask: Any,
                    sinks: mx.array | None = None) -> mx.array:
    """Softmax attention of queries (B, Hq, n, D) over one layer's paged KV.

    SINKS (Hq,): a learned logit per query head that enters each softmax's denominator
    (gpt-oss's attention sinks): a key with no value.
    """
    b, layer = kv.batch, kv.layer
    sink = _sinks(sinks, b.store, layer)
    standard = mask is b.mask or mask is None or isinstance(mask, str)
    if not isinstance(mask, mx.array):
        mask = b.mask
    if kv.keys is not None and kv.values is not None:
        return _dense_cache(queries, kv, kv.keys, kv.values, scale, mask, standard, sinks)
    if kv.dense:
        return _working_set(queries, kv, scale, mask, standard, sinks)
    host = not b.bucket  # a compiled step cannot evaluate mid-graph (numpy's exp2)
    store = b.store
    rows_mask, window = mask, None
    if kv.window_k is not None and kv.window_v is not None:  # own page from the full-precision tail
        rows_mask = mask & b.older
        wmask = b.window_mask
        if not standard:  # e.g. a sliding window: apply the model's mask at window positions
            pos = mx.minimum(b.window_pos, mask.shape[-1] - 1)
            wmask = wmask & mx.take_along_axis(mask, mx.broadcast_to(
                pos, (*mask.shape[:-1], pos.shape[-1])), axis=-1)
        window = Segment(kv.window_k, kv.window_v, wmask)
    if b.shared and standard:
        shared = _segment(store.gather(layer, b.shared_table, b.dtype), None)
        rest = _segment(store.gather(layer, b.rest_table, b.dtype), rows_mask[..., b.shared :])
        out = _cascade(queries, scale, shared, [rest] + ([window] if window else []), host,
                       sink)
    elif not store.quantized:
        keys, values = (_dense(x) for x in store.gather(layer, b.table, b.dtype))
        out = _fused(queries, keys, values, scale, mask, sinks)
    else:
        hkv = store.fmt.num_kv_heads
        if kv.pages is not None and queries.shape[1] // hkv * queries.shape[2] >= DEQUANTIZE_AT:
            pages = _segment(kv.pages, rows_mask)  # the floats _dense gives the gathered pages
        else:
            pages = _segment(store.gather(layer, b.table, b.dtype), rows_mask)
        segments = [pages] + ([window] if window else [])
        if queries.shape[2] > 1 and sinks is None and (
                mx.default_device() == mx.gpu or _fused_fits(queries, segments, b.dtype)):
            keys, values, both = _concat(segments)
            out = _fused(queries, keys, values, scale, both)
        else:  # sinks: centered values need the sink's own value (``Sinks``)
            out = _normalized(queries, scale, segments, host, sink)
    return _add_value_center(out, store, layer) if store.quantized else out


def _working_set(queries: mx.array, kv: LayerKV, scale: float, mask: mx.array, standard: bool,
                 sinks: mx.array | None = None) -> mx.array:
    """K8V4 decode over float copies of the older pages and the tail (worker/kv/working.py)."""
    plan = kv.batch.work
    assert plan is not None
    keys, values = kv.batch.store.k_tail[kv.layer], kv.batch.store.v_tail[kv.layer]
    if plan.shared_table is not None and plan.rest_table is not None and standard:
        return _float_rows(queries, kv, keys[plan.rest_table], values[plan.rest_table], scale,
                           mask, (keys[plan.shared_table], values[plan.shared_table]), sinks)
    table = plan.whole_table()
    return _float_rows(queries, kv, keys[table], values[table], scale, mask, sinks=sinks)


def _dense_cache(queries: mx.array, kv: LayerKV, keys: mx.array, values: mx.array, scale: float,
                 mask: mx.array, standard: bool, sinks: mx.array | None = None) -> mx.array:
    """Decode over the dense decode cache (worker/kv/dense.py): what the gathers read."""
    s = kv.batch.shared
    if s and standard:
        return _float_rows(queries, kv, keys[:, :, s:], values[:, :, s:], scale, mask,
                           (keys[:1, :, :s], values[:1, :, :s]), sinks)
    if not kv.batch.store.quantized:
        return _fused(queries, keys, values, scale, mask, sinks)
    return _float_rows(queries, kv, keys, values, scale, mask, sinks=sinks)


def _float_rows(queries: mx.array, kv: LayerKV, keys: mx.array, values: mx.array, scale: float,
                mask: mx.array, shared: tuple[mx.array, mx.array] | None = None,
                sinks: mx.array | None = None) -> mx.array:
    """Decode over float keys/values read for each row (the working set's, the dense cache's).

    KEYS/VALUES (B, H, L, D) are attended cast to the batch's dtype; with SHARED, the prefix
    every row shares (1, H, S, D) is attended once (cascade) beside each row's rest, KEYS/VALUES
    (B, H, L - S, D), both as stored. K8V4 adds its value center.
    """
    b, store = kv.batch, kv.batch.store
    host = not b.bucket  # a compiled step cannot evaluate mid-graph (numpy's exp2)
    if shared is not None:
        rest = Segment(keys, values, mask[..., b.shared :])
        out = _cascade(queries, scale, Segment(*shared, None), [rest], host,
                       _sinks(sinks, store, kv.layer))
    elif store.quantized and sinks is not None:  # the sink's value in centered space
        out = _normalized(queries, scale, [Segment(keys, values, mask)], host,
                          _sinks(sinks, store, kv.layer))
    else:  # plain float keys: the fused kernel (on the CPU, one native softmax op)
        if keys.dtype != b.dtype:
            keys, values = keys.astype(b.dtype), values.astype(b.dtype)
        if store.quantized and queries.shape[2] == 1 and sinks is None and cpu_softmax.fits(
                queries, keys, values, mask):  # the center summed onto by the last product
            addend = store.value_addend(kv.layer, queries.shape[0], queries.shape[1])
            return cpu_softmax.sdpa(queries, keys, values, scale, mask, addend)
        out = _fused(queries, keys, values, scale, mask, sinks)
    return _add_value_center(out, store, kv.layer) if store.quantized else out


def _segment(kv: tuple[Any, Any], mask: mx.array | None) -> Segment:
    return Segment(kv[0], kv[1], mask)


def _fused(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any,
           sinks: mx.array | None = None) -> mx.array:
    """The fused kernel; on CPU its fallback's ops with the FMA softmax (the same bits).

    With SINKS the fused kernel itself (the native softmax has no sink column)."""
    if sinks is not None:
        return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale,
                                                    mask=mask, sinks=sinks)
    if cpu_softmax.fits(queries, keys, values, mask):
        return cpu_softmax.sdpa(queries, keys, values, scale, mask)
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)


def _fused_fits(queries: mx.array, segments: list[Segment], dtype: mx.Dtype) -> bool:
    """True when a CPU prompt's attention over SEGMENTS, concatenated, runs the native fused
    kernel (worker/cpu/softmax.py: float32, enough scores), faster than the segments' base-2
    softmax with its host exponentials."""
    masks = [s.mask for s in segments if s.mask is not None]
    if (dtype != mx.float32 or queries.dtype != mx.float32 or cpu_softmax.native() is None
            or len(masks) < len(segments)):  # ``_concat`` needs every mask
        return False
    length = sum(m.shape[-1] for m in masks)
    return queries.size // queries.shape[-1] * length >= cpu_softmax.MIN_SCORES


def _concat(segments: list[Segment]) -> tuple[mx.array, mx.array, mx.array]:
    """Dequantized keys, values and masks of masked segments, concatenated along the keys."""
    masks = [s.mask for s in segments if s.mask is not None]
    assert len(masks) == len(segments)
    shape = masks[0].shape[:-1]
    return (mx.concatenate([_dense(s.keys) for s in segments], axis=2),
            mx.concatenate([_dense(s.values) for s in segments], axis=2),
            mx.concatenate([mx.broadcast_to(m, (*shape, m.shape[-1])) for m in masks], axis=-1))


def _dense(x: mx.array | QuantizedPages) -> mx.array:
    if isinstance(x, QuantizedPages):
        return dequantize(x.w, x.scales, x.biases, x.group_size, x.bits)
    return x


def _gqa(queries: mx.array, kv_heads: int, scale: float) -> mx.array:
    """(B, Hq, n, D) -> (B, Hkv, rep * n, D) scaled to base-2 scores; head i reads KV head i // rep."""
    bsz, hq, n, d = queries.shape
    return (queries * (scale * LOG2E)).reshape(bsz, kv_heads, (hq // kv_heads) * n, d)


def _kv_heads(x: mx.array | QuantizedPages) -> int:
    return (x.w if isinstance(x, QuantizedPages) else x).shape[1]


def _partial(q: mx.array, n: int, segments: list[Segment], host: bool = True,
             sinks: Sinks | None = None) -> tuple[mx.array, mx.array]:
    """Softmax attention of q (B, Hkv, rep*n, D) over the segments: (output, base-2 log-sum).

    HOST: large score arrays may be evaluated for numpy (not while a compiled step traces).
    SINKS: one more score per query head (scaled to base 2 here), with its value if any.
    """
    bsz, hkv, m, _ = q.shape
    rep = m // n
    scores = []
    for s in segments:
        sc = _scores(q, s.keys).reshape(bsz, hkv, rep, n, -1)
        if s.mask is not None:
            sc = mx.where(s.mask[:, :, None], sc, MASKED)
        scores.append(sc.astype(mx.float32))
    columns = scores
    if sinks is not None:  # query head h * rep + r reads KV head h
        sink = (sinks.logits.astype(mx.float32) * LOG2E).reshape(1, hkv, rep, 1, 1)
        columns = [*scores, mx.broadcast_to(sink, (bsz, hkv, rep, n, 1))]
    allsc = mx.concatenate(columns, axis=-1) if len(columns) > 1 else columns[0]
    probs, top, total = _exp2_normalizers(allsc, host, skip_masked=n > 1)
    out = None
    start = 0
    for s, sc in zip(segments, scores, strict=True):
        width = sc.shape[-1]
        p = probs[..., start : start + width].reshape(bsz, hkv, m, width)
        start += width
        part = _apply(p, s.values)
        out = part if out is None else out + part
    assert out is not None
    if sinks is not None and sinks.value is not None:  # the sink column holds its value
        p = probs[..., -1:].reshape(bsz, hkv, m, 1)
        out = out + p * sinks.value.reshape(1, hkv, 1, -1)
    lse = (top + mx.log2(total)).reshape(bsz, hkv, m, 1)
    return out / total.reshape(bsz, hkv, m, 1), lse


def _exp2_normalizers(scores: mx.array, host: bool = True, skip_masked: bool = False
                      ) -> tuple[mx.array, mx.array, mx.array]:
    """2^(scores - max), the max and the sum along the last axis.

    On the CPU, large score arrays take a detour through numpy: MLX's CPU element-wise kernels
    are scalar, and numpy's SIMD exp2 is ~8x faster than ``mx.power`` there (1.1 vs 8.7 ms for
    2.9M floats), which makes the whole prefill step of shared-prefix batches ~10% faster.
    SKIP_MASKED (several queries per row: causal masks hide about half the keys): scores far
    below the max get their 0 from a select, not from powf, whose underflow path (masked scores
    sit at -1e30) costs several times its usual call; the same floats.
    """
    if host and scores.size >= NUMPY_AT and mx.default_device() == mx.cpu:
        mx.eval(scores)
        a = np.asarray(scores)
        top_np = a.max(axis=-1, keepdims=True)
        probs_np = np.exp2(a - top_np)
        return (mx.array(probs_np), mx.array(top_np),
                mx.array(probs_np.sum(axis=-1, keepdims=True, dtype=np.float32)))
    top = mx.max(scores, axis=-1, keepdims=True)
    if skip_masked:
        x = scores - top
        low = x < UNDERFLOW
        probs = mx.where(low, 0.0, mx.power(2.0, mx.where(low, 0.0, x)))
    else:
        probs = mx.power(2.0, scores - top)
    return probs, top, mx.sum(probs, axis=-1, keepdims=True)


def _scores(q: mx.array, keys: mx.array | QuantizedPages) -> mx.array:
    if isinstance(keys, QuantizedPages):
        if q.shape[2] >= DEQUANTIZE_AT:
            return q @ _dense(keys).swapaxes(-1, -2)
        return mx.quantized_matmul(q, keys.w, keys.scales, keys.biases, transpose=True,
                                   group_size=keys.group_size, bits=keys.bits)
    return q @ keys.swapaxes(-1, -2)


def _apply(p: mx.array, values: mx.array | QuantizedPages) -> mx.array:
    if isinstance(values, QuantizedPages):
        p = p.astype(values.scales.dtype)
        if p.shape[2] >= DEQUANTIZE_AT:
            return p @ _dense(values)
        return mx.quantized_matmul(p, values.w, values.scales, values.biases, transpose=False,
                                   group_size=values.group_size, bits=values.bits)
    return p.astype(values.dtype) @ values


def _normalized(queries: mx.array, scale: float, segments: list[Segment], host: bool = True,
                sinks: Sinks | None = None) -> mx.array:
    """Attention of each row over its own segments."""
    bsz, hq, n, d = queries.shape
    out, _ = _partial(_gqa(queries, _kv_heads(segments[0].keys), scale), n, segments, host,
                      sinks)
    return out.reshape(bsz, hq, n, d).astype(queries.dtype)


def _cascade(queries: mx.array, scale: float, shared: Segment, rows: list[Segment],
             host: bool = True, sinks: Sinks | None = None) -> mx.array:
    """Shared prefix attended once by all rows' queries, merged with each row's own keys.

    SINKS enter the rows' part only (once: the merge sums both parts' denominators)."""
    bsz, hq, n, d = queries.shape
    hkv = _kv_heads(shared.keys)
    q = _gqa(queries, hkv, scale)  # (B, Hkv, rep*n, D)
    m = q.shape[2]
    stacked = q.transpose(1, 0, 2, 3).reshape(1, hkv, bsz * m, d)
    s_out, s_lse = _partial(stacked, bsz * m, [shared], host)
    s_out = s_out.reshape(hkv, bsz, m, d).transpose(1, 0, 2, 3)
    s_lse = s_lse.reshape(hkv, bsz, m, 1).transpose(1, 0, 2, 3)
    r_out, r_lse = _partial(q, n, rows, host, sinks)
    top = mx.maximum(s_lse, r_lse)
    ws, wr = mx.power(2.0, s_lse - top), mx.power(2.0, r_lse - top)
    out = (s_out * ws + r_out * wr) / (ws + wr)
    return out.reshape(bsz, hq, n, d).astype(queries.dtype)


def _add_value_center(out: mx.array, store: PagedKVStore, layer: int) -> mx.array:
    """Add the per-KV-head value mean back to OUT (B, Hq, n, D) (attention weights sum to one):
    query head i reads KV head i // (Hq / Hkv); ``PagedKVStore.centers`` at the batch's shape."""
    return out + store.centers("v", layer, out.shape[0], out.shape[1])


_installed: dict[str, Any] = {}


def _router(original: Any) -> Any:
    """ORIGINAL (an attention function) sending LayerKV caches to paged_attention."""

    def sdpa(queries: mx.array, keys: Any, values: Any, cache: Any, scale: float, mask: Any,
             sinks: Any = None) -> mx.array:
        if isinstance(keys, LayerKV):
            return paged_attention(queries, keys, scale, mask, sinks)
        if (sinks is None and isinstance(cache, PagedView)  # full-precision pages, gathered
                and cpu_softmax.fits(queries, keys, values, mask)):
            return cpu_softmax.sdpa(queries, keys, values, scale, mask)
        result: mx.array = original(queries, keys, values, cache=cache, scale=scale, mask=mask,
                                    sinks=sinks)
        return result

    return sdpa


def install() -> None:
    """Route paged KV to paged_attention in every loaded mlx-lm (and mlx-vlm) model module."""
    import mlx_lm.models.base as base

    llama4_rows.install()
    gated_delta.install()
    original = _installed.setdefault("original", base.scaled_dot_product_attention)
    routed = _installed.setdefault("routed", _router(original))
    pairs = [("mlx_lm.models.", original, routed)]
    vlm_base = sys.modules.get("mlx_vlm.models.base")
    if vlm_base is not None:  # a vision model is loaded: its language model's modules too
        vlm_original = _installed.setdefault("vlm_original", vlm_base.scaled_dot_product_attention)
        pairs.append(("mlx_vlm.models.", vlm_original,
                      _installed.setdefault("vlm_routed", _router(vlm_original))))
    for prefix, before, after in pairs:
        for name, module in list(sys.modules.items()):
            if name.startswith(prefix) and getattr(
                    module, "scaled_dot_product_attention", None) is before:
                module.scaled_dot_product_attention = after  # type: ignore[attr-defined]


def routes_attention(model: Any) -> bool:
    """True when every attention layer of MODEL calls the routed attention function (a hybrid
    model's recurrent layers aside)."""
    install()
    routed = {f for f in (_installed["routed"], _installed.get("vlm_routed")) if f is not None}
    layers = getattr(getattr(model, "model", model), "layers", None) or getattr(model, "layers", [])
    found = False
    for layer in layers:
        attn = next((getattr(layer, a) for a in ("self_attn", "attention", "attn")
                     if hasattr(layer, a)), None)
        if attn is None and hasattr(layer, "linear_attn"):
            continue  # a hybrid model's recurrent layer (worker/kv/state_view.py)
        if attn is None:
            return False
        module = sys.modules.get(type(attn).__module__)
        if getattr(module, "scaled_dot_product_attention", None) not in routed:
            return False
        found = True
    return found
