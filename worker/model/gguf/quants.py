"""GGML quantized blocks as MLX affine quantization (group 32), where that is exact.

Every 32-value (sub-)block of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K decodes as
`scale * q + bias` with unsigned q of 4, 5 or 8 bits, which is MLX's affine format with group
size 32: the integers are repacked, the block's scale and offset become MLX's scale and bias.
The values are the same as the `gguf` package's reference dequantization when the scales are kept
in float32 (a K-quant's scale is a float16 times a 6-bit integer). Other types (Q6_K, Q2_K, Q3_K,
the IQ types, ...) have 16-value sub-blocks or codebooks MLX has no format for: `repack` returns
None and the caller dequantizes them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as T

GROUP = 32


@dataclass
class Affine:
    """MLX affine-quantized rows: packed uint32 words, float32 scales and biases per 32 values."""

    weight: np.ndarray  # uint32 (rows, cols * bits / 32)
    scales: np.ndarray  # float32 (rows, cols / 32)
    biases: np.ndarray  # float32 (rows, cols / 32)
    bits: int


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned integers Q (rows, cols) of BITS bits into MLX's uint32 words: a little-endian
    bit stream per row (value i at bits [i*BITS, (i+1)*BITS))."""
    rows, cols = q.shape
    q = q.astype(np.uint32)
    if bits in (2, 4, 8):
        per = 32 // bits
        lanes = q.reshape(rows, cols // per, per) << (np.arange(per, dtype=np.uint32) * bits)
        words: np.ndarray = np.bitwise_or.reduce(lanes, axis=2).astype(np.uint32)
        return words
    stream = np.unpackbits(q.astype(np.uint8)[..., None], axis=-1, bitorder="little")[..., :bits]
    packed = np.packbits(stream.reshape(rows, cols * bits), axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u4")


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte offset AT of each block, as float32 (n, 1)."""
    return np.ascontiguousarray(blocks[:, at:at + 2]).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """A 32-value block's 16 bytes: low nibbles are values 0-15, high nibbles 16-31."""
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1's 32 fifth bits (a little-endian uint32 per block) as (n, 32) values 0 or 16."""
    word = np.ascontiguousarray(qh).view("<u4")
    return (((word >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's 12 scale bytes: 8 six-bit scales and 8 six-bit mins per super-block."""
    s = s.astype(np.uint8)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc.astype(np.float32), mn.astype(np.float32)


def _blocks(qtype: T, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Integers (n, values), scales and biases (n, groups) and bits of N blocks of QTYPE."""
    if qtype == T.Q4_0:
        d = _f16(b, 0)
        return _nibbles(b[:, 2:18]), d, -8 * d, 4
    if qtype == T.Q4_1:
        return _nibbles(b[:, 4:20]), _f16(b, 0), _f16(b, 2), 4
    if qtype == T.Q5_0:
        d = _f16(b, 0)
        return _nibbles(b[:, 6:22]) | _high_bits(b[:, 2:6]), d, -16 * d, 5
    if qtype == T.Q5_1:
        return _nibbles(b[:, 8:24]) | _high_bits(b[:, 4:8]), _f16(b, 0), _f16(b, 2), 5
    if qtype == T.Q8_0:
        d = _f16(b, 0)
        q = (b[:, 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return q, d, -128 * d, 8
    if qtype in (T.Q4_K, T.Q5_K):
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, mn = _k_scales(b[:, 4:16])
        n = len(b)
        qs = b[:, 16:144] if qtype == T.Q4_K else b[:, 48:176]
        chunks = qs.reshape(n, 4, 32)  # 4 chunks of 64 values: low nibbles, then high nibbles
        q = np.stack([chunks & 15, chunks >> 4], axis=2).reshape(n, 8, 32)
        if qtype == T.Q5_K:  # sub-block s takes bit s of each of the 32 qh bytes
            qh = b[:, 16:48].reshape(n, 1, 32)
            q = (q | (((qh >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1) << 4)).astype(np.uint8)
        return q.reshape(n, 256), d * sc, -dmin * mn, 5 if qtype == T.Q5_K else 4
    raise KeyError(qtype)


REPACKABLE = frozenset({T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K})


def repack(qtype: T, raw: np.ndarray, cols: int) -> Affine | None:
    """RAW (rows, bytes) blocks of QTYPE holding COLS values a row, as MLX affine rows; None for a
    type MLX has no exact format for."""
    if qtype not in REPACKABLE:
        return None
    from gguf import GGML_QUANT_SIZES

    block_values, block_bytes = GGML_QUANT_SIZES[qtype]
    rows = raw.shape[0]
    blocks = np.ascontiguousarray(raw).reshape(-1, block_bytes)
    q, scales, biases, bits = _blocks(qtype, blocks)
    groups = cols // GROUP
    return Affine(pack(q.reshape(rows, cols), bits), scales.reshape(rows, groups),
                  biases.reshape(rows, groups), bits)
