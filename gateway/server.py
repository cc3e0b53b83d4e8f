"""Run the gateway under uvicorn, announce readiness, and drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from types import FrameType

import uvicorn

from gateway.app import build_app
from gateway.config import GatewayConfig
from gateway.edge.bodybudget import MIN_BUDGET, BodyBudget, BudgetGauge
from gateway.edge.connlimit import (
    backlog,
    default_max_connections,
    max_connections_problem,
    quiet_accept_errors,
    raise_fd_limit,
)
from gateway.edge.http_protocol import MAX_HEADER_BYTES, GuardedH11Protocol, Refusals
from gateway.edge.idle import IdleConnections
from gateway.edge.quietlog import quiet_uvicorn
from gateway.edge.slowbody import SlowBodies
from gateway.plane.drain import Drainer
from gateway.plane.hub import Hub
from gateway.plane.supervisor import Supervisor
from protocol.process import EXIT_CANNOT_LOAD

log = logging.getLogger("rapid_mlx.gateway")


class _Server(uvicorn.Server):
    """The first SIGTERM drains (running requests get up to `shutdown_timeout`), SIGINT ends
    running requests at once; either way the server then stops its workers and exits 0 (uvicorn
    would re-raise the signal)."""

    drainer: Drainer | None = None
    loop: asyncio.AbstractEventLoop | None = None
    shutdown_timeout: float = 30.0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drainer is not None and self.loop is not None and not self.should_exit:
            timeout = self.shutdown_timeout if sig == signal.SIGTERM else 0.0
            self.loop.call_soon_threadsafe(self.drainer.begin, timeout)
            return
        super().handle_exit(sig, frame)
        self._captured_signals.clear()

    def drained(self) -> None:
        """The drain finished: let uvicorn shut down (the lifespan stops the workers)."""
        self.should_exit = True


def bound_url(server: uvicorn.Server, fallback_host: str, fallback_port: int) -> str:
    """The base URL of the address the listening socket really has (0.0.0.0 stays 0.0.0.0)."""
    for srv in getattr(server, "servers", []):
        for sock in srv.sockets or ():
            host, port = sock.getsockname()[:2]
            return f"http://{f'[{host}]' if ':' in host else host}:{port}"
    return f"http://{fallback_host}:{fallback_port}"


async def _settled(hub: Hub) -> None:
    """Wait until every alias is ready or failed (one that cannot load must not hide the others),
    and at least one is ready."""
    states = hub.aliases.values()
    while not (any(st.ready_event.is_set() for st in states)
               and all(st.ready_event.is_set() or st.state == "failed" for st in states)):
        await asyncio.sleep(0.1)


async def _announce(server: uvicorn.Server, config: GatewayConfig, hub: Hub) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    await _settled(hub)
    print(f"Ready: {bound_url(server, config.host, config.port)}/v1", flush=True)


def connection_bounds(config: GatewayConfig, limit: int) -> dict[str, object]:
    """The HTTP protocol's bounds under an fd LIMIT: the header timeout and the open connections
    allowed; SystemExit if --max-connections cannot be kept."""
    most = config.max_connections or default_max_connections(limit)
    problem = max_connections_problem(most, limit)
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        sys.exit(2)
    if config.max_body_memory < MIN_BUDGET:
        print(f"error: --max-body-memory must be at least {MIN_BUDGET} bytes (64MiB), the "
              "largest body a route takes", file=sys.stderr, flush=True)
        sys.exit(2)
    log.info("at most %d open client connections (fd limit %d)", most, limit)
    return {"header_timeout": config.header_timeout, "max_connections": most,
            "refusals": Refusals(), "idle": IdleConnections(), "bodies": SlowBodies(),
            "linger_slots": backlog(limit), "budget": BodyBudget(config.max_body_memory)}


async def serve(config: GatewayConfig) -> None:
    """Serve until SIGINT/SIGTERM; workers are stopped before returning."""
    limit = raise_fd_limit()
    bounds = connection_bounds(config, limit)
    app = build_app(config)
    bounds["shapes"] = app.state.error_shapes  # broken requests answered in their path's shape
    protocol = type("Protocol", (GuardedH11Protocol,), bounds)
    budget = bounds["budget"]
    assert isinstance(budget, BodyBudget)
    app.state.hub.metrics.registry.register(BudgetGauge(budget))
    asyncio.get_running_loop().set_exception_handler(quiet_accept_errors)
    uv = uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level,
                        lifespan="on", timeout_graceful_shutdown=5, http=protocol,
                        h11_max_incomplete_event_size=MAX_HEADER_BYTES, timeout_keep_alive=5,
                        backlog=backlog(limit))
    quiet_uvicorn()  # after uvicorn.Config, which configures its loggers
    server = _Server(uv)
    server.loop = asyncio.get_running_loop()
    server.shutdown_timeout = config.shutdown_timeout
    server.drainer = Drainer(app.state.hub, server.drained)
    announcer = asyncio.create_task(_announce(server, config, app.state.hub))
    supervisor = app.state.supervisor
    if supervisor is not None:
        supervisor.on_all_failed = server.drained  # nothing left to serve: exit
    try:
        await server.serve()
    finally:
        announcer.cancel()
    if supervisor is not None and supervisor.gave_up:
        _exit_nothing_to_serve(supervisor)
    if not server.started:
        sys.exit(1)


def _exit_nothing_to_serve(supervisor: Supervisor) -> None:
    """Every alias failed: say why, one line each, and exit non-zero for the process manager."""
    failures = supervisor.final_failures
    for alias, why, _ in failures:
        print(f"error: cannot serve '{alias}': {why}", file=sys.stderr, flush=True)
    deterministic = bool(failures) and all(cannot_load for _, _, cannot_load in failures)
    sys.exit(EXIT_CANNOT_LOAD if deterministic else 1)


def run(config: GatewayConfig) -> None:
    """Blocking entry point."""
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(serve(config))
