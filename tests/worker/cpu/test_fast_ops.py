"""RoPE and RMSNorm with fewer CPU kernels (worker/cpu/fast_ops.py) give mx.fast's bits."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm import load

import worker.cpu.fast_ops as fast_ops
import worker.engine.executor as eng
import worker.kv.dense as kv_dense
from protocol.messages import SamplingParams
from tests.conftest import shared_model
from tests.worker.engine.test_engine import make_engine
from tests.worker.kv.test_dense import _prompts
from tests.worker.kv.test_dense import _run as run_rows
from worker.cpu.fast_ops import FastOps, FusedRMSNorm, TableRoPE, wrap_fast_ops
from worker.engine.compile_mode import ROWS_ENV

DTYPES = [mx.float32, mx.bfloat16, mx.float16]


def _rope(dims: int, base: float, ops: FastOps) -> TableRoPE:
    rope = nn.RoPE(dims, base=base)
    rope.__class__ = TableRoPE
    rope._fast_ops = ops
    return rope


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "heads", "steps", "dims", "width"), [
    (32, 8, 1, 8, 8), (32, 4, 1, 8, 8), (8, 8, 1, 64, 64), (3, 4, 5, 32, 64), (1, 2, 1, 8, 8),
    (1, 2, 9, 128, 128)])
def test_rope_is_mx_fast_rope(dtype: mx.Dtype, rows: int, heads: int, steps: int, dims: int,
                              width: int) -> None:
    """Every call of a forward (q and k of every layer) rotates as mx.fast.rope does."""
    rng = np.random.default_rng(rows * 100 + steps)
    ops = FastOps()
    for base in (10000.0, 1e6, 500000.0):
        rope = _rope(dims, base, ops)
        for _ in range(8):
            offset = mx.array(rng.integers(0, 40_000, rows).astype(np.int32))
            ops.use(offset)
            for h in (heads, 2 * heads):  # the queries' heads, then the keys': one set of tables
                x = mx.array(rng.standard_normal((rows, h, steps, width)).astype(np.float32)
                             * 8).astype(dtype)
                want = mx.fast.rope(x, dims, traditional=False, base=base, scale=1.0,
                                    offset=offset)
                got = rope(x, offset=offset)
                assert got.dtype == want.dtype
                assert np.array_equal(np.array(got.astype(mx.float32)),
                                      np.array(want.astype(mx.float32)))
            assert len(ops.made) == 1
            ops.use(None, active=False)


def test_rope_outside_a_forward_is_mx_fast_rope() -> None:
    """Other offsets (an int, another array) and no forward: mx.fast.rope itself."""
    ops = FastOps()
    rope = _rope(8, 10000.0, ops)
    x = mx.ones((4, 2, 1, 8))
    offset = mx.array([1, 2, 3, 4])
    for active, given in ((False, offset), (True, 3), (True, mx.array([1, 2, 3, 4]))):
        ops.use(offset, active=active)
        rope(x, offset=given)
        assert ops.made == {}


@pytest.mark.parametrize("eps", [1e-5, 1e-6])
@pytest.mark.parametrize("shape", [(32, 1, 64), (8, 1, 512), (1, 7, 64), (3, 2, 48), (4, 1, 896),
                                   (2, 3, 3584), (5, 1, 2560), (1, 1, 5120), (2, 1, 4, 64),
                                   (6, 64)])
def test_rms_norm_is_mx_fast_rms_norm(eps: float, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape) * shape[-1])
    norm = nn.RMSNorm(shape[-1], eps=eps)
    norm.__class__ = FusedRMSNorm
    norm._fast_ops = FastOps()
    norm._fast_ops.use(0)
    for scale in (1e-3, 1.0, 300.0):
        norm.weight = mx.array(rng.standard_normal(shape[-1]).astype(np.float32))
        x = mx.array(rng.standard_normal(shape).astype(np.float32) * scale)
        want = mx.fast.rms_norm(x, norm.weight, eps)
        assert np.array_equal(np.array(norm(x)), np.array(want))
        half = x.astype(mx.bfloat16)  # other dtypes: mx.fast itself
        assert np.array_equal(np.array(norm(half).astype(mx.float32)),
                              np.array(mx.fast.rms_norm(half, norm.weight, eps).astype(mx.float32)))


def test_wrapping_keeps_the_model() -> None:
    """Same parameters under the same names; a second wrap reuses the first one's state."""
    model, _ = load(str(shared_model("stories260K")))[:2]
    before = dict(nn.utils.tree_flatten(model.parameters()))
    ops = wrap_fast_ops(model)
    assert ops is not None and wrap_fast_ops(model) is ops
    after = dict(nn.utils.tree_flatten(model.parameters()))
    assert before.keys() == after.keys()
    assert all(before[k] is after[k] for k in before)
    kinds = {type(m) for m in model.modules()}
    assert TableRoPE in kinds and FusedRMSNorm in kinds
    assert nn.RoPE not in kinds and nn.RMSNorm not in kinds


