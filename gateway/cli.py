"""The `rapid-mlx` command: serve models, list them, operate a running server."""

from __future__ import annotations

import json
import os
import sys

import click

from gateway.aliases import format_table, load_aliases, served_model, user_alias_file
from gateway.config import GatewayConfig
from gateway.served import ServedModel

DEFAULT_ALIAS = "default"  # the embedded demo model (gateway/data/aliases.toml)


def _served(models: tuple[str, ...], names: tuple[str, ...], tool_parser: str | None,
            reasoning_parser: str | None, aliases_file: str | None) -> list[ServedModel]:
    aliases = load_aliases(user_alias_file(aliases_file))
    models = models or (DEFAULT_ALIAS,)
    if names and len(names) != len(models):
        raise click.UsageError("--served-model-name must be given once per MODEL")
    out = [served_model(model, names[i] if names else None, aliases, tool_parser,
                        reasoning_parser) for i, model in enumerate(models)]
    if len({s.alias for s in out}) != len(out):
        raise click.UsageError("two models would share an alias; use --served-model-name")
    return out


@click.group()
def main() -> None:
    """rapid-mlx: an OpenAI-compatible inference server on MLX."""


@main.command()
@click.argument("models", nargs=-1)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--served-model-name", "names", multiple=True, help="alias per MODEL, in order")
@click.option("--api-key", "api_keys", multiple=True, envvar="RAPID_MLX_API_KEYS",
              help="accept only these keys (default: any)")
@click.option("--tool-call-parser", default=None)
@click.option("--reasoning-parser", default=None)
@click.option("--aliases", "aliases_file", default=None, envvar="RAPID_MLX_ALIASES",
              help="a TOML file of extra or overriding aliases")
@click.option("--kv-cache-turboquant", type=click.Choice(["k8v4", "none"]), default="k8v4",
              show_default=True, help="KV pages: 8-bit keys + 4-bit values, or full precision")
@click.option("--kv-cache-memory", default="0.1", show_default=True,
              help="KV pool per worker: bytes (2GiB, 512MB) or a fraction of RAM")
@click.option("--disable-prefix-cache", is_flag=True, help="no radix-tree prefix sharing")
@click.option("--max-batch", default=32, show_default=True, type=int)
@click.option("--prefill-budget", default=512, show_default=True, type=int,
              help="prompt tokens computed per engine step")
@click.option("--max-waiting", default=256, show_default=True, type=int)
@click.option("--context-length", default=0, type=int, help="cap every model's context")
@click.option("--worker-address", default="", help="bind workers here (default: private ipc)")
@click.option("--hang-timeout", default=30.0, show_default=True, type=float,
              help="seconds without progress, with work, before a worker is declared hung")
@click.option("--log-level", default="info", show_default=True)
@click.option("--no-spawn-workers", is_flag=True,
              help="start no workers: wait for `rapid-mlx worker --connect ADDR` to join")
@click.option("--shutdown-timeout", default=30.0, show_default=True, type=float,
              help="on SIGTERM, seconds running requests may take to finish")
@click.option("--swap-wait", default=30.0, show_default=True, type=float,
              help="seconds a request waits for a restarting or swapping worker")
@click.option("--swap-drain-timeout", default=30.0, show_default=True, type=float,
              help="on a hot swap, seconds running requests may take to finish")
@click.option("--max-start-crashes", default=5, show_default=True, type=int,
              help="crashes at start-up in a row before an alias is marked failed")
@click.option("--restart-backoff", default=0.5, show_default=True, type=float,
              help="first restart delay; doubles after each crash at start-up")
@click.option("--admin-key", default=None, envvar="RAPID_MLX_ADMIN_KEY",
              help="admin endpoints need this bearer key (default: loopback clients only)")
@click.option("--curve-dir", default=None, type=click.Path(file_okay=False),
              help="CURVE keys (see `rapid-mlx keys`): only listed workers may join")
@click.option("--worker-token-file", default=None, type=click.Path(dir_okay=False),
              help="external workers must send the token in this file (created if missing)")
@click.option("--insecure-worker-transport", is_flag=True,
              help="allow tcp:// workers without CURVE, and external workers without proof")
@click.option("--heartbeat-timeout", default=1.0, show_default=True, type=float,
              help="seconds a worker connection may leave a ping unanswered before an "
                   "external worker is declared gone")
