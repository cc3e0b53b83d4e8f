"""Decide the KV page format and pool size for a loaded model."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx

from worker.engine.attention import routes_attention
from worker.kv.layer_kinds import UnknownCache, layer_kinds
from worker.kv.paged_kv import KVFormat, PagedKVStore, k8v4_supported
from worker.kv.pages import completer
from worker.kv.rows import writer


class UnsupportedModel(Exception):
    """The model's layers do not use a plain key/value cache."""


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


def probe_kv_shape(model: Any) -> tuple[int, int, int]:
    """(layers, kv heads, head dim) found by running one token through the model."""
    layers = len(model.layers)
    try:
        layer_kinds(model, layers)
    except UnknownCache as e:
        raise UnsupportedModel(str(e)) from None
    probes = [_Probe() for _ in range(layers)]
    mx.eval(model(mx.array([[0]]), cache=probes))
    shapes = {p.shape[1:2] + p.shape[3:] for p in probes if p.shape is not None}
    if len(shapes) != 1 or any(p.v_dim != p.shape[-1] for p in probes if p.shape):
        raise UnsupportedModel(f"layers have differing KV shapes {shapes}")
    heads, dim = next(iter(shapes))
    return layers, heads, dim


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
            work_share: float = 0.0) -> KVPlan:
    """Choose K8V4 when it fits the head dim, size the pool, allocate it.

    With K8V4 and WORKING_SET, float copies of running rows' full pages (worker/kv/working.py)
    get the budget the pool leaves, or WORK_SHARE of the budget taken from the pool if more, at
    most every running row's whole context. What is left after both is the store's
    ``spare_bytes``: the most the dense decode cache (worker/kv/dense.py) may hold.
    """
    layers, heads, dim = probe_kv_shape(model)
    reason = "requested"
    if kind == "k8v4" and not k8v4_supported(dim, group_size):
        kind, reason = "none", (f"head_dim {dim} is not a multiple of the quantization group "
                                f"size {group_size}; keeping full-precision pages")
    elif kind == "k8v4" and not routes_attention(model):
        kind, reason = "none", ("the model computes attention itself (not through mlx-lm's "
                                "scaled_dot_product_attention); keeping full-precision pages")
    fmt = KVFormat(layers, heads, dim, page_size, dtype, kind, group_size)
    per_context = -(-context_length // page_size)
    useful = 2 * max_batch * per_context + 1  # every slot busy, plus as much again for prefixes
    tails = max_batch + 2 if kind == "k8v4" else 0  # one per running request, plus scratch
    float_page = replace(fmt, kind="none").bytes_per_page()
    left = max(parse_memory(memory) - tails * float_page, 0)  # tails: full-precision pages
    work = 0
    if tails and working_set:  # K8V4: float copies of running rows' full pages
        spare = (left - min(left // fmt.bytes_per_page(), useful) * fmt.bytes_per_page())
        work = min(max(spare, int(left * work_share)) // float_page, max_batch * per_context)
        left -= work * float_page
    num_pages = max(min(left // fmt.bytes_per_page(), useful), per_context + 2)
    spare = max(left - num_pages * fmt.bytes_per_page(), 0)  # the dense decode cache's at most
    store = PagedKVStore(fmt, num_pages, tail_pages=tails, work_pages=work, spare_bytes=spare,
                         put_rows=writer(), complete=completer())
    store.kinds = layer_kinds(model, layers)
    return KVPlan(store, kind, reason)
