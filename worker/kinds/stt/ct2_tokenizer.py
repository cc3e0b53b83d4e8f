"""The tokenizer and feature-extractor files transformers' WhisperProcessor needs, from CT2's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EOT = "<|endoftext|>"


def add_timestamp_tokens(tokenizer: dict[str, Any], n_vocab: int) -> int:
    """Add Whisper's <|0.00|>..<|30.00|> tokens after the last special token (older tokenizer.json
    files lack them, and mlx-audio finds timestamp_begin by the name <|0.00|>); return how many."""
    added = tokenizer.setdefault("added_tokens", [])
    if any(t["content"] == "<|0.00|>" for t in added):
        return 0
    next_id = int(max(t["id"] for t in added)) + 1
    count = n_vocab - next_id
    for i in range(count):
        added.append({"id": next_id + i, "content": f"<|{i * 0.02:.2f}|>", "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    return count


def write_tokenizer_files(src: Path, dst: Path, dims: dict[str, int]) -> None:
    """tokenizer.json (with timestamp tokens), tokenizer_config.json, preprocessor_config.json."""
    tokenizer = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    add_timestamp_tokens(tokenizer, dims["n_vocab"])
    (dst / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    tok_config = {"tokenizer_class": "WhisperTokenizer", "bos_token": EOT, "eos_token": EOT,
                  "unk_token": EOT, "pad_token": EOT, "model_max_length": dims["n_text_ctx"],
                  "errors": "replace", "add_prefix_space": False}
    (dst / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    features = {"feature_extractor_type": "WhisperFeatureExtractor",
                "feature_size": dims["n_mels"], "sampling_rate": 16000, "hop_length": 160,
                "chunk_length": 30, "n_fft": 400, "n_samples": 480000,
                "nb_max_frames": 3000, "padding_side": "right", "padding_value": 0.0,
                "return_attention_mask": False, "processor_class": "WhisperProcessor"}
    (dst / "preprocessor_config.json").write_text(json.dumps(features, indent=2))
