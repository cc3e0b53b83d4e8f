"""MLA pages: keys (the compressed latent) and values (the RoPE part) of different widths.

The tiny models come from tools/tiny_models (DeepSeek-V3's and GLM-4.7-Flash's structure).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

from tools.tiny_models.build import build
from tools.tiny_models.configs import config_for
from worker.engine.attention import install
from worker.kv.dense import DenseCache
from worker.kv.paged_batch import LayerKV, PagedBatch
from worker.kv.paged_kv import KVFormat, PagedKVStore
from worker.kv.setup import MLA_REASON, UnsupportedModel, plan_kv, probe_kv_shape, probe_layers


@pytest.fixture(scope="module", params=["deepseek_v3", "glm4_moe_lite"])
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[str, Any]:
    path = build(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, load(str(path))[0]


def test_the_probe_accepts_mla_widths_and_the_plan_keeps_full_precision(tiny: tuple[str, Any]
                                                                        ) -> None:
    name, model = tiny
    cfg = config_for(name)
    found = probe_layers(model)
    dim, v_dim = found.head_dim, found.value_dim
    assert (found.attention_layers, found.kv_heads, dim, v_dim) == (cfg["num_hidden_layers"], 1, cfg["kv_lora_rank"],
                                           cfg["qk_rope_head_dim"])
    with pytest.raises(UnsupportedModel, match="different|width"):
        probe_kv_shape(model)  # callers that need one width (a draft model) refuse it
    plan = plan_kv(model, mx.float32, kind="k8v4", memory="4MiB", page_size=8, group_size=32,
                   max_batch=4, context_length=256)
    assert (plan.kind, plan.reason) == ("none", MLA_REASON)
    fmt = plan.store.fmt
    assert fmt.split and (fmt.head_dim, fmt.v_dim) == (dim, v_dim)
    assert fmt.bytes_per_token_per_layer() == (dim + v_dim) * 4
    store = plan.store
    assert store.k[0][0].shape[-1] == dim and store.v[0][0].shape[-1] == v_dim
    assert store.nbytes() == fmt.bytes_per_page() * store.num_pages


class _Layer:
    def __init__(self, width: int) -> None:
        self.width = width


class _Mismatched:
    """Two layers writing keys of different widths: a model the engine must refuse."""

    layers = [_Layer(32), _Layer(64)]

    def __call__(self, tokens: mx.array, cache: list[Any]) -> mx.array:
        for layer, c in zip(self.layers, cache, strict=True):
            k = mx.zeros((1, 1, 1, layer.width))
            c.update_and_fetch(k, mx.zeros((1, 1, 1, 16)))
        return mx.zeros((1, 1, 4))


def test_the_probe_refuses_layers_of_differing_shapes() -> None:
    with pytest.raises(UnsupportedModel, match="differing KV shapes"):
        probe_layers(_Mismatched())


def test_k8v4_pages_need_one_width() -> None:
    fmt = KVFormat(2, 1, 64, 8, mx.float32, "k8v4", 32, value_dim=32)
    with pytest.raises(ValueError, match="one width"):
        PagedKVStore(fmt, 4, tail_pages=2)


@pytest.mark.parametrize("dense", [False, True])
def test_views_hand_back_exact_arrays_and_no_cascade(dense: bool) -> None:
    """A batch of rows sharing their first pages: the MLA view writes the latent and RoPE part
    and returns every row's whole history as arrays (no LayerKV: the model computes attention
    itself), bit for bit what was written; the shared pages are not cascaded."""
    install()
    p, dim, v_dim, rows = 4, 64, 32, 4
    fmt = KVFormat(1, 1, dim, p, mx.float32, "none", 32, value_dim=v_dim)
    store = PagedKVStore(fmt, 16, spare_bytes=1 << 20)
    cache = DenseCache(store) if dense else None
    rng = np.random.default_rng(0)
    hist = [(rng.standard_normal((9, dim)).astype(np.float32),
             rng.standard_normal((9, v_dim)).astype(np.float32)) for _ in range(rows)]
    for b in range(rows):  # rows share pages 1 and 2 (a common prefix), then their own
        hist[b] = (np.concatenate([hist[0][0][:8], hist[b][0][8:]]),
                   np.concatenate([hist[0][1][:8], hist[b][1][8:]]))
    tables = [[1, 2, 3 + b] for b in range(rows)]
    prefill = PagedBatch(store, tables, [0] * rows, [8] * rows, mx.float32, cascade=True,
                         dense=cache)
    assert prefill.shared == 0
    k = mx.array(np.stack([h[0][:8] for h in hist]))[:, None]
    v = mx.array(np.stack([h[1][:8] for h in hist]))[:, None]
    got_k, got_v = prefill.views()[0].update_and_fetch(k, v)
    assert not isinstance(got_k, LayerKV) and got_k.shape == (rows, 1, 8, dim)
    mx.eval(store.arrays())
    starts = [8] * rows
    step = PagedBatch(store, tables, starts, [1] * rows, mx.float32, cascade=True, dense=cache)
    assert step.shared == 0 and (step.dense is not None) == dense
    k = mx.array(np.stack([h[0][8:9] for h in hist]))[:, None]
    v = mx.array(np.stack([h[1][8:9] for h in hist]))[:, None]
    got_k, got_v = step.views()[0].update_and_fetch(k, v)
    assert isinstance(got_k, mx.array) and got_v.shape == (rows, 1, 9, v_dim)
    np.testing.assert_array_equal(np.array(got_k[:, 0]), np.stack([h[0] for h in hist]))
    np.testing.assert_array_equal(np.array(got_v[:, 0]), np.stack([h[1] for h in hist]))
    if cache is not None:
        assert cache.nbytes == cache.cap * rows * (dim + v_dim) * 4


def test_tiny_configs_keep_the_real_structure() -> None:
    ds = config_for("deepseek_v3")
    assert ds["topk_method"] == "noaux_tc" and ds["n_group"] > ds["topk_group"] > 1
    assert ds["n_routed_experts"] % ds["n_group"] == 0
    assert 0 < ds["first_k_dense_replace"] < ds["num_hidden_layers"]
    assert ds["rope_scaling"]["type"] == "yarn"
    for cfg in (ds, config_for("glm4_moe_lite")):
        assert cfg["kv_lora_rank"] % 32 == 0 and cfg["qk_rope_head_dim"] % 32 == 0
        assert cfg["q_lora_rank"] and cfg["v_head_dim"] and cfg["n_shared_experts"] == 1


def test_built_models_route_tokens_to_experts(tmp_path: Path) -> None:
    """DeepSeek-V3's gate starts at zero in mlx-lm; the builder makes it random."""
    model = load(str(build("deepseek_v3", tmp_path / "m")))[0]
    gate = model.model.layers[1].mlp.gate.weight
    assert float(mx.abs(gate).max()) > 0
