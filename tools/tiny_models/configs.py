"""Per model_type, a tiny config that keeps the real checkpoints' structural features.

Sizes are small (hidden 128-256, 2-6 layers); what is kept is what the engine must handle: the
layer pattern (linear attention vs full attention, sliding vs global), windows, sinks, MLA ranks,
MoE routing. ``vocab_size`` and the special tokens come from the demo tokenizer (``build.py``).
"""

from __future__ import annotations

from typing import Any

# Qwen3.5 / Qwen3.6 (Gated DeltaNet + attention every 4th layer; mlx-community's text_config)
_QWEN3_5_TEXT: dict[str, Any] = {
    "model_type": "qwen3_5_text",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rms_norm_eps": 1e-6,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "mrope_section": [11, 11, 10],
                        "rope_theta": 100000, "partial_rotary_factor": 0.25},
}

CONFIGS: dict[str, dict[str, Any]] = {
    "qwen3": {
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,  # != 128 / 4
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
    },
    # Llama 3.1 8B / 3.3 70B / Hermes 3 (3.2 3B: tied): GQA 4:1, llama3 rope scaling, untied
    "llama": {
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    },
    # Mistral 7B v0.3 (mlx-lm's llama code): GQA 4:1, rope_theta 1e6, no sliding window, untied
    "mistral": {
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
        "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "sliding_window": None, "max_position_embeddings": 32768,
    },
    # Qwen2.5 7B / Coder 7B / R1-Distill-Qwen 7B: q/k/v biases, GQA 7:1, untied
    "qwen2": {
        "hidden_size": 224, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 7, "num_key_value_heads": 1, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "max_position_embeddings": 32768, "sliding_window": 131072, "use_sliding_window": False,
    },
    # Qwen3 30B-A3B / Coder 30B-A3B: every layer MoE (128 experts, top 8), qk norms, head_dim 128
    # != 2048 / 32, GQA 8:1, untied; experts / 8, top-k / 4
    "qwen3_moe": {
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 32,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "max_position_embeddings": 40960, "num_experts": 16, "num_experts_per_tok": 2,
        "moe_intermediate_size": 64, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "norm_topk_prob": True,
    },
    # GLM-4 9B: q/k/v biases, half the head dims rotated (traditional rope), GQA (16:1 there,
    # 4:1 here: head_dim is hidden / heads), untied
    "glm4": {
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
        "attention_bias": True, "partial_rotary_factor": 0.5, "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 32768,
    },
    # GLM-4.6 / 4.5-Air: first layer dense then MoE (sigmoid routing with a correction bias,
    # one shared expert, 160 experts top 8), q/k/v biases, qk norms, partial rope, head_dim 128
    # != 5120 / 96, GQA 12:1, untied; experts / 8, top-k / 4
    "glm4_moe": {
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 3,
        "num_attention_heads": 12, "num_key_value_heads": 1, "head_dim": 32,
        "attention_bias": True, "use_qk_norm": True, "partial_rotary_factor": 0.5,
        "rope_theta": 1000000.0, "rope_scaling": None, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 202752, "tie_word_embeddings": False,
        "n_routed_experts": 20, "num_experts_per_tok": 2, "n_shared_experts": 1,
        "moe_intermediate_size": 64, "first_k_dense_replace": 1, "n_group": 1,
        "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    },
    # MiniMax M2 / M2.5: every layer MoE (256 experts top 8, sigmoid routing with a correction
    # bias, no shared expert), full-width qk norms, rotary on half the head dims, head_dim 128
    # != 3072 / 48, GQA 6:1, untied; experts / 8, top-k / 4
    "minimax": {
        "model_type": "minimax_m2", "hidden_size": 128, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 6, "num_key_value_heads": 1, "head_dim": 32,
        "rotary_dim": 16, "rope_theta": 5000000.0, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 196608, "tie_word_embeddings": False,
        "num_local_experts": 32, "num_experts_per_tok": 2, "shared_intermediate_size": 0,
        "scoring_func": "sigmoid", "use_qk_norm": True,
    },
    "qwen3_5": {"text_config": _QWEN3_5_TEXT, "tie_word_embeddings": True},
    "qwen3_5_moe": {"text_config": {
        **_QWEN3_5_TEXT, "model_type": "qwen3_5_moe_text", "num_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64, "decoder_sparse_step": 1,
    }, "tie_word_embeddings": True},
    "qwen3_next": {
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
        "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 32,
        "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64, "decoder_sparse_step": 1, "norm_topk_prob": True,
        "mlp_only_layers": [], "tie_word_embeddings": False, "attention_bias": False,
        "max_position_embeddings": 4096,
    },
    # gpt-oss-20b/120b: a learned sink logit per query head, sliding-window (128) layers
    # alternating with full ones, yarn RoPE, MoE (window 24 here: short prompts cross it)
    "gpt_oss": {
        "hidden_size": 128, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "num_local_experts": 4, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5,
        "sliding_window": 24, "rope_theta": 150000,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096},
        "tie_word_embeddings": False,
    },
    # Llama 4 Scout (mlx-community's config: model_type llama4 with a text_config): chunked
    # attention (attention_chunk_size 8192, 32 here) on 3 of 4 layers, NoPE + temperature
    # tuning on every 4th, MoE with a shared expert (floor_scale scaled with the chunk)
    "llama4": {"text_config": {
        "model_type": "llama4_text", "attention_bias": False, "attention_chunk_size": 32,
        "head_dim": 32, "hidden_size": 128, "interleave_moe_layer_step": 1,
        "intermediate_size": 128, "intermediate_size_mlp": 256,
        "max_position_embeddings": 4096, "num_attention_heads": 4, "num_experts_per_tok": 1,
        "num_hidden_layers": 4, "num_key_value_heads": 2, "num_local_experts": 4,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "use_qk_norm": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                         "low_freq_factor": 1.0, "original_max_position_embeddings": 8192},
        "attn_temperature_tuning": True, "floor_scale": 32, "attn_scale": 0.1,
    }},
    # Gemma 3 text: sliding window (512-1024 in the checkpoints, 32 here) on 5 of 6 layers
    "gemma3_text": {
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 6,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "query_pre_attn_scalar": 32, "sliding_window": 32, "sliding_window_pattern": 6,
        "max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    },
    # DeepSeek-V3.1: MLA (q and kv LoRA ranks, RoPE part apart), yarn RoPE, the first
    # first_k_dense_replace layers dense and the rest MoE with noaux_tc group routing
    # (real: 256 experts in 8 groups, 4 groups kept, 8 experts a token; here 16 in 4, 2, 4)
    "deepseek_v3": {
        "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
        "q_lora_rank": 64, "kv_lora_rank": 64, "qk_rope_head_dim": 32, "qk_nope_head_dim": 32,
        "v_head_dim": 32, "n_routed_experts": 16, "n_shared_experts": 1,
        "num_experts_per_tok": 4, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "topk_method": "noaux_tc", "scoring_func": "sigmoid", "n_group": 4, "topk_group": 2,
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "max_position_embeddings": 163840, "tie_word_embeddings": False,
        "attention_bias": False,
        "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096},
    },
    # GLM-4.7-Flash: MLA like DeepSeek-V3 (wider nope and value heads), plain RoPE, one dense
    # layer then MoE (real: 64 experts, 4 a token, one group)
    "glm4_moe_lite": {
        "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
        "q_lora_rank": 96, "kv_lora_rank": 128, "qk_rope_head_dim": 32, "qk_nope_head_dim": 48,
        "v_head_dim": 64, "n_routed_experts": 8, "n_shared_experts": 1,
        "num_experts_per_tok": 4, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "topk_method": "noaux_tc", "scoring_func": "sigmoid", "n_group": 1, "topk_group": 1,
        "norm_topk_prob": True, "routed_scaling_factor": 1.8, "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0, "max_position_embeddings": 202752,
        "tie_word_embeddings": False, "attention_bias": False, "partial_rotary_factor": 1.0,
        "num_nextn_predict_layers": 1,
    },
}


def config_for(model_type: str) -> dict[str, Any]:
    """A copy of MODEL_TYPE's tiny config (KeyError: no tiny config for it)."""
    import copy

    return {"model_type": model_type, **copy.deepcopy(CONFIGS[model_type])}
