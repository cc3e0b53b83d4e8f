"""Shard a loaded model over the group, and give every rank rank 0's KV pool."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import mlx.core as mx

from worker.kv.paged_kv import PagedKVStore
from worker.kv.pages import completer
from worker.kv.rows import writer
from worker.kv.setup import KVPlan, UnsupportedModel
from worker.tp import plan as p
from worker.tp.link import Link

log = logging.getLogger("rapid_mlx.worker")


def shard_model(model: Any, link: Link) -> None:
    """Split MODEL's attention heads and MLP over the group (mlx-lm's `shard`), in place."""
    if hasattr(model, "split") or getattr(model, "mrope", False):
        raise UnsupportedModel("tensor parallel serves text models only, not vision models")
    shard = getattr(model, "shard", None)
    if shard is None:
        kind = getattr(model, "model_type", type(model).__module__)
        raise UnsupportedModel(f"mlx-lm cannot shard '{kind}' models (no Model.shard); "
                               "tensor parallel needs one of llama, qwen2, qwen3, ...")
    if any(hasattr(layer, "linear_attn") for layer in model.layers):
        raise UnsupportedModel("tensor parallel does not serve models with recurrent "
                               "(linear-attention) layers yet; serve it on one rank")
    for layer in model.layers:
        attn = layer.self_attn
        heads = getattr(attn, "n_heads", 0) or getattr(attn, "num_attention_heads", 0)
        kv_heads = getattr(attn, "n_kv_heads", 0) or getattr(attn, "num_key_value_heads", 0)
        if heads % link.size or kv_heads % link.size:
            raise UnsupportedModel(f"{heads} attention heads and {kv_heads} KV heads do not "
                                   f"split over {link.size} ranks")
    shard(link.group)
    mx.eval(model.parameters())


def share_store(plan: KVPlan, link: Link) -> KVPlan:
    """Every rank's pool as rank 0 sized it (the same page ids everywhere); returns the plan."""
    store = plan.store
    link.open()
    if link.rank == 0:
        link.send(p.Shape(store.num_pages, store.tail_pages, plan.kind, store.work_pages,
                          store.spare_bytes))
        return plan
    shape = link.receive()
    if not isinstance(shape, p.Shape):
        raise RuntimeError(f"expected the KV pool's shape from rank 0, got {type(shape).__name__}")
    if (shape.num_pages, shape.tail_pages, shape.kind, shape.work_pages) == (
            store.num_pages, store.tail_pages, plan.kind, store.work_pages):
        return plan
    fmt = replace(store.fmt, kind=shape.kind)
    log.info("rank %d: KV pool resized to rank 0's %d pages", link.rank, shape.num_pages)
    return KVPlan(PagedKVStore(fmt, shape.num_pages, tail_pages=shape.tail_pages,
                               work_pages=shape.work_pages, spare_bytes=shape.spare_bytes,
                               put_rows=writer(), complete=completer()),
                  shape.kind, plan.reason)
