"""Start-up refusals of an open worker socket, and CURVE key scoping by key name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from gateway.plane.curve import CurveServer, generate_keys
from tests.e2e.harness import ROOT


@pytest.mark.parametrize(("kw", "refused"), [
    ({"worker_address": "tcp://127.0.0.1:5555"}, True),
    ({"worker_address": "tcp://127.0.0.1:5555", "insecure_worker_transport": True}, False),
    ({"worker_address": "tcp://127.0.0.1:5555", "curve_dir": "keys"}, False),
    ({"worker_address": "tcp://127.0.0.1:5555", "worker_token_file": "t"}, True),
    ({"worker_address": "ipc:///tmp/x/gw", "spawn_workers": False}, True),
    ({"worker_address": "ipc:///tmp/x/gw", "spawn_workers": False, "worker_token_file": "t"},
     False),
    ({}, False),
])
def test_an_open_worker_socket_is_refused(kw: dict[str, object], refused: bool) -> None:
    problem = GatewayConfig(served=[], **kw).worker_plane_problem()  # type: ignore[arg-type]
    assert bool(problem) is refused, problem


def test_serve_refuses_tcp_without_curve_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "gateway", "serve", "--worker-address",
                           "tcp://127.0.0.1:5555"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and "--insecure-worker-transport" in lines[0], lines


def test_the_token_file_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "worker.token"
    cfg = GatewayConfig(served=[], worker_token_file=str(path))
    token = cfg.worker_token()
    assert token and len(token) >= 32 and path.stat().st_mode & 0o777 == 0o600
    assert cfg.worker_token() == token  # read back, not replaced


async def test_a_key_named_alias_at_host_serves_only_that_alias(tmp_path: Path) -> None:
    import zmq
    import zmq.asyncio

    generate_keys(tmp_path, ["gpu1", "a@gpu2"])
    curve = CurveServer(tmp_path)
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    try:
        curve.apply(ctx, sock)
        by_name = {name: key for key, name in curve.names.items()}
        assert curve.allows(by_name["gpu1"], "a") and curve.allows(by_name["gpu1"], "b")
        assert curve.allows(by_name["a@gpu2"], "a") and not curve.allows(by_name["a@gpu2"], "b")
        assert not curve.allows(None, "a") and not curve.allows("x" * 40, "a")
        assert not curve.allows(curve.public.decode(), "a")  # the gateway's own key: spawned only
    finally:
        curve.stop()
        sock.close(0)
        ctx.term()
