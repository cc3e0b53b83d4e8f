"""Rebuild tokenizer.json and tokenizer_config.json from a GGUF's tokenizer.ggml.* metadata and
its tokenizer.chat_template (byte-level BPE, tokenizer.ggml.model 'gpt2', only)."""

from __future__ import annotations

from typing import Any

from worker.model.gguf.config import Unsupported
from worker.model.gguf.reader import GGUFFile

CONTROL, USER_DEFINED, UNUSED = 3, 4, 5  # llama.cpp's token types (1 is a normal token)

# llama.cpp's pre-tokenizer names (tokenizer.ggml.pre) and the Hugging Face split they stand for
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
           r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLIT_REGEX = {"qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "llama-bpe": _LLAMA3,
                "llama3": _LLAMA3}
_DIGITS_THEN_GPT2 = {"smollm", "starcoder", "refact"}
_NFC = {"qwen2", "deepseek-r1-qwen"}


def _byte_level(use_regex: bool) -> dict[str, Any]:
    """The ByteLevel pre-tokenizer (GPT-2's split when USE_REGEX)."""
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def pre_tokenizer(pre: str) -> dict[str, Any]:
    """The Hugging Face pre-tokenizer for llama.cpp's pre-tokenizer name PRE (GPT-2's for an
    unknown one)."""
    if pre in _SPLIT_REGEX:
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": _SPLIT_REGEX[pre]}, "behavior": "Isolated",
             "invert": False}, _byte_level(False)]}
    if pre in _DIGITS_THEN_GPT2:
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, _byte_level(True)]}
    return _byte_level(True)


def tokenizer_files(gguf: GGUFFile) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """tokenizer.json, tokenizer_config.json and notes (what was approximated) for GGUF."""
    kind = gguf.meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise Unsupported(f"tokenizer.ggml.model '{kind}' (mapped: byte-level BPE, 'gpt2')")
    tokens = [str(t) for t in gguf.bulk("tokenizer.ggml.tokens") or []]
    types = [int(t) for t in gguf.bulk("tokenizer.ggml.token_type") or [1] * len(tokens)]
    merges = [str(m) for m in gguf.bulk("tokenizer.ggml.merges") or []]
    pre = str(gguf.meta.get("tokenizer.ggml.pre", "default"))
    notes = [] if pre in _SPLIT_REGEX or pre in _DIGITS_THEN_GPT2 or pre in ("gpt2", "default") \
        else [f"pre-tokenizer '{pre}' is not mapped: GPT-2's split is used"]
    added = [{"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == CONTROL}
             for i, tok in enumerate(tokens) if types[i] in (CONTROL, USER_DEFINED)]
    add_bos = bool(gguf.meta.get("tokenizer.ggml.add_bos_token", False))
    bos_id = gguf.meta.get("tokenizer.ggml.bos_token_id")
    post: dict[str, Any] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                            "use_regex": False}
    if add_bos and bos_id is not None:
        bos = tokens[int(bos_id)]
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [int(bos_id)], "tokens": [bos]}}}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"} if pre in _NFC else None,
        "pre_tokenizer": pre_tokenizer(pre),
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {tok: i for i, tok in enumerate(tokens)}, "merges": merges},
    }
    return tokenizer, _tokenizer_config(gguf, tokens, added, add_bos), notes


def _tokenizer_config(gguf: GGUFFile, tokens: list[str], added: list[dict[str, Any]],
                      add_bos: bool) -> dict[str, Any]:
    """tokenizer_config.json: special tokens by name, the chat template, BOS/EOS handling."""
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(gguf.arch("context_length", 4096)),
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"}
                                 for a in added},
    }
    for role in ("bos", "eos", "unknown", "padding"):
        token_id = gguf.meta.get(f"tokenizer.ggml.{role}_token_id")
        if token_id is not None and 0 <= int(token_id) < len(tokens):
            name = {"unknown": "unk", "padding": "pad"}.get(role, role)
            config[f"{name}_token"] = tokens[int(token_id)]
    template = gguf.meta.get("tokenizer.chat_template")
    if template:
        config["chat_template"] = str(template)
    return config


def generation_config(gguf: GGUFFile) -> dict[str, Any]:
    """generation_config.json: the end-of-turn ids the file names (eos, eot, eom)."""
    ids: list[int] = []
    for role in ("eos", "eot", "eom"):
        value = gguf.meta.get(f"tokenizer.ggml.{role}_token_id")
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    out: dict[str, Any] = {"eos_token_id": ids[0] if len(ids) == 1 else ids} if ids else {}
    bos = gguf.meta.get("tokenizer.ggml.bos_token_id")
    if bos is not None:
        out["bos_token_id"] = int(bos)
    return out
