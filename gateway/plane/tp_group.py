"""A tensor-parallel worker group: one supervised process (worker.tp.launch) running N ranks."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from protocol.process import TP_DIR_ENV


def tensor_parallel(worker_args: list[str]) -> int:
    """The --tensor-parallel N in a worker command line (1 when absent)."""
    for i, arg in enumerate(worker_args):
        if arg == "--tensor-parallel" and i + 1 < len(worker_args):
            return int(worker_args[i + 1])
        if arg.startswith("--tensor-parallel="):
            return int(arg.split("=", 1)[1])
    return 1


def is_group(worker_args: list[str]) -> bool:
    """True when the worker runs as a group of ranks through mlx.launch."""
    return tensor_parallel(worker_args) > 1


def group_command(worker_cmd: list[str]) -> list[str]:
    """WORKER_CMD run as a group by worker.tp.launch, which exits when this gateway does."""
    return [sys.executable, "-m", "worker.tp.launch", "--parent-pid", str(os.getpid()), "--",
            *worker_cmd]


@contextmanager
def group_folder(worker_args: list[str]) -> Iterator[dict[str, str]]:
    """For a group: a temp folder for its launcher and ranks (their hostfile and plan socket),
    removed when the group is over however it ended (a SIGKILLed launcher cannot remove it);
    yields the environment that hands it to them (empty for a single worker)."""
    if not is_group(worker_args):
        yield {}
        return
    folder = tempfile.mkdtemp(prefix="rapid-mlx-tp-")
    try:
        yield {TP_DIR_ENV: folder}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
