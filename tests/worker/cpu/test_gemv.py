"""worker/cpu/native's gemv primitive (worker/cpu/gemv.py): OpenBLAS sgemm's bits for few rows, and
per-row products whose rows do not depend on the rows beside them."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

import worker.cpu.gemv as cpu_gemv
from tests.conftest import shared_model
from tests.worker.cpu.native_helpers import bits, fma_cpu
from tests.worker.engine.test_engine import make_engine
from tests.worker.kv.test_dense import _prompts, _run
from worker.cpu.blas import set_blas_threads
from worker.engine.compile_mode import ROWS_ENV

QWEN3 = Path(__file__).resolve().parents[3] / "bench" / ".models" / "qwen3-4l-512"


def _openblas() -> Any:
    lib = ctypes.CDLL(None)
    return lib if hasattr(lib, "openblas_get_num_threads") else None


# the kernel copies the order of the preloaded OpenBLAS (tests run with it, see the Makefile)
# with one thread, the worker's policy for models below 1 GB; make install builds it on Linux
# x86-64, where (with AVX2 and FMA) it must load and match
pytestmark = pytest.mark.skipif(not fma_cpu() or _openblas() is None,
                                reason="built for x86-64 with FMA, with OpenBLAS preloaded")


@pytest.fixture(scope="module", autouse=True)
def one_blas_thread() -> Iterator[None]:
    before = int(_openblas().openblas_get_num_threads())
    set_blas_threads(1)
    yield
    set_blas_threads(before)


@pytest.fixture(scope="module")
def native() -> Any:
    module = cpu_gemv.native()
    assert module is not None, "worker/cpu/native/_gemv not built or not loadable (make install)"
    return module


# OpenBLAS core name -> the order measured on it, and the vendor of the processors measured
# (AMD's Zen 4 also reports Cooperlake: its sums are the "cooperlake" order's, found by detect)
KNOWN_CORES = {"Haswell": ("haswell", "GenuineIntel"), "Zen": ("haswell", "AuthenticAMD"),
               "SkylakeX": ("skylakex", "GenuineIntel"),
               "Cooperlake": ("skylakex", "GenuineIntel"),
               "SapphireRapids": ("skylakex", "GenuineIntel")}


def _vendor() -> str:
    """The CPU vendor /proc/cpuinfo names ("" where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith("vendor_id")), "")


@pytest.fixture(scope="module")
def order(native: Any) -> cpu_gemv.Order:
    """The preloaded OpenBLAS's order: one of ORDERS on the cores they were measured on."""
    lib = _openblas()
    lib.openblas_get_corename.restype = ctypes.c_char_p
    core = lib.openblas_get_corename().decode()
    found = cpu_gemv.detect(native)
    measured = KNOWN_CORES.get(core)
    if measured is None or measured[1] != _vendor():
        if found is None:
            pytest.skip(f"OpenBLAS core {core} on {_vendor() or 'this CPU'}: no known order "
                        "(the worker keeps MLX's matmul)")
        return found
    assert found is not None and found.name == measured[0], (core, found)
    return found


@pytest.fixture(scope="module")
def kernel(native: Any, order: cpu_gemv.Order) -> cpu_gemv.GemvState:
    """The native module's two products in the detected order."""
    return cpu_gemv.GemvState(native, order)


@pytest.mark.parametrize("k", [512, 1536, 1000, 641, 333, 17, 8, 7])
@pytest.mark.parametrize("n", [1, 7, 9, 24, 37, 512])
def test_products_are_mx_matmuls(native: Any, kernel: cpu_gemv.GemvState, k: int,
                                  n: int) -> None:
    """1-4 rows, K across GEMM_Q's blocking rules (one block, halves rounded up, q-sized
    blocks, tails), N across the 16/8/single-row groups; in 2-D, 3-D and compiled."""
    rng = np.random.default_rng(k * 1000 + n)
    w = mx.array(rng.standard_normal((n, k)).astype(np.float32))
    for m in range(1, 5):
        x = mx.array(rng.standard_normal((m, k)).astype(np.float32) * 10.0 ** rng.integers(-3, 4))
        want = bits(x @ w.T)
        assert np.array_equal(bits(kernel.matmul_t(x, w)), want), m
        x3 = x.reshape(m, 1, k)
        assert np.array_equal(bits(kernel.matmul_t(x3, w)).reshape(m, n), want)
        traced = mx.compile(lambda a, b: kernel.matmul_t(a, b))
        assert np.array_equal(bits(traced(x, w)), want)
    assert cpu_gemv.same_bits(native, [w], order=kernel.order)


