"""Commands that run a worker/ module in its own process (the gateway imports no worker/ code):
`worker` and the model converters."""

from __future__ import annotations

import os
import subprocess
import sys

import click


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                 "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def worker(args: tuple[str, ...]) -> None:
    """Run one model worker that connects to a gateway (`python -m worker`; try --help)."""
    from gateway.plane.tp_group import tensor_parallel

    cmd = [sys.executable, "-m", "worker", *args]
    if tensor_parallel(list(args)) > 1:  # a worker group: worker.tp.launch starts its ranks
        cmd = [sys.executable, "-m", "worker.tp.launch", "--", *cmd]
    os.execv(sys.executable, cmd)


@click.command("convert-embeddings",
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                 "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def convert_embeddings(args: tuple[str, ...]) -> None:
    """Convert a sentence-transformers checkpoint for serving: SRC DST (try --help)."""
    # the converter imports mlx (through mlx-embeddings), which the gateway never does
    os.execv(sys.executable, [sys.executable, "-m", "worker.kinds.embed.convert", *args])


@click.command("convert-whisper")
@click.argument("src", type=click.Path(exists=True, file_okay=False))
@click.argument("dst", type=click.Path(file_okay=False))
@click.option("--dtype", type=click.Choice(["float16", "float32"]), default="float16",
              show_default=True, help="weights dtype in the output")
def convert_whisper(src: str, dst: str, dtype: str) -> None:
    """Convert a faster-whisper (CTranslate2) Whisper folder SRC into an MLX folder DST."""
    cmd = [sys.executable, "-m", "worker.kinds.stt.convert_ct2", src, dst, "--dtype", dtype]
    sys.exit(subprocess.run(cmd, check=False).returncode)


@click.command("convert-kokoro",
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                 "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def convert_kokoro(args: tuple[str, ...]) -> None:
    """Convert a Kokoro-82M ONNX export for serving: SRC DST [--voices] [--vocab] (try --help)."""
    os.execv(sys.executable, [sys.executable, "-m", "worker.kinds.tts.convert", *args])


@click.command("kokoro-voices")
@click.argument("src", type=click.Path(exists=True))
@click.argument("dst", type=click.Path(file_okay=False))
def kokoro_voices(src: str, dst: str) -> None:
    """Add Kokoro voices (kokoro-js tarball, NAME.bin folder, .npz) to the Kokoro folder DST."""
    cmd = [sys.executable, "-m", "worker.kinds.tts.voices", src, dst]
    sys.exit(subprocess.run(cmd, check=False).returncode)
