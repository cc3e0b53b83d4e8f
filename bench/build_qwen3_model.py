"""Build the benchmark's float32 Qwen3-architecture model with random weights, deterministically.

    .venv/bin/python -m bench.build_qwen3_model [--out bench/.models/qwen3-4l-512] [--seed 0] [--force]

4 layers, hidden 512, 8 attention heads, 4 KV heads, head_dim 64, intermediate 1536, vocab 32000,
max_position_embeddings 4096, tied embeddings, float32.  Written in Hugging Face layout
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json with a plain ChatML chat
template, special_tokens_map.json, generation_config.json) and loadable with ``mlx_lm.load``.

The tokenizer is a byte-level BPE trained with the ``tokenizers`` library on deterministic
synthetic text (pseudo-words made of syllables, Zipf-distributed) until it has exactly 32000
entries; no added filler tokens are needed.  Weights are drawn from a numpy generator seeded with
``--seed`` (normal, std 0.02; norms are ones), so the same seed gives the same bytes.  The text a
random model produces is random: fine for throughput.  The folder is reused when its recorded
build parameters match (``bench_build.json``).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_OUT = Path(__file__).resolve().parent / ".models" / "qwen3-4l-512"
BUILD_VERSION = 2

CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "intermediate_size": 1536,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "bos_token_id": None,
    "eos_token_id": 2,
    "pad_token_id": 0,
}

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
           "w", "z", "br", "cl", "dr", "fl", "gr", "pl", "st", "tr", "sh", "ch", "th", "qu", "sp"]
_VOWELS = ["a", "e", "i", "o", "u", "y", "ai", "ea", "ou", "io", "ee", "oo"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck", "ng", "x"]


def _word(rng: random.Random) -> str:
    n = rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5))
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(n))


def corpus(seed: int, distinct_words: int = 40000, sentences: int = 40000) -> Iterator[str]:
    """Deterministic synthetic text: Zipf-distributed pseudo-words, some capitalized, digits, punctuation."""
    rng = random.Random(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < distinct_words:
        w = _word(rng)
        if w not in seen:
            seen.add(w)
            words.append(w)
    cum = list(itertools.accumulate(1.0 / (i + 1) ** 0.9 for i in range(len(words))))
    # every word appears at least twice so that BPE can merge it fully
    for i in range(0, len(words), 16):
        chunk = words[i:i + 16]
        yield " ".join(chunk) + ". " + " ".join(reversed(chunk)) + "."
    for _ in range(sentences):
        k = rng.randint(4, 18)
        ws = rng.choices(words, cum_weights=cum, k=k)
        ws[0] = ws[0].capitalize()
        if rng.random() < 0.2:
            ws.insert(rng.randint(0, len(ws)), str(rng.randint(0, 9999)))
        yield " ".join(ws) + rng.choice([".", ".", ".", "?", "!", ",", ";", ":"])


def build_tokenizer(seed: int, vocab_size: int) -> Any:
    """Train the byte-level BPE (exactly ``vocab_size`` entries, specials first)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"BPE training reached {tok.get_vocab_size()} entries, not {vocab_size}; "
                           "enlarge the synthetic corpus")
    spec = json.loads(tok.to_str())
    for entry in spec["added_tokens"]:
        entry["special"] = True
        entry["normalized"] = False
    return Tokenizer.from_str(json.dumps(spec))


def tokenizer_config(tok: Any) -> dict[str, Any]:
    """tokenizer_config.json: ChatML template, EOS <|im_end|>, no BOS."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(tok.token_to_id(name)): {"content": name, "lstrip": False, "normalized": False,
                                         "rstrip": False, "single_word": False, "special": True}
            for name in SPECIAL_TOKENS},
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "model_max_length": CONFIG["max_position_embeddings"],
        "pad_token": PAD_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def weight_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Hugging Face parameter names and shapes of a Qwen3 model with tied embeddings."""
    h, n_h, n_kv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    ff, v = cfg["intermediate_size"], cfg["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (n_h * d, h),
            p + "self_attn.k_proj.weight": (n_kv * d, h),
            p + "self_attn.v_proj.weight": (n_kv * d, h),
            p + "self_attn.o_proj.weight": (h, n_h * d),
            p + "self_attn.q_norm.weight": (d,),
            p + "self_attn.k_norm.weight": (d,),
            p + "mlp.gate_proj.weight": (ff, h),
            p + "mlp.up_proj.weight": (ff, h),
            p + "mlp.down_proj.weight": (h, ff),
        })
    return shapes


def build_weights(seed: int, cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Random float32 weights: normal(0, 0.02) matrices, ones for the RMSNorm scales."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in sorted(weight_shapes(cfg).items()):
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, dtype=np.float32)
        else:
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
    return out


def dump(obj: Any) -> str:
    """Pretty JSON with a final newline."""
    return json.dumps(obj, indent=2) + "\n"


def _build_record(seed: int) -> dict[str, Any]:
    return {"build_version": BUILD_VERSION, "seed": seed, "config": CONFIG}


def is_current(out: Path, params: dict[str, Any]) -> bool:
    """True when OUT is a complete bench model folder built from PARAMS (its bench_build.json)."""
    rec = out / "bench_build.json"
    needed = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    if not rec.is_file() or not all((out / n).is_file() for n in needed):
        return False
    try:
        return bool(json.loads(rec.read_text())["params"] == params)
    except (ValueError, KeyError):
        return False


def write_text_files(tmp: Path, config: dict[str, Any], seed: int) -> None:
    """The bench tokenizer (seeded), its config and special tokens, CONFIG and the generation
    config, into the folder being built."""
    tok = build_tokenizer(seed, config["vocab_size"])
    tok.save(str(tmp / "tokenizer.json"))
    (tmp / "tokenizer_config.json").write_text(dump(tokenizer_config(tok)))
    (tmp / "special_tokens_map.json").write_text(dump({"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}))
    (tmp / "config.json").write_text(dump(config))
    (tmp / "generation_config.json").write_text(dump({"eos_token_id": config["eos_token_id"],
                                                      "pad_token_id": config["pad_token_id"]}))


def build(out: Path = DEFAULT_OUT, seed: int = 0, force: bool = False, quiet: bool = False) -> Path:
    """Build (or reuse) the model folder and return it."""
    import mlx.core as mx

    out = Path(out)
    if not force and is_current(out, _build_record(seed)):
        return out
    t0 = time.monotonic()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_text_files(tmp, CONFIG, seed)
    weights = {k: mx.array(v) for k, v in build_weights(seed, CONFIG).items()}
    mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "pt"})
    digest = hashlib.sha256((tmp / "model.safetensors").read_bytes()).hexdigest()
    tok_digest = hashlib.sha256((tmp / "tokenizer.json").read_bytes()).hexdigest()
    (tmp / "bench_build.json").write_text(dump({"params": _build_record(seed),
                                                "model_sha256": digest, "tokenizer_sha256": tok_digest}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    if not quiet:
        print(f"built {out} in {time.monotonic() - t0:.1f}s (weights sha256 {digest[:12]}, "
              f"tokenizer sha256 {tok_digest[:12]})", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.build_qwen3_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="rebuild even when the folder is current")
    p.add_argument("--check", action="store_true", help="load the result with mlx_lm.load and generate")
    args = p.parse_args(argv)
    out = build(args.out, args.seed, args.force)
    print(out)
    if args.check:
        from mlx_lm import generate, load

        loaded: Any = load(str(out))
        model, tokenizer = loaded[0], loaded[1]
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}],
                                               add_generation_prompt=True)
        print(repr(generate(model, tokenizer, prompt, max_tokens=16)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
