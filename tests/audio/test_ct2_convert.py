"""The CTranslate2 reader and the Whisper name mapping, on a tiny synthetic model file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from worker.kinds.stt.convert_ct2 import ConversionError, convert, dimensions, map_variables
from worker.kinds.stt.ct2_reader import CT2FormatError, read_ct2, write_ct2
from worker.kinds.stt.ct2_tokenizer import add_timestamp_tokens

D, H, MELS, VOCAB = 8, 2, 4, 60


def _tiny_whisper() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float16)

    v = {"encoder/num_heads": np.array(H, np.int16), "decoder/num_heads": np.array(H, np.int16),
         "encoder/conv1/weight": w(D, MELS, 3), "encoder/conv1/bias": w(D),
         "encoder/conv2/weight": w(D, D, 3), "encoder/conv2/bias": w(D),
         "encoder/position_encodings/encodings": w(6, D),
         "encoder/layer_norm/gamma": w(D), "encoder/layer_norm/beta": w(D),
         "decoder/embeddings/weight": w(VOCAB, D),
         "decoder/position_encodings/encodings": w(5, D),
         "decoder/layer_norm/gamma": w(D), "decoder/layer_norm/beta": w(D)}
    for side in ("encoder", "decoder"):
        p = f"{side}/layer_0"
        v.update({f"{p}/self_attention/layer_norm/gamma": w(D),
                  f"{p}/self_attention/layer_norm/beta": w(D),
                  f"{p}/self_attention/linear_0/weight": w(3 * D, D),
                  f"{p}/self_attention/linear_0/bias": w(3 * D),
                  f"{p}/self_attention/linear_1/weight": w(D, D),
                  f"{p}/self_attention/linear_1/bias": w(D),
                  f"{p}/ffn/layer_norm/gamma": w(D), f"{p}/ffn/layer_norm/beta": w(D),
                  f"{p}/ffn/linear_0/weight": w(4 * D, D), f"{p}/ffn/linear_0/bias": w(4 * D),
                  f"{p}/ffn/linear_1/weight": w(D, 4 * D), f"{p}/ffn/linear_1/bias": w(D)})
    p = "decoder/layer_0/attention"
    v.update({f"{p}/layer_norm/gamma": w(D), f"{p}/layer_norm/beta": w(D),
              f"{p}/linear_0/weight": w(D, D), f"{p}/linear_0/bias": w(D),
              f"{p}/linear_1/weight": w(2 * D, D), f"{p}/linear_1/bias": w(2 * D),
              f"{p}/linear_2/weight": w(D, D), f"{p}/linear_2/bias": w(D)})
    return v


def test_reader_round_trip(tmp_path: Path) -> None:
    v = _tiny_whisper()
    write_ct2(tmp_path / "model.bin", "WhisperSpec", v)
    spec, got = read_ct2(tmp_path / "model.bin")
    assert spec == "WhisperSpec" and set(got) == set(v)
    for k in v:
        assert got[k].dtype == v[k].dtype and np.array_equal(got[k], v[k]), k


def test_reader_refuses_broken_files(tmp_path: Path) -> None:
    write_ct2(tmp_path / "model.bin", "WhisperSpec", _tiny_whisper())
    data = (tmp_path / "model.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:len(data) // 2])
    with pytest.raises(CT2FormatError):
        read_ct2(tmp_path / "cut.bin")
    (tmp_path / "v9.bin").write_bytes(b"\x09\0\0\0" + data[4:])
    with pytest.raises(CT2FormatError):
        read_ct2(tmp_path / "v9.bin")


def test_fused_projections_split_and_conv_transposed() -> None:
    v = _tiny_whisper()
    out = map_variables(v)
    qkv = v["encoder/layer_0/self_attention/linear_0/weight"]
    assert np.array_equal(out["encoder.blocks.0.attn.query.weight"], qkv[:D])
    assert np.array_equal(out["encoder.blocks.0.attn.key.weight"], qkv[D:2 * D])
    assert np.array_equal(out["encoder.blocks.0.attn.value.weight"], qkv[2 * D:])
    assert "encoder.blocks.0.attn.key.bias" not in out  # Whisper's key has no bias
    bias = v["decoder/layer_0/attention/linear_1/bias"]
    assert np.array_equal(out["decoder.blocks.0.cross_attn.value.bias"], bias[D:])
    assert out["encoder.conv1.weight"].shape == (D, 3, MELS)
    assert np.array_equal(out["encoder.conv1.weight"][:, 1, :], v["encoder/conv1/weight"][:, :, 1])
    assert "decoder.blocks.0.mlp2.bias" in out and "encoder.ln_post.weight" in out
    assert dimensions(v) == {"n_mels": MELS, "n_audio_ctx": 6, "n_audio_state": D,
                             "n_audio_head": H, "n_audio_layer": 1, "n_vocab": VOCAB,
                             "n_text_ctx": 5, "n_text_state": D, "n_text_head": H,
                             "n_text_layer": 1}


def test_every_mlx_parameter_is_written() -> None:
    """The mapped names are exactly the parameters of mlx-audio's Whisper of the same size."""
    mx = pytest.importorskip("mlx.core")
    from mlx.utils import tree_flatten
    from mlx_audio.stt.models.whisper import whisper as mw

    v = _tiny_whisper()
    model = mw.Model(mw.ModelDimensions.from_dict(dimensions(v)), mx.float32)
    want = {k for k, _ in tree_flatten(model.parameters())}
    assert set(map_variables(v)) == want


def test_unknown_variable_is_refused() -> None:
    v = _tiny_whisper()
    v["encoder/layer_0/mystery/weight"] = np.zeros(3, np.float16)
    with pytest.raises(ConversionError):
        map_variables(v)


def test_convert_writes_loadable_folder(tmp_path: Path) -> None:
    src = tmp_path / "ct2"
    src.mkdir()
    write_ct2(src / "model.bin", "WhisperSpec", _tiny_whisper())
    added = [{"id": 50 + i, "content": f"<|tok{i}|>", "special": True} for i in range(3)]
    (src / "tokenizer.json").write_text(json.dumps({"added_tokens": added, "model": {}}))
    (src / "config.json").write_text(json.dumps({"alignment_heads": [[0, 1]]}))
    convert(src, tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["model_type"] == "whisper" and cfg["n_vocab"] == VOCAB
    tok = json.loads((tmp_path / "out" / "tokenizer.json").read_text())
    stamps = [t for t in tok["added_tokens"] if t["content"].startswith("<|0.")]
    assert stamps[0] == {**stamps[0], "id": 53, "content": "<|0.00|>"}
    assert len(tok["added_tokens"]) == VOCAB - 50
    gen = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert gen["alignment_heads"] == [[0, 1]]


def test_timestamp_tokens_not_added_twice() -> None:
    tok = {"added_tokens": [{"id": 5, "content": "<|0.00|>"}]}
    assert add_timestamp_tokens(tok, 100) == 0
