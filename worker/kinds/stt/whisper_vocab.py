"""Hugging Face tokenizer files for a Whisper folder that has none (mlx-whisper's layout), built
from Whisper's tiktoken vocabularies (worker/kinds/stt/vocab/, see its README) the way mlx-whisper
builds its tokenizer: byte-level BPE ranks, then the special tokens (end of text, start of
transcript, the languages, tasks, no-timestamps, the 1501 timestamps) in order.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from worker.kinds.stt.ct2_tokenizer import write_tokenizer_files

VOCAB = Path(__file__).resolve().parent / "vocab"
# Whisper's language tokens, in token order (mlx-whisper's LANGUAGES keys)
LANGUAGES = ("en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar",
             "sv", "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu",
             "ta", "no", "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa",
             "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn",
             "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc",
             "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn",
             "mt", "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw",
             "su", "yue")
PLAIN_VOCAB = 51765  # n_vocab - this = the languages (+1 for the multilingual vocabulary)


def vocab_name(n_vocab: int) -> str:
    """'multilingual' or 'gpt2' (English-only models), as mlx-whisper picks it."""
    return "multilingual" if n_vocab >= 51865 else "gpt2"


def specials(n_vocab: int) -> list[str]:
    """The special tokens after the BPE ranks, in id order."""
    languages = n_vocab - PLAIN_VOCAB - int(vocab_name(n_vocab) == "multilingual")
    return ["<|endoftext|>", "<|startoftranscript|>",
            *[f"<|{code}|>" for code in LANGUAGES[:languages]], "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>",
            *[f"<|{i * 0.02:.2f}|>" for i in range(1501)]]


def read_ranks(name: str) -> dict[bytes, int]:
    """A tiktoken vocabulary: token bytes -> rank."""
    with gzip.open(VOCAB / f"{name}.tiktoken.gz", "rt") as f:
        return {base64.b64decode(tok): int(rank) for tok, rank in (ln.split() for ln in f if ln)}


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character map (byte-level BPE)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _last_merge(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two parts BPE joins last to make TOKEN (merging lower-ranked pairs first)."""
    parts = [bytes([b]) for b in token]
    limit = ranks[token]
    while len(parts) > 2:
        best = min(((ranks[p], i) for i in range(len(parts) - 1)
                    if (p := parts[i] + parts[i + 1]) in ranks and ranks[p] < limit),
                   default=None)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    if len(parts) != 2:
        raise ValueError(f"no BPE merge makes {token!r}")
    return parts[0], parts[1]


def tokenizer_json(n_vocab: int) -> dict[str, Any]:
    """The tokenizer.json of a Whisper model with N_VOCAB tokens."""
    ranks = read_ranks(vocab_name(n_vocab))
    chars = _byte_chars()

    def text(b: bytes) -> str:
        return "".join(chars[x] for x in b)

    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    merges = [" ".join(map(text, _last_merge(tok, ranks))) for tok, _ in by_rank if len(tok) > 1]
    added = [{"id": len(ranks) + i, "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, t in enumerate(specials(n_vocab))]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": level, "post_processor": None,
            "decoder": {**level, "add_prefix_space": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False,
                      "vocab": {**{text(t): r for t, r in by_rank}, "<|endoftext|>": len(ranks)},
                      "merges": merges}}


def cache_root() -> Path:
    """Where built tokenizer folders are kept (RAPID_MLX_CACHE or ~/.cache/rapid-mlx)."""
    root = os.environ.get("RAPID_MLX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rapid-mlx")
    return Path(root) / "whisper-tokenizers"


def tokenizer_folder(dims: dict[str, int]) -> Path:
    """A folder with tokenizer.json, tokenizer_config.json and preprocessor_config.json for a
    Whisper model of DIMS (built once, then reused)."""
    folder = cache_root() / f"{vocab_name(dims['n_vocab'])}-{dims['n_vocab']}-{dims['n_mels']}"
    if (folder / "preprocessor_config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        work, out = Path(tmp) / "src", Path(tmp) / "out"
        work.mkdir()
        out.mkdir()
        (work / "tokenizer.json").write_text(json.dumps(tokenizer_json(dims["n_vocab"]),
                                                        ensure_ascii=False), encoding="utf-8")
        write_tokenizer_files(work, out, dims)
        try:
            out.rename(folder)
        except OSError:  # another worker built it first
            pass
    return folder
