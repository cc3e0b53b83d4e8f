"""What the `rapid-mlx` commands share: the one-line error, the alias table and --url."""

from __future__ import annotations

from typing import Any

import click

from gateway.aliases import AliasEntry, load_aliases, user_alias_file


class OneLineError(click.ClickException):
    """An error shown as one `error: ...` line (no usage text), with its own exit code."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        """Print the one line to stderr."""
        click.echo(f"error: {self.message}", err=True)


def aliases_or_fail(aliases_file: str | None) -> dict[str, AliasEntry]:
    """The alias table (built-in plus the user's file), or a one-line error naming the problem."""
    try:
        return load_aliases(user_alias_file(aliases_file))
    except ValueError as exc:
        raise OneLineError(str(exc)) from exc


URL = click.option("--url", default="http://127.0.0.1:8000", show_default=True,
                   envvar="RAPID_MLX_URL", help="the running server")
