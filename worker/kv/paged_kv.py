"""Paged KV storage for every layer: full-precision pages, or K8V4 (8-bit keys, 4-bit values).

Pages live in row arrays of shape (slots * kv_heads, ...): slot = page * page_size + offset and
row = slot * kv_heads + head, so one gather by a (B, H, L) row table yields attention's (B, H, L, D)
layout directly, with no transpose copy. K8V4 quantizes group-wise along
head_dim with mx.quantize (affine) and keeps scales and biases in float16, so a token costs
(D + D/2 + 8*D/group) bytes per KV head per layer instead of 4*D in float16.

Two things keep K8V4 close to full precision:
- Centering: keys and values are stored minus a fixed per-layer, per-head mean (calibrated once
  per worker). Softmax ignores a constant added to every key's score, so centered keys need no
  correction; attention adds the value mean back to its output (the weights sum to one). Keys'
  large near-constant channels (low-frequency RoPE pairs) then no longer set the 8-bit step.
- A full-precision tail: each running request also keeps the page it is writing in full
  precision (``tail_pages`` slots of one page each, KIVI's residual). A query reads its own
  page from there and every older page quantized, so results do not depend on chunking.

Decode batches read older pages from float copies when they fit (``WorkingSet``, slots after
the tail pages in the tail arrays, worker/kv/working.py): dequantized once, the same floats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import mlx.core as mx

from worker.kv.layer_kinds import FULL, LayerKinds
from worker.kv.paged_kv_work import WorkingSet
from worker.kv.scatter import PutRows, scatter_rows
from worker.kv.state_pool import StatePool

KEY_BITS = 8
VALUE_BITS = 4
CENTER_CACHE_BYTES = 16 << 20  # K8V4 centers kept at decode batches' shapes (``centers``)


class CompletePages(Protocol):
    """K8V4 page completions and working-set loads in one node each (worker/kv/pages.py)."""

    def __call__(self, k_tail: mx.array, v_tail: mx.array, tail_rows: mx.array,
                 keys: list[mx.array], values: list[mx.array], pool_rows: mx.array,
                 copy_rows: mx.array | None, group_size: int) -> list[mx.array] | None:
        """The arrays written (keys' (packed, scales, biases), values', then with COPY_ROWS
        k_tail, v_tail), or None (the store's own ops then)."""

    def load(self, k_tail: mx.array, v_tail: mx.array, keys: list[mx.array],
             values: list[mx.array], pool_rows: mx.array, copy_rows: mx.array,
             group_size: int) -> list[mx.array] | None:
        """(k_tail, v_tail) with POOL_ROWS' float copies at COPY_ROWS, or None."""


class QuantizedPages(NamedTuple):
    """Gathered quantized pages of one layer: packed weights, scales, biases (B, H, L, .)."""

    w: mx.array
    scales: mx.array
    biases: mx.array
    bits: int
    group_size: int


@dataclass(frozen=True)
class KVFormat:
    """Shape and encoding of the pages."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    dtype: mx.Dtype
    kind: str = "k8v4"  # or "none"
    group_size: int = 32
    # the values' width when it is not the keys' (0: head_dim). MLA layers write their
    # compressed latent as "keys" and its RoPE part as "values", one head, and compute attention
    # themselves from the gathered pages (``split``)
    value_dim: int = 0

    @property
    def v_dim(self) -> int:
        """The values' width."""
        return self.value_dim or self.head_dim

    @property
    def split(self) -> bool:
        """Keys and values of different widths (MLA): pages reach the model as gathered arrays
        (no cascade, no K8V4 attention: the model does not call the routed attention on them
        as keys and values)."""
        return self.v_dim != self.head_dim

    def bytes_per_token_per_layer(self) -> int:
        """KV bytes one token costs in one layer."""
        h, d, dv = self.num_kv_heads, self.head_dim, self.v_dim
        if self.kind == "none":
            return h * (d + dv) * self.dtype.size
        g = self.group_size  # a float16 scale + bias per group
        return h * (d * KEY_BITS // 8 + 4 * (d // g)) + h * (dv * VALUE_BITS // 8 + 4 * (dv // g))

    def bytes_per_page(self) -> int:
        """KV bytes of one page across all layers."""
        return self.bytes_per_token_per_layer() * self.page_size * self.num_layers


def k8v4_supported(head_dim: int, group_size: int) -> bool:
    """True when group-wise quantization fits the head dimension."""
    return head_dim % group_size == 0 and head_dim >= group_size


class PagedKVStore:
    """The page arrays of every layer; writes by slot, gathers by slot table.

    Every write goes through ``put_rows`` (MLX's scatter, or the worker's in-place write,
    worker/kv/rows.py) and replaces the array in the store's lists. The in-place write copies
    when an older version still has a reader to run, but a view of the array (a reshape) shares
    its buffer unseen: a view must be read by the op it was made for, in the same graph.
    """

    def __init__(self, fmt: KVFormat, num_pages: int, tail_pages: int = 0,
                 work_pages: int = 0, spare_bytes: int = 0,
                 put_rows: PutRows = scatter_rows, complete: CompletePages | None = None,
                 window_layers: tuple[int, ...] = (), window_pages: int = 0) -> None:
        self.fmt = fmt
        self.put_rows = put_rows
        self.complete = complete  # page completions with copies in one step, when given
        self.num_pages = num_pages
        # the windowed layer group (worker/kv/window_group.py): its layers' arrays hold
        # WINDOW_PAGES pages of their own id space (0: no group, every layer holds NUM_PAGES)
        self.window_pages = window_pages if window_layers else 0
        self.window_layers = frozenset(window_layers) if self.window_pages else frozenset()
        # bytes of the memory budget these arrays leave unused (worker/kv/dense.py's cache)
        self.spare_bytes = spare_bytes
        self.quantized = fmt.kind != "none"
        self.tail_pages = tail_pages if self.quantized else 0
        self.work_pages = work_pages if self.tail_pages else 0
        # float copies of full pages live in the tail arrays after the tail pages
        self.work = WorkingSet(num_pages, self.work_pages)
        slots = num_pages * fmt.page_size
        h, d, dv = fmt.num_kv_heads, fmt.head_dim, fmt.v_dim
        if self.quantized and fmt.split:
            raise ValueError("K8V4 pages need keys and values of one width")
        self.k: list[list[mx.array]] = []
        self.v: list[list[mx.array]] = []
        self.k_tail: list[mx.array] = []
        self.v_tail: list[mx.array] = []
        self.k_center = [mx.zeros((h, d), dtype=fmt.dtype) for _ in range(fmt.num_layers)]
        self.v_center = [mx.zeros((h, dv), dtype=fmt.dtype) for _ in range(fmt.num_layers)]
        tail_rows = (self.tail_pages + self.work_pages) * fmt.page_size * h
        for layer in range(fmt.num_layers):
            if layer in self.window_layers:
                assert fmt.kind == "none", "windowed layer groups hold full-precision pages"
                self.k.append([mx.zeros((window_pages * fmt.page_size * h, d), dtype=fmt.dtype)])
                self.v.append([mx.zeros((window_pages * fmt.page_size * h, dv), dtype=fmt.dtype)])
            elif fmt.kind == "none":
                self.k.append([mx.zeros((slots * h, d), dtype=fmt.dtype)])
                self.v.append([mx.zeros((slots * h, dv), dtype=fmt.dtype)])
            else:
                self.k.append(self._quantized_arrays(slots, KEY_BITS))
                self.v.append(self._quantized_arrays(slots, VALUE_BITS))
                self.k_tail.append(mx.zeros((tail_rows, d), dtype=fmt.dtype))
                self.v_tail.append(mx.zeros((tail_rows, d), dtype=fmt.dtype))
        self.query_heads = 0  # the value centers' last query heads (``centers``)
        # a hybrid model's recurrent-layer state slots (its attention layers are the fmt's layers)
        self.states: StatePool | None = None
        # per layer: full, sliding window or chunked attention (worker/kv/layer_kinds.py)
        self.kinds = LayerKinds((FULL,) * fmt.num_layers, (0,) * fmt.num_layers)
        self._center_rows()
        mx.eval(self.k, self.v, self.k_tail, self.v_tail)

    def set_centers(self, keys: list[mx.array], values: list[mx.array]) -> None:
        """Per-layer (kv_heads, head_dim) means subtracted before storing (before any write)."""
        self.k_center = [k.astype(self.fmt.dtype) for k in keys]
        self.v_center = [v.astype(self.fmt.dtype) for v in values]
        mx.eval(self.k_center, self.v_center)
        self._center_rows()

    def _center_rows(self) -> None:
        """The centers as (kv_heads, 1, head_dim) arrays (a decode step's keys (B, H, 1, D) are
        centered by one subtraction), and ``centers``' cache of them at a batch's full shape."""
        self.k_center_rows = [c[:, None, :] for c in self.k_center]
        self.v_center_rows = [c[:, None, :] for c in self.v_center]
        # the value centers at the query heads (value_heads of them), once asked for outside a
        # trace: a compiled step gets them as inputs instead of repeating them in its graph
        self.v_center_heads: list[mx.array] = []
        # None: made in the graph (a compiled step's trace, whose centers are its inputs)
        self.center_cache: dict[tuple[str, int, int, int], mx.array] | None = {}
        # a compiled step's trace: its value_addend inputs by (layer, rows, heads)
        self.addend_inputs: dict[tuple[int, int, int], mx.array] = {}
        mx.eval(self.k_center_rows, self.v_center_rows)

    def centers(self, kind: str, layer: int, rows: int, heads: int) -> mx.array:
        """LAYER's key ("k") or value ("v") center for ROWS x HEADS (B, H, 1, D): contiguous and
        made once per shape (an operand of the step's shape needs no broadcast node), or
        broadcast in the graph. HEADS may be the query heads (value centers added back after
        attention: query head i reads KV head i // (HEADS / kv_heads))."""
        base = (self.k_center_rows if kind == "k" else self.v_center_rows)[layer]
        rep = heads // self.fmt.num_kv_heads
        if kind == "v":
            self.query_heads = heads
        key = (kind, layer, rows, heads)
        cache = self.center_cache
        if cache is not None and key in cache:
            return cache[key]
        heads_base = self._at_heads(kind, layer, base, rep) if rep > 1 else base
        size = rows * heads * base.shape[-1] * base.itemsize
        if cache is None or sum(a.nbytes for a in cache.values()) + size > CENTER_CACHE_BYTES:
            return heads_base  # a trace, or a large model's many shapes: broadcast in the graph
        cache[key] = mx.contiguous(mx.broadcast_to(heads_base, (rows, heads, 1, base.shape[-1])))
        mx.eval(cache[key])
        return cache[key]

    def value_addend(self, layer: int, rows: int, heads: int) -> mx.array:
        """LAYER's value center as the addend of the native attention's last product for ROWS
        one-query rows of HEADS query heads: (rows, kv_heads, heads / kv_heads, 1, D) (the
        grouped heads' layout), or (rows, heads, 1, D) when HEADS are the KV heads. A compiled
        step gets it as an input (``addend_inputs``); outside a trace it is made once per shape
        like ``centers``; else (a trace not given it, a full cache) broadcast in the graph."""
        h, d = self.fmt.num_kv_heads, self.v_center[layer].shape[-1]
        key = ("addend", layer, rows, heads)
        if key[1:] in self.addend_inputs:
            return self.addend_inputs[key[1:]]
        cache = self.center_cache
        if cache is not None and key in cache:
            return cache[key]
        rep = heads // h
        base = self.v_center_rows[layer]  # (kv_heads, 1, D)
        made = (mx.broadcast_to(base[:, None], (rows, h, rep, 1, d)) if rep > 1
                else mx.broadcast_to(base, (rows, h, 1, d)))
        size = rows * heads * d * base.itemsize
        if cache is None or sum(a.nbytes for a in cache.values()) + size > CENTER_CACHE_BYTES:
            return made
        cache[key] = mx.contiguous(made)
        mx.eval(cache[key])
        return cache[key]

    def value_addends(self, rows: int) -> list[mx.array]:
        """``value_addend`` of every layer for ROWS at the query heads the value centers were
        last asked for (``centers``; none before): a compiled step's inputs."""
        heads = self.query_heads
        return [self.value_addend(layer, rows, heads)
                for layer in range(self.fmt.num_layers)] if heads else []

    @property
    def value_heads(self) -> int:
        """How many query heads ``v_center_heads`` is for (0: not made yet)."""
        return self.v_center_heads[0].shape[0] if self.v_center_heads else 0

    def _at_heads(self, kind: str, layer: int, base: mx.array, rep: int) -> mx.array:
        """LAYER's center BASE (kv_heads, 1, D) repeated REP times per head; the value centers'
        kept once made outside a trace (``v_center_heads``), else repeated in the graph."""
        if kind == "v" and not self.v_center_heads and self.center_cache is not None:
            self.v_center_heads = [mx.repeat(c, rep, axis=0) for c in self.v_center_rows]
            mx.eval(self.v_center_heads)
        if kind == "v" and self.value_heads == base.shape[0] * rep:
            return self.v_center_heads[layer]
        return mx.repeat(base, rep, axis=0)

    def _quantized_arrays(self, slots: int, bits: int) -> list[mx.array]:
        h, d, g = self.fmt.num_kv_heads, self.fmt.head_dim, self.fmt.group_size
        return [mx.zeros((slots * h, d * bits // 32), dtype=mx.uint32),
                mx.zeros((slots * h, d // g), dtype=mx.float16),
                mx.zeros((slots * h, d // g), dtype=mx.float16)]

    def write(self, layer: int, rows: mx.array, keys: mx.array, values: mx.array
              ) -> tuple[mx.array, mx.array]:
        """Store keys/values (R, D) at ROWS (R,) (one row per token and KV head).

        Returns what was stored before quantization: the keys and values, centered for K8V4.
        """
        if self.fmt.kind == "none":
            self._put(self.k[layer], 0, rows, keys.astype(self.fmt.dtype))
            self._put(self.v[layer], 0, rows, values.astype(self.fmt.dtype))
            return keys, values
        keys, values = self.center(layer, keys, values)
        self.write_quantized(layer, rows, keys, values)
        return keys, values

    def center(self, layer: int, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """K8V4: keys/values (R, D) minus the layer's per-head means (rows cycle over heads), or
        a decode step's (B, H, 1, D), returned as their (B * H, D) rows."""
        h, d = self.fmt.num_kv_heads, self.fmt.head_dim
        if keys.ndim == 4 and keys.shape[2] == 1:
            rows = keys.shape[0]
            return ((keys - self.centers("k", layer, rows, h)).reshape(-1, d),
                    (values - self.centers("v", layer, rows, h)).reshape(-1, d))
        return ((keys.reshape(-1, h, d) - self.k_center[layer]).reshape(-1, d),
                (values.reshape(-1, h, d) - self.v_center[layer]).reshape(-1, d))

    def write_quantized(self, layer: int, rows: mx.array, keys: mx.array, values: mx.array
                        ) -> list[tuple[mx.array, mx.array, mx.array]]:
        """K8V4: quantize centered keys/values (R, D) into the pages at ROWS (R,).

        Returns what was written: (packed, scales, biases) of the keys, then of the values.
        """
        written = []
        for arrays, x, bits in ((self.k[layer], keys, KEY_BITS), (self.v[layer], values, VALUE_BITS)):
            w, s, b = mx.quantize(x, group_size=self.fmt.group_size, bits=bits)
            s, b = s.astype(mx.float16), b.astype(mx.float16)
            for i, part in enumerate((w, s, b)):
                self._put(arrays, i, rows, part)
            written.append((w, s, b))
        return written

    def write_dequantized(self, layer: int, rows: mx.array, keys: mx.array, values: mx.array,
                          dtype: mx.Dtype) -> tuple[mx.array, mx.array, mx.array, mx.array]:
        """K8V4: store keys/values (B, H, n, D) at ROWS (B*H*n,); also what reading them gives.

        Returns the centered keys and values, and the floats (B, H, n, D) in DTYPE that
        ``gather`` + dequantizing (or ``load_work``, for DTYPE the pages' dtype) would give for
        ROWS, computed from the quantize outputs (no gather). Attention's layout is kept
        throughout: its products read contiguous keys, as they read gathered ones.
        """
        shape, d = keys.shape, keys.shape[-1]
        keys = keys - self.k_center[layer][:, None, :]
        values = values - self.v_center[layer][:, None, :]
        (kw, ks, kb), (vw, vs, vb) = self.write_quantized(
            layer, rows, keys.reshape(-1, d), values.reshape(-1, d))
        g = self.fmt.group_size
        return (keys, values,
                dequantize(kw, ks.astype(dtype), kb.astype(dtype), g, KEY_BITS).reshape(shape),
                dequantize(vw, vs.astype(dtype), vb.astype(dtype), g, VALUE_BITS).reshape(shape))

    def requantize(self, layer: int, tail_rows: mx.array, rows: mx.array,
                   work_rows: mx.array | None = None) -> None:
        """K8V4: quantize the tail's TAIL_ROWS (R,) into the pages at ROWS (R,).

        With WORK_ROWS (R,), also put their float copies there (what ``load_work`` would give
        for ROWS, from the quantize outputs: no gather).
        """
        if self.complete is not None:
            done = self.complete(self.k_tail[layer], self.v_tail[layer], tail_rows,
                                 self.k[layer], self.v[layer], rows, work_rows,
                                 self.fmt.group_size)
            if done is not None:
                self.k[layer][:], self.v[layer][:] = done[:3], done[3:6]
                if work_rows is not None:
                    self.k_tail[layer], self.v_tail[layer] = done[6], done[7]
                return
        keys, values = self.k_tail[layer][tail_rows], self.v_tail[layer][tail_rows]
        if work_rows is None:
            self.write_quantized(layer, rows, keys, values)
            return
        # one compiled function: its element-wise chains fuse (fewer graph nodes per step)
        *parts, k_copy, v_copy = requantized(self.fmt.group_size, self.fmt.dtype)(keys, values)
        for arrays, written in ((self.k[layer], parts[:3]), (self.v[layer], parts[3:])):
            for i, part in enumerate(written):
                self._put(arrays, i, rows, part)
        self._put(self.k_tail, layer, work_rows, k_copy)
        self._put(self.v_tail, layer, work_rows, v_copy)

    def load_work(self, layer: int, rows: mx.array, work_rows: mx.array) -> None:
        """Dequantize the page ROWS (R,) into the float rows WORK_ROWS (R,) of the tail arrays.

        The floats are exactly what ``gather`` + ``mx.dequantize`` give for these rows.
        """
        dtype, g = self.fmt.dtype, self.fmt.group_size
        if self.complete is not None:
            done = self.complete.load(self.k_tail[layer], self.v_tail[layer], self.k[layer],
                                      self.v[layer], rows, work_rows, g)
            if done is not None:
                self.k_tail[layer], self.v_tail[layer] = done
                return
        for arrays, out, bits in ((self.k[layer], self.k_tail, KEY_BITS),
                                  (self.v[layer], self.v_tail, VALUE_BITS)):
            w, s, b = (a[rows] for a in arrays)
            self._put(out, layer, work_rows,
                      dequantize(w, s.astype(dtype), b.astype(dtype), g, bits))

    def write_tail(self, layer: int, rows: mx.array, keys: mx.array, values: mx.array) -> None:
        """Store centered keys/values (R, D) in full precision at tail ROWS (R,)."""
        self._put(self.k_tail, layer, rows, keys.astype(self.fmt.dtype))
        self._put(self.v_tail, layer, rows, values.astype(self.fmt.dtype))

    def _put(self, arrays: list[mx.array], i: int, rows: mx.array, values: mx.array) -> None:
        """ARRAYS[I] with ROWS set to VALUES, through ``put_rows``."""
        arrays[i] = self.put_rows(arrays[i], rows, values)

    def gather_tail(self, layer: int, table: mx.array) -> tuple[mx.array, mx.array]:
        """Full-precision tail keys and values at the rows of TABLE (B, H, W)."""
        return self.k_tail[layer][table], self.v_tail[layer][table]

    def gather_tail_pages(self, layer: int, tails: mx.array, width: int
                          ) -> tuple[mx.array, mx.array]:
        """The first WIDTH positions of each row's tail page TAILS (B,), as (B, H, WIDTH, D)."""
        return (_by_page(self.k_tail[layer], tails[:, None], self.fmt, width),
                _by_page(self.v_tail[layer], tails[:, None], self.fmt, width))

    def gather(self, layer: int, table: mx.array, dtype: mx.Dtype
               ) -> tuple[mx.array, mx.array] | tuple[QuantizedPages, QuantizedPages]:
        """Keys and values at the rows of TABLE (B, H, L), as (B, H, L, D) or quantized pages."""
        if self.fmt.kind == "none":
            return self.k[layer][0][table], self.v[layer][0][table]
        g = self.fmt.group_size

        def pages(arrays: list[mx.array], bits: int) -> QuantizedPages:
            w, s, b = (a[table] for a in arrays)
            return QuantizedPages(w, s.astype(dtype), b.astype(dtype), bits, g)

        return pages(self.k[layer], KEY_BITS), pages(self.v[layer], VALUE_BITS)

    def arrays(self) -> list[mx.array]:
        """Every page array (to materialize pending writes)."""
        pages = [a for arrays in (*self.k, *self.v) for a in arrays] + self.k_tail + self.v_tail
        return pages if self.states is None else pages + self.states.all_arrays()

    def nbytes(self) -> int:
        """Bytes held by all page arrays."""
        return sum(a.nbytes for a in self.arrays())


_REQUANTIZED: dict[tuple[int, mx.Dtype], Callable[..., list[mx.array]]] = {}


def requantized(group_size: int, dtype: mx.Dtype) -> Callable[..., list[mx.array]]:
    """Compiled: keys/values (R, D) -> their K8V4 (packed, scales, biases) as ``write_quantized``
    stores them, then the floats ``load_work`` would read back (the same bits: the compiled
    chains run the same element-wise ops)."""
    key = (group_size, dtype)
    if key not in _REQUANTIZED:

        def run(keys: mx.array, values: mx.array) -> list[mx.array]:
            out: list[mx.array] = []
            copies = []
            for x, bits in ((keys, KEY_BITS), (values, VALUE_BITS)):
                w, s, b = mx.quantize(x, group_size=group_size, bits=bits)
                s, b = s.astype(mx.float16), b.astype(mx.float16)
                out += [w, s, b]
                copies.append(dequantize(w, s.astype(dtype), b.astype(dtype), group_size, bits))
            return out + copies

        _REQUANTIZED[key] = mx.compile(run)
    return _REQUANTIZED[key]


def dequantize(w: mx.array, scales: mx.array, biases: mx.array, group_size: int, bits: int
               ) -> mx.array:
    """``mx.dequantize``'s floats for affine 8- and 4-bit groups, in a few ops on the CPU.

    MLX's CPU dequantize is a fallback of 30-50 small ops (shifts and masks per packed field);
    here the packed words are read as bytes (little-endian: field i of a word is byte i, or
    nibble i) and each group is ``q * scale + bias``, the same two roundings.
    """
    if bits not in (4, 8) or mx.default_device() != mx.cpu:
        return mx.dequantize(w, scales, biases, group_size=group_size, bits=bits)
    q = mx.view(w, mx.uint8)
    if bits == 4:
        q = mx.stack([q & 15, q >> 4], axis=-1)
    shape = scales.shape
    q = q.reshape(*shape, group_size).astype(scales.dtype)
    return (q * scales[..., None] + biases[..., None]).reshape(*shape[:-1], -1)


def _by_page(a: mx.array, pages: mx.array, fmt: KVFormat, length: int) -> mx.array:
    """Rows of pool array A for the pages PAGES (B, W): (B, H, LENGTH, cols), a page per copy."""
    p, h, cols = fmt.page_size, fmt.num_kv_heads, a.shape[-1]
    bsz, w = pages.shape
    blocks = a.reshape(-1, p * h * cols)[pages]  # (B, W, P*H*cols): one copy per page
    out = blocks.reshape(bsz, w * p, h, cols).transpose(0, 2, 1, 3)
    return out[:, :, :length] if length < w * p else out

