"""Which queued inputs go into the next padded forward: close lengths, oldest request first."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Item:
    """One input of one request, tokenized."""

    request_id: str
    index: int  # its place in the request's input list
    tokens: list[int]


@dataclass
class Pending:
    """One admitted request: its inputs, and the vectors of those already embedded."""

    request_id: str
    items: list[Item]
    dimensions: int = 0
    done: dict[int, bytes] = field(default_factory=dict)
    started: bool = False
    arrived: float = 0.0

    @property
    def finished(self) -> bool:
        """True when every input has its vector."""
        return len(self.done) == len(self.items)


def pick_batch(requests: list[Pending], queued: list[Item], max_batch: int,
               max_tokens: int) -> list[Item]:
    """The next batch from QUEUED: the oldest request's longest queued input, then the queued
    inputs (of any request) closest below it in length, up to MAX_BATCH rows and MAX_TOKENS
    padded tokens. Sorting by length keeps padding small; the anchor keeps every request moving."""
    if not queued:
        return []
    order = {p.request_id: i for i, p in enumerate(requests)}
    oldest = min(order.get(it.request_id, len(order)) for it in queued)
    ranked = sorted(queued, key=lambda it: len(it.tokens))
    anchor = max((i for i, it in enumerate(ranked)
                  if order.get(it.request_id, len(order)) == oldest),
                 key=lambda i: (len(ranked[i].tokens), i))  # the last of equal lengths
    width = max(1, len(ranked[anchor].tokens))
    rows = max(1, min(max_batch, max_tokens // width))
    start = max(0, anchor + 1 - rows)
    batch = ranked[start:anchor + 1]
    for it in ranked[anchor + 1:]:  # room left: longer inputs, while the padded size fits
        if len(batch) >= rows or (len(batch) + 1) * len(it.tokens) > max_tokens:
            break
        batch.append(it)
    return batch
