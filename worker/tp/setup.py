"""The start-up every rank goes through in the same order (its collectives must line up)."""

from __future__ import annotations

import argparse
from typing import Any

from worker.kv.setup import KVPlan
from worker.tp.link import Link


def load_shard(args: argparse.Namespace, link: Link) -> tuple[Any, KVPlan]:
    """A follower's model (sharded) and KV pool (rank 0's size), as rank 0 makes its own."""
    from worker.cpu.blas import apply_blas_policy
    from worker.engine.dtype import model_dtype
    from worker.kv.setup import plan_kv
    from worker.model.load import load_model
    from worker.tp.shard import shard_model, share_store

    loaded = load_model(args.model, args.revision)
    apply_blas_policy(loaded.model)  # as rank 0 does
    shard_model(loaded.model, link)
    context_length = args.context_length or loaded.facts.context_length
    plan = plan_kv(loaded.model, model_dtype(loaded.model), kind=args.kv_cache_turboquant,
                   memory=args.kv_cache_memory, page_size=args.kv_page_size,
                   group_size=args.kv_group_size, max_batch=args.max_batch,
                   context_length=context_length, window_group=False)
    return loaded, share_store(plan, link)


def join_group(args: argparse.Namespace) -> Link:
    """This rank's link to its mlx.launch group; checks the group has --tensor-parallel ranks."""
    import os

    from worker.tp.link import join

    if "MLX_RANK" not in os.environ:
        raise SystemExit("--tensor-parallel N: start the group with `rapid-mlx worker ...` or "
                         "`python -m worker.tp.launch -- python -m worker ...`, not alone")
    link = join()
    if link.size != args.tensor_parallel:
        raise SystemExit(f"--tensor-parallel {args.tensor_parallel} but the group has "
                         f"{link.size} ranks (start it with mlx.launch -n {args.tensor_parallel})")
    if args.parent_pid is not None:
        args.parent_pid = os.getppid()  # our parent is mlx.launch (or its ssh): die with it
    return link
