"""Offline stand-ins for the 150k-token Qwen3 and 128k-token Llama 3 tokenizers (no hub access).

    python -m bench.peers.big_vocab [--out bench/.models/vocab]

A byte-level BPE is trained with ``tokenizers`` on local text (the Python sources and docs of the
installed packages: code, prose, numbers, some non-ASCII) with each family's pre-tokenizer regex,
to the family's size of ordinary tokens, and the family's special tokens are added:

- qwen3: 151,643 BPE tokens + 26 specials (``<|endoftext|>``, ``<|im_start|>``, ``<think>``, ...);
  digits split one by one (``\\p{N}``), as Qwen2/3 do.
- llama3: 128,000 BPE tokens + 256 specials (``<|begin_of_text|>``, ``<|eot_id|>``,
  ``<|reserved_special_token_N|>``); digits in runs of up to three (``\\p{N}{1,3}``).

Only the token strings matter to a grammar engine (its mask work is a walk over the vocabulary's
byte strings), so these measure what the real files would, with a realistic mix of tokens.
The result is cached in the output folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / ".models" / "vocab"

_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}DIGITS"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN3_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                  "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                  "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                  "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
                  "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                  "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                   "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
LLAMA3_SPECIALS += [f"<|reserved_special_token_{i}|>" for i in range(3, 256 - len(LLAMA3_SPECIALS) + 3)]

FAMILIES = {  # name: (ordinary tokens, digit rule, specials, eos)
    "qwen3": (151_643, "", QWEN3_SPECIALS, "<|im_end|>"),
    "llama3": (128_000, "{1,3}", LLAMA3_SPECIALS, "<|eot_id|>"),
}


def corpus(limit_bytes: int = 120_000_000) -> Iterator[str]:
    """Local text: .py/.rst/.md/.txt files of the installed packages, up to LIMIT_BYTES."""
    root = Path(sysconfig.get_paths()["purelib"])
    seen = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".rst", ".md", ".txt", ".pyi") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        seen += len(text)
        yield text
        if seen > limit_bytes:
            return


def build(family: str, out: Path = OUT) -> Path:
    """Train (or reuse) FAMILY's stand-in; return the path of its tokenizer.json."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    path = out / f"{family}-tokenizer.json"
    if path.exists():
        return path
    size, digits, specials, _ = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_SPLIT.replace("DIGITS", digits)), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    got = tok.get_vocab_size()
    tok.add_special_tokens(specials)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    print(f"{family}: {got} BPE tokens (target {size}) + {len(specials)} specials", file=sys.stderr)
    return path


def eos_id(family: str, path: Path) -> int:
    """The id of FAMILY's end-of-turn token in the tokenizer at PATH."""
    vocab = json.loads(path.read_text())
    return int(next(t["id"] for t in vocab["added_tokens"]
                    if t["content"] == FAMILIES[family][3]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    for name in FAMILIES:
        print(build(name, args.out))
