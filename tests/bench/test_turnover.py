"""bench.turnover: wave clustering, the analysis of a small synthetic trace, and the hook wrapping
the gateway's and worker's functions (in a fresh interpreter, as the servers load it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.turnover import HOOK, analyze, load, waves


def test_waves_split_at_gaps() -> None:
    got = waves([1.0, 1.01, 1.02, 2.0, 2.005, 5.0])
    assert got == [[1.0, 1.01, 1.02], [2.0, 2.005], [5.0]]


def test_analyze_a_synthetic_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = []
    for w in range(3):  # three waves of 4 requests: last tokens at 1.0, 2.0, 3.0 s
        for i in range(4):
            rid = f"w{w}r{i}"
            lines += [f"W_last {rid} {w + 1.0:.6f}", f"W_read w{w + 1}r{i} {w + 1.05 + i / 1000:.6f}",
                      f"W_admit w{w + 1}r{i} {w + 1.06 + i / 1000:.6f}"]
    lines += ["W_step0 2 0.5", "W_step1 2 0.6", "W_step0 4 0.61", "W_step1 4 0.8"]
    (tmp_path / "1.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "client.txt").write_text("1.010000 1.500000 0.100000\n")
    ev, steps = load(tmp_path)
    assert ev["W_admit"]["w1r0"] == pytest.approx(1.06) and len(steps) == 4
    analyze(tmp_path, 4)
    out = capsys.readouterr().out
    assert "3 whole waves" in out
    assert "| W_admit | 60.0 | 62.0 | 63.0 |" in out  # first / median / last after each wave's end
    assert "W_read -> W_prep0" not in out  # no intake marks in this trace
    assert "empty rows x time 0.05 s (17.2%)" in out  # 2 of 4 rows, 0.1 s of 0.29 s


def test_hook_wraps_and_writes(tmp_path: Path) -> None:
    code = ("import worker.serve.loop, worker.serve.text_runner, worker.serve.intake, "
            "worker.engine.core, gateway.openai.chat, "
            "gateway.plane.hub, gateway.plane.events, gateway.edge.http_protocol\n"
            "names = [worker.serve.text_runner.TextRunner._admit, worker.serve.intake.prepare_job, "
            "worker.serve.loop.WorkerLoop.send_outputs, "
            "worker.engine.core.Engine.step, gateway.plane.hub.Hub.submit, "
            "gateway.plane.events._on_step]\n"
            "print(all(f.__name__.startswith('t_') for f in names))\n"
            "import sitecustomize; sitecustomize._ev('X', 'k')\n")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "RAPID_TRACE": str(tmp_path), "PYTHONPATH": f"{HOOK}{os.pathsep}{root}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
    marks = [p.read_text() for p in tmp_path.glob("*.txt")]
    assert any(line.startswith("X k ") for m in marks for line in m.splitlines())
