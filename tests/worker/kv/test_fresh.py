"""K8V4 chunks from position 0 read their pages from the floats they quantized (worker/kv/fresh.py).

Same bits as writing the pages and reading them back: attention's output, the pages, the tails,
and the working-set copies the chunk fills (exactly what a load would dequantize).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _run
from worker.engine.attention import install, paged_attention
from worker.engine.core import Engine, model_dtype
from worker.kv import fresh as kv_fresh
from worker.kv.paged_batch import LayerKV, PagedBatch
from worker.kv.paged_kv import KVFormat, PagedKVStore
from worker.kv.setup import plan_kv
from worker.model.embedded import embedded_model_path

P, H, D = 4, 2, 32
TABLES = [[1, 2, 3, 4], [5, 6, 7], [8, 9]]
TAILS = 8
STARTS_ROWS = kv_fresh.starts_rows


def _store(work_pages: int, page: int = P) -> PagedKVStore:
    install()
    store = PagedKVStore(KVFormat(1, H, D, page, mx.float32, "k8v4"), num_pages=16, tail_pages=TAILS,
                         work_pages=work_pages)
    mx.random.seed(0)
    store.set_centers([mx.random.normal((H, D))], [mx.random.normal((H, D))])
    return store


def _fresh(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    monkeypatch.setattr(kv_fresh, "starts_rows", lambda s, b: on and STARTS_ROWS(s, b))


def _chunk(store: PagedKVStore, lengths: list[int], hq: int, seed: int = 3
           ) -> tuple[PagedBatch, mx.array]:
    """Feed rows 0.. a chunk from position 0; attention's output (B, HQ, n, D)."""
    n, rows = max(lengths), len(lengths)
    mx.random.seed(seed)
    k = 3 * mx.random.normal((rows, H, n, D)) + 4.0
    v = mx.random.normal((rows, H, n, D))
    q = mx.random.normal((rows, hq, n, D))
    batch = PagedBatch(store, TABLES[:rows], [0] * rows, lengths, mx.float32,
                       tails=list(range(1, rows + 1)))
    kv, _ = batch.views()[0].update_and_fetch(k, v)
    assert isinstance(kv, LayerKV)
    out = paged_attention(q, kv, D**-0.5, batch.mask)
    mx.eval(out, store.arrays())
    return batch, out


@pytest.mark.parametrize("lengths,hq,page", [([15], 4, P), ([5], 4, P), ([16], 4, P),
                                             ([15, 9, 4], 4, P), ([6, 2], 6, P), ([3], 2, 2)])
def test_fresh_chunks_give_the_bits_of_reading_the_pages_back(
        monkeypatch: pytest.MonkeyPatch, lengths: list[int], hq: int, page: int) -> None:
    """([3], 2, 2): three queries per KV head, too few to dequantize: the pages are gathered."""
    got = {}
    for on in (False, True):
        _fresh(monkeypatch, on)
        store = _store(work_pages=12, page=page)
        batch, out = _chunk(store, lengths, hq)
        assert batch.fresh == on
        real = page * H  # page 0 and tail page 0 are the padding's scratch
        pools = [a[real:] for arrays in (*store.k, *store.v) for a in arrays]
        tails = [t[real : TAILS * page * H] for t in (*store.k_tail, *store.v_tail)]
        got[on] = (out, pools, tails)
    for b, length in enumerate(lengths):  # padding queries' outputs are never read
        assert mx.array_equal(got[False][0][b, :, :length], got[True][0][b, :, :length]).item()
    for x, y in zip(got[False][1] + got[False][2], got[True][1] + got[True][2], strict=True):
        assert mx.array_equal(x, y).item()


def test_the_working_set_holds_the_floats_a_load_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    lengths = [15, 9]  # full pages: 1, 2, 3 and 5, 6
    store = _store(work_pages=12)
    batch, _ = _chunk(store, lengths, 4)
    assert batch.fill is not None
    work, block = store.work, mx.arange(P * H)
    for page in (1, 2, 3, 5, 6):
        slot = int(work.slot_of[page])
        assert slot >= 0
        rows = page * P * H + block
        copy = (TAILS + slot) * P * H + block
        for arrays, tail, bits in ((store.k[0], store.k_tail[0], 8),
                                   (store.v[0], store.v_tail[0], 4)):
            w, s, b = (a[rows] for a in arrays)
            want = mx.dequantize(w, s.astype(mx.float32), b.astype(mx.float32), group_size=32,
                                 bits=bits)
            assert mx.array_equal(tail[copy], want).item()
    assert work.slot_of[4] < 0 and work.slot_of[7] < 0  # the rows' own pages are in their tails
    assert work.loads == 5
    work.check()
    # the rows' first decode step finds every older page there: nothing to load (row 0 fills
    # page 4, whose copy comes from the step's own quantize)
    step = PagedBatch(store, TABLES[:2], lengths, [1, 1], mx.float32, tails=[1, 2])
    assert step.work is not None and step.work.dense and step.work.load is None
    assert work.loads == 6 and step.work.fresh is not None


def test_first_decode_steps_read_the_same_floats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filled by the chunk or loaded by the step: the decode step's attention is bit-identical."""
    lengths = [15, 9]
    outs = []
    for on in (False, True):
        _fresh(monkeypatch, on)
        store = _store(work_pages=12)
        _chunk(store, lengths, 4)
        assert store.work.loads == (5 if on else 0)
        mx.random.seed(7)
        k, v = mx.random.normal((2, H, 1, D)), mx.random.normal((2, H, 1, D))
        q = mx.random.normal((2, 4, 1, D))
        step = PagedBatch(store, TABLES[:2], lengths, [1, 1], mx.float32, tails=[1, 2])
        assert step.work is not None and (step.work.load is None) == on
        kv, _ = step.views()[0].update_and_fetch(k, v)
        outs.append(paged_attention(q, kv, D**-0.5, step.mask))
        mx.eval(outs[-1], store.arrays())
        assert store.work.loads == 6  # and row 0's page 4, filled by this step
    assert mx.array_equal(outs[0], outs[1]).item()


def test_no_room_in_the_working_set_fills_nothing() -> None:
    store = _store(work_pages=2)  # the chunk writes 3 full pages
    batch, _ = _chunk(store, [15], 4)
    assert batch.fresh and batch.fill is None and store.work.loads == 0
    assert store.work.refused == 0  # a prefill is not a refused decode batch


def _engine(model: Any, tok: Any) -> Engine:
    install()
    plan = plan_kv(model, model_dtype(model), kind="k8v4", memory="64MiB", page_size=8,
                   group_size=32, max_batch=32, context_length=512)
    return Engine(model, tok, plan.store, context_length=512)


def test_greedy_tokens_are_the_same_with_fresh_chunks_on_and_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Cold, then prefix hits (the cached pages read quantized), alone and together."""
    mdl, tok = load(str(embedded_model_path()))[:2]
    system = " ".join(PROMPTS[:3])
    prompts = {f"p{i}": tok.encode(system + " " + p) for i, p in enumerate(PROMPTS[:6])}
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    runs = {}
    for on in (False, True):
        _fresh(monkeypatch, on)
        engine = _engine(mdl, tok)
        cold = {rid: _run(engine, {rid: ids}, params)[rid] for rid, ids in prompts.items()}
        hits = _run(engine, prompts, params)
        runs[on] = (cold, hits)
        assert cold == hits
    assert runs[False] == runs[True]
