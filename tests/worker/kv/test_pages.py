"""worker/cpu/native's K8V4 page completions (worker/kv/pages.py): MLX's quantize and read-back
floats in one node, writing the pool and tail arrays in place when nothing else reads them."""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterator

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

import worker.kv.pages as kv_pages
from tests.worker.engine.test_engine import make_engine
from tests.worker.kv.test_dense import _prompts, _run
from worker.kv.paged_kv import dequantize, requantized
from worker.model.embedded import embedded_model_path

# make install builds it on Linux x86-64 (worker/cpu/native/build.py); there it must load
pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                                reason="built on Linux x86-64")

G, D = 32, 64


@pytest.fixture(autouse=True)
def on() -> Iterator[None]:
    assert kv_pages.native() is not None
    kv_pages.ENABLED = True
    yield
    kv_pages.ENABLED = True


def _counts() -> tuple[int, int]:
    module = kv_pages.native()
    assert module is not None
    in_place, copied = module.counts()
    return int(in_place), int(copied)


def _arrays(seed: int = 0) -> tuple[mx.array, mx.array, list[mx.array], list[mx.array]]:
    """Tails (16, D) holding random rows in 0..7 and pools of 12 rows with random contents."""
    rng = np.random.default_rng(seed)
    tails = [mx.array(np.concatenate([rng.standard_normal((8, D)) * 4 + 1, np.zeros((8, D))])
                      .astype(np.float32)) for _ in range(2)]
    pools = [[mx.array(rng.integers(0, 2**32, (12, D * bits // 32), dtype=np.uint32)),
              mx.array(rng.standard_normal((12, D // G)).astype(np.float16)),
              mx.array(rng.standard_normal((12, D // G)).astype(np.float16))] for bits in (8, 4)]
    mx.eval(tails, pools)
    return tails[0], tails[1], pools[0], pools[1]


def test_the_check_passes_on_many_seeds() -> None:
    module = kv_pages.native()
    assert all(kv_pages.check(module, seed) for seed in range(8))


@pytest.mark.parametrize("index", [mx.int32, mx.uint32, mx.int64])
def test_the_outputs_are_mlx_ops(index: mx.Dtype) -> None:
    k_tail, v_tail, keys, values = _arrays()
    src, dst, copy = (mx.array(r, dtype=index) for r in ([5, 0, 3], [11, 2, 7], [8, 9, 15]))
    *parts, k_copy, v_copy = requantized(G, mx.float32)(k_tail[src], v_tail[src])
    want = []
    for a, part, rows in [*((a, p, dst) for a, p in zip((*keys, *values), parts, strict=True)),
                          (k_tail, k_copy, copy), (v_tail, v_copy, copy)]:
        w = mx.array(a)
        w[rows] = part
        want.append(w)
    mx.eval(want)
    got = kv_pages.complete_pages(k_tail, v_tail, src, keys, values, dst, copy, G)
    assert got is not None and len(got) == 8
    assert all(mx.array_equal(g, w).item() for g, w in zip(got, want, strict=True))


def _written(keys: list[mx.array], values: list[mx.array], k: mx.array, v: mx.array,
             dst: mx.array) -> list[mx.array]:
    """The pool arrays after MLX's ``write_quantized`` of K and V at DST (into copies)."""
    want = []
    for arrays, x, bits in ((keys, k, 8), (values, v, 4)):
        w, s, b = mx.quantize(x, group_size=G, bits=bits)
        for a, part in zip(arrays, (w, s.astype(mx.float16), b.astype(mx.float16)), strict=True):
            copy = mx.array(a)
            copy[dst] = part
            want.append(copy)
    mx.eval(want)
    return want


def test_without_copy_rows_only_the_pool_is_written_in_place() -> None:
    """A compiled step's completions: the tails are read, the six pool arrays written (MLX's
    ``write_quantized``: quantize, float16 casts, row writes), in their own buffers."""
    k_tail, v_tail, keys, values = _arrays()
    src, dst = mx.array([5, 0, 3]), mx.array([11, 2, 7])
    want = _written(keys, values, k_tail[src], v_tail[src], dst)
    address = [np.asarray(a).__array_interface__["data"][0] for a in (*keys, *values)]
    tails = np.array(k_tail), np.array(v_tail)
    before = _counts()
    got = kv_pages.complete_pages(k_tail, v_tail, src, keys, values, dst, None, G)
    del keys, values  # nothing else holds the old pool arrays
    assert got is not None and len(got) == 6
    mx.eval(got)
    assert all(mx.array_equal(g, w).item() for g, w in zip(got, want, strict=True))
    assert [np.asarray(a).__array_interface__["data"][0] for a in got] == address
    assert _counts()[0] - before[0] == 6 and _counts()[1] == before[1]
    assert np.array_equal(np.array(k_tail), tails[0]) and np.array_equal(np.array(v_tail), tails[1])


def _loaded(tail: mx.array, arrays: list[mx.array], bits: int, src: mx.array, dst: mx.array
            ) -> mx.array:
    """A copy of TAIL with the pool rows SRC of ARRAYS dequantized at DST (MLX's ops)."""
    w, s, b = (a[src] for a in arrays)
    copy = mx.array(tail)
    copy[dst] = dequantize(w, s.astype(mx.float32), b.astype(mx.float32), G, bits)
    mx.eval(copy)
    return copy


def test_loads_are_the_stores_dequantized_rows_in_place() -> None:
    """``load_pages``: pool rows' floats (``PagedKVStore.load_work``'s MLX ops) at tail rows,
    in the tails' own buffers; other rows untouched."""
    k_tail, v_tail, keys, values = _arrays()
    src, dst = mx.array([11, 2, 7]), mx.array([9, 15, 12])
    want = [_loaded(k_tail, keys, 8, src, dst), _loaded(v_tail, values, 4, src, dst)]
    address = [np.asarray(a).__array_interface__["data"][0] for a in (k_tail, v_tail)]
    before = _counts()
    got = kv_pages.load_pages(k_tail, v_tail, keys, values, src, dst, G)
    del k_tail, v_tail  # nothing else holds the old tails
    assert got is not None and len(got) == 2
    mx.eval(got)
    assert all(mx.array_equal(g, w).item() for g, w in zip(got, want, strict=True))
    assert [np.asarray(a).__array_interface__["data"][0] for a in got] == address
    assert _counts()[0] - before[0] == 2 and _counts()[1] == before[1]


def test_unheld_arrays_are_written_in_place() -> None:
    k_tail, v_tail, keys, values = _arrays()
    address = [np.asarray(a).__array_interface__["data"][0] for a in (*keys, *values, k_tail,
                                                                       v_tail)]
    rows = mx.array([1]), mx.array([4]), mx.array([10])
    before = _counts()
    got = kv_pages.complete_pages(k_tail, v_tail, rows[0], keys, values, rows[1], rows[2], G)
    del k_tail, v_tail, keys, values  # nothing else holds the old versions
    assert got is not None
    mx.eval(got)
    assert [np.asarray(a).__array_interface__["data"][0] for a in got] == address
    assert _counts()[0] - before[0] == 8 and _counts()[1] == before[1]


def test_a_pending_reader_makes_it_copy_and_keeps_the_old_rows() -> None:
    k_tail, v_tail, keys, values = _arrays()
    old = np.array(keys[1])
    reader = keys[1][mx.array([4])]  # lazy: it must still see the old scales
    before = _counts()
    got = kv_pages.complete_pages(k_tail, v_tail, mx.array([2]), keys, values, mx.array([4]),
                                  mx.array([12]), G)
    assert got is not None
    mx.eval(got, reader)
    assert np.array_equal(np.array(reader), old[4:5])
    assert not np.array_equal(np.array(got[1])[4], old[4])
    assert _counts()[1] - before[1] == 8  # every input is still held here


def test_other_dtypes_fall_back() -> None:
    k_tail, v_tail, keys, values = _arrays()
    rows = mx.array([0])
    assert kv_pages.complete_pages(k_tail.astype(mx.float16), v_tail.astype(mx.float16), rows,
                                   keys, values, rows, rows, G) is None


@pytest.mark.parametrize("compiled", ["off", "auto"])
def test_engine_steps_complete_pages_in_place_with_the_same_tokens(
        compiled: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """K8V4 rows joining and leaving a decode batch (plain steps, or compiled ones, whose
    completions write the pool only): pages fill on many steps, each completed by one node in
    place, and every step's logits and the greedy tokens are those of MLX's ops, bit for bit."""
    mdl, tok = load(str(embedded_model_path()))[:2]
    results = {}
    for enabled in (False, True):
        kv_pages.ENABLED = enabled
        engine = make_engine(mdl, tok, kind="k8v4", prefix_cache=False, compile_decode=compiled,
                             page_size=8)
        assert engine.kv.store.fmt.kind == "k8v4"
        assert (engine.kv.store.complete is not None) is enabled
        before = _counts()
        results[enabled] = _run(engine, _prompts(tok, 8, False), 2, monkeypatch)
        in_place, copied = (a - b for a, b in zip(_counts(), before, strict=True))
        assert (in_place > 8 * 8 and copied == 0) if enabled else in_place == copied == 0
        assert engine.kv.store.work.loads > 0
        if compiled == "auto":  # compiled steps ran (and completed pages after them)
            assert engine.compiled is not None and any(engine.compiled.fns.values())
    (tokens, logits), (want_tokens, want_logits) = results[True], results[False]
    assert tokens == want_tokens
    assert len(logits) == len(want_logits)
    assert all(np.array_equal(a, b) for a, b in zip(logits, want_logits, strict=True))
