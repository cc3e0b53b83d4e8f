"""Commands about the models `serve` knows: `models` lists them, `pull` downloads one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from gateway.aliases import format_table, load_aliases, unknown_model, user_alias_file
from gateway.cli.common import OneLineError, aliases_or_fail
from protocol.process import EMBEDDED_PREFIX


@click.command()
@click.option("--aliases", "aliases_file", default=None, envvar="RAPID_MLX_ALIASES",
              help="a TOML file of extra or overriding aliases")
def models(aliases_file: str | None) -> None:
    """List the models `serve` knows by name (built-in aliases plus the user's file)."""
    try:
        click.echo(format_table(load_aliases(user_alias_file(aliases_file))))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


@click.command()
@click.argument("model")
@click.option("--revision", default=None, help="branch, tag or commit (default: main)")
@click.option("--aliases", "aliases_file", default=None, envvar="RAPID_MLX_ALIASES",
              help="a TOML file of extra or overriding aliases")
def pull(model: str, revision: str | None, aliases_file: str | None) -> None:
    """Download MODEL (an alias or Hugging Face repo id) into the local cache, ahead of serving."""
    aliases = aliases_or_fail(aliases_file)
    problem = unknown_model(model, aliases)
    if problem:
        raise OneLineError(problem)
    repo = aliases[model].repo if model in aliases else model
    if repo.startswith(EMBEDDED_PREFIX):
        click.echo(f"{model}: the embedded demo model ships with rapid-mlx; nothing to download")
        return
    folder = Path(repo).expanduser()
    if folder.is_dir():
        click.echo(f"{model}: a local folder ({folder.resolve()}); nothing to download")
        return
    # the worker's fetch downloads (in its own process: the gateway does not import worker/); its
    # progress and its one `error:` line go to this stderr, the folder to its stdout
    cmd = [sys.executable, "-m", "worker.model.fetch", repo, *(["--revision", revision] if revision
                                                         else [])]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise click.exceptions.Exit(done.returncode)
    click.echo(f"{model}: {repo} is in the local cache: {done.stdout.strip()}")
