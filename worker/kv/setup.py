"""Decide the KV page format and pool size for a loaded model."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx

from worker.engine.attention import routes_attention
from worker.kv.layer_kinds import ATTENTION_CACHES, RECURRENT_CACHES, layer_kinds
from worker.kv.paged_kv import KVFormat, PagedKVStore, k8v4_supported
from worker.kv.pages import completer
from worker.kv.rows import writer
from worker.kv.state_pool import StateLayout, StatePool
from worker.kv.window_group import WindowGroup, group_for

MLA_REASON = ("MLA layers (compressed latent and RoPE part as keys and values of different "
              "widths) compute attention themselves from gathered pages, and the latent serves as "
              "both key and value, so K8V4's 4-bit values and value centering do not apply; "
              "keeping full-precision pages")


class UnsupportedModel(Exception):
    """The model's layers keep something per sequence the paged engine cannot hold."""


@dataclass
class KVPlan:
    """The chosen format, the pool, and why."""

    store: PagedKVStore
    kind: str
    reason: str


class _Probe:
    """A cache that records the shape of the keys and values a layer writes."""

    offset = 0
    start_position = 0  # llama4 reads these of its chunked caches

    def maybe_trim_front(self) -> None:
        """Nothing to trim."""

    def __init__(self) -> None:
        self.shape: tuple[int, ...] | None = None
        self.v_dim = 0

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.shape = tuple(keys.shape)
        self.v_dim = int(values.shape[-1])
        return keys, values

    def make_mask(self, *args: Any, **kwargs: Any) -> Any:
        return None


_ATTENTION_CACHES = set(ATTENTION_CACHES)  # full, sliding window, chunked
_STATE_CACHES = set(RECURRENT_CACHES)  # a recurrent layer's fixed-size states (Gated DeltaNet)


@dataclass(frozen=True)
class ModelLayers:
    """What a model's layers keep per sequence: attention KV (layers, heads, head dim) and, in a
    hybrid model, recurrent states."""

    attention_layers: int
    kv_heads: int
    head_dim: int
    states: StateLayout | None
    # the values' width when it is not the keys' (0: head_dim): MLA layers write their
    # compressed latent as keys and its RoPE part as values, one head
    value_dim: int = 0


def probe_layers(model: Any) -> ModelLayers:
    """The model's per-sequence memory, found by running one token through it."""
    make_cache = getattr(model, "make_cache", None)
    made = list(make_cache()) if make_cache is not None else []
    if len(made) != len(model.layers):  # no per-layer caches said (a vision wrapper): attention
        made = [None] * len(model.layers)
    kinds = [type(c).__name__ if c is not None else "KVCache" for c in made]
    unknown = set(kinds) - _ATTENTION_CACHES - _STATE_CACHES
    if unknown:
        raise UnsupportedModel(f"model uses {sorted(set(kinds))} caches; the paged engine "
                               f"serves attention KV caches and recurrent states, not "
                               f"{sorted(unknown)}")
    probes = {i: _Probe() for i, k in enumerate(kinds) if k in _ATTENTION_CACHES}
    caches = [probes.get(i, made[i]) for i in range(len(kinds))]
    mx.eval(model(mx.array([[0]]), cache=caches))
    found = [p for p in probes.values() if p.shape is not None]
    # (kv heads, key width, value width): one for every layer; keys and values may differ in
    # width (MLA)
    shapes = {(p.shape[1], p.shape[3], p.v_dim) for p in found if p.shape is not None}
    if len(shapes) != 1:
        raise UnsupportedModel(f"layers have differing KV shapes {shapes} "
                               "(kv heads, key width, value width)")
    heads, dim, v_dim = next(iter(shapes))
    recurrent = tuple(i for i, k in enumerate(kinds) if k in _STATE_CACHES)
    states = None
    if recurrent:
        first: Any = made[recurrent[0]]
        states = StateLayout(recurrent, tuple((tuple(a.shape[1:]), a.dtype) for a in first.cache))
    return ModelLayers(len(probes), heads, dim, states, v_dim if v_dim != dim else 0)


def probe_kv_shape(model: Any) -> tuple[int, int, int]:
    """(attention layers, kv heads, head dim) of a model with attention layers only."""
    found = probe_layers(model)
    if found.states is not None:
        raise UnsupportedModel("a model with recurrent layers cannot serve here")
    if found.value_dim:
        raise UnsupportedModel(f"keys of width {found.head_dim} and values of width "
                               f"{found.value_dim} (MLA) are not supported here")
    return found.attention_layers, found.kv_heads, found.head_dim


