"""Failing to start is one clear line, no restart, and a non-zero exit; stopping is quiet."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.e2e.harness import ROOT, Server, free_port

pytestmark = pytest.mark.slow

DEMO = ROOT / "worker" / "model" / "demo" / "weights"
OFFLINE = {"HF_HUB_OFFLINE": "1"}


def _cli(*args: str, env: dict[str, str] | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, env={**os.environ, **(env or {})})


def _clean(lines: list[str]) -> None:
    text = "".join(lines)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "restarting" not in text, text


def _demo_copy(dst: Path, config: dict[str, object] | None = None) -> Path:
    dst.mkdir()
    for f in DEMO.glob("*.json"):
        shutil.copy(f, dst / f.name)
    if config is not None:
        (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_unknown_alias_is_one_line_and_exit_2_before_any_process() -> None:
    started = time.monotonic()
    out = _cli("serve", "qwen3-4b", "--port", str(free_port()), "--log-level", "info")
    assert time.monotonic() - started < 5.0
    assert out.returncode == 2, out
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1, lines  # uvicorn never started (it would log at info)
    assert lines[0].startswith("error: unknown model 'qwen3-4b': not an alias"), lines
    assert "Did you mean: qwen3-4b-4bit" in lines[0] and "rapid-mlx models" in lines[0]


def test_missing_folder_is_caught_by_the_cli(tmp_path: Path) -> None:
    out = _cli("serve", str(tmp_path / "no-such-model"), "--port", str(free_port()))
    assert out.returncode == 2, out
    assert out.stderr.strip().splitlines() == [
        f"error: unknown model '{tmp_path / 'no-such-model'}': no such folder. Check the path, "
        "or pass an alias (see 'rapid-mlx models')."]


def test_folder_without_config_fails_once_and_serve_exits_78(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    started = time.monotonic()
    srv = Server(str(tmp_path / "empty"))
    assert srv.wait_exit() == 78
    elapsed = time.monotonic() - started
    _clean(srv.lines)
    text = "".join(srv.lines)
    lines = [ln for ln in srv.lines if "cannot load" in ln]
    assert len(lines) == 1 and lines[0].startswith("error: cannot serve 'empty': cannot load"), text
    assert "has no config.json" in lines[0] and "rapid-mlx models" in lines[0]
    assert text.count("worker[") == 0, text  # the worker reported through the gateway
    assert elapsed < 90, elapsed


def test_uncached_repo_offline_fails_once_and_serve_exits_78(tmp_path: Path) -> None:
    srv = Server("nosuch-org/nosuch-model", env={**OFFLINE, "HF_HOME": str(tmp_path)})
    assert srv.wait_exit() == 78
    _clean(srv.lines)
    lines = [ln for ln in srv.lines if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: cannot serve 'nosuch-model': cannot load "
                               "'nosuch-org/nosuch-model': it is not in the local Hugging Face "
                               "cache and HF_HUB_OFFLINE is set; run 'rapid-mlx pull"), lines


def test_failed_models_leave_the_others_serving(tmp_path: Path) -> None:
    arch = _demo_copy(tmp_path / "arch", {"model_type": "no_such_architecture"})
    big = _demo_copy(tmp_path / "big")
    with open(big / "model.safetensors", "wb") as f:
        f.truncate(2**40)  # sparse: 1 TiB on paper, no disk used
    srv = Server(str(DEMO), str(arch), str(big), "nosuch-org/nosuch-model",
                 "--served-model-name", "good", "--served-model-name", "arch",
                 "--served-model-name", "big", "--served-model-name", "repo",
                 env={**OFFLINE, "HF_HOME": str(tmp_path / "hf")})
    try:
        srv.wait_ready(120)  # "Ready" once every alias is ready or failed
        bad = ("arch", "big", "repo")
        models = {m["id"]: m for m in httpx.get(f"{srv.url}/models").json()["data"]}
        assert models["good"]["state"] == "ready", models
        assert all(models[a]["state"] == "failed" for a in bad), models
        health = httpx.get(f"{srv.url}/health").json()
        assert health["status"] == "degraded"
        why = {a: health["models"][a]["last_exit"] for a in bad}
        assert "model type 'no_such_architecture' is not supported by mlx-lm" in why["arch"], why
        assert "GiB of memory is available" in why["big"], why
        assert "HF_HUB_OFFLINE is set" in why["repo"], why
        for a in bad:
            info = srv.worker(a)
            assert info["state"] == "failed" and info["restarts"] == 0, info
            r = httpx.post(f"{srv.url}/chat/completions", timeout=10, json={
                "model": a, "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code == 503 and why[a] in r.json()["error"]["message"]
        r = httpx.post(f"{srv.url}/chat/completions", timeout=60, json={
            "model": "good", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text
        time.sleep(1.0)  # nothing restarts behind our back
        assert all(srv.worker(a)["restarts"] == 0 for a in bad)
    finally:
        code = srv.stop()
    assert code == 0
    _clean(srv.lines)
    for a in bad:  # one line per failed model, from the gateway
        assert sum(f"{a} is failed and not restarted" in ln for ln in srv.lines) == 1, srv.lines


def test_version() -> None:
    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("rapid-mlx ") and out.stdout.count(
        "\n") == 1, out


def test_pull_offline_fails_with_one_line(tmp_path: Path) -> None:
    out = _cli("pull", "qwen3-4b-4bit", env={**OFFLINE, "HF_HOME": str(tmp_path)})
    assert out.returncode == 1, out
    assert out.stderr.strip().splitlines() == [
        "error: cannot download 'mlx-community/Qwen3-4B-4bit': it is not in the local cache and "
        "HF_HUB_OFFLINE is set; check the network and HF_HUB_OFFLINE, then try again"], out
    typo = _cli("pull", "qwen3-4b", env=OFFLINE)
    assert typo.returncode == 2 and "Did you mean: qwen3-4b-4bit" in typo.stderr, typo


def test_pull_cached_repo_and_local_folder(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--some-org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    out = _cli("pull", "some-org/tiny", env={**OFFLINE, "HF_HOME": str(tmp_path)})
    assert out.returncode == 0, out
    assert out.stdout.strip() == f"some-org/tiny: some-org/tiny is in the local cache: {snap}"
    local = _cli("pull", str(DEMO))
    assert local.returncode == 0 and "a local folder" in local.stdout, local
    assert "nothing to download" in _cli("pull", "default").stdout


def _worker_pids(srv: Server) -> list[int]:
    return [p.pid for p in srv.tree()[1:]]


def test_sigterm_while_the_worker_loads_is_quiet() -> None:
    srv = Server()
    deadline = time.monotonic() + 60
    while not _worker_pids(srv):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # the worker is importing or loading, not ready
    assert not srv._ready.is_set()
    started = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - started < 5.0  # a loading worker is not waited on: it cannot listen
    _clean(srv.lines)


def test_sigterm_of_a_ready_server_says_nothing_of_restarts() -> None:
    srv = Server().wait_ready()
    assert srv.stop() == 0
    _clean(srv.lines)


class _Group:
    """A server in its own process group, stopped the way a terminal does (Ctrl-C reaches the
    foreground process group: the gateway; its workers run in their own sessions and are
    stopped by it). A signal to every process, as systemd sends, is test_worker_stopped_...."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--port", str(self.port), "--log-level",
             "warning"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            self.ready.set() if line.startswith("Ready: ") else None

    def stop(self, sig: int) -> int:
        procs = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(True)]
        os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(30)
        finally:
            _, alive = psutil.wait_procs(procs, timeout=10)
            for p in alive:
                p.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_group_signal_to_a_ready_server_restarts_nothing(sig: int) -> None:
    srv = _Group()
    assert srv.ready.wait(90), "".join(srv.lines)
    assert srv.stop(sig) == 0
    _clean(srv.lines)


