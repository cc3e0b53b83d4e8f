"""Fail requests the engine could not step and check that its page books still balance."""

from __future__ import annotations

from collections.abc import Sequence

from protocol.messages import RequestOutput
from worker.engine.request import Request
from worker.kv.manager import KVManager
from worker.kv.radix_cache import Node

STEP_FAILED = "the model failed while generating this request; it was stopped (see the worker log)"


class EngineBroken(RuntimeError):
    """The engine's state cannot be trusted after a failure: the worker must exit."""


class SendFailed(RuntimeError):
    """The loop's sender failed mid-step: a socket error, not the rows'; it leaves the loop."""


def error_output(r: Request, message: str = STEP_FAILED,
                 code: str = "internal_error") -> RequestOutput:
    """The terminal error output of a request the engine gave up on."""
    return RequestOutput(request_id=r.id, finish_reason="error", error=message,
                         error_code=code, prompt_tokens=r.prompt_len,
                         completion_tokens=max(r.generated, 0))


def discard(kv: KVManager, r: Request) -> None:
    """Return r's own pages and prefix lock without caching what it computed (it may be torn)."""
    kv.release(r, cache=False)


def verify(kv: KVManager, holders: Sequence[Request]) -> None:
    """Raise EngineBroken unless pages, tails and prefix locks are exactly those HOLDERS own."""
    try:
        kv.check()
    except AssertionError as exc:
        raise EngineBroken(f"KV pool inconsistent: {exc}") from exc
    own = sum(len(r.kv.pages) - r.kv.shared for r in holders)
    tree = kv.radix.num_pages if kv.radix is not None else 0
    if kv.pool.num_used != own + tree:
        raise EngineBroken(f"{kv.pool.num_used} KV pages in use, requests and cache hold {own + tree}")
    if kv.window_pool is not None:  # the windowed layer group's pages
        own = sum(kv.own_window_pages(r) for r in holders)
        tree = kv.radix.num_window_pages if kv.radix is not None else 0
        if kv.window_pool.num_used != own + tree:
            raise EngineBroken(f"{kv.window_pool.num_used} windowed KV pages in use, requests "
                               f"and cache hold {own + tree}")
        read = sum(1 for r in holders for w in r.kv.window[: r.kv.shared] if w)
        if sum(kv.window_refs.values()) != read:
            raise EngineBroken(f"requests read {read} of the cache's windowed pages, "
                               f"{sum(kv.window_refs.values())} counted")
    tails = sum(1 for r in holders if r.kv.tail)
    if kv.tails is not None and kv.tails.num_used != tails:
        raise EngineBroken(f"{kv.tails.num_used} tail pages in use, requests hold {tails}")
    if kv.radix is not None:
        _verify_locks(list(kv.radix.roots.values()),
                      [r.kv.node for r in holders if r.kv.node is not None])


def _verify_locks(roots: list[Node], locked: list[Node]) -> None:
    expected: dict[int, int] = {id(root): 1 for root in roots}  # each root is locked for good
    for node in locked:
        n: Node | None = node
        while n is not None:
            expected[id(n)] = expected.get(id(n), 0) + 1
            n = n.parent
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n.lock_ref != expected.get(id(n), 0):
            raise EngineBroken(f"prefix node locked {n.lock_ref} times, expected "
                               f"{expected.get(id(n), 0)}")
        stack.extend(n.children.values())
