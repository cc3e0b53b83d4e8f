"""Commands that operate a running server (`status`, `swap`) or prepare its worker keys (`keys`)."""

from __future__ import annotations

import json

import click

from gateway.cli.common import URL


@click.command()
@URL
@click.option("--api-key", default=None, envvar="RAPID_MLX_API_KEY")
@click.option("--admin-key", default=None, envvar="RAPID_MLX_ADMIN_KEY",
              help="the server's --admin-key: with it pids, paths and every request are shown")
@click.option("--json", "as_json", is_flag=True, help="print the raw JSON")
@click.option("-v", "--verbose", is_flag=True, help="one line per running request")
def status(url: str, api_key: str | None, admin_key: str | None, as_json: bool,
           verbose: bool) -> None:
    """Show every worker of a running server as a table (an API key of a server with keys sees
    no pids, paths or requests: those need the admin key)."""
    from gateway.ops.opsctl import OpsError, call, table

    try:
        _, body = call(url, "/v1/workers", key=admin_key or api_key)
    except OpsError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(body, indent=2) if as_json else table(body["data"], verbose))


@click.command()
@click.argument("alias")
@click.argument("model", required=False)
@URL
@click.option("--revision", default=None, help="Hugging Face revision of MODEL")
@click.option("--admin-key", default=None, envvar="RAPID_MLX_ADMIN_KEY")
@click.option("--drain-timeout", default=None, type=float,
              help="seconds running requests may take (default: the server's)")
@click.option("--timeout", default=600.0, show_default=True, type=float,
              help="seconds to wait for the new worker")
def swap(alias: str, model: str | None, url: str, revision: str | None, admin_key: str | None,
         drain_timeout: float | None, timeout: float) -> None:
    """Restart ALIAS's worker on a running server, on MODEL if given (else the same model)."""
    from gateway.ops.opsctl import OpsError, call

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


@click.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--worker", "workers", multiple=True,
              help="create a key pair for this worker (named ALIAS@HOST: it may serve only ALIAS)")
def keys(directory: str, workers: tuple[str, ...]) -> None:
    """Create CURVE keys in DIRECTORY: the gateway's, and one pair per --worker."""
    from gateway.plane.curve import generate_keys

    for path in generate_keys(directory, list(workers)):
        click.echo(f"wrote {path}")
