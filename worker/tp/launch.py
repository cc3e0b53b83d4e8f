"""`python -m worker.tp.launch -- python -m worker ... --tensor-parallel N`: one worker group.

Runs the worker command as N ranks of an mlx.distributed ring: on this machine over TCP loopback
(started here with mlx.launch's environment contract, MLX_RANK and MLX_HOSTFILE), or on the
machines of `--tp-hostfile FILE` through mlx.launch itself (ssh; rank 0 is the file's first host
and is the one that connects to the gateway). Exits with rank 0's exit code, so a supervisor sees
"cannot load" (78) as it does from a single worker; any rank's death ends the whole group.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from worker.tp.command import free_ports, group_options, launch_command
from worker.tp.status import DIR_ENV, STATUS_ENV, read_status

EXIT_RANK_LOST = 75  # another rank than 0 died first (EX_TEMPFAIL: the group is restarted)


def _die_with_parent() -> None:
    """Linux: SIGTERM this process when its parent dies (set in a child before exec)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
        except OSError:
            pass


def run_local(worker: list[str], ranks: int, port: int) -> int:
    """Start RANKS ranks on this machine (mlx.launch's env contract, without its busy-polling
    output relay: on a small machine it takes a whole core); any rank's exit ends the group."""
    folder = _folder()
    hostfile = os.path.join(folder, "hosts.json")
    with open(hostfile, "w") as f:
        json.dump([[f"127.0.0.1:{port + r}"] for r in range(ranks)], f)
    env = {**os.environ, "MLX_HOSTFILE": hostfile, DIR_ENV: folder}
    procs: list[subprocess.Popen[bytes]] = []
    stopping: list[int] = []  # a signal that came while the ranks were starting

    def _stop(signum: int) -> None:  # rank 0 drains, then tells the others to stop
        if not procs:
            stopping.append(signum)
        elif procs[0].poll() is None:
            procs[0].send_signal(signum)

    _on_signals(_stop)  # before any rank runs: a SIGTERM in the start-up is a drain, not a kill
    procs.extend(subprocess.Popen(worker, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                                  env={**env, "MLX_RANK": str(r)}) for r in range(ranks))
    if stopping:
        _stop(stopping[0])
    try:
        while procs[0].poll() is None and all(q.poll() in (None, 0) for q in procs[1:]):
            time.sleep(0.1)  # (a rank exiting 0 was told to stop by rank 0, which follows)
        first = next((r for r, q in enumerate(procs) if q.returncode not in (None, 0)), 0)
        if first != 0 or procs[0].returncode != 0:
            print(f"worker.tp.launch: rank {first} exited ({_how(procs[first].returncode)}): "
                  "ending the group", file=sys.stderr, flush=True)
        grace = 5.0 if procs[0].returncode == 0 else 0.0  # a clean stop told the others
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(q.poll() is None for q in procs):
            time.sleep(0.05)
        # a lost rank leaves the others nothing to finish: end them at once (fail fast)
        steps = [(signal.SIGKILL, 3.0)] if first != 0 else [(signal.SIGTERM, 3.0),
                                                            (signal.SIGKILL, 3.0)]
        for sig, wait in steps:
            for q in procs:
                if q.poll() is None:
                    q.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                for q in procs:
                    q.wait(wait)
        code = procs[0].wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if first != 0:  # rank 0 was ended because another rank died: not a clean stop
        return EXIT_RANK_LOST
    return code if code >= 0 else 128 - code


def _folder() -> str:
    """The group's temp folder: the supervisor's (it removes it even when we are SIGKILLed),
    else a new one; removed when the group ends."""
    given = os.environ.get(DIR_ENV)
    if given and os.path.isdir(given):
        return given
    return tempfile.mkdtemp(prefix="rapid-mlx-tp-")


def _how(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def run_hosts(worker: list[str]) -> int:
    """Start the ranks of --tp-hostfile's machines with mlx.launch (ssh); rank 0's exit code."""
    folder = _folder()
    status = os.path.join(folder, "status")
    child = subprocess.Popen(launch_command(worker), stdin=subprocess.DEVNULL,
                             env={**os.environ, STATUS_ENV: status, DIR_ENV: folder},
                             preexec_fn=_die_with_parent)
    _on_signals(lambda _signum: child.terminate())
    child.wait()
    code = read_status(status, 1)
    shutil.rmtree(folder, ignore_errors=True)
    return code


def _on_signals(stop: Callable[[int], object]) -> None:
    """SIGTERM or SIGINT: call STOP with it (each time: a second SIGTERM stops a drain)."""

    def _handler(signum: int, _frame: object) -> None:
        stop(signum)

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)


def main(argv: list[str] | None = None) -> int:
    """Run the group until it ends; rank 0's exit code (1 when rank 0 left none)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m worker.tp.launch", description=__doc__)
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process exits")
    p.add_argument("worker", nargs=argparse.REMAINDER, help="-- the worker command")
    args = p.parse_args(argv)
    worker = args.worker[1:] if args.worker[:1] == ["--"] else args.worker
    if not worker:
        p.error("no worker command after --")
    if args.parent_pid is not None:
        _die_with_parent()
        if os.getppid() != args.parent_pid:
            return 0
    opts = group_options(worker)
    if opts.tp_hostfile:
        return run_hosts(worker)
    return run_local(worker, opts.tensor_parallel, opts.tp_port or free_ports(opts.tensor_parallel))


if __name__ == "__main__":
    sys.exit(main())