def parse_memory(spec: str) -> int:
    """Bytes from '2GiB', '512MB', '1073741824' or a fraction of RAM like '0.1'."""
    s = spec.strip().lower()
    units = {"gib": 2**30, "gb": 10**9, "mib": 2**20, "mb": 10**6, "kib": 2**10, "kb": 10**3}
    for unit, factor in units.items():
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * factor)
    value = float(s)
    if value <= 1.0:
        return int(value * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return int(value)


def plan_kv(model: Any, dtype: mx.Dtype, *, kind: str, memory: str, page_size: int,
            group_size: int, max_batch: int, context_length: int, working_set: bool = True,
            work_share: float = 0.0, prefill_budget: int = 512,
            window_group: bool = True) -> KVPlan:
    """Choose K8V4 when it fits the head dim, size the pool, allocate it.

    With K8V4 and WORKING_SET, float copies of running rows' full pages (worker/kv/working.py)
    get the budget the pool leaves, or WORK_SHARE of the budget taken from the pool if more, at
    most every running row's whole context. What is left after both is the store's
    ``spare_bytes``: the most the dense decode cache (worker/kv/dense.py) may hold. A model with
    sliding or chunked layers keeps those in their own smaller pool (worker/kv/window_group.py)
    when that leaves the full layers more pages and WINDOW_GROUP (off in a tensor-parallel group,
    whose ranks share one block table per request); PREFILL_BUDGET (a step's prompt tokens)
    sizes it.
    """
    found = probe_layers(model)
    layers, heads, dim = found.attention_layers, found.kv_heads, found.head_dim
    v_dim = found.value_dim or dim
    reason = "requested"
    if kind == "k8v4" and v_dim != dim:
        kind, reason = "none", MLA_REASON
    elif kind == "k8v4" and not k8v4_supported(dim, group_size):
        kind, reason = "none", (f"head_dim {dim} is not a multiple of the quantization group "
                                f"size {group_size}; keeping full-precision pages")
    elif kind == "k8v4" and not routes_attention(model):
        kind, reason = "none", ("the model computes attention itself (not through mlx-lm's "
                                "scaled_dot_product_attention); keeping full-precision pages")
    fmt = KVFormat(layers, heads, dim, page_size, dtype, kind, group_size,
                   value_dim=v_dim if v_dim != dim else 0)
    per_context = -(-context_length // page_size)
    useful = 2 * max_batch * per_context + 1  # every slot busy, plus as much again for prefixes
    tails = max_batch + 2 if kind == "k8v4" else 0  # one per running request, plus scratch
    float_page = replace(fmt, kind="none").bytes_per_page()
    budget = parse_memory(memory)
    slots = state_slots(found.states, budget, max_batch) if found.states else 0
    left = max(budget - tails * float_page - slots * (
        found.states.bytes_per_slot() if found.states else 0), 0)  # tails: full precision
    work = 0
    if tails and working_set:  # K8V4: float copies of running rows' full pages
        spare = (left - min(left // fmt.bytes_per_page(), useful) * fmt.bytes_per_page())
        work = min(max(spare, int(left * work_share)) // float_page, max_batch * per_context)
        left -= work * float_page
    kinds = layer_kinds(model, layers)
    group = group_for(kinds, page_size, kind, found.states is not None) if window_group else None
    window_pages, full_page = 0, fmt.bytes_per_page()
    if group is not None:
        layer_page = fmt.bytes_per_page() // layers
        chunk = -(-min(prefill_budget, context_length) // page_size) + 1
        window_pages = window_pool_pages(group, max_batch, chunk)
        if window_pages < min(left // full_page, useful):  # else releasing pages saves nothing
            full_page = layer_page * (layers - len(group.layers))
            left = max(left - window_pages * layer_page * len(group.layers), 0)
            reason += (f"; {len(group.layers)} windowed layers in their own pool of "
                       f"{window_pages} pages, released as they leave the window")
        else:
            window_pages = 0
    elif kinds.windowed:
        reason += ("; windowed layers keep every page of a sequence (one layer group: K8V4 "
                   "pages, a hybrid model, tensor parallelism, or no full layer)")
    num_pages = max(min(left // full_page, useful), per_context + 2)
    spare = max(left - num_pages * full_page, 0)  # the dense decode cache's at most
    store = PagedKVStore(fmt, num_pages, tail_pages=tails, work_pages=work, spare_bytes=spare,
                         put_rows=writer(), complete=completer(),
                         window_layers=group.layers if group is not None and window_pages else (),
                         window_pages=window_pages)
    if found.states is not None:
        store.states = StatePool(found.states, slots, put_rows=writer())
    store.kinds = kinds
    return KVPlan(store, kind, reason)


def window_pool_pages(group: WindowGroup, max_batch: int, chunk: int) -> int:
    """The windowed layer group's pool: scratch, every running row's window, as much again
    for the prefix cache's, and CHUNK pages: a step's prompt chunks (written at once)."""
    return 1 + 2 * max_batch * group.seq_pages() + chunk


def state_slots(layout: StateLayout, budget: int, max_batch: int) -> int:
    """Recurrent-state slots: scratch, one per running request, and for boundary states and
    prefix-cache snapshots twice as many again plus 8 within a quarter of the memory budget
    (at least 8, like the pool's least pages: a prefix hit needs a snapshot)."""
    spare = max(budget // 4 // layout.bytes_per_slot() - max_batch, 0)
    return 1 + max_batch + max(min(2 * max_batch + 8, spare), 8)
