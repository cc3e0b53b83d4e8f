"""The command lines of a worker group: its options, its ring ports, and mlx.launch's."""

from __future__ import annotations

import argparse
import random
import shutil
import socket
import sys
from pathlib import Path

DEFAULT_PORT = 32323  # mlx.launch's default: ranks listen on PORT, PORT+1, ... per host


def group_options(worker_argv: list[str]) -> argparse.Namespace:
    """The group options found in a worker command line (the rest is ignored)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--tensor-parallel", type=int, default=1)
    p.add_argument("--tp-hostfile", default=None)
    p.add_argument("--tp-port", type=int, default=0)
    return p.parse_known_args(worker_argv)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> int:
    """A port P with P .. P+N-1 free on HOST (checked by binding; a race stays possible)."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - n)
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {n} consecutive free ports on {host}")


def launch_command(worker_argv: list[str]) -> list[str]:
    """The mlx.launch command line that runs WORKER_ARGV as the group's ranks."""
    opts = group_options(worker_argv)
    exe = Path(sys.executable).parent / "mlx.launch"
    launcher = [str(exe)] if exe.exists() else [shutil.which("mlx.launch") or "mlx.launch"]
    if opts.tp_hostfile:
        where = ["--hostfile", opts.tp_hostfile]
        port = opts.tp_port or DEFAULT_PORT
    else:
        where = ["--hosts", "127.0.0.1", "-n", str(opts.tensor_parallel)]
        port = opts.tp_port or free_ports(opts.tensor_parallel)
    return [*launcher, "--backend", "ring", "--starting-port", str(port), *where, "--",
            *worker_argv]
