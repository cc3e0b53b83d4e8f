"""K8V4 decode over float copies of full pages (worker/kv/working.py) reads the same numbers."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _run
from worker.engine.attention import install, paged_attention
from worker.engine.core import Engine, model_dtype
from worker.kv.paged_batch import LayerKV, PagedBatch
from worker.kv.paged_kv import KVFormat, PagedKVStore
from worker.kv.setup import plan_kv
from worker.kv.working import working_set_status
from worker.model.embedded import embedded_model_path

P, H, HQ, D = 4, 2, 4, 32
PREFIX = [1, 2, 3]  # pages every row shares (12 tokens)
TABLES = [PREFIX + [4, 5], PREFIX + [6, 7], PREFIX + [8, 9]]
LENGTHS = [15, 13, 17]  # tokens already written per row
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


def _store(work_pages: int) -> PagedKVStore:
    install()
    store = PagedKVStore(KVFormat(1, H, D, P, mx.float32, "k8v4"), num_pages=16, tail_pages=8,
                         work_pages=work_pages)
    mx.random.seed(0)
    store.set_centers([mx.random.normal((H, D))], [mx.random.normal((H, D))])
    return store


def _feed(store: PagedKVStore, rows: list[int], starts: list[int], lengths: list[int],
          cascade: bool, seed: int) -> tuple[PagedBatch, Any]:
    n = max(lengths)
    mx.random.seed(seed)
    k = 3 * mx.random.normal((len(starts), H, n, D)) + 4.0
    v = mx.random.normal((len(starts), H, n, D))
    batch = PagedBatch(store, [TABLES[r] for r in rows], starts, lengths, mx.float32,
                       tails=[r + 1 for r in rows], cascade=cascade)
    keys, _ = batch.views()[0].update_and_fetch(k, v)
    mx.eval(store.arrays())
    return batch, keys


def _history(store: PagedKVStore) -> None:
    _feed(store, [0], [0], [LENGTHS[0]], False, 1)
    for row in (1, 2):
        _feed(store, [row], [12], [LENGTHS[row] - 12], False, 1 + row)


def test_float_copies_are_bit_identical_to_dequantized_pages() -> None:
    store = _store(work_pages=12)
    _history(store)
    batch, kv = _feed(store, [0, 1, 2], LENGTHS, [1, 1, 1], False, 9)
    assert isinstance(kv, LayerKV) and kv.dense
    assert batch.work is not None and batch.work.table is not None
    table, older = batch.table, batch.older
    want_k, want_v = (mx.dequantize(x.w, x.scales, x.biases, group_size=x.group_size, bits=x.bits)
                      for x in store.gather(0, table, mx.float32))
    got_k, got_v = store.k_tail[0][batch.work.table], store.v_tail[0][batch.work.table]
    keep = mx.broadcast_to(older[:, :, 0, :, None], got_k.shape)  # the older pages: copies
    assert mx.array_equal(mx.where(keep, got_k, 0), mx.where(keep, want_k, 0)).item()
    assert mx.array_equal(mx.where(keep, got_v, 0), mx.where(keep, want_v, 0)).item()
    # pages 1-3 (shared) and 8; the rows' own pages are tails, and row 0's (4) fills now: its
    # copy comes from this step's quantize
    assert store.work.loads == 5 and batch.work.load is not None and batch.work.fresh is not None
    slot = int(store.work.slot_of[4])
    assert slot >= 0
    rows = mx.array([(4 * P + i) * H + h for i in range(P) for h in range(H)])
    copies = mx.arange((store.tail_pages + slot) * P * H, (store.tail_pages + slot + 1) * P * H)
    for arrays, tail, bits in ((store.k[0], store.k_tail[0], 8), (store.v[0], store.v_tail[0], 4)):
        w, sc, bi = (a[rows] for a in arrays)
        want = mx.dequantize(w, sc.astype(mx.float32), bi.astype(mx.float32), group_size=32,
                             bits=bits)
        assert mx.array_equal(tail[copies], want).item()
    store.work.check()


@pytest.mark.parametrize("cascade", [False, True])
def test_decode_attention_equals_the_quantized_path(cascade: bool) -> None:
    outs = []
    for work_pages in (0, 12):
        store = _store(work_pages)
        _history(store)
        batch, kv = _feed(store, [0, 1, 2], LENGTHS, [1, 1, 1], cascade, 9)
        assert kv.dense == bool(work_pages)
        assert batch.shared == (12 if cascade else 0)
        mx.random.seed(11)
        q = mx.random.normal((3, HQ, 1, D))
        outs.append(paged_attention(q, kv, D**-0.5, batch.mask))
    # quantized_matmul and dequantize-then-matmul sum in different orders
    assert mx.allclose(outs[0], outs[1], atol=2e-5).item()


def test_verify_batches_inside_a_page_read_the_working_set_like_the_quantized_path() -> None:
    """A speculative verify (n tokens per row, short of the page's last slot; one row padded)."""
    outs = []
    for work_pages in (0, 12):
        store = _store(work_pages)
        _history(store)
        batch, kv = _feed(store, [1, 2], LENGTHS[1:], [2, 1], False, 9)
        assert kv.dense == bool(work_pages)
        mx.random.seed(11)
        q = mx.random.normal((2, HQ, 2, D))
        outs.append(paged_attention(q, kv, D**-0.5, batch.mask))
    # row 2's second query is padding (its output is never read)
    assert mx.allclose(outs[0][:, :, :1], outs[1][:, :, :1], atol=2e-5).item()
    assert mx.allclose(outs[0][0], outs[1][0], atol=2e-5).item()
    store = _store(12)
    _history(store)
    _, kv = _feed(store, [0], LENGTHS[:1], [2], False, 9)  # crosses into the next page
    assert not kv.dense


def test_too_small_a_working_set_reads_quantized() -> None:
    store = _store(work_pages=3)  # the batch reads 4 distinct older pages
    _history(store)
    _, kv = _feed(store, [0, 1, 2], LENGTHS, [1, 1, 1], False, 9)
    assert not kv.dense and kv.window_k is not None
    status = working_set_status(store)  # what /v1/workers shows
    assert status["kv_working_set_pages"] == 3 and status["kv_working_set_refused"] >= 1


def _engine(model: Any, tok: Any, work_pages: int | None, **kw: Any) -> Engine:
    install()
    plan = plan_kv(model, model_dtype(model), kind="k8v4", memory="64MiB", page_size=8,
                   group_size=32, max_batch=kw.get("max_batch", 32), context_length=512)
    store = plan.store
    if work_pages is not None:
        store = PagedKVStore(store.fmt, store.num_pages, tail_pages=store.tail_pages,
                             work_pages=work_pages)
    assert store.fmt.kind == "k8v4"
    return Engine(model, tok, store, context_length=512, **kw)


def test_greedy_tokens_are_the_same_with_and_without_the_working_set() -> None:
    mdl, tok = load(str(embedded_model_path()))[:2]
    system = " ".join(PROMPTS[:3])
    prompts = {f"p{i}": tok.encode(system + " " + p) for i, p in enumerate(PROMPTS[:8])}
    quantized = _run(_engine(mdl, tok, 0), prompts, GREEDY)
    full = _engine(mdl, tok, None)  # the default: the budget left by the pool
    work = full.kv.store.work
    assert full.kv.store.work_pages > 0
    assert _run(full, prompts, GREEDY) == quantized
    assert work.loads > 0 and work.refused == 0
    status = working_set_status(full.kv.store)
    assert status["kv_working_set_loads"] == work.loads and status["kv_working_set_refused"] == 0
    assert 0 <= status["kv_working_set_pages_used"] <= status["kv_working_set_pages"]
    # a working set smaller than the batch's pages: evictions, and steps that read quantized
    slots = work.loads // 2
    small = _engine(mdl, tok, slots)
    for rid, ids in prompts.items():  # one at a time: each fits, together they do not
        assert _run(small, {rid: ids}, GREEDY) == {rid: quantized[rid]}
    assert small.kv.store.work.loads > slots and small.kv.store.work.refused == 0
    assert _run(small, prompts, GREEDY) == quantized
    assert small.kv.store.work.refused > 0
    small.kv.store.work.check()


@pytest.mark.parametrize("work_pages", [0, 12])
def test_deferred_page_writes_give_token_by_token_bits(work_pages: int) -> None:
    """Decode steps quantize a page when it fills; other batches first flush what is pending."""
    store = _store(work_pages)
    mx.random.seed(4)
    k = 3 * mx.random.normal((1, H, 16, D)) + 4.0
    v = mx.random.normal((1, H, 16, D))
    table = [[1, 2, 3, 4]]

    def feed(start: int, n: int) -> None:
        batch = PagedBatch(store, table, [start], [n], mx.float32, tails=[1])
        assert (batch.work is not None) == (n == 1)
        batch.views()[0].update_and_fetch(k[:, :, start : start + n], v[:, :, start : start + n])
        mx.eval(store.arrays())

    feed(0, 5)  # a prompt chunk, then decode steps filling pages 2 and 3, then a 2-token chunk
    for pos in range(5, 14):
        feed(pos, 1)
    feed(14, 2)
    rows = mx.arange(16 * H) + 1 * P * H  # pages 1-4, every position and head
    flat_k = k.transpose(0, 2, 1, 3).reshape(-1, D)
    flat_v = v.transpose(0, 2, 1, 3).reshape(-1, D)
    want_k, want_v = store.center(0, flat_k, flat_v)
    for arrays, x, bits in ((store.k[0], want_k, 8), (store.v[0], want_v, 4)):
        w, s, b = mx.quantize(x, group_size=32, bits=bits)
        assert mx.array_equal(arrays[0][rows], w).item()
        assert mx.array_equal(arrays[1][rows], s.astype(mx.float16)).item()
        assert mx.array_equal(arrays[2][rows], b.astype(mx.float16)).item()
