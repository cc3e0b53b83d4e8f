"""A hybrid model's recurrent-state slots per request, and the prefix cache's state snapshots.

A running request owns one slot (``RequestPages.state``). When a step ends a request's fed
positions on a page boundary, its new state is also written to the request's boundary slot
(``boundary``, covering ``boundary_at`` positions); once the request's pages up to there are in
the radix tree, the tree's node there takes that slot over as its snapshot. A prefix hit resumes
from the deepest snapshot on the matched path (its state copied into the request's slot). Slots
for running requests always come first: boundary slots are taken only while enough stay free for
every row the batch may still admit, and snapshots are evicted least recently used first (or
with their node's pages).
"""

from __future__ import annotations

from collections import OrderedDict

from worker.kv.radix_cache import Node
from worker.kv.request_pages import RequestPages
from worker.kv.state_pool import StatePool


class Snapshots:
    """Hands out state slots and keeps the snapshots hung on radix nodes."""

    def __init__(self, pool: StatePool, max_batch: int) -> None:
        self.pool = pool
        self.max_batch = max_batch
        self.held: OrderedDict[int, Node] = OrderedDict()  # snapshot slot -> node, oldest first
        self.running = 0  # requests holding a state slot
        self.taken = 0  # snapshots committed so far (a counter for the worker's status)

    def _take(self, keep: int) -> int | None:
        """A slot, evicting old snapshots if needed, while KEEP slots stay free; else None."""
        while self.pool.num_free <= keep and self.held:
            slot, node = self.held.popitem(last=False)
            node.snapshot = 0
            self.pool.free(slot)
        if self.pool.num_free <= keep:
            return None
        return self.pool.alloc()

    def hold(self, kv: RequestPages) -> bool:
        """Give KV a running slot (starting from zeros: its first step feeds position 0)."""
        if kv.state:
            return True
        slot = self._take(0)
        if slot is None:
            return False
        kv.state = slot
        self.running += 1
        return True

    def boundary(self, kv: RequestPages) -> None:
        """Give KV a boundary slot if one can be spared (best effort)."""
        if kv.boundary or not kv.state:
            return
        slot = self._take(max(self.max_batch - self.running, 0))
        if slot is not None:
            kv.boundary, kv.boundary_at = slot, 0

    def resume(self, kv: RequestPages, node: Node) -> None:
        """KV's running slot (held) starts from NODE's snapshot."""
        self.pool.copy(kv.state, node.snapshot)
        self.held.move_to_end(node.snapshot)

    def attach(self, kv: RequestPages, node: Node, depth: int) -> None:
        """NODE (ending DEPTH tokens deep, in the tree) takes over KV's boundary state when it
        covers exactly DEPTH positions and the node has none yet."""
        if not kv.boundary or kv.boundary_at != depth or node.snapshot or node.parent is None:
            return
        node.snapshot = kv.boundary
        self.held[kv.boundary] = node
        kv.boundary, kv.boundary_at = 0, 0
        self.taken += 1

    def dropped(self, node: Node) -> None:
        """NODE left the tree: its snapshot's slot is free again."""
        if node.snapshot:
            self.held.pop(node.snapshot, None)
            self.pool.free(node.snapshot)
            node.snapshot = 0

    def release(self, kv: RequestPages) -> None:
        """KV's slots go back (a boundary state the tree did not take is dropped)."""
        if kv.state:
            self.pool.free(kv.state)
            self.running -= 1
        if kv.boundary:
            self.pool.free(kv.boundary)
        kv.state = kv.boundary = kv.boundary_at = 0

    def status(self) -> dict[str, int]:
        """The worker status fields: state slots in all, free, held as snapshots."""
        return {"state_slots": self.pool.num_slots - 1, "state_slots_free": self.pool.num_free,
                "state_snapshots": len(self.held), "state_bytes_per_slot":
                self.pool.layout.bytes_per_slot()}