def serve(models: tuple[str, ...], host: str, port: int, names: tuple[str, ...],
          api_keys: tuple[str, ...], tool_call_parser: str | None, reasoning_parser: str | None,
          aliases_file: str | None, kv_cache_turboquant: str, kv_cache_memory: str,
          disable_prefix_cache: bool, max_batch: int, prefill_budget: int, max_waiting: int, context_length: int,
          worker_address: str, hang_timeout: float, log_level: str, no_spawn_workers: bool,
          shutdown_timeout: float, swap_wait: float, swap_drain_timeout: float,
          max_start_crashes: int, restart_backoff: float, admin_key: str | None,
          curve_dir: str | None, worker_token_file: str | None, insecure_worker_transport: bool,
          heartbeat_timeout: float) -> None:
    """Serve MODELS (aliases, Hugging Face repo ids or local folders); none: the embedded demo."""
    from gateway.server import run

    if no_spawn_workers and not worker_address:
        raise click.UsageError("--no-spawn-workers needs --worker-address (where workers connect)")

    worker_args = ["--max-batch", str(max_batch), "--prefill-budget", str(prefill_budget),
                   "--max-waiting", str(max_waiting), "--log-level", log_level.upper(),
                   "--kv-cache-turboquant", kv_cache_turboquant,
                   "--kv-cache-memory", kv_cache_memory]
    if disable_prefix_cache:
        worker_args.append("--disable-prefix-cache")
    if context_length:
        worker_args += ["--context-length", str(context_length)]
    config = GatewayConfig(
        served=_served(models, names, tool_call_parser, reasoning_parser, aliases_file),
        host=host, port=port,
        worker_address=worker_address, worker_args=worker_args,
        api_keys=[k for k in api_keys if k], hang_timeout=hang_timeout, log_level=log_level,
        spawn_workers=not no_spawn_workers, shutdown_timeout=shutdown_timeout,
        swap_wait=swap_wait, swap_drain_timeout=swap_drain_timeout,
        max_start_crashes=max_start_crashes, restart_backoff=restart_backoff,
        admin_key=admin_key or None, curve_dir=curve_dir, worker_token_file=worker_token_file,
        insecure_worker_transport=insecure_worker_transport, heartbeat_timeout=heartbeat_timeout)
    problem = config.worker_plane_problem()
    if problem:
        raise click.ClickException(problem)
    try:
        config.worker_token()  # create the token file now, or say why it cannot be read
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"--worker-token-file: {exc}") from exc
    run(config)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def worker(args: tuple[str, ...]) -> None:
    """Run one model worker that connects to a gateway (`python -m worker`; try --help)."""
    os.execv(sys.executable, [sys.executable, "-m", "worker", *args])


_URL = click.option("--url", default="http://127.0.0.1:8000", show_default=True,
                    envvar="RAPID_MLX_URL", help="the running server")


@main.command()
@_URL
@click.option("--api-key", default=None, envvar="RAPID_MLX_API_KEY")
@click.option("--json", "as_json", is_flag=True, help="print the raw JSON")
@click.option("-v", "--verbose", is_flag=True, help="one line per running request")
def status(url: str, api_key: str | None, as_json: bool, verbose: bool) -> None:
    """Show every worker of a running server as a table."""
    from gateway.opsctl import OpsError, call, table

    try:
        _, body = call(url, "/v1/workers", key=api_key)
    except OpsError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(body, indent=2) if as_json else table(body["data"], verbose))


@main.command()
@click.argument("alias")
@click.argument("model", required=False)
@_URL
@click.option("--revision", default=None, help="Hugging Face revision of MODEL")
@click.option("--admin-key", default=None, envvar="RAPID_MLX_ADMIN_KEY")
@click.option("--drain-timeout", default=None, type=float,
              help="seconds running requests may take (default: the server's)")
@click.option("--timeout", default=600.0, show_default=True, type=float,
              help="seconds to wait for the new worker")
def swap(alias: str, model: str | None, url: str, revision: str | None, admin_key: str | None,
         drain_timeout: float | None, timeout: float) -> None:
    """Restart ALIAS's worker on a running server, on MODEL if given (else the same model)."""
    from gateway.opsctl import OpsError, call

    body = {"model": model, "revision": revision, "timeout": timeout,
            "drain_timeout": drain_timeout}
    try:
        code, out = call(url, f"/admin/swap/{alias}", key=admin_key, body=body,
                         timeout=timeout + 30)
    except OpsError as exc:
        raise click.ClickException(str(exc)) from exc
    what = "swapped" if code == 200 else "swap started (not ready yet)"
    click.echo(f"{alias}: {what}: model {out['model']}, boot {out['previous_boot_id']} -> "
               f"{out['boot_id']}, state {out['state']}")


@main.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--worker", "workers", multiple=True,
              help="create a key pair for this worker (named ALIAS@HOST: it may serve only ALIAS)")
def keys(directory: str, workers: tuple[str, ...]) -> None:
    """Create CURVE keys in DIRECTORY: the gateway's, and one pair per --worker."""
    from gateway.curve import generate_keys

    for path in generate_keys(directory, list(workers)):
        click.echo(f"wrote {path}")


@main.command()
@click.option("--aliases", "aliases_file", default=None, envvar="RAPID_MLX_ALIASES",
              help="a TOML file of extra or overriding aliases")
def models(aliases_file: str | None) -> None:
    """List the models `serve` knows by name (built-in aliases plus the user's file)."""
    try:
        click.echo(format_table(load_aliases(user_alias_file(aliases_file))))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
