"""bench/roofline.py's logic: which matrices a step multiplies by, the plain attention, verdicts."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models import qwen3

from bench.roofline import (
    SIDES,
    above,
    blas_floor,
    floor_step,
    floors,
    model_step,
    plain_attention,
    report,
    roof_ms,
    run_side,
    step_bytes_flops,
    verdict,
    weight_matrices,
)


def tiny(tied: bool) -> Any:
    """A 2-layer random Qwen3 (hidden 32, 4 heads, 2 KV heads, head_dim 8, vocab 64)."""
    args = qwen3.ModelArgs(model_type="qwen3", hidden_size=32, num_hidden_layers=2,
                           intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=8, rms_norm_eps=1e-6, vocab_size=64, max_position_embeddings=128,
                           rope_theta=10000.0, tie_word_embeddings=tied)
    model = qwen3.Model(args)
    mx.eval(model.parameters())
    return model


@pytest.mark.parametrize("tied", [True, False])
def test_weight_matrices_are_every_linear_and_the_head_once(tied: bool) -> None:
    model = tiny(tied)
    shapes = sorted(tuple(m.weight.shape) for m in weight_matrices(model))
    per_layer = [(32, 32), (16, 32), (16, 32), (32, 32), (48, 32), (48, 32), (32, 48)]  # q k v o g u d
    assert shapes == sorted(per_layer * 2 + [(64, 32)])
    nbytes, flops = step_bytes_flops(model, rows=3)
    params = sum(o * i for o, i in shapes)
    assert (nbytes, flops) == (4 * params, 2 * 3 * params)


def test_plain_attention_matches_the_fused_kernel_with_grouped_heads() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (mx.array(rng.standard_normal(s).astype(np.float32))
               for s in ((3, 4, 1, 8), (3, 2, 11, 8), (3, 2, 11, 8)))
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=8 ** -0.5)
    got = plain_attention(q, k, v, scale=8 ** -0.5)
    assert got.shape == want.shape
    assert np.allclose(np.array(got), np.array(want), atol=1e-5)


@pytest.mark.parametrize("attention", ["", "plain", "sdpa"])
def test_floor_step_runs(attention: str) -> None:
    floor_step(tiny(True), rows=2, context=5, attention=attention)()


def test_model_step_decodes_every_row() -> None:
    model_step(tiny(True), rows=3)()


def test_verdicts_and_fractions() -> None:
    assert verdict(13.0, 10.0, 1.3) == {"bar": 1.3, "most": 1.3, "reachable": True}
    assert verdict(14.0, 10.0, 1.5)["reachable"] is False
    assert above(10.0, 7.5) == 0.25 and above(5.0, 7.5) == 0.0
    cell = {"weight_bytes": 2_000_000, "flops": 4_000_000_000}
    assert roof_ms(cell, {"read_gbs": 10.0, "gflops": 100.0}) == pytest.approx(40.0)  # compute-bound
    assert roof_ms(cell, {"read_gbs": 0.01, "gflops": 100.0}) == pytest.approx(200.0)  # bytes-bound


def test_report_renders_every_cell() -> None:
    sides = {s: {"wall": 10.0 + i, "cpu": 5.0 + i} for i, s in enumerate(SIDES)}
    cell = {"model": "m", "rows": 8, "context": 88, "weight_bytes": 1 << 20, "flops": 1 << 24, **sides}
    text = report({"machine": {"copy_gbs": 10.0, "read_gbs": 8.0, "gflops": 50.0, "op_us": 4.0},
                   "blas_threads": 1, "cells": [cell, {**cell, "rows": 1}]})
    assert "| m | 8 | 1.5x |" in text and "| m | 1 | 1.3x |" in text


def test_blas_floor_computes_the_products() -> None:
    model = tiny(True)
    for rows in (1, 3):
        ys = blas_floor(model, rows)()
        mats = weight_matrices(model)
        rng = np.random.default_rng(0)
        for m, y in zip(mats, ys, strict=True):
            w = np.array(m.weight)
            x = rng.standard_normal((rows, w.shape[1]), dtype=np.float32)
            assert np.allclose(y, w @ x.T, atol=1e-4)


def test_machine_floor_takes_the_cheaper_products() -> None:
    cell = {"matmuls": {"wall": 20.0}, "+attention": {"wall": 22.0}, "blas": {"wall": 11.0}}
    assert floors(cell, "wall") == (22.0, 13.0)
    cell["blas"]["wall"] = 30.0
    assert floors(cell, "wall") == (22.0, 22.0)


def test_blas_side_stands_aside_for_other_dtypes() -> None:
    model = tiny(True)
    model.set_dtype(mx.float16)
    assert run_side("blas", model, None, rows=1, context=4, steps=1) == {
        "wall": float("inf"), "cpu": float("inf")}
