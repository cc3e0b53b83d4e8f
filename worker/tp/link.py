"""Rank 0's plans to the other ranks: msgspec bytes over a ZeroMQ XPUB/SUB pair (an idle rank
then waits in a socket, not in a busy-polling collective), tokens as lazy all_sums."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import mlx.core as mx
import numpy as np
import zmq

from worker.tp import plan as p
from worker.tp.status import DIR_ENV


class Link:
    """One rank's end of the group: rank 0 sends, the others receive, all in the same order."""

    def __init__(self, group: mx.distributed.Group) -> None:
        self.group = group
        self.rank = group.rank()
        self.size = group.size()
        self.ctx = zmq.Context()
        self.sock: zmq.Socket[bytes] | None = None
        self.own_dir: str | None = None  # an ipc folder this rank made (no launcher gave one)

    def open(self, timeout: float = 60.0) -> None:
        """Set up the plan channel: rank 0 binds and says where (through the ring)."""
        if self.rank == 0:
            self.sock = self.ctx.socket(zmq.XPUB)
            self.sock.setsockopt(zmq.SNDHWM, 0)
            self.sock.setsockopt(zmq.LINGER, 1000)
            where = _endpoint()
            if where.startswith("ipc://") and DIR_ENV not in os.environ:
                self.own_dir = os.path.dirname(where[6:])
            self.sock.bind(where)
            self.bytes(self.sock.getsockopt_string(zmq.LAST_ENDPOINT).encode())
            deadline = time.monotonic() + timeout
            for _ in range(self.size - 1):  # every follower subscribed: no plan can be lost
                if not self.sock.poll(int(max(deadline - time.monotonic(), 0) * 1000)):
                    raise RuntimeError("the other ranks did not subscribe to rank 0's plans")
                self.sock.recv()
        else:
            self.sock = self.ctx.socket(zmq.SUB)
            self.sock.setsockopt(zmq.RCVHWM, 0)
            self.sock.setsockopt(zmq.SUBSCRIBE, b"")
            self.sock.connect(self.bytes(None).decode())

    def send(self, plan: p.Plan) -> None:
        """Rank 0: queue PLAN for every other rank (does not wait for them)."""
        assert self.sock is not None
        self.sock.send(p.encode(plan))

    def receive(self, parent: int | None = None) -> p.Plan:
        """Another rank: the next plan; raises when PARENT (our launcher) is gone meanwhile."""
        assert self.sock is not None
        while not self.sock.poll(1000):
            if parent is not None and os.getppid() != parent:
                raise RuntimeError("the group's launcher is gone")
        return p.decode(self.sock.recv())

    def tokens(self, tokens: mx.array | None, n: int) -> mx.array:
        """Rank 0's (B,) token array on every rank, lazily (part of the forward's graph)."""
        own = tokens if tokens is not None else mx.zeros((n,), dtype=mx.int32)
        return mx.distributed.all_sum(own.astype(mx.int32), group=self.group)

    def bytes(self, data: bytes | None) -> bytes:
        """Rank 0's DATA everywhere through the ring: its length, then its bytes (all_sums)."""
        n = mx.array([len(data) if data is not None else 0], dtype=mx.int32)
        size = int(np.array(mx.distributed.all_sum(n, group=self.group))[0])
        if data is not None:
            buf = mx.array(np.frombuffer(data, dtype=np.uint8))
        else:
            buf = mx.zeros((size,), dtype=mx.uint8)
        out = mx.distributed.all_sum(buf, group=self.group)
        mx.eval(out)
        return bytes(np.array(out, copy=False))

    def close(self) -> None:
        """Close the plan channel (and remove rank 0's ipc folder)."""
        if self.sock is not None:
            self.sock.close()
        if self.own_dir is not None:
            shutil.rmtree(self.own_dir, ignore_errors=True)
        self.ctx.term()


def _endpoint() -> str:
    """Where rank 0 binds: ipc when every rank is on this machine, else its ring address."""
    hosts: list[list[str]] = []
    path = os.environ.get("MLX_HOSTFILE")
    if path and os.path.exists(path):
        with open(path) as f:
            hosts = json.load(f)
    ip = hosts[0][0].rsplit(":", 1)[0] if hosts and hosts[0] else "127.0.0.1"
    if all(h.rsplit(":", 1)[0] == "127.0.0.1" for node in hosts for h in node):
        folder = os.environ.get(DIR_ENV) or tempfile.mkdtemp(prefix="rapid-mlx-tp-")
        return f"ipc://{folder}/plans"
    return f"tcp://{ip}:*"


def join() -> Link:
    """This process's link to the group it was started in (raises when there is none)."""
    return Link(mx.distributed.init(strict=True))
