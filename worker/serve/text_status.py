"""The text-generation runner's part of a worker's status: its requests, counters and KV cache."""

from __future__ import annotations

import time
from typing import Any

from worker.engine.compile_mode import compile_status
from worker.engine.core import Engine
from worker.kv.dense import dense_status
from worker.kv.layer_kinds import FULL, kinds_status
from worker.kv.pages import page_status
from worker.kv.rows import row_write_status
from worker.kv.working import working_set_status
from worker.model.load import LoadedModel


def text_status(e: Engine, loaded: LoadedModel, tokenizing: int) -> dict[str, Any]:
    """The model, the engine's requests and counters (TOKENIZING: jobs in intake), its KV cache."""
    now = time.monotonic()
    reqs = [{"id": r.id, "phase": r.phase, "prompt_tokens": r.prompt_len,
             "tokens": r.generated, "age_s": round(now - r.arrival, 3)}
            for r in [*e.running, *e.waiting]]
    return {
        "model": loaded.facts.model, "path": str(loaded.path), "dtype": loaded.facts.dtype,
        "running": len(e.running), "waiting": len(e.waiting), "requests": reqs,
        "tokenizing": tokenizing, "failed_steps": e.failed_steps,
        "steps": e.stats.steps, "overlapped_steps": e.stats.overlapped_steps,
        "sync_step_seconds": round(e.stats.sync_seconds, 3), "generated_tokens": e.stats.generated_tokens,
        "prompt_tokens_computed": e.stats.prompt_tokens_computed,
        "decode_rows": e.stats.decode_rows, "finished": e.stats.finished,
        "last_step_at": e.stats.last_step_at, "max_batch": e.max_batch,
        "preemptions": e.stats.preemptions, **kv_status(e),
    }


def kv_status(e: Engine) -> dict[str, Any]:
    """The KV cache's format, pages, bytes, prefix cache, speeds, speculation and compilation."""
    fmt = e.kv.store.fmt
    s = e.stats
    return {
        "kv_format": fmt.kind, "kv_format_note": e.kv_note, "kv_page_size": fmt.page_size,
        # per KV head and token: the keys' and values' widths (MLA: the latent and RoPE part)
        "kv_key_width": fmt.head_dim, "kv_value_width": fmt.v_dim,
        "kv_pages_used": e.kv.pool.num_used, "kv_pages_free": e.kv.pool.num_free,
        "kv_pages_total": e.kv.pool.total,
        "kv_bytes_per_token": fmt.bytes_per_token_per_layer() * fmt.num_layers,
        "kv_bytes_per_token_per_layer": fmt.bytes_per_token_per_layer(),
        "kv_bytes_total": e.kv.store.nbytes(),
        "kv_full_precision_tail_pages": e.kv.tails.total if e.kv.tails else 0,
        **layer_kinds_status(e),
        **working_set_status(e.kv.store), **dense_status(f.dense for f in e.forwards().values()),
        **row_write_status(), **page_status(),
        **kinds_status(e.kv.store.kinds, [(len(r.kv.pages), r.computed) for r in e.running],
                       fmt.page_size),
        **group_status(e),
        "prefix_cache": e.kv.radix is not None,
        "prefix_cache_pages": e.kv.radix.num_pages if e.kv.radix else 0,
        "prefix_cache_queries": e.kv.stats.queries, "prefix_cache_hits": e.kv.stats.hits,
        "prefix_cache_hit_rate": round(e.kv.stats.hits / e.kv.stats.queries, 4)
        if e.kv.stats.queries else 0.0,
        "prefill_tokens_per_s": round(s.prompt_tokens_computed / s.prefill_seconds, 1)
        if s.prefill_seconds else 0.0,
        "decode_tokens_per_s": round(s.decode_rows / s.decode_seconds, 1)
        if s.decode_seconds else 0.0,
        "grammar_mask_seconds": round(s.mask_seconds, 4),
        "speculative": e.spec.name if e.spec is not None else None,
        "spec_draft_tokens": s.drafted_tokens, "spec_accepted_tokens": s.accepted_tokens,
        "spec_acceptance_rate": round(s.accepted_tokens / s.drafted_tokens, 4)
        if s.drafted_tokens else None,
        **compile_status(e.compile_decode, getattr(e, "compiled", None)),
    }


def group_status(e: Engine) -> dict[str, Any]:
    """Pages in use per layer kind (its group's pool: running rows' and the prefix cache's),
    pages running rows hold per kind, and the windowed layer group's pool."""
    kv, kinds = e.kv, set(e.kv.store.kinds.kinds)
    window = kv.window_pool
    used = {k: window.num_used if window is not None and k != FULL else kv.pool.num_used
            for k in kinds}
    held = {k: sum(sum(1 for w in r.kv.window if w) if window is not None and k != FULL
                   else len(r.kv.pages) for r in e.running) for k in kinds}
    return {"kv_pages_used_by_kind": used, "kv_pages_held_by_kind": held,
            "kv_window_pages_total": window.total if window is not None else 0,
            "kv_window_pages_free": window.num_free if window is not None else 0,
            "prefix_cache_window_pages": kv.radix.num_window_pages if kv.radix else 0}


def layer_kinds_status(e: Engine) -> dict[str, Any]:
    """Memory per layer kind: attention layers hold pages, a hybrid's recurrent layers hold state
    slots (per running request, and the prefix cache's snapshots)."""
    states = e.kv.store.states
    out: dict[str, Any] = {"kv_attention_layers": e.kv.store.fmt.num_layers,
                           "kv_recurrent_layers": len(states.layout.layers) if states else 0}
    if states is not None and e.kv.snapshots is not None:
        out.update(e.kv.snapshots.status(), state_bytes_total=states.nbytes())
    return out
