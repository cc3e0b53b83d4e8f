"""worker/cpu/native's in-place row writes (worker/kv/rows.py): MLX's scatter's values, written in
the array's own buffer whenever no reader still to be encoded needs the old rows."""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterator

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

import worker.kv.rows as kv_rows
from tests.conftest import shared_model
from tests.worker.engine.test_engine import make_engine
from tests.worker.kv.test_dense import _prompts, _run
from worker.kv.scatter import scatter_rows

# make install builds it on Linux x86-64 (worker/cpu/native/build.py); there it must load
pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                                reason="built on Linux x86-64")


@pytest.fixture(autouse=True)
def on() -> Iterator[None]:
    assert kv_rows.native() is not None
    kv_rows.ENABLED = True
    yield
    kv_rows.ENABLED = True


def _counts() -> tuple[int, int]:
    module = kv_rows.native()
    assert module is not None
    in_place, copied = module.counts()
    return int(in_place), int(copied)


def _dense(shape: tuple[int, int], dtype: mx.Dtype, seed: int = 0) -> mx.array:
    a = mx.array(np.random.default_rng(seed).integers(0, 1000, shape)).astype(dtype)
    mx.eval(a)
    return a


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16, mx.uint32])
@pytest.mark.parametrize("index", [mx.int32, mx.uint32, mx.int64])
def test_the_values_are_mlx_scatters(dtype: mx.Dtype, index: mx.Dtype) -> None:
    rows = mx.array([7, 0, 3], dtype=index)
    values = _dense((3, 5), dtype, seed=1)
    want = scatter_rows(_dense((9, 5), dtype), rows, values)
    got = kv_rows.write_rows(_dense((9, 5), dtype), rows, values)
    assert mx.array_equal(got, want).item()


@pytest.mark.parametrize("index", [mx.int32, mx.uint32, mx.int64])
def test_copy_rows_is_a_gather_then_a_write(index: mx.Dtype) -> None:
    src = _dense((6, 5), mx.float32, seed=2)
    rows, src_rows = mx.array([7, 0, 3], dtype=index), mx.array([5, 1, 5], dtype=index)
    want = scatter_rows(_dense((9, 5), mx.float32), rows, src[src_rows])
    before = _counts()
    got = kv_rows.copy_rows(kv_rows.write_rows, _dense((9, 5), mx.float32), rows, src, src_rows)
    assert mx.array_equal(got, want).item()
    assert _counts()[0] - before[0] == 1
    # another writer (MLX's scatter) gets the gathered rows
    assert mx.array_equal(kv_rows.copy_rows(scatter_rows, _dense((9, 5), mx.float32), rows, src,
                                            src_rows), want).item()


