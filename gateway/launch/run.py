"""`rapid-mlx launch CLIENT`: ask the server what it serves, print or write the client's
configuration, then run the client if it is installed."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import click

from gateway.launch.configs import BUILDERS, ClientConfig, Target
from gateway.ops.opsctl import OpsError, call

# the CLIs `make install` pins into .venv/agent-clis (deploy/ensure-agent-clis.sh: same versions)
PINNED = {"codex": "@openai/codex@0.171.0", "claude": "@anthropic-ai/claude-code@2.1.332"}
INSTALL = {"opencode": "npm install -g opencode-ai",
           "aider": "python -m pip install aider-install && aider-install"}
CLIS_ENV = "RAPID_MLX_AGENT_CLIS"  # where the pinned CLIs are (default: <venv>/agent-clis)


def agent_clis() -> Path:
    """The npm prefix holding the pinned agent CLIs."""
    return Path(os.environ.get(CLIS_ENV) or Path(sys.prefix) / "agent-clis")


def find_client(client: str) -> str | None:
    """CLIENT's executable: the pinned one `make install` put in the project's environment,
    else one on PATH, else None."""
    pinned = agent_clis() / "node_modules" / ".bin" / client
    if client in PINNED and os.access(pinned, os.X_OK):
        return str(pinned)
    return shutil.which(client)


def install_hint(client: str) -> str:
    """How to install CLIENT (the pinned version for the CLIs the project tests)."""
    if client in PINNED:
        return (f"`make install` (deploy/ensure-agent-clis.sh) or: npm install --prefix "
                f"{agent_clis()} {PINNED[client]}")
    return INSTALL[client]


def target(url: str, alias: str | None, api_key: str | None) -> Target:
    """The served alias (the one asked for, or the first) and its context length."""
    base = url.rstrip("/").removesuffix("/v1")
    try:
        _, body = call(base, "/v1/models", key=api_key)
    except OpsError as exc:
        raise click.ClickException(str(exc)) from exc
    models = {m["id"]: m for m in body.get("data", [])}
    if not models:
        raise click.ClickException(f"{url} serves no model")
    if alias is None:
        alias = next(iter(models))
    if alias not in models:
        raise click.ClickException(f"{url} does not serve '{alias}' (it serves: "
                                   f"{', '.join(models)})")
    ctx = int(models[alias].get("context_length") or 0) or 4096
    return Target(base=base, alias=alias, context_length=ctx, api_key=api_key or "rapid-mlx")


def render(cfg: ClientConfig) -> str:
    """What `launch` prints: the file's keys, the files beside it, the environment lines."""
    lines = [f"# {cfg.client}: {cfg.path}", cfg.merge("").rstrip()]
    for path, text in cfg.files.items():
        lines += ["", f"# {path}", text.rstrip()]
    if cfg.env:
        lines += ["", "# environment"] + [f"export {k}={v}" for k, v in cfg.env.items()]
    if cfg.note:
        lines += ["", f"# {cfg.note}"]
    return "\n".join(lines) + "\n"


def write(cfg: ClientConfig) -> Path | None:
    """Merge into the client's file; the old file is kept as FILE.bak-TIMESTAMP (returned)."""
    old = cfg.path.read_text() if cfg.path.exists() else ""
    try:
        new = cfg.merge(old)
    except ValueError as exc:
        raise click.ClickException(f"cannot merge into {cfg.path}: {exc}") from exc
    backup = None
    if old:
        backup = cfg.path.with_name(f"{cfg.path.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copy2(cfg.path, backup)
    cfg.path.parent.mkdir(parents=True, exist_ok=True)
    cfg.path.write_text(new)
    for path, text in cfg.files.items():  # ours alone: rewritten whole
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return backup


def launch(client: str, url: str, alias: str | None, api_key: str | None, do_write: bool,
           do_exec: bool, extra: tuple[str, ...]) -> None:
    """Print (or write) CLIENT's configuration for the server at URL, then exec CLIENT."""
    cfg = BUILDERS[client](target(url, alias, api_key), Path.home())
    if do_write:
        backup = write(cfg)
        click.echo(f"wrote {cfg.path}" + (f" (previous file: {backup})" if backup else ""))
        for path in cfg.files:
            click.echo(f"wrote {path}")
        if cfg.env:
            click.echo("\n".join(f"export {k}={v}" for k, v in cfg.env.items()))
        if cfg.note:
            click.echo(f"# {cfg.note}")
    else:
        click.echo(render(cfg), nl=False)
    if not do_exec:
        return
    exe = find_client(client)
    if exe is None:
        click.echo(f"{client} is not installed; install it with: {install_hint(client)}",
                   err=True)
        return
    if not (do_write or cfg.env_enough):
        click.echo(f"(not running {client}: pass --write so it reads this configuration, or "
                   "set it up by hand as above)", err=True)
        return
    os.execvpe(exe, [client, *cfg.args, *extra], {**os.environ, **cfg.env})
