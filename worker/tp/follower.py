"""A rank other than 0: run every forward rank 0 plans, on this rank's shard, until told to stop."""

from __future__ import annotations

import argparse
import logging
import signal

from worker.kv.request_pages import RequestPages
from worker.tp import plan as p
from worker.tp.link import Link

log = logging.getLogger("rapid_mlx.worker")


def follow(forward: object, link: Link, parent: int | None = None) -> str:
    """Receive and run plans until a Stop; return its reason (a lost peer raises)."""
    from worker.engine.forward import Forward

    assert isinstance(forward, Forward)
    while True:
        plan = link.receive(parent)
        if isinstance(plan, p.Stop):
            return plan.reason
        # rank 0 samples from its own logits: ours are not computed where the head is separable
        if isinstance(plan, p.Call):
            forward(plan.rows, _pages(plan.pages, plan.tails), plan.starts,
                    plan.want_logits and forward.split is None)
        elif isinstance(plan, p.Decode):
            tokens = link.tokens(None, len(plan.starts))
            forward.feed(tokens, _pages(plan.pages, plan.tails), plan.starts)
        elif isinstance(plan, p.Idle):  # rank 0 freed its dense decode cache: so do we
            forward.idle()
        else:
            raise RuntimeError(f"unexpected plan {type(plan).__name__} from rank 0")


def _pages(pages: list[list[int]], tails: list[int]) -> list[RequestPages]:
    return [RequestPages(pages=ps, tail=t) for ps, t in zip(pages, tails, strict=True)]


def run_follower(args: argparse.Namespace, link: Link) -> int:
    """Load, shard and serve this rank's part of the model; 0 when rank 0 stopped us cleanly."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # mlx.launch ends the group: no clean-up here
    from worker.engine.attention import install as install_paged_attention
    from worker.engine.dtype import model_dtype
    from worker.engine.forward import Forward
    from worker.kv.calibrate import calibrate_centers
    from worker.kv.setup import UnsupportedModel
    from worker.model.fetch import CannotLoad
    from worker.tp.setup import load_shard

    try:
        loaded, plan = load_shard(args, link)
    except (CannotLoad, UnsupportedModel) as exc:  # rank 0 finds the same and tells the gateway
        log.debug("rank %d cannot serve the model: %s", link.rank, exc)
        return 0
    install_paged_attention()
    dtype = model_dtype(loaded.model)
    forward = Forward(loaded.model, plan.store, dtype)
    forward.sharded = True
    if plan.store.quantized:
        calibrate_centers(loaded.model, loaded.tokenizer, plan.store)
    log.info("rank %d of %d: following rank 0", link.rank, link.size)
    try:
        reason = follow(forward, link, args.parent_pid)
    except RuntimeError as exc:  # the ring lost a peer: the group is over
        log.error("rank %d: %s", link.rank, exc)
        return 1
    log.info("rank %d: rank 0 stopped (%s)", link.rank, reason)
    return 0
