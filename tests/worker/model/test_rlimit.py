"""mlx-lm imported by the worker keeps the process's open-file limits."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from worker.model.rlimit import gentle_setrlimit

ROOT = Path(__file__).resolve().parents[3]
PROBE = ("import resource, sys\n"
         "if sys.argv[1] == 'worker':\n"
         "    from worker.model.rlimit import import_mlx_lm\n"
         "    import_mlx_lm()\n"
         "else:\n"
         "    import mlx_lm.utils\n"
         "print(*resource.getrlimit(resource.RLIMIT_NOFILE))\n")


def _run(how: str, soft: int, hard: int) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return subprocess.run([sys.executable, "-c", PROBE, how], cwd=ROOT, env=dict(os.environ),
                          preexec_fn=limit, capture_output=True, text=True, timeout=120)


def _hard() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


@pytest.mark.skipif(_hard() < 1024, reason="this process's hard open-file limit is below 1024, so no child can be given one of 1024 to show the import failing under it")
def test_a_hard_limit_below_4096_does_not_stop_the_import() -> None:
    plain = _run("plain", 256, 1024)  # what the worker did before: the import raised
    assert plain.returncode != 0 and "ValueError" in plain.stderr
    done = _run("worker", 256, 1024)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1024", "1024"]  # soft raised towards 2048, hard kept


def test_a_higher_hard_limit_is_not_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    # in-process with a fake limit: once mlx_lm is imported (this pytest process may have done
    # so) no process here can hold a hard limit above 4096 to show it for real
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 8192))
    setrlimit = gentle_setrlimit(lambda which, limits: calls.append(limits))
    setrlimit(resource.RLIMIT_NOFILE, (2048, 4096))  # what mlx_lm.utils asks for
    assert calls == [(2048, 8192)]
    calls.clear()
    monkeypatch.setattr(resource, "getrlimit", lambda which: (4096, 8192))
    setrlimit(resource.RLIMIT_NOFILE, (2048, 4096))
    assert calls == []  # nothing lowered
    setrlimit(resource.RLIMIT_CORE, (0, 0))  # other limits pass through
    assert calls == [(0, 0)]


def test_a_soft_limit_above_the_request_stays() -> None:
    hard = _hard()
    soft = min(hard, 5000) if hard != resource.RLIM_INFINITY else 5000
    done = _run("worker", soft, hard)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(soft), str(hard)]
