"""Layer kinds read from mlx-lm's caches, the positions each kind still needs, and the masks."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, ChunkedKVCache, KVCache, RotatingKVCache

from worker.kv.layer_kinds import (
    CHUNKED,
    FULL,
    SLIDING,
    LayerKinds,
    UnknownCache,
    kinds_status,
    layer_kinds,
)
from worker.kv.paged_batch import PagedBatch
from worker.kv.paged_kv import KVFormat, PagedKVStore


class _Model:
    def __init__(self, caches: list[object]) -> None:
        self.caches = caches

    def make_cache(self) -> list[object]:
        return self.caches


def test_kinds_from_make_cache() -> None:
    model = _Model([RotatingKVCache(max_size=24), KVCache(), ChunkedKVCache(32), KVCache()])
    kinds = layer_kinds(model, 4)
    assert kinds.kinds == (SLIDING, FULL, CHUNKED, FULL)
    assert kinds.sizes == (24, 0, 32, 0)
    assert kinds.windowed and kinds.counts == {SLIDING: 1, FULL: 2, CHUNKED: 1}
    assert not layer_kinds(object(), 3).windowed  # no make_cache: every layer full
    # a hybrid's recurrent layers hold states, not pages: only its attention layers have kinds
    assert layer_kinds(_Model([ArraysCache(2), KVCache()]), 1).kinds == (FULL,)

    class MambaCache(ArraysCache):
        """A cache kind the paged engine does not know."""

    with pytest.raises(UnknownCache, match="MambaCache"):
        layer_kinds(_Model([MambaCache(2), KVCache()]), 2)


def test_needed_positions_and_pages() -> None:
    kinds = LayerKinds((SLIDING, FULL, CHUNKED), (24, 0, 32))
    assert kinds.needed_from(0, 100) == 77  # the last 24 positions, 100 included
    assert kinds.needed_from(0, 10) == 0
    assert kinds.needed_from(1, 100) == 0
    assert kinds.needed_from(2, 100) == 96  # chunk 96..127
    assert kinds.window_start(100) == 77
    # 7 pages of 16 (positions 0..111), next query at 100: sliding needs pages 4..6, chunked 6
    assert kinds.held_pages(7, 100, 16) == {FULL: 7, SLIDING: 3, CHUNKED: 1}
    status = kinds_status(kinds, [(7, 100), (2, 20)], 16)
    assert status["kv_layer_kinds"] == {SLIDING: {"layers": 1, "window": 24},
                                        FULL: {"layers": 1, "window": 0},
                                        CHUNKED: {"layers": 1, "window": 32}}
    assert status["kv_pages_needed_by_kind"] == {SLIDING: 3 + 2, FULL: 9, CHUNKED: 1 + 2}


def test_chunked_mask_keeps_each_query_in_its_own_chunk() -> None:
    store = PagedKVStore(KVFormat(1, 1, 32, 4, mx.float32, "none"), num_pages=16)
    batch = PagedBatch(store, [[1, 2, 3], [4, 5, 6]], [5, 2], [3, 3], mx.float32)
    mask = batch.views()[0].make_mask(3, chunk_size=4)
    q = batch.q_pos  # (B, 1, n, 1)
    k = batch.k_pos
    want = (k <= q) & (k >= q // 4 * 4)
    assert mx.array_equal(mask, want).item()
    # row 0, query at 7: keys 4..7; at 6: keys 4..6
    assert mask[0, 0, 2].tolist() == [False] * 4 + [True] * 4
    assert mask[0, 0, 1].tolist() == [False] * 4 + [True] * 3 + [False]