@pytest.mark.parametrize("heads", [1, 3])
def test_write_centered_is_mlx_subtraction_then_a_write(heads: int) -> None:
    """Rows cycle over the center's rows (a decode step's (B, H) order); the values are MLX's
    subtraction's, specials and subnormals included."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal((6, 5)).astype(np.float32) * 10
    values[0, :4] = [np.inf, -np.inf, np.nan, -0.0]
    values[1, :2] = [1e-40, -3e-39]  # subnormal
    center = rng.standard_normal((heads, 5)).astype(np.float32)
    center[0, 0] = np.inf
    center[-1, 1] = 1e-40
    v, c, rows = mx.array(values), mx.array(center), mx.array([7, 0, 3, 8, 2, 5])
    centered = (v.reshape(-1, heads, 5) - c).reshape(-1, 5)
    want = scatter_rows(_dense((9, 5), mx.float32), rows, centered)
    before = _counts()
    got = kv_rows.write_centered(kv_rows.write_rows, _dense((9, 5), mx.float32), rows, v, c)
    assert got is not None
    assert mx.array_equal(mx.view(got, mx.uint32), mx.view(want, mx.uint32)).item()
    assert _counts()[0] - before[0] == 1
    # another writer, dtype or shape: the caller subtracts with MLX's ops
    assert kv_rows.write_centered(scatter_rows, _dense((9, 5), mx.float32), rows, v, c) is None
    assert kv_rows.write_centered(kv_rows.write_rows, _dense((9, 5), mx.float16), rows,
                                  v.astype(mx.float16), c.astype(mx.float16)) is None


def _broadcast() -> mx.array:
    a = mx.broadcast_to(mx.arange(4, dtype=mx.float32), (6, 4))  # 4 floats of buffer, 24 elements
    mx.eval(a)
    return a


def test_strided_values_and_a_broadcast_array_are_read_through_their_strides() -> None:
    values = mx.arange(20, dtype=mx.float32).reshape(4, 5)[1:, ::-1][:, :4]  # (3, 4), strided
    rows = mx.array([5, 1, 2])
    want = np.tile(np.arange(4, dtype=np.float32), (6, 1))
    want[[5, 1, 2]] = np.array(values)
    before = _counts()
    got = kv_rows.write_rows(_broadcast(), rows, values)
    mx.eval(got)
    assert np.array_equal(np.array(got), want)
    assert _counts() == (before[0], before[1] + 1)  # expanded into a buffer of its own
    again = kv_rows.write_rows(got, mx.array([0]), mx.ones((1, 4)))
    del got
    mx.eval(again)
    assert _counts() == (before[0] + 1, before[1] + 1)  # then written in place
    want[0] = 1
    assert np.array_equal(np.array(again), want)


def test_a_write_is_in_place_once_earlier_readers_are_encoded() -> None:
    a = _dense((64, 8), mx.float32)
    reader = a[mx.array([3, 4])] * 2  # handed to MLX before the write: it runs first
    mx.async_eval(reader)
    before = _counts()
    a = kv_rows.write_rows(a, mx.array([3]), mx.full((1, 8), -1.0))
    mx.eval(a)
    assert _counts() == (before[0] + 1, before[1])
    assert np.array(reader)[0].tolist() != [-2.0] * 8  # the reader saw the old row
    assert np.array(a)[3].tolist() == [-1.0] * 8


def test_a_reader_not_yet_encoded_makes_the_write_copy() -> None:
    a = _dense((64, 8), mx.float32)
    old = np.array(a)
    reader = a[mx.array([3])]  # lazy: MLX could encode it after the write
    written = kv_rows.write_rows(a, mx.array([3]), mx.full((1, 8), -1.0))
    del a
    before = _counts()
    mx.eval(written)  # the write first, the reader after
    assert _counts() == (before[0], before[1] + 1)
    assert np.array_equal(np.array(reader), old[3:4])
    assert np.array(written)[3].tolist() == [-1.0] * 8


def test_a_kept_handle_keeps_its_rows() -> None:
    a = _dense((16, 4), mx.float32)
    kept = np.array(a)
    written = kv_rows.write_rows(a, mx.array([0]), mx.full((1, 4), 5.0))
    mx.eval(written)
    assert np.array_equal(np.array(a), kept)


def test_the_status_counts_the_writes() -> None:
    before = kv_rows.row_write_status()
    a = kv_rows.write_rows(_dense((8, 2), mx.float32), mx.array([1]), mx.ones((1, 2)))
    mx.eval(a)
    after = kv_rows.row_write_status()
    assert after["kv_row_writes_in_place"] == before["kv_row_writes_in_place"] + 1
    assert after["kv_row_writes_copied"] == before["kv_row_writes_copied"]


def test_other_shapes_fall_back_to_mlx_scatter() -> None:
    a = _dense((4, 3, 2), mx.float32)
    values = mx.ones((1, 3, 2))
    got = kv_rows.write_rows(a, mx.array([2]), values)
    assert mx.array_equal(got[2], values[0]).item()
    assert kv_rows.writer() is kv_rows.write_rows
    kv_rows.ENABLED = False
    assert kv_rows.writer() is scatter_rows


@pytest.mark.parametrize("compile_decode", ["off", "on"])
@pytest.mark.parametrize("kind", ["k8v4", "none"])
def test_engine_steps_write_in_place_with_the_same_tokens(kind: str, compile_decode: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows joining and leaving a decode batch, plain steps and compiled ones (the native write
    is a node of the compiled function too): the steps write the page arrays in place (K8V4:
    the tail's rows centered in the same node), and every step's logits and the greedy tokens
    are those of MLX's scatter (and subtraction), bit for bit."""
    # head dim 8 cannot take K8V4 pages (group size 32): its head-dim-32 twin does
    mdl, tok = load(str(shared_model("stories260K-hd32" if kind == "k8v4" else "stories260K")))[:2]
    results = {}
    for enabled in (False, True):
        kv_rows.ENABLED = enabled
        engine = make_engine(mdl, tok, kind=kind, prefix_cache=False,
                             compile_decode=compile_decode)
        assert (engine.kv.store.put_rows is kv_rows.write_rows) is enabled
        assert engine.kv.store.fmt.kind == kind
        before = _counts()
        results[enabled] = _run(engine, _prompts(tok, 8, False), 2, monkeypatch)
        assert compile_decode == "off" or any(engine.compiled.fns.values())
        in_place, copied = (a - b for a, b in zip(_counts(), before, strict=True))
        if enabled:  # copies: the first write of each array (a broadcast of zeros)
            assert in_place > 100 and copied <= 3 * 2 * engine.kv.store.fmt.num_layers
    (tokens, logits), (want_tokens, want_logits) = results[True], results[False]
    assert tokens == want_tokens
    assert len(logits) == len(want_logits)
    assert all(np.array_equal(a, b) for a, b in zip(logits, want_logits, strict=True))