@pytest.fixture(scope="module", params=["stories260K", "stories260K-hd32"])
def model(request: pytest.FixtureRequest) -> tuple[str, Any, Any]:
    mdl, tok = load(str(shared_model(request.param)))[:2]
    return ("none" if request.param == "stories260K" else "k8v4"), mdl, tok


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 8, 32])
@pytest.mark.parametrize("compiled", [0, 8])
def test_engine_logits_are_mx_fasts(model: tuple[str, Any, Any], rows: int, compiled: int,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy tokens and every sampled logits array, bit for bit, with and without: prefill
    chunks, plain and compiled decode steps (K8V4 and full precision), rows joining and
    leaving."""
    kind, mdl, tok = model
    monkeypatch.setenv(ROWS_ENV, str(compiled))
    monkeypatch.setattr(kv_dense, "MIN_ROWS", 1)
    prompts = _prompts(tok, rows, shared=False)
    results = []
    for enabled in (False, True):
        monkeypatch.setattr(fast_ops, "ENABLED", enabled)
        engine = make_engine(mdl, tok, kind=kind, memory="256MiB", page_size=8, max_batch=rows,
                             compile_decode="auto")
        assert engine.kv.store.fmt.kind == kind and engine.executor.forward.fast_ops is not None
        results.append(run_rows(engine, prompts, rows // 4, monkeypatch))
    (tokens_off, logits_off), (tokens_on, logits_on) = results
    assert tokens_on == tokens_off
    assert len(logits_on) == len(logits_off)
    for a, b in zip(logits_on, logits_off, strict=True):
        assert a.shape == b.shape and np.array_equal(a, b)


def test_a_decode_step_computes_its_rope_tables_once(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph of a plain 32-row stories260K decode step has one cos (it had one per rope
    call: ten) and no separate rsqrt (the norms' tails are fused)."""
    mdl, tok = load(str(shared_model("stories260K")))[:2]
    engine = make_engine(mdl, tok, max_batch=32, compile_decode="off")
    graphs: list[str] = []
    original = mx.async_eval

    def recording(*arrays: Any) -> None:
        dot = tmp_path / f"step{len(graphs)}.dot"
        mx.export_to_dot(str(dot), *[a for a in arrays if isinstance(a, mx.array)])
        graphs.append(dot.read_text())
        original(*arrays)

    monkeypatch.setattr(eng.mx, "async_eval", recording)
    for rid, ids in _prompts(tok, 32, shared=False).items():
        engine.add(rid, ids, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    while engine.has_work:
        engine.step()
    steps = [ops for ops in (re.findall(r'label ="(\w+)"', g) for g in graphs) if "Matmul" in ops]
    assert engine.stats.overlapped_steps > 0 and steps
    for ops in steps:  # a decode forward's graph
        assert ops.count("Cos") == 1 and ops.count("Sin") == 1
        assert "Rsqrt" not in ops


def test_larger_models_keep_mx_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above the small-model gate (kv_dense.MAX_WEIGHT_BYTES) nothing is wrapped: on the Qwen3
    bench model the fused ops made plain steps copy the KV pool (measured)."""
    mdl, tok = load(str(shared_model("stories260K")))[:2]
    monkeypatch.setattr(kv_dense, "MAX_WEIGHT_BYTES", 0)
    engine = make_engine(mdl, tok, max_batch=8)
    assert engine.executor.forward.fast_ops is None
    kinds = {type(m) for m in mdl.modules()}
    assert TableRoPE not in kinds and FusedRMSNorm not in kinds
