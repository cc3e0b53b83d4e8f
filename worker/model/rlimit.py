"""Import mlx-lm without letting it change the process's open-file limits.

`mlx_lm.utils` sets RLIMIT_NOFILE to (2048, 4096) when imported: where the hard limit is below
4096 (a container run with `--ulimit nofile=1024`) that raises ValueError and the worker cannot
start, and where it is higher the import lowers it for good (an unprivileged process cannot raise
it back). ``import_mlx_lm`` imports it once with that call made gentle: the soft limit may rise
up to the hard one, nothing is ever lowered.
"""

from __future__ import annotations

import importlib
import resource
from typing import Any


def gentle_setrlimit(real: Any) -> Any:
    """RESOURCE.setrlimit that, for open files, only ever raises the soft limit (to at most the
    hard one) and leaves everything else as it is."""
    def setrlimit(which: int, limits: tuple[int, int]) -> None:
        if which != resource.RLIMIT_NOFILE:
            real(which, limits)
            return
        soft, hard = resource.getrlimit(which)
        if soft == resource.RLIM_INFINITY:
            return
        want = limits[0] if hard == resource.RLIM_INFINITY else min(limits[0], hard)
        if want > soft:
            real(which, (want, hard))
    return setrlimit


def import_mlx_lm() -> None:
    """Import mlx_lm.utils (the module that sets the limit) keeping the open-file limits: the
    soft limit may rise towards its request, the hard limit never changes."""
    real = resource.setrlimit
    resource.setrlimit = gentle_setrlimit(real)
    try:
        importlib.import_module("mlx_lm.utils")
    finally:
        resource.setrlimit = real
