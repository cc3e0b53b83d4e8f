"""Convert a Hugging Face / sentence-transformers encoder folder into the folder we serve.

    python -m worker.kinds.embed.convert SRC DST [--dtype float32|float16|bfloat16] [-q]
                                            [--matryoshka-dims 768,512,256,128]

The weights go through mlx-embeddings' own conversion (its per-architecture ``sanitize``);
the sentence-transformers files (modules.json, 1_Pooling/..., sentence_bert_config.json,
config_sentence_transformers.json) and the tokenizer are copied beside them."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
            "README.md", "vocab.txt", "sentencepiece.bpe.model", "tokenizer.model",
            "merges.txt", "vocab.json")


def copy_st_files(src: Path, dst: Path) -> list[str]:
    """Copy the sentence-transformers module folders' configs (not their weights) and files."""
    copied: list[str] = []
    for name in ST_FILES:
        if (src / name).is_file() and not (dst / name).exists():
            shutil.copy2(src / name, dst / name)
            copied.append(name)
    for sub in sorted(p for p in src.iterdir() if p.is_dir() and p.name[:1].isdigit()):
        for f in sub.rglob("*"):  # e.g. 1_Pooling/config.json, 2_Dense/config.json
            if f.is_file() and f.suffix not in (".safetensors", ".bin", ".pt"):
                out = dst / f.relative_to(src)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, out)
                copied.append(str(f.relative_to(src)))
    return copied


def write_matryoshka(dst: Path, dims: list[int]) -> None:
    """Record the sizes the model was trained to be truncated to (our key in the ST config)."""
    path = dst / "config_sentence_transformers.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["matryoshka_dims"] = sorted(set(dims), reverse=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def convert(src: str, dst: str, dtype: str = "float32", quantize: bool = False,
            q_bits: int = 8, matryoshka: list[int] | None = None) -> Path:
    """Write DST: SRC's weights converted by mlx-embeddings, plus its tokenizer and ST files."""
    from mlx_embeddings.convert import convert as mlx_convert

    out = Path(dst)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} exists and is not empty; remove it or pick another folder")
    mlx_convert(src, str(out), dtype=dtype, quantize=quantize, q_bits=q_bits)
    if Path(src).is_dir():
        copy_st_files(Path(src), out)
    else:  # a Hugging Face repo id: copy from the snapshot mlx-embeddings downloaded
        from mlx_embeddings.utils import get_model_path

        copy_st_files(get_model_path(src), out)
    if matryoshka:
        write_matryoshka(out, matryoshka)
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and convert."""
    p = argparse.ArgumentParser(prog="rapid-mlx convert-embeddings", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="a Hugging Face repo id or a local sentence-transformers folder")
    p.add_argument("dst", help="the folder to write (must not exist, or be empty)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                   help="weight type (float32 is fastest on CPU; float16 halves the size)")
    p.add_argument("-q", "--quantize", action="store_true", help="quantize the linear layers")
    p.add_argument("--q-bits", type=int, default=8, choices=[4, 6, 8])
    p.add_argument("--matryoshka-dims", default="",
                   help="comma-separated sizes the model was trained to be truncated to; "
                   "lets clients ask `dimensions`")
    args = p.parse_args(argv)
    dims = [int(d) for d in args.matryoshka_dims.split(",") if d.strip()]
    out = convert(args.src, args.dst, args.dtype, args.quantize, args.q_bits, dims)
    print(f"wrote {out}; serve it with: rapid-mlx serve {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
