"""`rapid-mlx launch`: point a coding agent at the running server, then run it."""

from __future__ import annotations

import click

from gateway.cli.common import URL


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("client", type=click.Choice(["codex", "claude", "opencode", "aider"]))
@click.argument("client_args", nargs=-1, type=click.UNPROCESSED)
@URL
@click.option("--model", "alias", default=None, help="the alias to use (default: the first served)")
@click.option("--api-key", default=None, envvar="RAPID_MLX_API_KEY")
@click.option("--write", "do_write", is_flag=True,
              help="merge it into the file the client reads (the old file is backed up)")
@click.option("--no-exec", "no_exec", is_flag=True, help="only print or write; do not run CLIENT")
def launch(client: str, client_args: tuple[str, ...], url: str, alias: str | None,
           api_key: str | None, do_write: bool, no_exec: bool) -> None:
    """Print the configuration pointing CLIENT at the running server, then run CLIENT."""
    from gateway.launch.run import launch as run

    run(client, url, alias, api_key, do_write, not no_exec, client_args)
