"""GGUF tensors as the mlx-lm model's weights: names mapped, llama's Q/K rows put back in the
Hugging Face order, quantized blocks repacked (quants.py) or dequantized."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants

from worker.model.gguf.quants import GROUP, repack
from worker.model.gguf.reader import GGUFFile, RawTensor

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
          "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
          "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_PLAIN = frozenset({T.F32, T.F16, T.BF16})
ROWS_PER_CHUNK = 16384  # rows converted at a time (bounds the memory of a large embedding)


def hf_name(name: str) -> str | None:
    """The mlx-lm parameter for a GGUF tensor name, or None for a tensor the model has no use for
    (rope_freqs: not mapped here, see config.py)."""
    base, _, kind = name.rpartition(".")
    if base in _TOP:
        return f"{_TOP[base]}.{kind}"
    m = _BLOCK_NAME.fullmatch(name)
    if m and m.group(2) in _BLOCK:
        return f"model.layers.{m.group(1)}.{_BLOCK[m.group(2)]}.{m.group(3)}"
    return None


def unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of a llama Q or K projection: its converter
    interleaves each head's two rotary halves, (2, d/2) -> (d/2, 2); this takes (d/2, 2) back to
    (2, d/2). Works on weights, scales and biases alike."""
    n = rows.shape[0]
    return (rows.reshape(heads, n // heads // 2, 2, *rows.shape[1:]).swapaxes(1, 2)
            .reshape(rows.shape))


def _row_heads(gguf: GGUFFile, name: str) -> int:
    """For llama: the heads whose rows NAME's rows are (0: no permutation)."""
    if gguf.architecture != "llama":
        return 0
    if ".attn_q." in name:
        return int(gguf.arch("attention.head_count"))
    if ".attn_k." in name:
        return int(gguf.arch("attention.head_count_kv") or gguf.arch("attention.head_count"))
    return 0


def _dense(t: RawTensor, lo: int, hi: int) -> np.ndarray:
    """Rows LO..HI of T as float32 (plain or dequantized with the gguf package)."""
    part = t.data[lo:hi]
    if t.qtype in _PLAIN:
        if t.qtype == T.BF16:
            return (np.asarray(part).astype(np.uint32) << 16).view(np.float32)
        return np.asarray(part, dtype=np.float32)
    values: np.ndarray = gguf_quants.dequantize(np.asarray(part), t.qtype).astype(np.float32)
    return values


def convert_tensor(gguf: GGUFFile, t: RawTensor, dtype: np.dtype) -> tuple[dict[str, np.ndarray],
                                                                          int]:
    """T's arrays under their mlx-lm names (weight, or weight/scales/biases) and the bits of its
    affine quantization (0: stored as DTYPE)."""
    name = hf_name(t.name)
    assert name is not None
    rows = t.shape[0]
    cols = t.shape[-1]
    quantizable = (len(t.shape) == 2 and t.qtype not in _PLAIN and cols % GROUP == 0)
    parts: dict[str, list[np.ndarray]] = {}
    bits = 0
    for lo in range(0, rows, ROWS_PER_CHUNK):
        hi = min(rows, lo + ROWS_PER_CHUNK)
        affine = repack(t.qtype, np.asarray(t.data[lo:hi]), cols) if quantizable else None
        if affine is None:
            parts.setdefault("weight", []).append(_dense(t, lo, hi).reshape(hi - lo,
                                                                           *t.shape[1:]))
            continue
        bits = affine.bits
        parts.setdefault("weight", []).append(affine.weight)
        parts.setdefault("scales", []).append(affine.scales)
        parts.setdefault("biases", []).append(affine.biases)
    stem = name.rpartition(".")[0]
    kind = name.rpartition(".")[2]
    out: dict[str, np.ndarray] = {}
    heads = _row_heads(gguf, t.name)
    for key, chunks in parts.items():
        arr = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        if heads:
            arr = unpermute(arr, heads)
        if arr.dtype == np.float32:
            arr = arr.astype(dtype)
        out[f"{stem}.{key}" if kind == "weight" else name] = np.ascontiguousarray(arr)
    return out, bits


def model_tensors(gguf: GGUFFile, dtype: np.dtype) -> Iterator[tuple[str, dict[str, np.ndarray],
                                                                     int]]:
    """Each mapped tensor's module path, arrays and affine bits (0: stored as DTYPE)."""
    for t in gguf.tensors.values():
        name = hf_name(t.name)
        if name is None:
            continue
        arrays, bits = convert_tensor(gguf, t, dtype)
        yield name.rpartition(".")[0], arrays, bits


def unmapped(gguf: GGUFFile) -> list[str]:
    """GGUF tensors this converter does not map (the caller refuses a file with any)."""
    return [name for name in gguf.tensors if hf_name(name) is None]
