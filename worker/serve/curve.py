"""How a worker proves itself to its gateway: ZeroMQ CURVE keys, the per-boot secret or a worker
token, and a clear exit when the gateway refuses the handshake."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import zmq
import zmq.auth
from zmq.utils.monitor import recv_monitor_message

from protocol.messages import SECRET_ENV

log = logging.getLogger("rapid_mlx.worker")

REFUSED_EXIT = 2
_MAX_FAILED = 5  # handshakes failing without detail in a row: wrong server key or no CURVE


_FAILURES = (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
             zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)


def configure_client(sock: zmq.Socket[Any], server_key: str | None, secret_file: str | None) -> None:
    """Make SOCK a CURVE client (before connect) when keys are given; both or neither."""
    if not server_key and not secret_file:
        return
    if not (server_key and secret_file):
        raise SystemExit("--curve-server-key and --curve-secret-file go together")
    public, secret = zmq.auth.load_certificate(secret_file)
    if secret is None:
        raise SystemExit(f"{secret_file} holds no secret key (use the .key_secret file)")
    server_public, _ = zmq.auth.load_certificate(server_key)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


_TOKEN_WAIT = 30.0  # seconds to wait for a token file the gateway creates at start-up


def worker_secret(token_file: str | None) -> str:
    """The secret this worker sends in Ready: its spawner's per-boot secret, else the token file.

    The per-boot secret comes in the environment (argv is world-readable) and is removed from
    it at once, so no child process inherits it.
    """
    secret = os.environ.pop(SECRET_ENV, "")  # set by the gateway for the workers it spawns
    if secret or not token_file:
        return secret
    deadline = time.monotonic() + _TOKEN_WAIT
    while not os.path.exists(token_file) and time.monotonic() < deadline:
        time.sleep(0.2)  # the gateway creates it when it starts
    try:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise SystemExit(f"cannot read --worker-token-file: {exc}") from exc
    if not token:
        raise SystemExit(f"--worker-token-file {token_file} is empty")
    return token


def exit_when_refused(sock: zmq.Socket[Any]) -> None:
    """Watch SOCK's handshakes; exit with a clear message if the gateway refuses us."""
    mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                  | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                  | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                  | zmq.EVENT_HANDSHAKE_SUCCEEDED)

    def watch() -> None:
        failed, since = 0, 0.0
        while True:
            try:
                event = recv_monitor_message(mon)["event"] if mon.poll(1000) else None
            except zmq.ZMQError:  # the context is terminating
                mon.close(0)
                return
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                failed = 0
            elif event in _FAILURES:
                failed, since = failed + 1, since if failed else time.monotonic()
            fatal = event in (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
            if fatal or (failed and (failed >= _MAX_FAILED or time.monotonic() - since > 5)):
                why = ("this worker's key is not allowed" if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                       else "wrong server key, or CURVE is on at only one end")
                log.critical("the gateway refused this worker's connection (%s); exiting", why)
                logging.shutdown()
                os._exit(REFUSED_EXIT)

    threading.Thread(target=watch, name="handshake-watch", daemon=True).start()
