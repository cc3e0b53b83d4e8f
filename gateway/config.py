"""Settings of one gateway process."""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gateway.plane.tenants import DEFAULT_MOST
from gateway.served import ServedModel


@dataclass
class GatewayConfig:
    """Everything `rapid-mlx serve` decides before it starts."""

    served: list[ServedModel]
    host: str = "127.0.0.1"
    port: int = 8000
    worker_address: str = ""  # where workers connect; default: ipc in a private directory
    spawn_workers: bool = True
    replicas: int = 1  # spawned workers per alias (external ones join as extra replicas)
    routing: str = "cache_aware"  # cache_aware, least_loaded or round_robin (gateway/plane/routing.py)
    worker_args: list[str] = field(default_factory=list)
    api_keys: list[str] = field(default_factory=list)
    shared_prefix_cache: bool = False  # with API keys: tenants share one prefix cache (a side channel)
    hang_timeout: float = 30.0
    log_level: str = "info"
    shutdown_timeout: float = 30.0  # SIGTERM: how long running requests may finish
    swap_wait: float = 30.0  # how long a request waits for a restarting/swapping worker
    swap_drain_timeout: float = 30.0  # hot swap: how long running requests may finish
    max_start_crashes: int = 5
    restart_backoff: float = 0.5
    admin_key: str | None = None
    curve_dir: str | None = None  # CURVE keys: server.key_secret and clients/*.key
    # the HTTP edge (gateway/edge/middleware.py, auth.py, swap_targets.py)
    allowed_hosts: list[str] = field(default_factory=list)  # added to loopback names; "*": any
    cors_allow_origins: list[str] = field(default_factory=list)  # none: CORS off
    public_metrics: bool = False  # with API keys: /metrics open anyway
    public_health: bool = False  # with API keys: /v1/health* open anyway
    public_docs: bool = False  # with API keys: /docs and /openapi.json open anyway
    allow_unauthenticated: bool = False  # a non-loopback --host without API keys may start
    swap_allow_paths: list[str] = field(default_factory=list)  # folders swap targets may be in
    swap_allow_repos: bool = False  # swap targets may be Hugging Face repo ids
    allow_image_urls: bool = False  # fetch http(s) image URLs (public addresses only)
    alias_models: dict[str, str] = field(default_factory=dict)  # alias table: name -> repo
    header_timeout: float = 15.0  # a connection must send its request headers within this
    max_connections: int = 0  # open client connections at once; 0: from the fd limit
    max_body_memory: int = 256 << 20  # request-body bytes held at once (gateway/edge/bodybudget.py)
    max_requests_per_key: int = DEFAULT_MOST  # a tenant's jobs per model (gateway/plane/tenants.py)
    worker_token_file: str | None = None  # external workers prove themselves with this token
    insecure_worker_transport: bool = False  # tcp:// without CURVE, external workers without proof
    heartbeat_timeout: float = 1.0  # seconds a worker connection may leave a ping unanswered
    anthropic_model_map: list[tuple[str, str]] = field(default_factory=list)  # glob -> alias
    # stored responses (gateway/storage/): None or store_responses False: nothing is stored
    data_dir: str | None = None
    store_responses: bool = True
    responses_max_count: int = 10000  # 0: no count bound
    responses_max_age_days: float = 30.0  # 0: no age bound
    responses_max_bytes: int = 1 << 30  # bytes stored (JSON and rows); 0: no bound
    responses_max_bytes_per_key: int = 0  # the same, of one owner; 0: no bound

    def exposure_error(self) -> str | None:
        """Why this configuration must not start (a non-loopback host without keys), or None."""
        if is_loopback(self.host) or self.api_keys or self.allow_unauthenticated:
            return None
        return (f"refusing to listen on {self.host} without --api-key: anyone who can reach "
                f"this address could use the server; pass --api-key KEY, or "
                f"--allow-unauthenticated if that is intended")

    def worker_plane_problem(self) -> str | None:
        """Why the worker socket would be open to anyone (refuse to start), or None."""
        if self.insecure_worker_transport or self.curve_dir:
            return None
        if self.worker_address.startswith("tcp://"):
            return (f"--worker-address {self.worker_address} without --curve-dir would let anyone "
                    "who reaches it read prompts and act as a worker; add --curve-dir DIR (see "
                    "`rapid-mlx keys`) or --insecure-worker-transport")
        if not self.spawn_workers and not self.worker_token_file:
            return ("--no-spawn-workers needs a way for workers to prove themselves: "
                    "--worker-token-file FILE (and the same on each worker), --curve-dir DIR, "
                    "or --insecure-worker-transport")
        return None

    def worker_token(self) -> str | None:
        """The external workers' token from --worker-token-file, created (mode 0600) if missing."""
        if not self.worker_token_file:
            return None
        path = Path(self.worker_token_file)
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
        token = path.read_text(encoding="utf-8").strip()
        if not token:
            raise ValueError(f"--worker-token-file {path} is empty")
        return token

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
