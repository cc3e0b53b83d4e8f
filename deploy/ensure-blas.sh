#!/bin/sh
# Get an optimized BLAS for MLX on Linux: the mlx[cpu] wheel ships the slow reference BLAS, and
# workers preload OpenBLAS when it is installed (worker/cpu/blas.py). Never fails the setup.
# With --check (what `make serve` runs) it only reports: nothing is installed.
[ "$(uname -s)" = "Linux" ] || exit 0
CHECK=0; [ "$1" = "--check" ] && CHECK=1
for lib in /usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0 /usr/lib/*-linux-gnu/libopenblas.so.0 /usr/lib64/libopenblas.so.0; do
  [ -e "$lib" ] && { echo "OpenBLAS: $lib"; exit 0; }
done
if [ "$CHECK" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi
  if [ "$SUDO" != none ]; then
    echo "Installing libopenblas0-pthread (about 28x faster prefill on CPU)..."
    ($SUDO apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1; }) \
      && { echo "OpenBLAS installed."; exit 0; }
  fi
fi
echo "NOTE: no OpenBLAS found; MLX will use its slow reference BLAS on this CPU."
echo "      Install it for speed: sudo apt-get install libopenblas0-pthread (Debian/Ubuntu)"
exit 0
