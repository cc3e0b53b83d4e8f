"""GGUF metadata as an mlx-lm config.json, for the architectures mapped here (llama, qwen2,
qwen3); rope scaling is carried over when the file states it."""

from __future__ import annotations

from typing import Any

from worker.model.gguf.reader import GGUFFile

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM"}


class Unsupported(Exception):
    """The file holds something this converter does not map (architecture, tokenizer, tensor)."""


def model_config(gguf: GGUFFile, quantization: dict[str, Any] | None) -> dict[str, Any]:
    """config.json for GGUF's architecture; QUANTIZATION is mlx-lm's per-module map (or None)."""
    arch = gguf.architecture
    if arch not in ARCHITECTURES:
        raise Unsupported(f"architecture '{arch}' (mapped: {', '.join(sorted(ARCHITECTURES))})")
    if "rope_freqs.weight" in gguf.tensors:
        raise Unsupported("a rope_freqs tensor (Llama 3.1-style rope scaling)")
    heads = int(gguf.arch("attention.head_count"))
    hidden = int(gguf.arch("embedding_length"))
    embed = gguf.tensors["token_embd.weight"]
    config: dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch]],
        "model_type": arch,
        "hidden_size": hidden,
        "intermediate_size": int(gguf.arch("feed_forward_length")),
        "num_hidden_layers": int(gguf.arch("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(gguf.arch("attention.head_count_kv") or heads),
        "head_dim": int(gguf.arch("attention.key_length") or hidden // heads),
        "rms_norm_eps": float(gguf.arch("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(gguf.arch("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(gguf.arch("context_length", 4096)),
        "vocab_size": int(embed.shape[0]),
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
        "hidden_act": "silu",
    }
    if arch in ("llama",):
        config["attention_bias"] = "blk.0.attn_q.bias" in gguf.tensors
        config["mlp_bias"] = "blk.0.ffn_up.bias" in gguf.tensors
    scaling = gguf.arch("rope.scaling.type")
    if scaling and scaling != "none":
        config["rope_scaling"] = {"type": str(scaling), "rope_type": str(scaling),
                                  "factor": float(gguf.arch("rope.scaling.factor", 1.0))}
        original = gguf.arch("rope.scaling.original_context_length")
        if original:
            config["rope_scaling"]["original_max_position_embeddings"] = int(original)
    for key in ("bos_token_id", "eos_token_id"):
        value = gguf.meta.get(f"tokenizer.ggml.{key}")
        if value is not None:
            config[key] = int(value)
    if quantization:
        config["quantization"] = quantization
        config["quantization_config"] = quantization
    return config
