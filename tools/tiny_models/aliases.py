"""The model_type behind each built-in alias (gateway/data/aliases.toml), and its README table.

Text aliases load through mlx-lm (the model_type its config.json names; mlx-lm maps mistral to
its llama code and minimax_m2 to minimax). Vision aliases load through mlx-vlm; their language
model is listed beside them, and it is the tiny model of that type that the text tests serve.
"""

from __future__ import annotations

from collections.abc import Collection

TEXT_ALIASES: dict[str, str] = {
    "default": "qwen3",  # the embedded demo model
    "qwen3.5-0.8b-4bit": "qwen3_5",
    "qwen3.5-4b-4bit": "qwen3_5",
    "qwen3.5-9b-4bit": "qwen3_5",
    "qwen3.5-27b-4bit": "qwen3_5",
    "qwen3.5-35b-a3b-4bit": "qwen3_5_moe",
    "qwen3.6-35b-8bit": "qwen3_5_moe",
    "qwen3-0.6b-4bit": "qwen3",
    "qwen3-4b-4bit": "qwen3",
    "qwen3-8b-4bit": "qwen3",
    "qwen3-30b-a3b-4bit": "qwen3_moe",
    "qwen3-coder-30b-a3b-4bit": "qwen3_moe",
    "qwen3-next-80b-a3b-4bit": "qwen3_next",
    "qwen2.5-7b-4bit": "qwen2",
    "qwen2.5-coder-7b-4bit": "qwen2",
    "glm4.7-9b-4bit": "glm4",
    "glm4.7-flash-4bit": "glm4_moe_lite",
    "glm4.6-4bit": "glm4_moe",
    "glm4.5-air-4bit": "glm4_moe",
    "gpt-oss-20b": "gpt_oss",
    "gpt-oss-120b": "gpt_oss",
    "llama-3.1-8b-4bit": "llama",
    "llama-3.2-3b-4bit": "llama",
    "llama-3.3-70b-4bit": "llama",
    "llama-4-scout-4bit": "llama4",
    "deepseek-r1-8b-4bit": "qwen3",  # DeepSeek-R1-0528-Qwen3-8B (yarn rope scaling)
    "deepseek-r1-distill-qwen-7b-4bit": "qwen2",
    "deepseek-v3.1-4bit": "deepseek_v3",
    "minimax-m2.5-4bit": "minimax",
    "minimax-m2-4bit": "minimax",
    "hermes3-8b-4bit": "llama",
    "hermes4-14b-4bit": "qwen3",
    "mistral-7b-v0.3-4bit": "mistral",
}

# alias -> (model_type of the checkpoint, model_type of its language model)
VISION_ALIASES: dict[str, tuple[str, str]] = {
    "ui-tars-1.5-7b-4bit": ("qwen2_5_vl", "qwen2"),
    "gemma-3-4b-4bit": ("gemma3", "gemma3_text"),
    "gemma-3-12b-4bit": ("gemma3", "gemma3_text"),
}

# served by other kinds of worker (/v1/embeddings): not text generation
OTHER_ALIASES: frozenset[str] = frozenset(
    {"all-minilm-l6-v2", "embeddinggemma-300m", "qwen3-embedding-0.6b"})


def text_model_types() -> list[str]:
    """Every model_type the text path must serve: text aliases' and vision aliases' language
    models', sorted."""
    return sorted({*TEXT_ALIASES.values(), *(lm for _, lm in VISION_ALIASES.values())})


def aliases_of(model_type: str) -> list[str]:
    """The aliases whose (language) model is MODEL_TYPE, in table order."""
    return [*(a for a, t in TEXT_ALIASES.items() if t == model_type),
            *(a for a, (_, lm) in VISION_ALIASES.items() if lm == model_type)]


def readme_table(not_served: Collection[str]) -> str:
    """The README's markdown table: model_type, its aliases, whether the paged engine serves it
    (NOT_SERVED: the types it does not yet)."""
    rows = ["| model_type | aliases | paged engine |", "|---|---|---|"]
    for t in text_model_types():
        names = ", ".join(f"`{a}`" + (" (vision)" if a in VISION_ALIASES else "")
                          for a in aliases_of(t))
        rows.append(f"| {t} | {names} | {'not yet' if t in not_served else 'serves'} |")
    return "\n".join(rows) + "\n"
