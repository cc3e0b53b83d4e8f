"""worker.tp.launch's local group: rank 0's exit code is the group's; a rank that dies ends the
others at once (exit 75); a SIGTERM drains rank 0, whose clean stop lets the others finish.
The ranks here are small Python scripts (no model), each told its rank by MLX_RANK."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from worker.tp.launch import EXIT_RANK_LOST

# rank 0 says it is ready, then waits for SIGTERM or HOLD s and exits ZERO_CODE; rank 1 exits
# ONE_CODE after ONE_AFTER s
SCRIPT = """
import os, signal, sys, time
rank = int(os.environ["MLX_RANK"])
assert os.path.exists(os.environ["MLX_HOSTFILE"])
zero, one, after, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
if rank == 0:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(zero))
    print("rank 0 ready", flush=True)
    time.sleep(hold)
    sys.exit(zero)
time.sleep(after)
sys.exit(one)
"""
# far longer than any test waits: a group that waited for this rank would fail the test
FOREVER = 600.0


def _group(zero: int, one: int, after: float, hold: float = 2.0) -> subprocess.Popen[bytes]:
    worker = [sys.executable, "-c", SCRIPT, str(zero), str(one), str(after), str(hold),
              "--tensor-parallel", "2"]
    return subprocess.Popen([sys.executable, "-m", "worker.tp.launch", "--", *worker],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill a group the test left running (its ranks die with it)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize(("zero", "one", "after", "hold", "code"), [
    (0, 0, 0.1, 2.0, 0),  # rank 1 stopped first (told by rank 0): not a loss, rank 0's 0 counts
    (78, 0, 0.1, 2.0, 78),  # rank 0 could not load: the supervisor must see 78
    # rank 1 died: the group ends at once, not when rank 0 would (never, in the test's time)
    (0, 3, 0.1, FOREVER, EXIT_RANK_LOST),
])
def test_exit_codes(zero: int, one: int, after: float, hold: float, code: int) -> None:
    proc = _group(zero, one, after, hold)
    try:
        assert proc.wait(60) == code  # a liveness bound: seconds on a loaded machine
    finally:
        _end(proc)
    if code == EXIT_RANK_LOST:
        assert b"rank 1 exited (exit code 3)" in (proc.stderr.read() if proc.stderr else b"")


@pytest.mark.slow
def test_sigterm_goes_to_rank_zero() -> None:
    proc = _group(0, 0, FOREVER, FOREVER)  # rank 1 would run on: rank 0's clean exit must end it
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"rank 0 ready\n"  # its SIGTERM handler is set
        ranks = psutil.Process(proc.pid).children()
        assert len(ranks) == 2
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0  # rank 1 gets 5 s of grace, then SIGTERM
        _, alive = psutil.wait_procs(ranks, timeout=10)
        assert not alive, "a rank outlived its group"
    finally:
        _end(proc)
