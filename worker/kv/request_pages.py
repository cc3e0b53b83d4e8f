"""A request's hold on KV memory: its block tables, tail page and recurrent-state slots."""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.kv.radix_cache import Node


@dataclass
class RequestPages:
    """A request's block table: leading `shared` pages belong to the tree (locked via node).

    A model with a windowed layer group (worker/kv/window_group.py) also has ``window``, that
    group's block table over the same positions: its leading `shared` entries are the tree's
    too, and entries no future query sees are 0 (released; ``window_from`` is the first entry
    that may still be held).
    """

    pages: list[int] = field(default_factory=list)
    node: Node | None = None
    shared: int = 0
    tail: int = 0  # K8V4: the full-precision tail page of the page being written (0: none)
    state: int = 0  # a hybrid model's recurrent-state slot (worker/kv/snapshots.py; 0: none)
    boundary: int = 0  # its slot for the state at its latest page boundary (0: none)
    boundary_at: int = 0  # how many positions the boundary slot's state covers
    window: list[int] = field(default_factory=list)  # the windowed group's block table
    window_from: int = 0  # entries of ``window`` before this are 0
