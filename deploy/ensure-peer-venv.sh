#!/bin/sh
# The reference product as a bench peer (bench/README.md): PyPI `rapid-mlx` 0.16.10 in its own
# venv at $1 (default .venv/peer-rapid-mlx), so neither it nor its torch dependency enters the
# server's venv. Its command is $1/bin/rapid-mlx (our own `rapid-mlx` stays .venv/bin/rapid-mlx).
# - torch==2.13.0 first: the CPU wheel on this machine's disk (a bare `torch` would fetch a CUDA
#   build), as deploy/ensure-reference-venv.sh does.
# - mlx[cpu]: on Linux `mlx` alone has no libmlx.so (the reference product asks for plain `mlx`).
# - torchvision is removed again: the product requires it, but PyPI's Linux wheel is built for the
#   CUDA torch; beside torch 2.13.0+cpu its C ops fail to register and transformers then cannot
#   import any config class (e.g. LlamaConfig). The text server never uses it.
# Idempotent: a stamp file records what is installed; a second run returns at once.
set -e
DIR="${1:-.venv/peer-rapid-mlx}"
PY="${PYTHON:-python3}"
STAMP="$DIR/.peer-stamp"
PKGS="rapid-mlx==0.16.10 mlx[cpu]>=0.32.1,<0.33"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PKGS" ] && [ -x "$DIR/bin/rapid-mlx" ]; then
    exit 0
fi
fail() {
    echo "ensure-peer-venv: $1" >&2
    echo "ensure-peer-venv: the bench peer rapid-mlx 0.16.10 needs PyPI (and torch 2.13.0 from" \
         "this machine's wheel cache); without it, run the bench with --peers mlx_lm" >&2
    exit 1
}
"$PY" -m venv "$DIR" || fail "could not create the venv $DIR"
PIP="$DIR/bin/python -m pip install -q --disable-pip-version-check"
$PIP torch==2.13.0 || fail "pip could not install torch==2.13.0"
$PIP "rapid-mlx==0.16.10" "mlx[cpu]>=0.32.1,<0.33" || fail "pip could not install rapid-mlx==0.16.10"
"$DIR/bin/python" -m pip uninstall -q -y torchvision >/dev/null 2>&1 || true
"$DIR/bin/python" -c "import mlx.core, rapid_mlx; from transformers import LlamaConfig, Qwen3Config" \
    || fail "rapid-mlx was installed into $DIR but does not import"
echo "$PKGS" > "$STAMP"
