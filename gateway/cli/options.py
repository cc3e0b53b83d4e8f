"""Option types and shared option groups of the `rapid-mlx` command line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gateway.storage.sizes import parse_size


class Size(click.ParamType[int]):
    """A size in bytes: 1GiB, 512MiB, 100MB or plain bytes."""

    name = "BYTES"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        """The size VALUE names, in bytes."""
        try:
            return value if isinstance(value, int) else parse_size(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a size such as 1GiB, 512MiB, 100MB or 65536", param, ctx)


def listed(values: tuple[str, ...]) -> list[str]:
    """Repeatable options that also take comma-separated lists."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def edge_options(f: Callable[..., None]) -> Callable[..., None]:
    """The HTTP edge's options of `serve` (who may reach the server, and what stays public)."""
    options = [
        click.option("--allowed-hosts", multiple=True, help="Host names the server answers to "
                     "besides localhost and --host (comma-separated or repeated; '*': any)"),
        click.option("--cors-allow-origins", multiple=True, help="browser origins allowed to "
                     "call the API, e.g. http://localhost:3000 (default: CORS off; '*': any)"),
        click.option("--allow-unauthenticated", is_flag=True,
                     help="start on a non-loopback --host without --api-key"),
        click.option("--public-metrics", is_flag=True, help="with --api-key: /metrics needs none"),
        click.option("--public-health", is_flag=True,
                     help="with --api-key: /v1/health and /v1/health/ALIAS need none"),
        click.option("--public-docs", is_flag=True,
                     help="with --api-key: /docs and /openapi.json need none"),
        click.option("--swap-allow-path", "swap_allow_paths", multiple=True,
                     type=click.Path(file_okay=False),
                     help="admin swaps may load model folders under this directory (repeatable)"),
        click.option("--swap-allow-repos", is_flag=True,
                     help="admin swaps may load (and download) any Hugging Face repo id"),
        click.option("--allow-image-urls", is_flag=True,
                     help="fetch http(s) image URLs of requests (public addresses only, "
                     "bounded; default: only data: URLs are accepted)"),
        click.option("--header-timeout", default=15.0, show_default=True,
                     type=click.FloatRange(min=0.5),
                     help="seconds a connection may take to send its request headers"),
        click.option("--max-connections", default=0, type=click.IntRange(min=0),
                     help="open client connections at once; past it a new one evicts the "
                     "connection idle the longest (no request head yet), or gets a 503 when all "
                     "are serving requests (default: "
                     "the open-file limit, raised to its hard limit, less a reserve for workers, "
                     "storage and accept bursts, at most 10000)"),
        click.option("--max-body-memory", default="256MiB", show_default=True, type=Size(),
                     help="request-body bytes held at once over all connections (each request's "
                     "Content-Length from its headers until it is answered); a request whose "
                     "body does not fit gets a 503 with Retry-After before it is read (at least "
                     "64MiB, the largest body a route takes)"),
        click.option("--max-requests-per-key", default=None, type=click.IntRange(min=0),
                     help="generations one API key (without keys: one client address) may have "
                     "running or queued per model, each of a request's `n` counting; past it a "
                     "503 tenant_limit, so one key cannot fill the wait queue (default: half of "
                     "--max-waiting with API keys, none without; 0: no limit)"),
    ]
    for option in reversed(options):
        f = option(f)
    return f
