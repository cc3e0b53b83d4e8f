"""bench.peers.serving_cpu's guards: model names checked before any server starts; SIGTERM unwinds."""

from __future__ import annotations

import os
import signal

import pytest

from bench.peers import serving_cpu


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
