"""Tie a worker's life to its parent's."""

from __future__ import annotations

import ctypes
import os
import signal
import sys


def die_with_parent(parent_pid: int | None) -> None:
    """Ask the kernel to SIGTERM us when the parent dies (Linux); the loop also polls getppid."""
    if parent_pid is None:
        return
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent_pid:
        os._exit(0)
