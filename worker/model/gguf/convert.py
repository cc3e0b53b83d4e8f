"""Convert a GGUF file into an MLX model folder: `python -m worker.model.gguf.convert FILE OUT`.

Writes config.json (mlx-lm), model-NNNNN.safetensors, tokenizer.json, tokenizer_config.json (with
the file's chat template), generation_config.json and gguf_import.json (the source and, per GGML
type, what became of it). Imports no mlx (numpy and the gguf package only)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from worker.model.gguf.config import Unsupported, model_config
from worker.model.gguf.quants import GROUP
from worker.model.gguf.reader import GGUFFile
from worker.model.gguf.tensors import model_tensors, unmapped
from worker.model.gguf.tokenizer import generation_config, tokenizer_files

SHARD_BYTES = 2 << 30
DTYPES = {"float16": np.float16, "float32": np.float32}


def _write_json(path: Path, value: dict[str, Any]) -> None:
    """VALUE as indented JSON at PATH."""
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def convert(src: str | Path, out: str | Path, dtype: str = "float16",
            log: Any = None) -> dict[str, Any]:
    """Convert the GGUF file SRC into the MLX folder OUT (replaced whole, written beside it first);
    return the import summary (also in OUT/gguf_import.json)."""
    gguf = GGUFFile(src)
    stray = unmapped(gguf)
    if stray:
        raise Unsupported(f"tensors not mapped: {', '.join(stray[:5])}")
    tokenizer, tok_config, notes = tokenizer_files(gguf)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        summary = _write_folder(gguf, tmp, DTYPES[dtype], dtype, log)
        summary["notes"] = notes + summary["notes"]
        _write_json(tmp / "tokenizer.json", tokenizer)
        _write_json(tmp / "tokenizer_config.json", tok_config)
        _write_json(tmp / "generation_config.json", generation_config(gguf))
        _write_json(tmp / "gguf_import.json", summary)
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp made it 0700
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary


def _write_folder(gguf: GGUFFile, folder: Path, np_dtype: Any, dtype: str,
                  log: Any) -> dict[str, Any]:
    """Weights (sharded) and config.json into FOLDER; the summary of what each type became."""
    shard: dict[str, np.ndarray] = {}
    shard_bytes, shards = 0, 0
    quantization: dict[str, Any] = {}
    became: dict[str, str] = {}
    counts: Counter[str] = Counter()

    def flush() -> None:
        nonlocal shard, shard_bytes, shards
        if shard:
            shards += 1
            save_file(shard, str(folder / f"model-{shards:05d}.safetensors"),
                      metadata={"format": "mlx"})
            shard, shard_bytes = {}, 0

    for module, arrays, bits in model_tensors(gguf, np_dtype):
        qtype = gguf.tensors[_source_name(gguf, module, arrays)].type_name
        counts[qtype] += 1
        if bits:
            quantization[module] = {"group_size": GROUP, "bits": bits, "mode": "affine"}
            became[qtype] = f"MLX affine {bits}-bit, group {GROUP} (same values; scales {dtype})"
        else:
            became.setdefault(qtype, f"stored as {dtype}" if qtype in ("F32", "F16", "BF16")
                              else f"dequantized to {dtype} (MLX has no equal format)")
        for key, arr in arrays.items():
            shard[key] = arr
            shard_bytes += arr.nbytes
        if log:
            log(f"{module}: {qtype} -> {f'affine {bits}-bit' if bits else dtype}")
        if shard_bytes >= SHARD_BYTES:
            flush()
    flush()
    default_bits = Counter(q["bits"] for q in quantization.values()).most_common(1)
    quant = None
    if quantization:  # modules of another width than the most common one are named
        bits = default_bits[0][0]
        quant = {"group_size": GROUP, "bits": bits, "mode": "affine",
                 **{m: q for m, q in quantization.items() if q["bits"] != bits}}
    _write_json(folder / "config.json", model_config(gguf, quant))
    notes = [f"{q}: {how}" for q, how in sorted(became.items())]
    return {"source": str(gguf.path), "architecture": gguf.architecture, "dtype": dtype,
            "tensor_types": dict(counts), "notes": notes}


def _source_name(gguf: GGUFFile, module: str, arrays: dict[str, np.ndarray]) -> str:
    """The GGUF tensor a converted module's arrays came from (for the summary)."""
    from worker.model.gguf.tensors import hf_name

    keys = set(arrays)
    for name in gguf.tensors:
        mapped = hf_name(name)
        if mapped and mapped.rpartition(".")[0] == module and (
                mapped in keys or mapped.endswith(".weight") and f"{module}.weight" in keys):
            return name
    raise KeyError(module)


def main(argv: list[str] | None = None) -> int:
    """The command line: FILE OUT [--dtype]; prints the import notes, exits 2 when unsupported."""
    parser = argparse.ArgumentParser(prog="rapid-mlx convert-gguf",
                                     description="Convert a GGUF file into an MLX model folder.")
    parser.add_argument("file", help="a .gguf file")
    parser.add_argument("out", help="the MLX folder to write (replaced if it exists)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float16",
                        help="float tensors, dequantized tensors and quantization scales "
                             "(float32 keeps every value exact; default float16)")
    parser.add_argument("--verbose", action="store_true", help="one line per tensor")
    args = parser.parse_args(argv)
    try:
        summary = convert(args.file, args.out, args.dtype,
                          log=(lambda m: print(m, file=sys.stderr)) if args.verbose else None)
    except (Unsupported, OSError, ValueError) as exc:
        print(f"error: cannot convert {args.file}: {exc}", file=sys.stderr)
        return 2
    for note in summary["notes"]:
        print(f"  {note}", file=sys.stderr)
    print(Path(args.out).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
