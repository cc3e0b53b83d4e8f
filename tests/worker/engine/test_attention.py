"""Paged attention paths agree: cascade over a shared prefix vs per row, and the dense reference."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from worker.engine.attention import install, paged_attention
from worker.kv.paged_batch import LayerKV, PagedBatch
from worker.kv.paged_kv import KVFormat, PagedKVStore

P, H, HQ, D = 4, 2, 4, 32
PREFIX = [1, 2, 3]  # pages every row shares (12 tokens)
TABLES = [PREFIX + [4, 5], PREFIX + [6, 7], PREFIX + [8, 9]]
LENGTHS = [15, 13, 17]  # tokens already written per row


def _store(kind: str) -> PagedKVStore:
    install()
    store = PagedKVStore(KVFormat(1, H, D, P, mx.float32, kind), num_pages=16, tail_pages=8)
    mx.random.seed(0)
    store.set_centers([mx.random.normal((H, D))], [mx.random.normal((H, D))])
    return store


def _feed(store: PagedKVStore, rows: list[int], starts: list[int], lengths: list[int],
          cascade: bool, seed: int) -> tuple[PagedBatch, LayerKV | tuple[mx.array, mx.array]]:
    """Write random keys/values for these rows; return the batch and what attention reads."""
    n = max(lengths)
    mx.random.seed(seed)
    k = 3 * mx.random.normal((len(starts), H, n, D)) + 4.0  # off-center, like real keys
    v = mx.random.normal((len(starts), H, n, D))
    batch = PagedBatch(store, [TABLES[r] for r in rows], starts, lengths, mx.float32,
                       tails=[r + 1 for r in rows], cascade=cascade)
    keys, values = batch.views()[0].update_and_fetch(k, v)
    mx.eval(store.arrays())
    return batch, keys if isinstance(keys, LayerKV) else (keys, values)


def _prefill_history(store: PagedKVStore) -> None:
    _feed(store, [0], [0], [LENGTHS[0]], False, 1)  # row 0 writes the prefix too
    for row in (1, 2):
        _feed(store, [row], [12], [LENGTHS[row] - 12], False, 1 + row)


@pytest.mark.parametrize("kind", ["none", "k8v4"])
@pytest.mark.parametrize("n", [1, 3])
def test_cascade_equals_per_row_attention(kind: str, n: int) -> None:
    outs = []
    for cascade in (False, True):
        store = _store(kind)
        _prefill_history(store)
        batch, kv = _feed(store, [0, 1, 2], LENGTHS, [n, n, n - 1 if n > 1 else 1], cascade, 9)
        assert batch.shared == (12 if cascade else 0)
        mx.random.seed(11)
        q = mx.random.normal((3, HQ, n, D))
        if isinstance(kv, LayerKV):
            out = paged_attention(q, kv, D**-0.5, batch.mask)
        else:
            out = mx.fast.scaled_dot_product_attention(q, kv[0], kv[1], scale=D**-0.5,
                                                        mask=batch.mask)
        outs.append(out)
    assert mx.allclose(outs[0], outs[1], atol=2e-5).item()


def test_full_precision_paged_attention_equals_dense_reference() -> None:
    store = _store("none")
    _prefill_history(store)
    batch, kv = _feed(store, [0, 1, 2], LENGTHS, [2, 2, 2], True, 9)
    assert isinstance(kv, LayerKV) and batch.shared == 12
    q = mx.random.normal((3, HQ, 2, D))
    got = paged_attention(q, kv, D**-0.5, batch.mask)
    keys, values = store.gather(0, batch.table, mx.float32)
    assert isinstance(keys, mx.array) and isinstance(values, mx.array)
    want = mx.fast.scaled_dot_product_attention(q, keys, values, scale=D**-0.5, mask=batch.mask)
    assert mx.allclose(got, want, atol=2e-5).item()


def test_k8v4_reads_own_page_in_full_precision() -> None:
    """One query: its own page comes from the full-precision tail, older pages are quantized."""
    store = _store("k8v4")
    _prefill_history(store)
    batch, kv = _feed(store, [0], [LENGTHS[0]], [1], False, 5)
    assert isinstance(kv, LayerKV) and kv.window_k is not None
    # position 15 sits in page 3 (positions 12..15): the window holds exactly those four keys
    assert kv.window_k.shape[2] == 4
    assert batch.window_mask.sum().item() == 4
    assert (batch.older.sum().item()) == 12


def test_routes_attention_only_for_layers_using_mlx_lm_attention() -> None:
    from tests.worker.engine.test_architectures import _build
    from worker.engine.attention import routes_attention

    assert routes_attention(_build("qwen3"))

    class OwnAttention:  # a layer that computes attention itself
        pass

    class Layer:
        self_attn = OwnAttention()

    class Model:
        layers = [Layer()]

    assert not routes_attention(Model())


def test_numpy_exponentials_match_mlx() -> None:
    """The CPU detour through numpy for large score arrays gives MLX's own numbers."""
    from worker.engine.attention import NUMPY_AT, _exp2_normalizers

    mx.random.seed(3)
    scores = mx.random.normal((2, 4, NUMPY_AT // 8 + 1)) * 8.0
    scores = mx.where(mx.random.uniform(shape=scores.shape) < 0.1, -1e30, scores)  # masked keys
    probs, top, total = _exp2_normalizers(scores)
    want_top = mx.max(scores, axis=-1, keepdims=True)
    want = mx.power(2.0, scores - want_top)
    assert mx.array_equal(top, want_top).item()
    assert mx.allclose(probs, want, rtol=1e-6, atol=1e-30).item()  # subnormals may differ
    assert mx.allclose(total, want.sum(axis=-1, keepdims=True), rtol=1e-4).item()  # sum order


def test_skipping_masked_scores_gives_the_same_bits() -> None:
    """Several queries per row: far-below-max scores get 0 from a select instead of powf."""
    from worker.engine.attention import _exp2_normalizers

    mx.random.seed(5)
    scores = mx.random.normal((2, 3, 40, 64)) * 30.0  # some real scores fall 200 below the max
    scores = mx.where(mx.random.uniform(shape=scores.shape) < 0.6, -1e30, scores)
    scores[0, 0, 0] = -1e30  # a row with every key masked: uniform weights, as before
    scores[0, 0, 1, :3] = mx.array([mx.nan, -mx.inf, mx.inf])
    plain = _exp2_normalizers(scores, host=False)
    skipped = _exp2_normalizers(scores, host=False, skip_masked=True)
    for x, y in zip(plain, skipped, strict=True):
        assert mx.array_equal(x, y, equal_nan=True).item()
    assert (plain[0][0, 0, 0] == 1).all().item()


def test_gpu_fused_path_equals_the_hand_written_softmax() -> None:
    """On a GPU, K8V4 prompt chunks concatenate pages and tail for the fused kernel."""
    from worker.engine.attention import Segment, _concat, _fused, _normalized

    store = _store("k8v4")
    _prefill_history(store)
    batch, kv = _feed(store, [0, 1, 2], LENGTHS, [3, 3, 2], False, 9)
    assert isinstance(kv, LayerKV) and kv.window_k is not None and kv.window_v is not None
    pages = Segment(*store.gather(0, batch.table, mx.float32), batch.mask & batch.older)
    window = Segment(kv.window_k, kv.window_v, batch.window_mask)
    q = mx.random.normal((3, HQ, 3, D))
    keys, values, mask = _concat([pages, window])
    fused = _fused(q, keys, values, D**-0.5, mask)
    assert mx.allclose(fused, _normalized(q, D**-0.5, [pages, window]), atol=2e-5).item()


@pytest.mark.parametrize("bucket", [False, True])
def test_positions_and_masks_are_data(bucket: bool, tmp_path: Path) -> None:
    """A batch's query/key positions and masks (and K8V4's window) enter a step as data, not
    as graph nodes the step evaluates (each costs a node and a task on the stream's thread),
    with the values of the MLX ops they replace."""
    store = _store("k8v4")
    starts, lengths = [13, 5, 16], [1, 3, 2]
    batch = PagedBatch(store, TABLES, starts, lengths, mx.float32, tails=[1, 2, 3],
                       bucket=bucket)
    names = ("q_pos", "k_pos", "mask", "window_pos", "window_mask")
    for name in names:
        mx.export_to_dot(str(tmp_path / f"{name}.dot"), getattr(batch, name))
        assert "label" not in (tmp_path / f"{name}.dot").read_text(), name
    length, n, p = batch.k_pos.shape[-1], max(lengths), P
    q_pos = mx.array(starts)[:, None, None, None] + mx.arange(n)[None, None, :, None]
    k_pos = mx.arange(length)[None, None, None, :]
    assert batch.q_pos.dtype == q_pos.dtype and mx.array_equal(batch.q_pos, q_pos)
    assert batch.k_pos.dtype == k_pos.dtype and mx.array_equal(batch.k_pos, k_pos)
    assert mx.array_equal(batch.mask, k_pos <= q_pos)
    w = batch.window_pos
    assert mx.array_equal(batch.window_mask, (w <= q_pos) & (w // p == q_pos // p))



@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_a_decode_write_has_no_transpose(kind: str, tmp_path: Path) -> None:
    """One token per row (B, H, 1, D) is already in the (B, 1, H, D) order the pages store:
    its write adds no Transpose node (the values: test_cascade_equals_per_row_attention's
    n=1 cases and the engine's greedy fidelity tests)."""
    for n in (1, 2):
        store = _store(kind)
        _prefill_history(store)
        k = mx.random.normal((3, H, n, D))
        batch = PagedBatch(store, TABLES, LENGTHS, [n] * 3, mx.float32, tails=[1, 2, 3])
        batch.views()[0].update_and_fetch(k, k)
        mx.export_to_dot(str(tmp_path / "g.dot"), *store.arrays())
        assert ("Transpose" in (tmp_path / "g.dot").read_text()) == (n > 1)