@pytest.mark.parametrize("k", [512, 1536, 1000, 641, 333, 17, 8, 7])
@pytest.mark.parametrize("n", [1, 7, 9, 16, 24, 37, 512])
def test_per_row_products_are_each_row_alone(kernel: cpu_gemv.GemvState, k: int,
                                             n: int) -> None:
    """``matmul_rows`` on any number of rows gives each row the bits it gets alone, which are
    mx.matmul's for one row (N across the 16-row, 8-row and single-row weight groups; rows
    across the 4-row tiles and their remainders); in 2-D, 3-D and compiled."""
    rng = np.random.default_rng(k * 7 + n)
    w = mx.array(rng.standard_normal((n, k)).astype(np.float32))
    traced = mx.compile(lambda a, b: kernel.matmul_rows(a, b))
    for m in (1, 3, 4, 5, 8, 13, 32):
        x = rng.standard_normal((m, k)).astype(np.float32)
        x *= np.float32(10.0) ** rng.integers(-3, 4, (m, 1)).astype(np.float32)
        xs = mx.array(x)
        alone = np.concatenate([bits(xs[i:i + 1] @ w.T) for i in range(m)])
        assert np.array_equal(bits(kernel.matmul_rows(xs, w)), alone), m
        x3 = xs.reshape(m, 1, k)
        assert np.array_equal(bits(kernel.matmul_rows(x3, w)).reshape(m, n),
                              alone)
        assert np.array_equal(bits(traced(xs, w)), alone)


def test_per_row_products_take_strided_inputs(kernel: cpu_gemv.GemvState) -> None:
    """Strided inputs give the bits of the same values laid out contiguously (what a model's
    layers pass; OpenBLAS's SkylakeX cores choose their small kernel by the operands' layout,
    so MLX's own product of a transposed weight may sum in another order there)."""
    rng = np.random.default_rng(9)
    w = mx.array(rng.standard_normal((40, 300)).astype(np.float32))
    xt = mx.array(rng.standard_normal((300, 11)).astype(np.float32)).T  # (11, 300) transposed
    wt = mx.array(rng.standard_normal((300, 40)).astype(np.float32)).T
    for a, b in ((xt, w), (xt, wt), (xt[::2], w[::2])):
        ac, bc = mx.contiguous(a), mx.contiguous(b)
        alone = np.concatenate([bits(ac[i:i + 1] @ bc.T) for i in range(a.shape[0])])
        assert np.array_equal(bits(kernel.matmul_rows(a, b)), alone)


def test_the_tied_head_shape(native: Any, kernel: cpu_gemv.GemvState) -> None:
    """The Qwen3 bench model's LM head shape (32000 x 512) with its rows' magnitudes."""
    rng = np.random.default_rng(3)
    w = mx.array(rng.standard_normal((32000, 512)).astype(np.float32) * 0.02)
    assert cpu_gemv.same_bits(native, [w], rows=4, order=kernel.order, seed=5)
    x = mx.array(rng.standard_normal((cpu_gemv.MAX_ROWS, 512)).astype(np.float32))
    alone = np.concatenate([bits(x[i:i + 1] @ w.T) for i in range(x.shape[0])])
    assert np.array_equal(bits(kernel.matmul_rows(x, w)), alone)


@pytest.mark.parametrize("n", [8192, 8200, 12345])
def test_a_split_product_has_the_same_bits(kernel: cpu_gemv.GemvState, n: int) -> None:
    """A product of 2^22+ weight elements split between the stream's thread and the helper
    thread (threads=2) gives every row the bits it gets in one thread, whatever N's remainder
    after the halves (groups of 16 and 8 weight rows, single rows)."""
    rng = np.random.default_rng(n)
    w = mx.array(rng.standard_normal((n, 512)).astype(np.float32) * 0.05)
    for m in (1, 2, 3, 4, 7, 32):
        x = mx.array(rng.standard_normal((m, 512)).astype(np.float32))
        one = bits(kernel.matmul_rows(x, w, 1))
        for _ in range(3):
            assert np.array_equal(bits(kernel.matmul_rows(x, w, 2)), one), m
        alone = np.concatenate([bits(x[i:i + 1] @ w.T) for i in range(m)])
        assert np.array_equal(one, alone), m


