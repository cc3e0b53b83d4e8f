"""worker.tp.launch's local group: rank 0's exit code is the group's; a rank that dies ends the
others at once (exit 75); a SIGTERM drains rank 0, whose clean stop lets the others finish.
The ranks here are small Python scripts (no model), each told its rank by MLX_RANK."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from worker.tp.launch import EXIT_RANK_LOST

# rank 0 waits for SIGTERM or 2 s, then exits ZERO_CODE; rank 1 exits ONE_CODE after ONE_AFTER s
SCRIPT = """
import os, signal, sys, time
rank = int(os.environ["MLX_RANK"])
assert os.path.exists(os.environ["MLX_HOSTFILE"])
zero, one, after = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
if rank == 0:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(zero))
    time.sleep(2)
    sys.exit(zero)
time.sleep(after)
sys.exit(one)
"""


def _group(zero: int, one: int, after: float) -> subprocess.Popen[bytes]:
    worker = [sys.executable, "-c", SCRIPT, str(zero), str(one), str(after),
              "--tensor-parallel", "2"]
    return subprocess.Popen([sys.executable, "-m", "worker.tp.launch", "--", *worker],
                            stderr=subprocess.PIPE)


@pytest.mark.parametrize(("zero", "one", "after", "code"), [
    (0, 0, 0.1, 0),  # rank 1 stopped first (told by rank 0): not a loss, rank 0's 0 counts
    (78, 0, 0.1, 78),  # rank 0 could not load: the supervisor must see 78
    (0, 3, 0.1, EXIT_RANK_LOST),  # rank 1 died: the group ends at once, not after rank 0's 2 s
])
def test_exit_codes(zero: int, one: int, after: float, code: int) -> None:
    t0 = time.monotonic()
    proc = _group(zero, one, after)
    assert proc.wait(20) == code
    if code == EXIT_RANK_LOST:
        assert time.monotonic() - t0 < 1.9
        assert b"rank 1 exited (exit code 3)" in (proc.stderr.read() if proc.stderr else b"")


@pytest.mark.slow
def test_sigterm_goes_to_rank_zero() -> None:
    proc = _group(0, 0, 30)  # rank 1 would run 30 s: rank 0's clean exit must end the group
    time.sleep(1.0)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(20) == 0
    assert time.monotonic() - t0 < 10
