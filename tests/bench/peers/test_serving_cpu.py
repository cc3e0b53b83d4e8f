"""bench.peers.serving_cpu's guards: model names checked before any server starts; SIGTERM unwinds."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from bench.peers import serving_cpu
from bench.servers import Server


def test_an_unknown_model_is_refused_before_any_server_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    started: list[object] = []
    monkeypatch.setattr(serving_cpu, "ServerGroup", lambda servers: started.append(servers))
    with pytest.raises(SystemExit) as exc:
        serving_cpu.main(["--models", "qwen3,stories260K", "--peers", "none"])
    assert exc.value.code == 2 and not started
    assert "unknown stories260K" in capsys.readouterr().err


def test_sigterm_raises_system_exit() -> None:
    before = signal.getsignal(signal.SIGTERM)
    try:
        serving_cpu.exit_on_sigterm()
        with pytest.raises(SystemExit) as exc:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)  # let the handler run
        assert exc.value.code == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_hybrid_model_is_built_then_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """--models qwen3_5 builds (or reuses) the Qwen3.5 bench model before its servers start."""
    import bench.build_qwen3_5_model as builder

    built: list[Path] = []
    started: list[list[Server]] = []

    class Stop(Exception):
        pass

    def group(servers: list[Server]) -> None:
        started.append(servers)
        raise Stop

    def build(path: Path) -> Path:
        built.append(path)
        return path

    monkeypatch.setattr(builder, "build", build)
    monkeypatch.setattr(serving_cpu, "ServerGroup", group)
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(Stop):
            serving_cpu.main(["--models", "qwen3_5", "--peers", "mlx_lm"])
    finally:
        signal.signal(signal.SIGTERM, before)
    assert [p.name for p in built] == ["qwen3_5-4l-512"]
    assert [(s.kind, s.model_path) for s in started[0]] == [
        ("mlx_lm", str(built[0])), ("ours", str(built[0]))]
