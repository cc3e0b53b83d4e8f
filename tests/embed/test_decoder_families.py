"""mlx-embeddings' Qwen3 and Gemma3 embedding classes behind our runner, on tiny random weights
(the real Qwen3-Embedding and EmbeddingGemma weights cannot be had from a package registry):
they load, pool as their family does, normalize, and padding does not change a row."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from protocol import messages as m
from worker.kinds.detect import detect_kind
from worker.kinds.embed.runner import load_runner

QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "vocab_size": 300, "max_position_embeddings": 512,
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True}
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 64, "num_hidden_layers": 2,
          "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
          "head_dim": 16, "vocab_size": 300, "max_position_embeddings": 512,
          "rms_norm_eps": 1e-6, "sliding_window": 64, "sliding_window_pattern": 2,
          "query_pre_attn_scalar": 16, "rope_theta": 10000.0, "rope_local_base_freq": 10000.0}


def _build(tmp: Path, config: dict[str, Any], module: str) -> Path:
    import importlib

    arch = importlib.import_module(f"mlx_embeddings.models.{module}")
    mx.random.seed(0)
    net = arch.Model(arch.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(net.parameters()))
    folder = tmp / f"tiny-{module}-embedding"
    folder.mkdir()
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    (folder / "config.json").write_text(json.dumps(config))
    src = Path(__file__).resolve().parents[2] / "worker" / "model" / "demo" / "weights"
    for name in ("tokenizer.json", "tokenizer_config.json"):  # a small byte-level BPE
        if (src / name).exists():
            shutil.copy(src / name, folder / name)
    return folder


@pytest.mark.parametrize(("config", "module", "pooling"),
                         [(QWEN3, "qwen3", "lasttoken"), (GEMMA3, "gemma3_text", "mean")])
def test_family_loads_pools_and_ignores_padding(tmp_path: Path, config: dict[str, Any],
                                                module: str, pooling: str) -> None:
    folder = _build(tmp_path, config, module)
    if not (folder / "tokenizer.json").exists():
        pytest.skip("the demo model's tokenizer is not in this checkout")
    assert detect_kind(folder, config) == "embed"  # no ST files: "embedding" in the name
    r = load_runner("tiny", folder, config, argparse.Namespace(max_batch=8, max_waiting=8))
    assert r.model.cfg.pooling == pooling and r.model.cfg.normalize  # type: ignore[attr-defined]
    assert r.facts.embedding_dimensions == 64
    # Qwen3-Embedding truncates to any size from 32; EmbeddingGemma's sizes (768..128) exceed 64
    assert ("dimensions" in r.facts.capabilities) == (module == "qwen3")
    short, long = [5, 6, 7], [5, 6, 7, 8, 9, 10, 11, 12]
    r.add(m.Embed(request_id="both", inputs=[short, long]))
    r.add(m.Embed(request_id="dims", inputs=[short], dimensions=32 if module == "qwen3" else 0))
    outs = {o.request_id: o for o in _drain(r)}
    r.add(m.Embed(request_id="alone", inputs=[short]))
    alone = _drain(r)[0]
    a = np.frombuffer(outs["both"].embeddings[0], "<f4")
    b = np.frombuffer(alone.embeddings[0], "<f4")
    assert a.shape == (64,) and abs(np.linalg.norm(a) - 1) < 1e-4
    assert np.allclose(a, b, atol=1e-4)  # the padded row equals the row alone
    d = np.frombuffer(outs["dims"].embeddings[0], "<f4")
    if module == "qwen3":
        assert d.shape == (32,) and abs(np.linalg.norm(d) - 1) < 1e-4
        assert np.allclose(d, b[:32] / np.linalg.norm(b[:32]), atol=1e-5)


def _drain(r: Any) -> list[m.RequestOutput]:
    outs: list[m.RequestOutput] = []
    while r.has_work:
        outs += r.step()
    return outs
