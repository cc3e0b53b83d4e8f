"""Convert a faster-whisper (CTranslate2) Whisper folder into the folder mlx-audio's Whisper loads.

Usage: ``python -m worker.kinds.stt.convert_ct2 SRC DST [--dtype float16|float32]``.
SRC holds model.bin, config.json and tokenizer.json (faster-whisper's layout); DST gets
config.json, model.safetensors and the tokenizer / feature-extractor files transformers'
WhisperProcessor reads.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from worker.kinds.stt.ct2_reader import read_ct2
from worker.kinds.stt.ct2_tokenizer import write_tokenizer_files

_LAYER = re.compile(r"^(encoder|decoder)/layer_(\d+)/(.+)$")
_SIMPLE = {"self_attention/layer_norm": "attn_ln", "attention/layer_norm": "cross_attn_ln",
           "ffn/layer_norm": "mlp_ln", "ffn/linear_0": "mlp1", "ffn/linear_1": "mlp2",
           "self_attention/linear_1": "attn.out", "attention/linear_0": "cross_attn.query",
           "attention/linear_2": "cross_attn.out"}
_TOP = {"encoder/conv1": "encoder.conv1", "encoder/conv2": "encoder.conv2",
        "encoder/layer_norm": "encoder.ln_post", "decoder/layer_norm": "decoder.ln"}
_PARAM = {"gamma": "weight", "beta": "bias", "weight": "weight", "bias": "bias"}


class ConversionError(ValueError):
    """The source folder is not a CTranslate2 Whisper model."""


def _split_fused(prefix: str, parts: tuple[str, ...], param: str,
                 value: np.ndarray) -> dict[str, np.ndarray]:
    """Split a fused q/k/v (or k/v) projection; Whisper's key projection has no bias."""
    chunks = np.split(value, len(parts), axis=0)
    out = {}
    for part, chunk in zip(parts, chunks, strict=True):
        if part.endswith("key") and param == "bias":
            continue
        out[f"{prefix}.{part}.{param}"] = chunk
    return out


def map_variables(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CTranslate2 WhisperSpec variable names -> mlx-audio Whisper parameter names."""
    out: dict[str, np.ndarray] = {}
    for name, value in variables.items():
        if value.ndim == 0 or name.startswith(("encoder/position_encodings", "decoder/projection")):
            continue  # scalars are options; encoder positions are computed; projection is tied
        if name == "decoder/embeddings/weight":
            out["decoder.token_embedding.weight"] = value
            continue
        if name == "decoder/position_encodings/encodings":
            out["decoder.positional_embedding"] = value
            continue
        scope, _, param = name.rpartition("/")
        if param not in _PARAM:
            raise ConversionError(f"unexpected variable {name}")
        param = _PARAM[param]
        if scope in _TOP:
            if scope.startswith("encoder/conv") and param == "weight":
                value = value.transpose(0, 2, 1)  # (out, in, k) -> MLX Conv1d (out, k, in)
            out[f"{_TOP[scope]}.{param}"] = value
            continue
        match = _LAYER.match(scope)
        if match is None:
            raise ConversionError(f"unexpected variable {name}")
        side, index, rest = match.groups()
        prefix = f"{side}.blocks.{index}"
        if rest == "self_attention/linear_0":
            out.update(_split_fused(f"{prefix}.attn", ("query", "key", "value"), param, value))
        elif rest == "attention/linear_1":
            out.update(_split_fused(f"{prefix}.cross_attn", ("key", "value"), param, value))
        elif rest in _SIMPLE:
            out[f"{prefix}.{_SIMPLE[rest]}.{param}"] = value
        else:
            raise ConversionError(f"unexpected variable {name}")
    return out


def dimensions(variables: dict[str, np.ndarray]) -> dict[str, int]:
    """mlx-audio's ModelDimensions read off the CTranslate2 variables."""
    def layers(side: str) -> int:
        return len({m.group(2) for k in variables if (m := _LAYER.match(k)) and m.group(1) == side})

    vocab, text_state = variables["decoder/embeddings/weight"].shape
    audio_state, n_mels, _ = variables["encoder/conv1/weight"].shape
    return {"n_mels": int(n_mels),
            "n_audio_ctx": int(variables["encoder/position_encodings/encodings"].shape[0]),
            "n_audio_state": int(audio_state),
            "n_audio_head": int(variables["encoder/num_heads"]),
            "n_audio_layer": layers("encoder"), "n_vocab": int(vocab),
            "n_text_ctx": int(variables["decoder/position_encodings/encodings"].shape[0]),
            "n_text_state": int(text_state),
            "n_text_head": int(variables["decoder/num_heads"]), "n_text_layer": layers("decoder")}


def convert(src: Path, dst: Path, dtype: str = "float16") -> dict[str, int]:
    """Write the mlx-audio Whisper folder DST from the CTranslate2 folder SRC; return its dims."""
    from safetensors.numpy import save_file

    spec, variables = read_ct2(src / "model.bin")
    if spec != "WhisperSpec":
        raise ConversionError(f"{src} holds a {spec} model, not WhisperSpec")
    dims = dimensions(variables)
    weights = {k: np.ascontiguousarray(v.astype(dtype)) for k, v in map_variables(variables).items()}
    ct2_config = json.loads((src / "config.json").read_text()) if (src / "config.json").exists() else {}
    dst.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "mlx"})
    (dst / "config.json").write_text(json.dumps({"model_type": "whisper", **dims}, indent=2))
    gen = {"alignment_heads": ct2_config.get("alignment_heads", []),
           "is_multilingual": dims["n_vocab"] >= 51865}
    (dst / "generation_config.json").write_text(json.dumps(gen, indent=2))
    write_tokenizer_files(src, dst, dims)
    return dims


def main(argv: list[str] | None = None) -> int:
    """Command line: convert SRC to DST."""
    parser = argparse.ArgumentParser(prog="python -m worker.kinds.stt.convert_ct2", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="faster-whisper / CTranslate2 Whisper folder")
    parser.add_argument("dst", type=Path, help="output folder (mlx-audio Whisper layout)")
    parser.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    args = parser.parse_args(argv)
    try:
        dims = convert(args.src, args.dst, args.dtype)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot convert {args.src}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.dst} (whisper, {dims['n_audio_layer']}+{dims['n_text_layer']} layers, "
          f"vocab {dims['n_vocab']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
