"""Build the demo model's byte-level BPE tokenizer deterministically.

Writes tokenizer.json, tokenizer_config.json (with the chat template) and
special_tokens_map.json.  The BPE merges are learned with the ``tokenizers``
library on the synthetic corpus of :mod:`tools.demo_model.data`.

The pre-tokenizer splits letters, single digits, punctuation runs (which may
take one leading space) and whitespace apart.  A word never carries its leading
space, so a value such as ``New York`` is the same token sequence in the user's
message (``in New York?``) and in a JSON tool call (``"city": "New York"``),
which lets the tiny model copy arguments token by token.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from tools.demo_model import data

SPECIAL_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
]
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
VOCAB_SIZE = 4096
CORPUS_SEED = 1234
CORPUS_SIZE = 20000
MODEL_MAX_LENGTH = 2048

PRETOKENIZE_REGEX = (
    r"\p{L}+"  # letters, without a leading space
    r"|\p{N}"  # single digits
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"  # punctuation run, optional leading space
    r"|\s*[\r\n]+"  # newlines
    r"|\s+(?!\S)"
    r"|\s+"
)


def build_tokenizer(vocab_size: int = VOCAB_SIZE, corpus_seed: int = CORPUS_SEED,
                    corpus_size: int = CORPUS_SIZE) -> Tokenizer:
    """Train the BPE tokenizer on the synthetic corpus (deterministic)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(  # type: ignore[call-arg]
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    names = [t for t, _ in SPECIAL_TOKENS]
    tok.add_special_tokens(names)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=names,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(data.corpus(corpus_seed, corpus_size), trainer=trainer)
    # Qwen3 convention: only the chat markers are "special" (skipped on decode);
    # <think>, <tool_call>, ... stay visible in decoded text.
    spec = json.loads(tok.to_str())
    flags = dict(SPECIAL_TOKENS)
    for entry in spec["added_tokens"]:
        entry["special"] = flags[entry["content"]]
        entry["normalized"] = False
    return Tokenizer.from_str(json.dumps(spec))


def tokenizer_config(tok: Tokenizer) -> dict[str, Any]:
    added = {}
    for name, special in SPECIAL_TOKENS:
        added[str(tok.token_to_id(name))] = {
            "content": name, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [n for n, _ in SPECIAL_TOKENS if n not in (EOS_TOKEN, PAD_TOKEN)],
        "bos_token": None,
        "chat_template": data.chat_template(),
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": PAD_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def special_tokens_map() -> dict[str, Any]:
    return {
        "additional_special_tokens": [n for n, _ in SPECIAL_TOKENS if n not in (EOS_TOKEN, PAD_TOKEN)],
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
    }


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def write_tokenizer(out: Path, tok: Tokenizer | None = None) -> Tokenizer:
    """Build (if not given) and write the tokenizer files into ``out``; returns the tokenizer."""
    out.mkdir(parents=True, exist_ok=True)
    tok = tok or build_tokenizer()
    (out / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    (out / "tokenizer_config.json").write_text(_dump(tokenizer_config(tok)), encoding="utf-8")
    (out / "special_tokens_map.json").write_text(_dump(special_tokens_map()), encoding="utf-8")
    return tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    tok = write_tokenizer(args.out)
    print(f"wrote tokenizer with {tok.get_vocab_size()} tokens to {args.out}")


if __name__ == "__main__":
    main()
