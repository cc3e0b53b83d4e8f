"""GGUF files on the command line: `convert-gguf FILE OUT`, and `serve FILE.gguf` (converted once
into a cache folder). The conversion runs `python -m worker.model.gguf...` in its own process:
the gateway does not import worker/ code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click


def is_gguf_file(model: str) -> bool:
    """True for a MODEL argument naming an existing .gguf file."""
    return model.lower().endswith(".gguf") and Path(model).expanduser().is_file()


def gguf_folders(models: tuple[str, ...]) -> tuple[str, ...]:
    """MODELS with each .gguf file replaced by its converted cache folder (converted now when the
    cache has none; the conversion's progress and notes go to stderr)."""
    out = []
    for model in models:
        if not is_gguf_file(model):
            out.append(model)
            continue
        cmd = [sys.executable, "-m", "worker.model.gguf.cache", model]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0:
            raise click.exceptions.Exit(done.returncode)
        out.append(done.stdout.strip().splitlines()[-1])
    return tuple(out)


@click.command("convert-gguf")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--dtype", type=click.Choice(["float16", "float32"]), default="float16",
              show_default=True, help="float and dequantized tensors and quantization scales "
                                      "(float32 keeps every value exact)")
@click.option("--verbose", is_flag=True, help="one line per tensor")
def convert_gguf(file: str, out: str, dtype: str, verbose: bool) -> None:
    """Convert a GGUF file (llama.cpp, LM Studio, Ollama) into an MLX model folder OUT."""
    cmd = [sys.executable, "-m", "worker.model.gguf.convert", file, out, "--dtype", dtype,
           *(["--verbose"] if verbose else [])]
    sys.exit(subprocess.run(cmd, check=False).returncode)
