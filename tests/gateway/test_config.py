"""The gateway's private socket directory: created per run, stale ones swept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gateway.config import OWNER_FILE, GatewayConfig, remove_stale_socket_dirs


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_socket_dirs_of_dead_gateways_are_removed(tmp_path: Path) -> None:
    stale, live, foreign = tmp_path / "rmlx-stale", tmp_path / "rmlx-live", tmp_path / "rmlx-old"
    for d in (stale, live, foreign):
        d.mkdir()
        (d / "gw").write_text("")
    (stale / OWNER_FILE).write_text(str(_dead_pid()))
    (live / OWNER_FILE).write_text(str(os.getpid()))
    assert remove_stale_socket_dirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and foreign.exists()  # no owner file: left alone


def test_resolve_address_records_its_owner() -> None:
    cfg = GatewayConfig.__new__(GatewayConfig)
    cfg.worker_address = None
    address, directory = cfg.resolve_address()
    assert directory is not None and address == f"ipc://{directory}/gw"
    try:
        assert Path(directory, OWNER_FILE).read_text() == str(os.getpid())
        assert oct(os.stat(directory).st_mode & 0o777) == "0o700"
    finally:
        import shutil

        shutil.rmtree(directory)
