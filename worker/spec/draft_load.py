"""Load a draft model for speculative decoding: find it, check its tokenizer, size its KV pool."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from worker.kv.paged_kv import KVFormat, PagedKVStore
from worker.kv.pages import completer
from worker.kv.rows import writer
from worker.kv.setup import parse_memory, probe_kv_shape
from worker.model.fetch import CannotLoad, resolve

DEMO_DRAFT = ("demo-draft", "embedded://demo-draft")  # names of the demo model's trained draft


class DraftMismatch(CannotLoad):
    """The draft model cannot draft for this target (another tokenizer, an unsupported model)."""


@dataclass
class DraftModel:
    """A loaded draft model, its tokenizer and its folder."""

    model: Any
    tokenizer: Any
    path: Path


def resolve_draft(name: str, revision: str | None = None) -> Path:
    """The folder of draft model NAME: the demo's draft ('demo-draft'), a folder or a repo id."""
    if name in DEMO_DRAFT:
        from worker.model.embedded import embedded_draft_path

        return embedded_draft_path()
    return resolve(name, revision)


def _vocab(tokenizer: Any) -> dict[str, int]:
    get = getattr(tokenizer, "get_vocab", None)
    return dict(get()) if callable(get) else {}


def check_tokenizers(name: str, target: Any, draft: Any) -> None:
    """Raise DraftMismatch unless TARGET's and DRAFT's tokenizers map the same strings to the same ids."""
    tv, dv = _vocab(target), _vocab(draft)
    if not tv or not dv:
        raise DraftMismatch(name, "its tokenizer (or the target's) has no readable vocabulary",
                            "use a draft model with a Hugging Face tokenizer")
    if tv != dv:
        differ = sorted(k for k in tv.keys() | dv.keys() if tv.get(k) != dv.get(k))
        raise DraftMismatch(
            name, f"its tokenizer differs from the target's ({len(tv)} vs {len(dv)} tokens, "
            f"{len(differ)} differ, e.g. {differ[:3]!r})",
            "use a draft model trained with the target's tokenizer (same family, smaller size)")


def load_draft(name: str, target_tokenizer: Any, revision: str | None = None) -> DraftModel:
    """Load draft model NAME with mlx-lm and check it shares TARGET_TOKENIZER's vocabulary."""
    from mlx_lm import load as mlx_load

    from worker.model.load import choose_dtype

    path = resolve_draft(name, revision)
    model, tokenizer = mlx_load(str(path))[:2]
    check_tokenizers(name, target_tokenizer, tokenizer)
    choose_dtype(model)  # float32 on CPU, like the target
    return DraftModel(model, tokenizer, path)


def draft_store(model: Any, dtype: mx.Dtype, *, max_batch: int, context_length: int,
                page_size: int = 16, memory: str = "256MiB") -> PagedKVStore:
    """Full-precision pages for the draft: every row's whole context if MEMORY allows."""
    try:
        layers, heads, dim = probe_kv_shape(model)
    except Exception as exc:
        raise DraftMismatch("draft", f"its layers do not use a plain attention KV cache ({exc})",
                            "use a standard attention model as the draft") from exc
    fmt = KVFormat(layers, heads, dim, page_size, dtype, "none")
    per_row = -(-context_length // page_size) + 1
    total = parse_memory(memory)
    pages = max(min(max_batch * per_row + 1, total // fmt.bytes_per_page()), per_row + 1)
    spare = max(total - pages * fmt.bytes_per_page(), 0)  # its dense decode cache
    return PagedKVStore(fmt, pages, spare_bytes=spare, put_rows=writer(), complete=completer())


def draft_drafter(name: str, target_tokenizer: Any, *, max_batch: int, context_length: int,
                  page_size: int = 16, memory: str = "256MiB", revision: str | None = None,
                  compile: bool | None = True) -> Any:
    """A DraftModelDrafter over draft model NAME (checked against TARGET_TOKENIZER)."""
    from worker.engine.dtype import model_dtype
    from worker.spec.draft_model import DraftModelDrafter

    loaded = load_draft(name, target_tokenizer, revision)
    dtype = model_dtype(loaded.model)
    store = draft_store(loaded.model, dtype, max_batch=max_batch, context_length=context_length,
                        page_size=page_size, memory=memory)
    return DraftModelDrafter(loaded.model, store, dtype, compile=compile)
