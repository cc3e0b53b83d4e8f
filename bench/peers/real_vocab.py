"""The real Qwen (Qwen2/Qwen3) and Llama 3 vocabularies, loaded offline from their tiktoken files.

The files come from ``deploy/ensure-tokenizer-files.sh`` (extracted from two PyPI wheels:
``dashscope``'s ``qwen.tiktoken``, ``llama-models``' Llama 3 ``tokenizer.model``), found in
``$RAPID_MLX_TOKENIZER_FILES``, else ``tokenizer-files`` in the running venv (where ``make install``
puts them) or in ``.venv`` under the repository root.

- qwen3: the 151,643 byte-level BPE ranks Qwen2 and Qwen3 share, then their 26 added tokens at
  151643+ in the order of Qwen3's tokenizer.json (``<|endoftext|>``, ``<|im_start|>``,
  ``<|im_end|>``, ..., ``<tool_call>``, ``</tool_call>``, ..., ``<think>``, ``</think>``), logits
  width 151,936 (the models' padded embedding); end of turn ``<|im_end|>``.
- llama3: 128,000 ranks + 256 specials in Llama 3.1's order (``<|begin_of_text|>`` 128000,
  ``<|eot_id|>`` 128009, ``<|reserved_special_token_N|>``); end of turn ``<|eot_id|>``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from bench.peers.big_vocab import LLAMA3_SPECIALS, QWEN3_SPECIALS

ROOT = Path(__file__).resolve().parents[2]

_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}DIGITS"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# name: (file, pattern, specials, end-of-turn token, logits width)
FAMILIES: dict[str, tuple[str, str, list[str], str, int]] = {
    "qwen3": ("qwen.tiktoken", _SPLIT.replace("DIGITS", ""), QWEN3_SPECIALS, "<|im_end|>",
              151_936),
    "llama3": ("llama3.tiktoken", _SPLIT.replace("DIGITS", "{1,3}"), LLAMA3_SPECIALS,
               "<|eot_id|>", 128_256),
}


def files_dir() -> Path:
    """Where the tokenizer files are (they may be absent)."""
    env = os.environ.get("RAPID_MLX_TOKENIZER_FILES")
    if env:
        return Path(env)
    here = Path(sys.prefix) / "tokenizer-files"
    return here if here.is_dir() else ROOT / ".venv" / "tokenizer-files"


def available(family: str) -> bool:
    """True when FAMILY's file is present and tiktoken is installed."""
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        return False
    return (files_dir() / FAMILIES[family][0]).is_file()


def encoding(family: str) -> Any:
    """FAMILY's tiktoken Encoding (ranks from the file, the family's pattern and specials)."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    name, pattern, specials, _, _ = FAMILIES[family]
    ranks = load_tiktoken_bpe(str(files_dir() / name))
    base = len(ranks)
    return tiktoken.Encoding(name=family, pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens={s: base + i for i, s in enumerate(specials)})


def eos_id(family: str, enc: Any) -> int:
    """The id of FAMILY's end-of-turn token in ENC."""
    return int(enc._special_tokens[FAMILIES[family][3]])


def lltokenizer(family: str) -> tuple[Any, int]:
    """(an llguidance LLTokenizer over FAMILY's real vocabulary, its end-of-turn id); ~1 s."""
    from llguidance.tiktoken import lltokenizer_from_encoding

    enc = encoding(family)
    eos = eos_id(family, enc)
    return lltokenizer_from_encoding(enc, n_vocab=FAMILIES[family][4], eos_token=eos), eos
