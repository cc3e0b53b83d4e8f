"""What rank 0 tells the other ranks before each forward (msgspec, never pickle)."""

from __future__ import annotations

import msgspec


class Call(msgspec.Struct, tag="call"):
    """A Forward call: the rows' tokens at their start positions in their pages."""

    rows: list[list[int]]
    pages: list[list[int]]
    tails: list[int]
    starts: list[int]
    want_logits: bool


class Decode(msgspec.Struct, tag="decode"):
    """A lazy one-token decode: the tokens follow as an all_sum of rank 0's (B,) array."""

    pages: list[list[int]]
    tails: list[int]
    starts: list[int]


class Shape(msgspec.Struct, tag="shape"):
    """Rank 0's KV pool, which every rank allocates the same (page ids are shared)."""

    num_pages: int
    tail_pages: int
    kind: str
    work_pages: int = 0  # K8V4 float page copies (worker/kv/paged_kv_work.py)
    spare_bytes: int = 0  # what the pool leaves of the budget (the dense decode cache's)


class Idle(msgspec.Struct, tag="idle"):
    """No row runs on rank 0 now: free what only running rows need (the dense decode cache)."""


class Stop(msgspec.Struct, tag="stop"):
    """Rank 0 is exiting cleanly: so do the others."""

    reason: str


Plan = Call | Decode | Shape | Idle | Stop

_decoder = msgspec.msgpack.Decoder(Plan)
_encoder = msgspec.msgpack.Encoder()


def encode(plan: Plan) -> bytes:
    """The plan as msgpack bytes."""
    return _encoder.encode(plan)


def decode(data: bytes) -> Plan:
    """The plan in DATA."""
    return _decoder.decode(data)
