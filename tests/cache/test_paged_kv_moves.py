"""Compiled K8V4 page loads and completions write exactly what the per-layer methods write."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from cache.paged_kv import KVFormat, PagedKVStore
from cache.paged_kv_moves import PageMoves
from worker.kv_working import _pow2

P, H, D, LAYERS = 4, 2, 32, 3


def _store() -> PagedKVStore:
    store = PagedKVStore(KVFormat(LAYERS, H, D, P, mx.float32, "k8v4"), num_pages=8,
                         tail_pages=4, work_pages=4)
    mx.random.seed(0)
    rows = mx.arange(8 * P * H)
    for layer in range(LAYERS):  # every page and tail row holds distinct values
        store.write(layer, rows, mx.random.normal((8 * P * H, D)), mx.random.normal((8 * P * H, D)))
        store.k_tail[layer] = mx.random.normal(store.k_tail[layer].shape)
        store.v_tail[layer] = mx.random.normal(store.v_tail[layer].shape)
    mx.eval(store.arrays())
    return store


def _rows(pages: list[int]) -> mx.array:
    block = np.arange(P * H)
    return mx.array((_pow2(np.array(pages))[:, None] * P * H + block).reshape(-1))


@pytest.mark.parametrize("pages", [[1], [2, 5], [3, 6, 7]])  # 3 pages: padded to 4 (repeats)
def test_moves_equal_the_per_layer_methods(pages: list[int]) -> None:
    plain, compiled = _store(), _store()
    moves = PageMoves(compiled)
    slots = [4 + i for i in range(len(pages))]  # working-set pages of the tail arrays
    tails = [1 + i for i in range(len(pages))]
    for step in range(2):  # the second call reuses the compiled functions
        for store in (plain, compiled):
            if store is plain:
                for layer in range(LAYERS):
                    store.load_work(layer, _rows(pages), _rows(slots))
                    store.requantize(layer, _rows(tails), _rows(pages))
            else:
                moves.load(_rows(pages), _rows(slots))
                moves.complete(_rows(tails), _rows(pages))
            mx.eval(store.arrays())
        for a, b in zip(plain.arrays(), compiled.arrays(), strict=True):
            assert mx.array_equal(a, b).item()
        for store in (plain, compiled):  # new tail content for the second round
            for layer in range(LAYERS):
                store.k_tail[layer] = store.k_tail[layer] * 1.5 + step
            mx.eval(store.arrays())
    assert len(moves.fns) == 2


def test_pow2_pads_by_repeating_the_first_entry() -> None:
    assert _pow2(np.array([4])).tolist() == [4]
    assert _pow2(np.array([4, 5, 6])).tolist() == [4, 5, 6, 4]
    assert _pow2(np.array([1, 2, 3, 4, 5])).tolist() == [1, 2, 3, 4, 5, 1, 1, 1]
    assert len(_pow2(np.array([], dtype=np.int64))) == 0
