"""Start, probe and stop the servers under test: ``mlx_lm.server``, ours and the reference product.

Kinds: ``mlx_lm`` (``python -m mlx_lm.server`` from our venv), ``ours`` (``python -m gateway
serve``) and ``rapid_mlx_ref`` (PyPI ``rapid-mlx`` 0.16.10 from its own venv, built by
``deploy/ensure-peer-venv.sh``; ``RAPID_MLX_PEER_VENV`` overrides where).  Both peers get the
OpenBLAS our workers preload (``LD_PRELOAD``).  The reference product keeps a prefix-cache
snapshot under ``~/.cache/rapid-mlx``: every start gets a fresh private ``HOME`` (removed on
stop), so it starts cold and the user's cache is untouched.

Every server runs in its own process group (``start_new_session``) so that stopping it takes its
workers too: SIGTERM to the group, a grace period, then SIGKILL.  Logs go to files under
``bench/results/logs``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PEERS = ("mlx_lm", "rapid_mlx_ref")
# the reference product: no telemetry, no version check, no banner, no hub look-ups
PEER_ENV = {"RAPID_MLX_TELEMETRY": "0", "RAPID_MLX_DISABLE_VERSION_CHECK": "1",
            "RAPID_MLX_NO_BANNER": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def peer_venv() -> Path:
    """Where deploy/ensure-peer-venv.sh put the reference product (RAPID_MLX_PEER_VENV overrides)."""
    return Path(os.environ.get("RAPID_MLX_PEER_VENV") or ROOT / ".venv" / "peer-rapid-mlx")


def peer_binary() -> Path | None:
    """The reference product's ``rapid-mlx`` command, or None when its venv is not built."""
    exe = peer_venv() / "bin" / "rapid-mlx"
    return exe if exe.exists() else None


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def openblas_path() -> str | None:
    """The OpenBLAS our workers preload (worker.cpu.blas.find_openblas)."""
    sys.path.insert(0, str(ROOT))
    from worker.cpu.blas import find_openblas

    return find_openblas()


def mapped_openblas(pid: int | None) -> list[str] | None:
    """The OpenBLAS files process PID has mapped (None when unknown)."""
    if not pid:
        return None
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    return sorted({ln.split()[-1] for ln in maps.splitlines() if "openblas" in ln and "/" in ln})


def maps_openblas(pid: int | None, lib: str | None = None) -> bool | None:
    """True when PID maps LIB (the preloaded OpenBLAS; any OpenBLAS when None); None if unknown.

    numpy and scipy bundle OpenBLAS copies of their own, so only the exact preloaded file counts.
    """
    files = mapped_openblas(pid)
    if files is None:
        return None
    if lib is None:
        return bool(files)
    return os.path.realpath(lib) in files or lib in files


