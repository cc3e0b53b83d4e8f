"""Build worker/cpu/native's MLX extension (``make install``/``make test`` run ``python -m worker.cpu.native.build``).

The extension (fma_softmax.cpp) is an MLX C++ primitive bound with nanobind; it must share
nanobind's internals with MLX's own Python module (``mlx.core``), so it is compiled against the
nanobind release whose internals key MLX's wheel carries (``NB_VERSION`` below; the key is
checked in ``mlx/core*.so`` first) with MLX's domain (``NB_DOMAIN=mlx``). Only on Linux x86-64;
anywhere else, or when anything is missing or fails, it prints one line and exits 0: the worker
then uses MLX's own softmax (worker/cpu/softmax.py). Two g++ calls in parallel, ~10-20 s; an
up-to-date build is skipped. ``python -m worker.cpu.native.build`` also builds gemv.cpp (module
``_gemv``: few-row float32 products in OpenBLAS's order, worker/cpu/gemv.py), rows.cpp
(module ``_rows``: the KV store's row writes in place, worker/kv/rows.py), pages.cpp (module
``_pages``: K8V4 page completions in one node, worker/kv/pages.py) and qmatmul.cpp (module
``_qmatmul``: quantized layers' products, worker/cpu/qmatmul.py) the same way.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fma_softmax.cpp"
NAME = "_fma_softmax"
NB_VERSION = "3.1.0"  # its internals key, nanobind_..._a1_v22, is the one mlx 0.32's core uses
CXXFLAGS = ["-O2", "-fPIC", "-fvisibility=hidden", "-fno-strict-aliasing"]


def target() -> Path:
    """Where the built module goes (next to its source, importable as worker.cpu.native._fma_softmax)."""
    return HERE / (NAME + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def _mlx_version() -> str:
    import mlx.core as mx

    return str(getattr(mx, "__version__", ""))


def _c_string(path: Path, prefix: bytes) -> str | None:
    """The NUL-terminated string in PATH's bytes that starts with PREFIX (prefix included)."""
    data = path.read_bytes()
    start = data.find(prefix)
    if start < 0:
        return None
    return data[start:data.find(b"\0", start)].decode("ascii", "replace")


def _internals_key(core: Path) -> str | None:
    return _c_string(core, b"nanobind_system_")


TAG = "rapid-mlx built for mlx "


def _built_for(module: Path) -> str | None:
    """The MLX version MODULE was compiled against (read from its bytes, not imported)."""
    tag = _c_string(module, TAG.encode())
    return None if tag is None else tag[len(TAG):]


def _why_not() -> str | None:
    """Why this machine cannot build the extension (None: it can)."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"not Linux x86-64 ({sys.platform} {platform.machine()})"
    try:
        import nanobind
    except ImportError:
        return "nanobind is not installed (pip install nanobind==" + NB_VERSION + ")"
    if nanobind.__version__ != NB_VERSION:
        return f"nanobind {nanobind.__version__} installed, the build needs {NB_VERSION}"
    import mlx

    cores = sorted(Path(mlx.__path__[0]).glob("core*.so"))
    key = _internals_key(cores[0]) if cores else None
    if key is None or not key.endswith("_a1_v22"):
        return f"mlx's nanobind internals ({key}) are not nanobind {NB_VERSION}'s"
    return None


def _commands(out: Path, tmp: Path, source: Path) -> list[list[str]]:
    import mlx
    import nanobind

    nb = Path(nanobind.source_dir()).parent
    mlx_dir = Path(mlx.__path__[0])
    py_inc = sysconfig.get_paths()["include"]
    nb_obj, ext_obj = tmp / "nb.o", tmp / "ext.o"
    return [
        ["g++", *CXXFLAGS, "-std=c++17", "-DNB_BUILD", "-DNB_COMPACT_ASSERTIONS", f"-I{py_inc}",
         f"-I{nb / 'include'}", f"-I{nb / 'ext' / 'robin_map' / 'include'}", "-c",
         str(nb / "src" / "nb_combined.cpp"), "-o", str(nb_obj)],
        ["g++", *CXXFLAGS, "-std=c++20", "-ffp-contract=off", "-DNB_DOMAIN=mlx",
         f"-DBUILT_FOR_MLX=\"{_mlx_version()}\"", f"-I{py_inc}",
         f"-I{nb / 'include'}", f"-I{mlx_dir / 'include'}", "-c", str(source), "-o",
         str(ext_obj)],
        ["g++", "-shared", "-o", str(out), str(ext_obj), str(nb_obj), f"-L{mlx_dir / 'lib'}",
         "-lmlx", f"-Wl,-rpath,{mlx_dir / 'lib'}"],
    ]


def build(force: bool = False, source: Path | None = None, out: Path | None = None
          ) -> Path | None:
    """Build the extension (SOURCE into OUT: the softmax's by default) if it is missing, older
    than its source or built for another MLX; its path, or None."""
    source = SOURCE if source is None else source
    out = target() if out is None else out
    if not source.exists():
        print(f"worker/cpu/native: not built ({source.name} is not installed); MLX's own ops")
        return None
    newest = max(p.stat().st_mtime for p in [source, *source.parent.glob("*.h")])
    if (not force and out.exists() and out.stat().st_mtime >= newest
            and _built_for(out) == _mlx_version()):
        print(f"worker/cpu/native: {out.name} is up to date")
        return out
    why = _why_not()
    if why is not None:
        print(f"worker/cpu/native: not built ({why}); attention uses MLX's own softmax")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        partial = Path(tmp) / out.name
        compile_nb, compile_ext, link = _commands(partial, Path(tmp), source)
        try:
            jobs = [subprocess.Popen(c, stderr=subprocess.PIPE, text=True)
                    for c in (compile_nb, compile_ext)]
            errors = [j.communicate()[1] for j in jobs]
            if any(j.returncode for j in jobs):
                raise RuntimeError(next(e for e, j in zip(errors, jobs, strict=True)
                                        if j.returncode)[-2000:])
            subprocess.run(link, check=True, capture_output=True, text=True)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", None) or str(exc)
            print(f"worker/cpu/native: build failed; attention uses MLX's own softmax\n{detail}")
            return None
        os.replace(partial, out)
    print(f"worker/cpu/native: built {out.name}")
    return out


if __name__ == "__main__":
    build(force="--force" in sys.argv)
    # the one-row products in OpenBLAS's order (gemv.cpp, worker/cpu/gemv.py)
    build("--force" in sys.argv, HERE / "gemv.cpp", HERE / ("_gemv" + target().name[len(NAME):]))
    # row writes in place (rows.cpp, worker/kv/rows.py)
    build("--force" in sys.argv, HERE / "rows.cpp", HERE / ("_rows" + target().name[len(NAME):]))
    # K8V4 page completions in one node (pages.cpp, worker/kv/pages.py)
    build("--force" in sys.argv, HERE / "pages.cpp", HERE / ("_pages" + target().name[len(NAME):]))
    # quantized layers' products dequantized in registers (qmatmul.cpp, worker/cpu/qmatmul.py)
    build("--force" in sys.argv, HERE / "qmatmul.cpp",
          HERE / ("_qmatmul" + target().name[len(NAME):]))