@pytest.mark.parametrize("after", [0.05, 0.1, 0.2, 1.0])
def test_group_sigint_while_the_worker_loads_is_quiet(after: float) -> None:
    """Ctrl-C while a worker still starts Python (AFTER < 1 s: a CI flake under load, its
    KeyboardInterrupt traceback) or loads the model: no traceback, exit 0."""
    srv = _Group()
    deadline = time.monotonic() + 60
    while not psutil.Process(srv.proc.pid).children():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(after)
    assert srv.stop(signal.SIGINT) == 0
    _clean(srv.lines)


def test_worker_stopped_just_before_the_gateway_restarts_nothing() -> None:
    """A group signal can reach the worker first: its clean exit is not taken for a crash."""
    srv = Server().wait_ready()
    worker = psutil.Process(srv.worker("default")["pid"])
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)
    assert srv.stop() == 0
    _clean(srv.lines)


def test_a_load_error_not_known_to_be_final_is_retried_then_serve_exits_1(tmp_path: Path) -> None:
    model = _demo_copy(tmp_path / "corrupt")
    (model / "model.safetensors").write_bytes(b"not safetensors")
    srv = Server(str(model), "--max-start-crashes", "2", "--restart-backoff", "0.1")
    assert srv.wait_exit() == 1
    text = "".join(srv.lines)
    assert "Traceback" not in text, text
    assert sum("restarting in" in ln for ln in srv.lines) == 1, text  # retried once, with backoff
    last = [ln for ln in srv.lines if ln.strip()][-1]
    assert last.startswith("error: cannot serve 'corrupt': load failed: RuntimeError: "), text
    assert "(--log-level debug shows the traceback)" in text