def test_more_rows_other_dtypes_and_strided_inputs_are_mlx(kernel: cpu_gemv.GemvState) -> None:
    rng = np.random.default_rng(4)
    w = mx.array(rng.standard_normal((24, 40)).astype(np.float32))
    x = mx.array(rng.standard_normal((6, 40)).astype(np.float32))
    assert np.array_equal(bits(kernel.matmul_t(x, w)), bits(x @ w.T))  # 6 rows: MLX's
    half = kernel.matmul_t(x.astype(mx.float16), w.astype(mx.float16))
    assert half.dtype == mx.float16
    strided = mx.array(rng.standard_normal((40, 3)).astype(np.float32)).T  # (3, 40), not contiguous
    assert np.array_equal(bits(kernel.matmul_t(strided, w)),  # packed: the contiguous bits
                          bits(mx.contiguous(strided) @ w.T))


def test_inputs_go_in_as_they_are(kernel: cpu_gemv.GemvState, tmp_path: Path) -> None:
    """No Contiguous node per input (each costs a step a graph node and a task on the stream's
    thread); strided, broadcast and offset inputs are packed by the primitive, same bits."""
    rng = np.random.default_rng(8)
    w = mx.array(rng.standard_normal((37, 641)).astype(np.float32))
    x = mx.array(rng.standard_normal((3, 641)).astype(np.float32))
    y = kernel.matmul_t(x * 2, w)
    mx.export_to_dot(str(tmp_path / "g.dot"), y)
    graph = (tmp_path / "g.dot").read_text()
    assert "Gemv" in graph and "Contiguous" not in graph
    xt = mx.array(rng.standard_normal((641, 4)).astype(np.float32)).T  # (4, 641) transposed
    wt = mx.array(rng.standard_normal((641, 37)).astype(np.float32)).T  # (37, 641) transposed
    xb = mx.broadcast_to(x[1:2], (2, 1, 641))  # stride 0 rows
    xs = mx.array(rng.standard_normal((4, 2, 641)).astype(np.float32))[1:, 1]  # an offset, strided
    for a, b in ((xt, w), (x, wt), (xt, wt), (xb, w), (xs, wt), (x[:, ::-1], w[::2])):
        want = bits(mx.contiguous(a) @ mx.contiguous(b).T)  # see the strided per-row test
        assert np.array_equal(bits(kernel.matmul_t(a, b)), want)
        traced = mx.compile(lambda u, v: kernel.matmul_t(u, v))
        assert np.array_equal(bits(traced(a, b)), want)


def test_the_check_refuses_another_order(native: Any, order: cpu_gemv.Order) -> None:
    """K blocks other than the OpenBLAS core's GEMM_Q, or the other core's order, sum
    differently: the check says so (a model is then left as it was, next test). The shapes take
    both of OpenBLAS's paths (SkylakeX cores sum small products in another kernel)."""
    rng = np.random.default_rng(6)
    large = mx.array(rng.standard_normal((1536, 1536)).astype(np.float32))
    small = mx.array(rng.standard_normal((64, 1536)).astype(np.float32))
    assert cpu_gemv.same_bits(native, [large, small], order=order)
    assert not cpu_gemv.same_bits(native, [large], order=order._replace(q=256))
    assert not cpu_gemv.same_bits(native, [large], order=order._replace(q=10_000))  # one chain
    for other in cpu_gemv.ORDERS:
        if other.name != order.name:
            assert not cpu_gemv.same_bits(native, [large, small], order=other)
    assert cpu_gemv.order_for(native, [large, small]) == order


