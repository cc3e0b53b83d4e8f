"""Settings of one gateway process."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

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

    def resolve_address(self) -> tuple[str, str | None]:
        """The worker address to bind, and the private directory created for it (if any)."""
        if self.worker_address:
            return self.worker_address, None
        directory = tempfile.mkdtemp(prefix="rmlx-")  # mode 0700
        os.chmod(directory, 0o700)
        return f"ipc://{directory}/gw", directory
