"""The count and byte bounds of the response store: fair eviction, the heaviest owner first.

Over a bound, responses go from the owner (API key) holding the most (bytes for the byte bound,
responses for the count bound; of owners holding as much, the one with the oldest response),
oldest first within it, until the store is back under the bound; when that owner comes down to
the next one's level, the choice is made again. A light key loses
nothing while a heavy one is above it, and with one owner this is the plain oldest-first rule.
Each step reads only what it needs (schema.OWNERS: the totals kept by triggers, one row per API
key, and the responses indexed by (owner, seq)), so a put that evicts reads the rows it deletes
and the owners' totals, never the whole store.

KEEP is the seq of the response just stored: it is never evicted (a put that says True stored
it), even when its owner is the heaviest; the others then give way.
"""

from __future__ import annotations

import sqlite3

NONE = 2**62  # a seq above every stored one: nothing kept


def prune_count(db: sqlite3.Connection, bound: int, keep: int = NONE) -> None:
    """Delete responses, the heaviest owner's oldest first, until at most BOUND are stored."""
    _prune(db, "count", bound, keep)


def prune_bytes(db: sqlite3.Connection, bound: int, keep: int = NONE) -> None:
    """Delete responses, the heaviest owner's oldest first, until at most BOUND bytes are stored.
    A response's `size` (its bytes alone) is at least what deleting it frees (a body it shares
    with a newer one stays), so a pass never deletes one that need not go; passes repeat."""
    _prune(db, "bytes", bound, keep)


def _prune(db: sqlite3.Connection, column: str, bound: int, keep: int) -> None:
    """Delete responses, the heaviest owner's (by COLUMN) oldest first, until COLUMN's total is
    at most BOUND."""
    spent: list[str] = []
    while bound > 0 and (excess := _total(db, column) - bound) > 0:
        top = _heaviest(db, column, spent)
        if not top:
            return
        owner, goal = _goal(top, excess)
        if not _drop_oldest(db, owner, goal, keep, "1" if column == "count" else "size"):
            spent.append(owner)  # only KEEP left


def prune_owner_bytes(db: sqlite3.Connection, owner: str, bound: int, keep: int = NONE) -> None:
    """Delete OWNER's oldest responses until it holds at most BOUND bytes (the per-key bound)."""
    while bound > 0:
        row = db.execute("SELECT bytes FROM owners WHERE owner = ?", (owner,)).fetchone()
        if row is None or row[0] <= bound or not _drop_oldest(db, owner, row[0] - bound, keep):
            return


def prune_owners_bytes(db: sqlite3.Connection, bound: int) -> None:
    """Apply the per-key byte BOUND to every owner above it (at open)."""
    if bound > 0:
        for (owner,) in db.execute("SELECT owner FROM owners WHERE bytes > ?", (bound,)).fetchall():
            prune_owner_bytes(db, owner, bound)


def _total(db: sqlite3.Connection, column: str) -> int:
    return int(db.execute(f"SELECT {column} FROM usage").fetchone()[0])


def _heaviest(db: sqlite3.Connection, column: str, spent: list[str]) -> list[tuple[str, int]]:
    """The two owners holding the most (by COLUMN), but for those in SPENT; of owners holding
    as much, the one with the oldest response first (so ties keep the oldest-first rule)."""
    marks = ", ".join("?" * len(spent))
    where = f"{column} > 0 AND owner NOT IN ({marks})"
    top: list[tuple[str, int]] = db.execute(
        f"SELECT owner, {column} FROM owners WHERE {where} ORDER BY {column} DESC LIMIT 2",
        spent).fetchall()
    if len(top) == 2 and top[0][1] == top[1][1]:  # a tie: an index seek per owner in it
        first = db.execute(f"SELECT owner FROM owners WHERE {where} AND {column} = ? ORDER BY "
                           "(SELECT min(seq) FROM responses r WHERE r.owner = owners.owner) "
                           "LIMIT 1", (*spent, top[0][1])).fetchone()[0]
        top[0] = (first, top[0][1])
    return top


def _goal(top: list[tuple[str, int]], excess: int) -> tuple[str, int]:
    """The heaviest owner and how much it gives now: the excess, or down to the next owner's level
    (at least one unit), after which the heaviest is chosen again."""
    owner, most = top[0]
    return owner, max(1, min(excess, most - (top[1][1] if len(top) > 1 else 0)))


def _drop_oldest(db: sqlite3.Connection, owner: str, goal: int, keep: int,
                 weight: str = "size") -> bool:
    """Delete OWNER's oldest responses (before KEEP) whose WEIGHTs (their sizes, or 1 each) add
    up to GOAL; False if none."""
    cut, cur = None, db.execute(f"SELECT seq, {weight} FROM responses WHERE owner = ? AND seq < ? "
                                "ORDER BY seq", (owner, keep))
    for seq, size in cur:
        cut, goal = seq, goal - size
        if goal <= 0:
            break
    cur.close()
    if cut is None:
        return False
    db.execute("DELETE FROM responses WHERE owner = ? AND seq <= ?", (owner, cut))
    return True
