"""Acceptance 4: the shipped deploy/supervisord.conf runs the gateway plus two workers;
`supervisorctl restart worker-a` is a hot swap, and a gateway restart adopts the running workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psutil
import pytest

from tests.e2e.harness import ROOT, free_port
from tests.ops.harness import DEMO, stream_chat, wait_for

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _ctl(conf: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(BIN / "supervisorctl"), "-c", str(conf), *args], env=env,
                          capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def _ready(base: str) -> bool:
    return httpx.get(f"{base}/readyz", timeout=5).status_code == 200


def test_supervisord_gateway_and_two_workers() -> None:
    if not (BIN / "supervisord").exists() or not (BIN / "rapid-mlx").exists():
        pytest.skip("supervisor or the rapid-mlx script is not installed in this venv")
    run = Path(tempfile.mkdtemp(prefix="rmlx-sv-"))  # short path: unix socket names are limited
    os.chmod(run, 0o700)
    conf = run / "supervisord.conf"
    shutil.copy(ROOT / "deploy" / "supervisord.conf", conf)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RAPID_MLX_BIN": str(BIN), "RAPID_MLX_RUN": str(run),
           "RAPID_MLX_PORT": str(port), "RAPID_MLX_MODEL_A": DEMO, "RAPID_MLX_MODEL_B": DEMO}
    sup = subprocess.Popen([str(BIN / "supervisord"), "-n", "-c", str(conf)], env=env, cwd=run,
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    procs: list[psutil.Process] = []
    try:
        wait_for(lambda: _ready(base), timeout=120)
        procs = [psutil.Process(sup.pid), *psutil.Process(sup.pid).children(recursive=True)]
        assert len(procs) >= 4, procs  # supervisord, gateway, two workers
        for alias in ("a", "b"):
            assert stream_chat(f"{base}/v1", alias, 8).ok
        old = httpx.get(f"{base}/v1/workers/a", timeout=10).json()
        r = httpx.post(f"{base}/admin/swap/a", json={}, timeout=10)  # no --admin-key in the conf
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled"

        out = _ctl(conf, env, "restart", "worker-a")
        assert "worker-a: started" in out, out
        # requests arriving while the new worker loads wait for it instead of failing
        assert stream_chat(f"{base}/v1", "a", 8).ok
        assert stream_chat(f"{base}/v1", "b", 8).ok
        new = httpx.get(f"{base}/v1/workers/a", timeout=10).json()
        assert new["boot_id"] != old["boot_id"] and new["pid"] != old["pid"]
        assert new["restarts"] == 1 and new["state"] == "ready"

        gw_before = httpx.get(f"{base}/v1/workers/b", timeout=10).json()
        out = _ctl(conf, env, "restart", "gateway")
        assert "gateway: started" in out, out
        wait_for(lambda: _ready(base), timeout=60)  # the new gateway adopted both workers
        gw_after = httpx.get(f"{base}/v1/workers/b", timeout=10).json()
        assert gw_after["boot_id"] == gw_before["boot_id"]
        for alias in ("a", "b"):
            assert stream_chat(f"{base}/v1", alias, 8).ok
        procs = [psutil.Process(sup.pid), *psutil.Process(sup.pid).children(recursive=True)]
    finally:
        print(_ctl(conf, env, "shutdown"))
        try:
            code = sup.wait(60)
        except subprocess.TimeoutExpired:
            sup.kill()
            code = sup.wait(10)
        _, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            p.kill()
        log = (run / "supervisord.log").read_text() if (run / "supervisord.log").exists() else ""
        shutil.rmtree(run, ignore_errors=True)
    assert not alive, alive
    assert code == 0, log