def serve_help() -> str:
    """`python -m gateway serve --help`, to discover which flags this engine has."""
    out = subprocess.run([PY, "-m", "gateway", "serve", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    return out.stdout + out.stderr


@dataclass
class Server:
    """One server process under test."""

    name: str  # label in tables: "mlx_lm", "rapid_mlx_ref", "ours-k8v4-on", ...
    kind: str  # "mlx_lm", "rapid_mlx_ref" or "ours"
    model_path: str
    argv_extra: list[str] = field(default_factory=list)
    log_dir: Path = ROOT / "bench" / "results" / "logs"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    alias: str = "bench"
    started_at: float = 0.0
    blas: str | None = None
    home: str | None = None  # rapid_mlx_ref: the private HOME of this start; ours: its data home
    cwd: Path | None = None  # ours: the checkout to run (default: this one)
    env_extra: dict[str, str] = field(default_factory=dict)  # more environment for this server

    @property
    def is_peer(self) -> bool:
        return self.kind != "ours"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def request_model(self) -> str:
        # mlx_lm.server loads whatever "model" names; "default_model" is its --model
        return "default_model" if self.kind == "mlx_lm" else self.alias

    def argv(self) -> list[str]:
        if self.kind == "mlx_lm":
            return [PY, "-m", "mlx_lm.server", "--model", self.model_path, "--host", "127.0.0.1",
                    "--port", str(self.port), "--log-level", "WARNING", *self.argv_extra]
        if self.kind == "rapid_mlx_ref":
            exe = peer_binary()
            if exe is None:
                raise RuntimeError(f"the reference product is not installed in {peer_venv()}: "
                                   "run `sh deploy/ensure-peer-venv.sh` (or use --peers mlx_lm)")
            return [str(exe), "serve", self.model_path, "--host", "127.0.0.1",
                    "--port", str(self.port), "--served-model-name", self.alias,
                    "--log-level", "WARNING", *self.argv_extra]
        return [PY, "-m", "gateway", "serve", self.model_path, "--host", "127.0.0.1",
                "--port", str(self.port), "--served-model-name", self.alias,
                "--log-level", "warning", *self.argv_extra]

    def command_line(self) -> str:
        """The command as a person would type it (model path and port kept symbolic)."""
        parts = ["HOME=$(mktemp -d)"] if self.kind == "rapid_mlx_ref" else []
        parts += ["LD_PRELOAD=$OPENBLAS"] if self.is_peer and self.blas else []
        threads = self.peer_blas_threads(dict(os.environ))
        parts += [f"OPENBLAS_NUM_THREADS={threads}"] if threads else []
        exe = str(peer_binary()) if self.kind == "rapid_mlx_ref" else ""
        for a in self.argv():
            a = "python" if a == PY else a
            a = str(Path(a).relative_to(ROOT)) if exe and a == exe and a.startswith(str(ROOT)) else a
            a = "PATH" if a == self.model_path else a
            a = "PORT" if a == str(self.port) else a
            parts.append(a)
        return " ".join(parts)

    def peer_blas_threads(self, env: dict[str, str]) -> int | None:
        """The OpenBLAS threads a peer gets: the count our worker's policy picks for this model."""
        from worker.cpu.blas import blas_threads

        if not self.is_peer:
            return None
        size = sum(f.stat().st_size for f in Path(self.model_path).glob("*.safetensors"))
        return blas_threads(size, os.cpu_count() or 1, env)

    def start(self) -> None:
        self.port = self.port or free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.pop("_RAPID_MLX_BLAS_DONE", None)
        env.update(self.env_extra)
        if self.is_peer:
            self.blas = openblas_path()
            if self.blas:
                pre = env.get("LD_PRELOAD", "")
                env["LD_PRELOAD"] = f"{self.blas}:{pre}" if pre else self.blas
            threads = self.peer_blas_threads(env)
            if threads:
                env["OPENBLAS_NUM_THREADS"] = str(threads)
        if self.kind == "rapid_mlx_ref":
            # our RAPID_MLX_* settings mean other things to the reference product
            env = {k: v for k, v in env.items() if not k.startswith("RAPID_MLX_")}
            env.update(PEER_ENV)
            self.home = tempfile.mkdtemp(prefix="bench-peer-home-")
            env["HOME"] = self.home
        elif self.kind == "ours" and "--data-dir" not in self.argv_extra:
            # stored responses of this start only: not the user's data folder, and a baseline
            # checkout with an older store schema does not meet a newer one's file
            self.home = tempfile.mkdtemp(prefix="bench-ours-data-")
            env["XDG_DATA_HOME"] = self.home
        log = open(self.log_dir / f"{self.name}.log", "wb")  # noqa: SIM115 - closed by the child
        self.proc = subprocess.Popen(self.argv(), cwd=self.cwd or ROOT, env=env, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        self.started_at = time.monotonic()

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = (self.log_dir / f"{self.name}.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Poll until the server answers (ours: the alias is ready; peers: /v1/models)."""
        deadline = time.monotonic() + timeout
        path = "/v1/health" if self.kind == "ours" else "/v1/models"
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode if self.proc else '?'}:"
                                   f"\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.get(self.base_url + path, timeout=5.0)
                if r.status_code == 200:
                    if self.is_peer:
                        return
                    state = r.json().get("models", {}).get(self.alias, {}).get("state")
                    if state == "ready":
                        return
            time.sleep(0.5)
        raise TimeoutError(f"{self.name} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def worker_status(self) -> dict[str, Any]:
        """Our worker's live status (GET /v1/workers/{alias} -> live); {} for mlx_lm or on error."""
        if self.kind != "ours":
            return {}
        try:
            r = httpx.get(f"{self.base_url}/v1/workers/{self.alias}", timeout=30.0)
            return dict(r.json().get("live") or {}) if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return {}

    def compute_pid(self) -> int | None:
        """The pid doing the math: our worker, or the peer's server process itself."""
        if self.is_peer:
            return self.proc.pid if self.proc else None
        return self.worker_status().get("pid")

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the process group, wait, then SIGKILL whatever is left; drop a private HOME."""
        if self.proc is None:
            self._drop_home()
            return
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        # children (workers) may outlive the leader briefly; make sure the group is gone
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        self.proc = None
        self._drop_home()

    def _drop_home(self) -> None:
        if self.home:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class ServerGroup:
    """Start several servers side by side; always stop them all."""

    def __init__(self, servers: list[Server], ready_timeout: float = 300.0) -> None:
        self.servers = servers
        self.ready_timeout = ready_timeout

    def __enter__(self) -> ServerGroup:
        try:
            for s in self.servers:
                s.start()
            for s in self.servers:
                s.wait_ready(self.ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for s in self.servers:
            with contextlib.suppress(Exception):
                s.stop()
