"""A request's hold on KV memory: its block table, tail page and recurrent-state slots."""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.kv.radix_cache import Node


@dataclass
class RequestPages:
    """A request's block table: leading `shared` pages belong to the tree (locked via node)."""

    pages: list[int] = field(default_factory=list)
    node: Node | None = None
    shared: int = 0
    tail: int = 0  # K8V4: the full-precision tail page of the page being written (0: none)
    state: int = 0  # a hybrid model's recurrent-state slot (worker/kv/snapshots.py; 0: none)
    boundary: int = 0  # its slot for the state at its latest page boundary (0: none)
    boundary_at: int = 0  # how many positions the boundary slot's state covers
