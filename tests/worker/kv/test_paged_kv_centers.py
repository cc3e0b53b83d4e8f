"""K8V4 centers at a decode batch's shape (PagedKVStore.centers): the values a broadcast gives,
made once per shape, within a byte budget."""

from __future__ import annotations

import mlx.core as mx
import pytest

import worker.kv.paged_kv as paged_kv
from worker.kv.paged_kv import KVFormat, PagedKVStore

H, D = 2, 32


def _store() -> PagedKVStore:
    store = PagedKVStore(KVFormat(2, H, D, 4, mx.float32, "k8v4"), num_pages=8, tail_pages=2)
    mx.random.seed(0)
    store.set_centers([mx.random.normal((H, D)) for _ in range(2)],
                      [mx.random.normal((H, D)) for _ in range(2)])
    return store


@pytest.mark.parametrize(("kind", "heads"), [("k", H), ("v", H), ("v", 3 * H)])
def test_centers_are_the_broadcast_per_head(kind: str, heads: int) -> None:
    store = _store()
    got = store.centers(kind, 1, 5, heads)
    base = (store.k_center if kind == "k" else store.v_center)[1]
    want = mx.broadcast_to(mx.repeat(base, heads // H, axis=0)[None, :, None, :], (5, heads, 1, D))
    assert got.shape == (5, heads, 1, D) and mx.array_equal(got, want).item()
    assert store.centers(kind, 1, 5, heads) is got  # made once


def test_decode_keys_are_centered_like_rows() -> None:
    store = _store()
    mx.random.seed(1)
    keys, values = mx.random.normal((3, H, 1, D)), mx.random.normal((3, H, 1, D))
    got = store.center(0, keys, values)
    want = store.center(0, keys.reshape(-1, D), values.reshape(-1, D))
    assert all(mx.array_equal(g, w).item() for g, w in zip(got, want, strict=True))


def test_past_the_budget_centers_are_broadcast_in_the_graph(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setattr(paged_kv, "CENTER_CACHE_BYTES", 3 * H * D * 4)
    store = _store()
    store.centers("k", 0, 3, H)
    assert store.center_cache is not None and len(store.center_cache) == 1
    got = store.centers("k", 0, 4, H)  # would pass the budget
    assert len(store.center_cache) == 1 and got.shape == (H, 1, D)
    store.set_centers(store.k_center, store.v_center)
    assert store.center_cache == {}  # new centers: nothing stale


def test_value_centers_at_the_query_heads_are_kept_for_compiled_steps() -> None:
    """Made once outside a trace (``v_center_heads``: what a compiled step gets as inputs); a
    trace (no center cache) then reads them instead of repeating the centers in its graph."""
    store = _store()
    assert store.v_center_heads == []
    store.centers("v", 0, 4, 3 * H)
    assert store.value_heads == 3 * H and len(store.v_center_heads) == 2
    for layer in range(2):
        want = mx.repeat(store.v_center[layer], 3, axis=0)[:, None, :]
        assert mx.array_equal(store.v_center_heads[layer], want).item()
    store.center_cache = None  # as in a compiled step's trace
    assert store.centers("v", 1, 4, 3 * H) is store.v_center_heads[1]
    assert store.centers("v", 1, 4, 2 * H).shape == (2 * H, 1, D)  # other heads: in the graph
    store.set_centers(store.k_center, store.v_center)  # new centers drop them
    assert store.v_center_heads == []


@pytest.mark.parametrize("rep", [1, 3])
def test_value_addends_are_the_centers_in_the_grouped_output_layout(rep: int) -> None:
    """The native attention's addend: (rows, kv_heads, rep, 1, D) (or (rows, H, 1, D)) holding
    the value center of the KV head each query head reads; made once per shape; a trace reads
    its inputs; none before the query heads are known."""
    store = _store()
    assert store.value_addends(4) == []
    store.centers("v", 0, 4, rep * H)
    got = store.value_addends(4)
    for layer, a in enumerate(got):
        want = store.centers("v", layer, 4, rep * H)
        assert a.shape == ((4, H, rep, 1, D) if rep > 1 else (4, H, 1, D))
        assert mx.array_equal(a.reshape(4, rep * H, 1, D), want).item()
        assert store.value_addend(layer, 4, rep * H) is a  # made once
    store.center_cache = None  # as in a compiled step's trace
    given = mx.zeros_like(got[1])
    store.addend_inputs = {(1, 4, rep * H): given}
    assert store.value_addend(1, 4, rep * H) is given
    assert mx.array_equal(store.value_addend(0, 4, rep * H), got[0]).item()  # in the graph
