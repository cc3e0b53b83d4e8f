"""ZeroMQ CURVE for workers on other machines: key generation and the gateway's server side.

Layout of a key directory (``rapid-mlx keys DIR --worker NAME``):

    DIR/server.key            the gateway's public key: copy it to every worker machine
    DIR/server.key_secret     the gateway's key pair: stays on the gateway (`--curve-dir DIR`)
    DIR/clients/NAME.key      public keys of the workers allowed to join
    DIR/workers/NAME.key_secret  a worker's key pair: copy it to that worker only

A key named ``ALIAS@HOST`` (``--worker a@gpu1``) may serve only alias ALIAS; any other allowed
key may serve any alias. Workers the gateway spawns itself use the gateway's own key pair.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

log = logging.getLogger("rapid_mlx.gateway")

SPAWNED = "(spawned by this gateway)"  # the key name of the gateway's own key pair


def generate_keys(directory: str | Path, workers: list[str]) -> list[Path]:
    """Create the server key pair (once) and one key pair per worker name; return new files."""
    root = Path(directory)
    made: list[Path] = []
    for sub in ("", "clients", "workers"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    if not (root / "server.key_secret").exists():
        pub, sec = zmq.auth.create_certificates(root, "server")
        made += [Path(pub), Path(sec)]
    for name in workers:
        if (root / "workers" / f"{name}.key_secret").exists():
            continue
        pub, sec = zmq.auth.create_certificates(root / "workers", name)
        shutil.move(pub, root / "clients" / f"{name}.key")
        made += [root / "clients" / f"{name}.key", Path(sec)]
    for path in made:
        if path.name.endswith(".key_secret"):
            os.chmod(path, 0o600)
    return made


class CurveServer:
    """Makes the gateway's ROUTER a CURVE server that only admits the listed worker keys."""

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory)
        secret = self.root / "server.key_secret"
        if not secret.is_file():
            raise FileNotFoundError(f"{secret} is missing; create keys with `rapid-mlx keys "
                                    f"{self.root} --worker NAME`")
        self.public, self.secret = zmq.auth.load_certificate(secret)
        if self.secret is None:
            raise ValueError(f"{secret} holds no secret key")
        self.clients = self.root / "clients"
        self.auth: AsyncioAuthenticator | None = None
        self.names: dict[str, str] = {}  # allowed worker keys (z85, the ZAP User-Id) -> key name

    def apply(self, ctx: zmq.Context[Any], sock: zmq.Socket[Any], *, spawned: bool = False) -> None:
        """Start the ZAP authenticator on CTX and make SOCK a CURVE server (before bind)."""
        keys = sorted(self.clients.glob("*.key")) if self.clients.is_dir() else []
        for path in keys:
            public, _ = zmq.auth.load_certificate(path)
            self.names[public.decode("ascii")] = path.name[:-len(".key")]
        if spawned:
            self.names[self.public.decode("ascii")] = SPAWNED
        elif not keys:
            log.warning("no worker keys in %s: no worker can join", self.clients)
        self.auth = AsyncioAuthenticator(ctx)
        self.auth.start()
        self.auth.configure_curve_callback(domain="*", credentials_provider=self)
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_server = True
        log.info("CURVE on: %d worker key(s) allowed from %s", len(keys), self.clients)

    def callback(self, domain: str, key: bytes) -> bool:
        """ZAP: admit the handshake of an allowed key (z85)."""
        return key.decode("ascii", errors="replace") in self.names

    def allows(self, user_id: str | None, alias: str) -> bool:
        """True when the worker key USER_ID (a frame's ZAP User-Id) may serve ALIAS."""
        name = self.names.get(user_id or "")
        if name is None or name == SPAWNED:
            return False
        scope, at, _ = name.partition("@")
        return not at or scope == alias

    def client_args(self) -> list[str]:
        """Worker options that make a spawned worker a CURVE client with the gateway's keys."""
        secret = str(self.root / "server.key_secret")  # holds the public key too
        return ["--curve-server-key", secret, "--curve-secret-file", secret]

    def stop(self) -> None:
        """Stop the authenticator."""
        if self.auth is not None:
            self.auth.stop()
            self.auth = None
