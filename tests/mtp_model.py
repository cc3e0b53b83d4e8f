"""A tiny random-weight GLM-4.5 (glm4_moe) checkpoint with one next-n (MTP) layer, on the demo
model's tokenizer, laid out like the Hugging Face original: experts unstacked, two shards and an
index, the next-n layer as ``model.layers.{num_hidden_layers}`` in the second shard."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.random_model import FILES
from worker.model.embedded import embedded_model_path

CONFIG: dict[str, Any] = {
    "model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "vocab_size": 4096,
    "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
    "max_position_embeddings": 2048, "norm_topk_prob": True, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "n_group": 1, "topk_group": 1,
    "n_shared_experts": 1, "n_routed_experts": 4, "routed_scaling_factor": 1.0,
    "num_experts_per_tok": 2, "first_k_dense_replace": 1, "num_hidden_layers": 2,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None, "use_qk_norm": True,
    "tie_word_embeddings": False, "attention_bias": True, "partial_rotary_factor": 0.5,
    "num_nextn_predict_layers": 1, "eos_token_id": 2, "torch_dtype": "float32",
}
QUIET = 0.05  # agreeing models: the layers' outputs scaled by this (the model is almost a bigram)


def _unstack(weights: dict[str, Any], prefix: str) -> dict[str, Any]:
    """mlx-lm's stacked experts back into the checkpoint's per-expert names."""
    out = {}
    for k, v in weights.items():
        if ".mlp.switch_mlp." in k:
            head, tail = k.split(".mlp.switch_mlp.")
            for e in range(v.shape[0]):
                out[f"{prefix}{head}.mlp.experts.{e}.{tail}"] = v[e]
        else:
            out[prefix + k] = v
    return out


def glm_mtp_model(dest: Path, seed: int = 5, agree: bool = False, nextn: bool = True,
                  vocab: int | None = None) -> Path:
    """Write the checkpoint to DEST. AGREE: quiet layers and a next-n layer that reads only the
    next token's embedding, so its proposals mostly match the target's greedy choices.
    NEXTN False: the same model without the next-n layer (like a quantized conversion).
    VOCAB: a word-level tokenizer of that many words (w0..) instead of the demo's."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import glm4_moe

    src = embedded_model_path()
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if name != "config.json" and (src / name).exists():
            shutil.copy(src / name, dest / name)
    config = dict(CONFIG, num_nextn_predict_layers=1 if nextn else 0)
    if vocab is not None:
        config.update(vocab_size=vocab, eos_token_id=vocab - 1)
        _word_tokenizer(dest, vocab)
    (dest / "config.json").write_text(json.dumps(config, indent=1))
    args = glm4_moe.ModelArgs.from_dict(config)
    mx.random.seed(seed)
    model = glm4_moe.Model(args)
    layer = glm4_moe.DecoderLayer(args, args.num_hidden_layers)
    eh_proj = mx.random.normal((args.hidden_size, 2 * args.hidden_size)) * args.hidden_size ** -0.5
    if agree:
        for block in [*model.model.layers, layer]:
            _quiet(block)
        eh_proj = mx.concatenate([mx.eye(args.hidden_size), mx.zeros((args.hidden_size,) * 2)], 1)
    main = _unstack(dict(tree_flatten(model.parameters())), "")
    n = f"model.layers.{args.num_hidden_layers}."
    extra = _unstack(dict(tree_flatten(layer.parameters())), n)
    ones = mx.ones((args.hidden_size,))
    extra.update({n + "enorm.weight": ones, n + "hnorm.weight": ones, n + "eh_proj.weight": eh_proj,
                  n + "shared_head.norm.weight": ones,
                  n + "shared_head.head.weight": main["lm_head.weight"],
                  n + "embed_tokens.weight": main["model.embed_tokens.weight"]})
    shards = {"model-00001-of-00002.safetensors": main}
    if nextn:
        shards["model-00002-of-00002.safetensors"] = extra
    for name, weights in shards.items():
        mx.save_safetensors(str(dest / name), weights)
    weight_map = {k: name for name, w in shards.items() for k in w}
    (dest / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return dest


def _quiet(block: Any) -> None:
    """Scale what BLOCK adds to the residual stream by QUIET."""
    block.self_attn.o_proj.weight = block.self_attn.o_proj.weight * QUIET
    mlp = block.mlp
    if hasattr(mlp, "switch_mlp"):
        mlp.switch_mlp.down_proj.weight = mlp.switch_mlp.down_proj.weight * QUIET
        mlp.shared_experts.down_proj.weight = mlp.shared_experts.down_proj.weight * QUIET
    else:
        mlp.down_proj.weight = mlp.down_proj.weight * QUIET


def _word_tokenizer(dest: Path, vocab: int) -> None:
    """A word-level tokenizer of VOCAB words w0.. (the last one is EOS)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    for name in FILES:
        (dest / name).unlink(missing_ok=True)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # type: ignore[assignment]
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": f"w{vocab - 1}"}))
