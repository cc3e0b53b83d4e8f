"""Run the gateway under uvicorn and announce readiness."""

from __future__ import annotations

import asyncio
import logging
import sys
from types import FrameType

import uvicorn

from gateway.app import build_app
from gateway.config import GatewayConfig
from gateway.hub import Hub

log = logging.getLogger("rapid_mlx.gateway")


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGINT/SIGTERM after a graceful shutdown; a supervised server should
    instead exit 0 once it has stopped cleanly."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


async def _announce(server: uvicorn.Server, config: GatewayConfig, hub: Hub) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    await asyncio.gather(*(st.ready_event.wait() for st in hub.aliases.values()))
    host = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
    print(f"Ready: http://{host}:{config.port}/v1", flush=True)


async def serve(config: GatewayConfig) -> None:
    """Serve until SIGINT/SIGTERM; workers are stopped before returning."""
    app = build_app(config)
    uv = uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level,
                        lifespan="on", timeout_graceful_shutdown=5)
    server = _Server(uv)
    announcer = asyncio.create_task(_announce(server, config, app.state.hub))
    try:
        await server.serve()
    finally:
        announcer.cancel()
    if not server.started:
        sys.exit(1)


def run(config: GatewayConfig) -> None:
    """Blocking entry point."""
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(serve(config))
