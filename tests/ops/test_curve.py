"""Acceptance 5: a worker on tcp://127.0.0.1 with CURVE keys joins and serves; a worker with a
wrong key, or with none, is refused (and says so)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import ROOT, Server, free_port
from tests.ops.harness import DEMO, stream_chat, wait_for

pytestmark = pytest.mark.slow


def _worker(address: str, *curve: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway", "worker", "--alias", "a", "--model", DEMO,
         "--connect", address, "--log-level", "WARNING", *curve],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_curve_admits_only_listed_workers(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    made = subprocess.run([sys.executable, "-m", "gateway", "keys", str(keys), "--worker", "w1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    rogue = tmp_path / "rogue"  # a key pair the gateway does not list
    subprocess.run([sys.executable, "-m", "gateway", "keys", str(rogue), "--worker", "w1"],
                   cwd=ROOT, check=True, capture_output=True, timeout=60)
    address = f"tcp://127.0.0.1:{free_port()}"
    srv = Server(DEMO, "--served-model-name", "a", "--no-spawn-workers", "--worker-address",
                 address, "--curve-dir", str(keys))
    server_key = ["--curve-server-key", str(keys / "server.key")]
    refused: list[subprocess.Popen[str]] = []
    good = None
    try:
        srv.wait_http()
        refused = [
            _worker(address, *server_key, "--curve-secret-file", str(rogue / "workers" / "w1.key_secret")),
            _worker(address),  # no CURVE at all
        ]
        for w in refused:
            out, _ = w.communicate(timeout=90)
            assert w.returncode == 2, out
            assert "refused" in out, out
        health = httpx.get(f"{srv.url}/health", timeout=5).json()
        assert health["models"]["a"]["state"] == "starting" and health["models"]["a"]["pid"] is None

        good = _worker(address, *server_key, "--curve-secret-file",
                       str(keys / "workers" / "w1.key_secret"))
        srv.wait_ready()
        assert stream_chat(srv.url, "a", 8).ok
        info = srv.worker("a")
        assert info["state"] == "ready" and info["pid"] == good.pid
        # its pulse thread's socket passed the same CURVE handshake and is heard
        wait_for(lambda: srv.worker("a")["replicas"][0]["last_pulse_age_s"] is not None, 10)
    finally:
        for w in refused:
            if w.poll() is None:
                w.kill()
        srv.stop()
        if good is not None:
            good.terminate()  # an external worker outlives its gateway: its supervisor stops it
            good.wait(30)
