"""Settings of one gateway process."""

from __future__ import annotations

import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gateway.served import ServedModel


@dataclass
class GatewayConfig:
    """Everything `rapid-mlx serve` decides before it starts."""

    served: list[ServedModel]
    host: str = "127.0.0.1"
    port: int = 8000
    worker_address: str = ""  # where workers connect; default: ipc in a private directory
    spawn_workers: bool = True
    worker_args: list[str] = field(default_factory=list)
    api_keys: list[str] = field(default_factory=list)
    hang_timeout: float = 30.0
    log_level: str = "info"
    shutdown_timeout: float = 30.0  # SIGTERM: how long running requests may finish
    swap_wait: float = 30.0  # how long a request waits for a restarting/swapping worker
    swap_drain_timeout: float = 30.0  # hot swap: how long running requests may finish
    max_start_crashes: int = 5
    restart_backoff: float = 0.5
    admin_key: str | None = None
    curve_dir: str | None = None  # CURVE keys: server.key_secret and clients/*.key
    # the HTTP edge (gateway/edge.py, auth.py, swap_targets.py)
    allowed_hosts: list[str] = field(default_factory=list)  # added to loopback names; "*": any
    cors_allow_origins: list[str] = field(default_factory=list)  # none: CORS off
    public_metrics: bool = False  # with API keys: /metrics open anyway
    public_health: bool = False  # with API keys: /v1/health* open anyway
    public_docs: bool = False  # with API keys: /docs and /openapi.json open anyway
    allow_unauthenticated: bool = False  # a non-loopback --host without API keys may start
    swap_allow_paths: list[str] = field(default_factory=list)  # folders swap targets may be in
    swap_allow_repos: bool = False  # swap targets may be Hugging Face repo ids
    alias_models: dict[str, str] = field(default_factory=dict)  # alias table: name -> repo
    header_timeout: float = 15.0  # a connection must send its request headers within this

    def exposure_error(self) -> str | None:
        """Why this configuration must not start (a non-loopback host without keys), or None."""
        if is_loopback(self.host) or self.api_keys or self.allow_unauthenticated:
            return None
        return (f"refusing to listen on {self.host} without --api-key: anyone who can reach "
                f"this address could use the server; pass --api-key KEY, or "
                f"--allow-unauthenticated if that is intended")

    def resolve_address(self) -> tuple[str, str | None]:
        """The worker address to bind, and the private directory created for it (if any)."""
        if self.worker_address:
            return self.worker_address, None
        remove_stale_socket_dirs()
        directory = tempfile.mkdtemp(prefix="rmlx-")  # mode 0700
        os.chmod(directory, 0o700)
        Path(directory, OWNER_FILE).write_text(str(os.getpid()))
        return f"ipc://{directory}/gw", directory


OWNER_FILE = "gateway.pid"


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def remove_stale_socket_dirs(root: str | None = None) -> list[str]:
    """Delete our rmlx-* socket directories whose gateway is gone (e.g. after a SIGKILL)."""
    removed = []
    for directory in Path(root or tempfile.gettempdir()).glob("rmlx-*"):
        try:
            if directory.stat().st_uid != os.getuid():
                continue
            pid = int((directory / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or from a version that did not record its owner
        if not _alive(pid):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(str(directory))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # PermissionError: it exists, as someone else's process
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