def test_a_failed_check_leaves_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    nn: Any = cpu_gemv.nn
    model = nn.Sequential(nn.Linear(1536, 64, bias=False), nn.Linear(64, 8))
    monkeypatch.setattr(cpu_gemv, "same_bits", lambda module, weights, **kw: False)
    assert cpu_gemv.wrap_gemv(model) is None
    assert type(model.layers[0]) is nn.Linear
    monkeypatch.undo()
    state = cpu_gemv.wrap_gemv(model)
    assert state is not None
    assert type(model.layers[0]) is cpu_gemv.GemvLinear
    assert type(model.layers[1]) is nn.Linear  # a bias: MLX's addmm
    x = mx.ones((1, 1536))
    with cpu_gemv.running(state):
        model(x)
    model(x)  # outside our forwards: MLX's matmul
    assert state.calls == 1


def _qwen3() -> Path:
    """The Qwen3 bench model, built (deterministically, ~4 s) when a clean checkout lacks it."""
    from bench.build_qwen3_model import build

    return build(QWEN3, quiet=True)


MODELS = {"stories260K": lambda: shared_model("stories260K"), "qwen3": _qwen3}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    path = MODELS[request.param]()
    if not (path / "config.json").exists():
        pytest.skip(f"{path} is absent (the shared models sit in ../shared beside the checkout)")
    return load(str(path))[:2]


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 8])
@pytest.mark.parametrize("compiled", [0, 8])
def test_engine_tokens_are_the_same(native: Any, order: cpu_gemv.Order, model: tuple[Any, Any],
                                    rows: int, compiled: int,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy tokens are the same with and without the kernel, every sampled logits array
    (prefill and decode, plain and compiled steps, rows joining and leaving) agrees to float
    rounding, and the kernel ran. Not the same bits: products of 4-32 rows with large weights
    (prompts, batches) sum each row as alone, where OpenBLAS sums them in 4-row tiles (1-3
    rows: the same bits, test_products_are_mx_matmuls)."""
    mdl, tok = model
    monkeypatch.setenv(ROWS_ENV, str(compiled))
    prompts = _prompts(tok, rows, False)
    results = []
    for enabled in (False, True):
        monkeypatch.setattr(cpu_gemv, "ENABLED", enabled)
        engine = make_engine(mdl, tok, page_size=16, max_batch=rows, compile_decode="auto")
        state = engine.executor.forward.gemv
        assert state is not None, "the check refused the kernel on this model"
        before = state.calls
        results.append(_run(engine, prompts, rows // 4, monkeypatch))
        assert (state.calls > before) == enabled
    (tokens_off, logits_off), (tokens_on, logits_on) = results
    assert tokens_on == tokens_off
    assert len(logits_on) == len(logits_off) > 0
    for a, b in zip(logits_on, logits_off, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))


def test_which_products_go_to_the_kernel() -> None:
    """Every float32 product without bias (a Linear, a tied embedding's as_linear): 1-3 rows;
    up to MAX_ROWS rows when its weight has MIN_WEIGHTS_MANY_ROWS elements or more (smaller
    weights: sgemm as fast). More rows (prefill chunks): never."""
    nn: Any = cpu_gemv.nn

    class Model(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(512, 128, bias=False)
            self.lm_head = nn.Linear(512, 128, bias=False)
            self.embed = nn.Embedding(128, 512)
            self.small = nn.Embedding(64, 64)

    model = Model()
    assert model.lm_head.weight.size >= cpu_gemv.MIN_WEIGHTS_MANY_ROWS > model.small.weight.size
    state = cpu_gemv.wrap_gemv(model)
    assert state is not None
    with cpu_gemv.running(state):
        for rows, want in ((1, 4), (3, 4), (4, 3), (cpu_gemv.MAX_ROWS, 3),
                           (cpu_gemv.MAX_ROWS + 1, 0)):
            before = state.calls
            x = mx.ones((rows, 512))
            mx.eval(model.layer(x), model.lm_head(x), model.embed.as_linear(x),
                    model.small.as_linear(mx.ones((rows, 64))))
            assert state.calls - before == want, rows


def test_a_row_setting_that_is_not_a_number_keeps_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAPID_MLX_GEMV_MAX_ROWS", "lots")
    assert cpu_gemv._rows_setting("RAPID_MLX_GEMV_MAX_ROWS", 32) == 32
    monkeypatch.setenv("RAPID_MLX_GEMV_MAX_ROWS", "8")
    assert cpu_gemv._rows_setting("RAPID_MLX_GEMV_MAX_ROWS", 32) == 8
