"""Start the real `rapid-mlx serve` on a free loopback port and stop it."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port nobody listens on right now and not handed out before by this process (the
    kernel may offer a just-closed port again: a test's worker address and HTTP port once
    came out equal, and the gateway could not bind the second)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class Server:
    """One `python -m gateway serve` process with its workers; without a `--data-dir` in ARGS
    it stores responses in a fresh temporary one, removed by stop()."""

    def __init__(self, *args: str, env: dict[str, str] | None = None,
                 nofile: tuple[int, int] | None = None) -> None:
        self.own_data_dir = None if "--data-dir" in args else tempfile.mkdtemp(
            prefix="rapid-mlx-test-data-")
        if self.own_data_dir:
            args = (*args, "--data-dir", self.own_data_dir)
            atexit.register(shutil.rmtree, self.own_data_dir, ignore_errors=True)  # no stop()
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"
        cmd = [sys.executable, "-m", "gateway", "serve", "--port", str(self.port),
               "--log-level", "warning", *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})},
                                     preexec_fn=_fd_limit(nofile) if nofile else None)
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("Ready: "):
                self._ready.set()

    def wait_ready(self, timeout: float = 90.0) -> Server:
        """Block until the server prints its Ready line."""
        if not self._ready.wait(timeout):
            self.stop()
            raise RuntimeError("server not ready:\n" + "".join(self.lines[-40:]))
        return self

    def wait_http(self, timeout: float = 30.0) -> None:
        """Block until the HTTP port answers (workers may still be loading)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.url}/health", timeout=1.0)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("HTTP never came up:\n" + "".join(self.lines[-40:]))

    def worker(self, alias: str) -> dict[str, Any]:
        """The gateway's view of an alias's worker (GET /v1/workers/{alias})."""
        view: dict[str, Any] = httpx.get(f"{self.url}/workers/{alias}", timeout=10).json()
        return view

    def tree(self) -> list[psutil.Process]:
        """The server process and all its descendants."""
        try:
            p = psutil.Process(self.proc.pid)
            return [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def wait_exit(self, timeout: float = 120.0) -> int:
        """Wait for a server that should exit on its own; its exit code."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError("server did not exit:\n" + "".join(self.lines[-40:])) from None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the server and wait for it; SIGKILL the tree if it does not exit."""
        procs = self.tree()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            code = self.proc.wait(5)
        psutil.wait_procs(procs, timeout=10)
        if self.own_data_dir:
            shutil.rmtree(self.own_data_dir, ignore_errors=True)
        return code


def _fd_limit(limits: tuple[int, int]) -> Any:
    """A preexec_fn: the server's (soft, hard) limit of open files is LIMITS."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def plain_and(*flags: str) -> Iterator[tuple[Server, Server]]:
    """A plain server and one started with FLAGS (both --max-batch 8), stopped after use."""
    plain = Server("--max-batch", "8").wait_ready()
    try:
        other = Server("--max-batch", "8", *flags).wait_ready()
    except Exception:
        plain.stop()
        raise
    yield plain, other
    other.stop()
    plain.stop()
