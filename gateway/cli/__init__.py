"""The `rapid-mlx` command: serve models, list them, operate a running server."""

from __future__ import annotations

import click

from gateway.cli.gguf import convert_gguf
from gateway.cli.launch import launch
from gateway.cli.models import models, pull
from gateway.cli.ops import keys, status, swap
from gateway.cli.serve import serve
from gateway.cli.workers import (
    convert_embeddings,
    convert_kokoro,
    convert_whisper,
    kokoro_voices,
    worker,
)


def _print_version(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    """--version: print the installed package's version and exit."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        click.echo(f"rapid-mlx {version('rapid-mlx')}")
    except PackageNotFoundError:
        click.echo("rapid-mlx (version unknown: the package is not installed)")
    ctx.exit()


@click.group()
@click.option("--version", "-V", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Print the version and exit.")
def main() -> None:
    """rapid-mlx: an OpenAI-compatible inference server on MLX."""


for _command in (serve, worker, convert_embeddings, convert_whisper, convert_kokoro, kokoro_voices,
                 status, swap, keys, models, pull, launch, convert_gguf):
    main.add_command(_command)
