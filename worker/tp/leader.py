"""Rank 0's side: every Forward call first hands its inputs to the other ranks."""

from __future__ import annotations

import logging
from typing import Any

import mlx.core as mx

from worker.kv.request_pages import RequestPages
from worker.tp import plan as p
from worker.tp.link import Link

log = logging.getLogger("rapid_mlx.worker")


class Leader:
    """A worker.engine.forward.Tap that broadcasts each call's plan over LINK."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.stopped = False
        self.busy = False  # a forward was planned since the group was last told it is idle

    def call(self, rows: list[list[int]], kvs: list[RequestPages], starts: list[int],
             want_logits: bool, embeds: Any, positions: Any) -> None:
        """Send a Call plan (text rows only: the group has no image inputs)."""
        if positions is not None or (embeds is not None and any(e is not None for e in embeds)):
            raise ValueError("tensor parallel serves text models only")
        self.busy = True
        self.link.send(p.Call(rows, [kv.pages for kv in kvs], [kv.tail for kv in kvs],
                              list(starts), want_logits))

    def decode(self, tokens: mx.array, kvs: list[RequestPages], starts: list[int],
               positions: Any) -> mx.array:
        """Send a Decode plan; the tokens become an all_sum every rank takes part in."""
        if positions is not None:
            raise ValueError("tensor parallel serves text models only")
        self.busy = True
        self.link.send(p.Decode([kv.pages for kv in kvs], [kv.tail for kv in kvs], list(starts)))
        return self.link.tokens(tokens, len(starts))

    def idle(self) -> None:
        """No row runs: tell the other ranks (once after forwards) to free their dense caches."""
        if self.busy and not self.stopped:
            self.busy = False
            self.link.send(p.Idle())

    def stop(self, reason: str) -> None:
        """Tell the other ranks to exit (once; a broken group cannot hear it, so ignore that)."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.link.send(p.Stop(reason))
        except Exception as exc:  # a peer is gone already: it cannot be told
            log.debug("could not tell the group to stop: %s", exc)
        self.link.close()


def lead(engine: Any, link: Link) -> Leader:
    """Make ENGINE's forward calls broadcast to the group; return the tap."""
    leader = Leader(link)
    forward = engine.executor.forward
    forward.sharded = True
    forward.tap = leader
    return leader

