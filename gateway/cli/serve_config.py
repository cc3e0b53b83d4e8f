"""What `rapid-mlx serve` makes of its options: the served models, the worker group's arguments
and the data directory."""

from __future__ import annotations

import os
import sqlite3

import click

from gateway.aliases import served_model, unknown_model
from gateway.cli.common import OneLineError, aliases_or_fail
from gateway.served import ServedModel
from gateway.storage.paths import RESPONSES_DB, default_data_dir, prepare_data_dir
from gateway.storage.schema import SchemaError, connect

DEFAULT_ALIAS = "default"  # the embedded demo model (gateway/data/aliases.toml)


def served_models(models: tuple[str, ...], names: tuple[str, ...], tool_parser: str | None,
                  reasoning_parser: str | None, aliases_file: str | None) -> list[ServedModel]:
    """The models `serve` serves (the demo when none is named), each checked against the alias
    table; a one-line error for an unknown one, a usage error when names do not fit."""
    aliases = aliases_or_fail(aliases_file)
    models = models or (DEFAULT_ALIAS,)
    for model in models:
        problem = unknown_model(model, aliases)
        if problem:
            raise OneLineError(problem)
    if names and len(names) != len(models):
        raise click.UsageError("--served-model-name must be given once per MODEL")
    out = [served_model(model, names[i] if names else None, aliases, tool_parser,
                        reasoning_parser) for i, model in enumerate(models)]
    if len({s.alias for s in out}) != len(out):
        raise click.UsageError("two models would share an alias; use --served-model-name")
    return out


def data_dir(path: str | None) -> str:
    """The data directory, created 0700 with its database now, so that a bad one (unwritable,
    not a database, a newer schema) stops the start with its reason."""
    try:
        directory = prepare_data_dir(path or default_data_dir())
        connect(directory / RESPONSES_DB).close()
    except (OSError, ValueError, sqlite3.Error, SchemaError) as exc:
        raise click.ClickException(f"--data-dir: {exc}") from exc
    return str(directory)


def group_args(ranks: int, hostfile: str | None, port: int) -> list[str]:
    """Worker options of a tensor-parallel group (worker/tp/launch.py reads them)."""
    if hostfile and ranks == 1:
        raise click.UsageError("--tp-hostfile needs --tensor-parallel N (its number of hosts)")
    if ranks == 1:
        return []
    return (["--tensor-parallel", str(ranks)]
            + (["--tp-hostfile", os.path.abspath(hostfile)] if hostfile else [])
            + (["--tp-port", str(port)] if port else []))
