"""GGML blocks repacked as MLX affine quantization decode to the `gguf` package's reference values
(exactly, with float32 scales); types MLX has no format for (Q6_K) are dequantized by it."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf import quants as reference

from tests.real_weights import QWEN, gguf_or_skip
from worker.model.gguf.quants import REPACKABLE, pack, repack
from worker.model.gguf.reader import GGUFFile, RawTensor
from worker.model.gguf.tensors import convert_tensor, unpermute

_TWO_HALVES = {T.Q4_1, T.Q5_1, T.Q4_K, T.Q5_K}  # blocks starting with two float16s (d, m/dmin)


def random_blocks(qtype: T, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random blocks of QTYPE (random integers and scale bytes, sane float16 scales)."""
    rng = np.random.default_rng(seed)
    block_values, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block_values * block_bytes), dtype=np.uint8)
    blocks = raw.reshape(-1, block_bytes)
    halves = 2 if qtype in _TWO_HALVES else 1
    d = (rng.standard_normal((len(blocks), halves)) * 0.02).astype(np.float16)
    blocks[:, : 2 * halves] = d.view(np.uint8)
    if qtype == T.Q6_K:  # Q6_K keeps its float16 scale last
        blocks[:, -2:] = d[:, :1].view(np.uint8)
    return raw


def _mlx_values(qtype: T, raw: np.ndarray, cols: int) -> np.ndarray:
    affine = repack(qtype, raw, cols)
    assert affine is not None
    out = mx.dequantize(mx.array(affine.weight), mx.array(affine.scales), mx.array(affine.biases),
                        group_size=32, bits=affine.bits)
    return np.array(out)


@pytest.mark.parametrize("qtype", sorted(REPACKABLE, key=lambda t: t.name), ids=lambda t: t.name)
def test_repacked_blocks_decode_exactly(qtype: T) -> None:
    raw = random_blocks(qtype, 6, 768)
    want = reference.dequantize(raw, qtype)
    got = _mlx_values(qtype, raw, 768)
    assert got.shape == want.shape == (6, 768)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_pack_is_mlx_bit_order(bits: int) -> None:
    q = np.random.default_rng(bits).integers(0, 1 << bits, size=(4, 64), dtype=np.uint8)
    ones = mx.ones((4, 2))
    got = mx.dequantize(mx.array(pack(q, bits)), ones, mx.zeros((4, 2)), group_size=32,
                        bits=bits)
    np.testing.assert_array_equal(np.array(got), q.astype(np.float32))


def test_q6k_has_no_mlx_format_and_is_dequantized_like_the_reference() -> None:
    raw = random_blocks(T.Q6_K, 4, 512)
    assert repack(T.Q6_K, raw, 512) is None
    t = RawTensor("blk.0.ffn_down.weight", T.Q6_K, (4, 512), raw)

    class _Qwen:
        architecture = "qwen2"

    arrays, bits = convert_tensor(_Qwen(), t, np.dtype(np.float32))  # type: ignore[arg-type]
    assert bits == 0 and set(arrays) == {"model.layers.0.mlp.down_proj.weight"}
    np.testing.assert_array_equal(arrays["model.layers.0.mlp.down_proj.weight"],
                                  reference.dequantize(raw, T.Q6_K))


def test_unpermute_inverts_llama_cpp_rotary_permutation() -> None:
    heads, head_dim = 3, 8
    hf = np.arange(heads * head_dim * 2, dtype=np.float32).reshape(heads * head_dim, 2)
    # llama.cpp's convert_hf_to_gguf.py permute()
    gguf = (hf.reshape(heads, 2, head_dim // 2, 2).swapaxes(1, 2).reshape(hf.shape))
    np.testing.assert_array_equal(unpermute(gguf, heads), hf)
    assert not np.array_equal(gguf, hf)


def test_real_q4k_and_q6k_tensors_match_the_reference() -> None:
    gguf = GGUFFile(gguf_or_skip(QWEN))
    q4k = gguf.tensors["blk.0.attn_q.weight"]
    q6k = gguf.tensors["blk.0.ffn_down.weight"]
    assert (q4k.type_name, q6k.type_name) == ("Q4_K", "Q6_K")
    want = reference.dequantize(np.asarray(q4k.data), q4k.qtype)
    np.testing.assert_array_equal(_mlx_values(q4k.qtype, np.asarray(q4k.data), q4k.shape[1]),
                                  want)
    arrays, bits = convert_tensor(gguf, q6k, np.dtype(np.float32))
    assert bits == 0
    np.testing.assert_array_equal(arrays["model.layers.0.mlp.down_proj.weight"],
                                  reference.dequantize(np.asarray(q6k.data), q6k.qtype))
