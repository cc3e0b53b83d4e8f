"""The `rapid-mlx` command: serve models, list them."""

from __future__ import annotations

import click

from gateway.config import GatewayConfig
from gateway.served import ServedModel

DEFAULT_ALIAS = "default"
EMBEDDED_MODEL = "embedded://demo"


def _served(models: tuple[str, ...], names: tuple[str, ...], tool_parser: str | None,
            reasoning_parser: str | None) -> list[ServedModel]:
    if not models:
        return [ServedModel(DEFAULT_ALIAS, EMBEDDED_MODEL, tool_call_parser=tool_parser or "hermes",
                            reasoning_parser=reasoning_parser or "qwen3")]
    if names and len(names) != len(models):
        raise click.UsageError("--served-model-name must be given once per MODEL")
    out = []
    for i, model in enumerate(models):
        alias = names[i] if names else model.rstrip("/").rsplit("/", 1)[-1]
        out.append(ServedModel(alias, model, tool_call_parser=tool_parser,
                               reasoning_parser=reasoning_parser))
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
@click.option("--max-batch", default=32, show_default=True, type=int)
@click.option("--prefill-budget", default=512, show_default=True, type=int,
              help="prompt tokens computed per engine step")
@click.option("--max-waiting", default=256, show_default=True, type=int)
@click.option("--context-length", default=0, type=int, help="cap every model's context")
@click.option("--worker-address", default="", help="bind workers here (default: private ipc)")
@click.option("--hang-timeout", default=30.0, show_default=True, type=float)
@click.option("--log-level", default="info", show_default=True)
def serve(models: tuple[str, ...], host: str, port: int, names: tuple[str, ...],
          api_keys: tuple[str, ...], tool_call_parser: str | None, reasoning_parser: str | None,
          max_batch: int, prefill_budget: int, max_waiting: int, context_length: int,
          worker_address: str, hang_timeout: float, log_level: str) -> None:
    """Serve MODELS (aliases, Hugging Face repo ids or local folders); none: the embedded demo."""
    from gateway.server import run

    worker_args = ["--max-batch", str(max_batch), "--prefill-budget", str(prefill_budget),
                   "--max-waiting", str(max_waiting), "--log-level", log_level.upper()]
    if context_length:
        worker_args += ["--context-length", str(context_length)]
    config = GatewayConfig(
        served=_served(models, names, tool_call_parser, reasoning_parser), host=host, port=port,
        worker_address=worker_address, worker_args=worker_args,
        api_keys=[k for k in api_keys if k], hang_timeout=hang_timeout, log_level=log_level)
    run(config)


@main.command()
def models() -> None:
    """List the models `serve` knows by name."""
    click.echo(f"{'ALIAS':<24} MODEL")
    click.echo(f"{DEFAULT_ALIAS:<24} {EMBEDDED_MODEL} (embedded demo model)")
