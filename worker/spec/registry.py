"""Build the speculator an alias asked for: ``--speculative ngram|draft|mtp``."""

from __future__ import annotations

import importlib
from typing import Any

from worker.fetch import CannotLoad
from worker.spec.controller import Speculator
from worker.spec.drafter import Drafter
from worker.spec.ngram import NgramDrafter

KINDS = ("none", "ngram", "draft", "mtp")


def build_speculator(kind: str, loaded: Any, *, num_draft: int, draft_model: str | None,
                     max_batch: int, context_length: int) -> Speculator | None:
    """The Speculator for KIND over the loaded target (None: speculation off).

    Raises CannotLoad (the worker says why and does not restart) when KIND cannot be had.
    """
    if kind in ("", "none") or num_draft <= 0:
        return None
    model = str(getattr(loaded, "path", "") or "the model")
    if kind == "ngram":
        drafter: Drafter = NgramDrafter()
    elif kind == "draft":
        if not draft_model:
            raise CannotLoad(model, "--speculative draft needs a draft model",
                             "pass --draft-model PATH|ALIAS")
        make = _factory("worker.spec.draft_load", "draft_drafter", kind, model)
        drafter = make(draft_model, loaded.tokenizer, max_batch=max_batch,
                       context_length=context_length)
    elif kind == "mtp":
        make = _factory("worker.spec.mtp", "mtp_drafter", kind, model)
        drafter = make(loaded, max_batch=max_batch, context_length=context_length)
    else:
        raise CannotLoad(model, f"--speculative {kind!r} is unknown",
                         f"choose one of {', '.join(KINDS)}")
    return Speculator(drafter, num_draft)


def _factory(module: str, name: str, kind: str, model: str) -> Any:
    """MODULE.NAME, imported only when asked for; a clear CannotLoad when it is not there."""
    todo = "serve without --speculative, or with --speculative ngram"
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as exc:
        raise CannotLoad(model, f"--speculative {kind} is not available in this build ({exc})",
                         todo) from exc
    if found is None:
        raise CannotLoad(model, f"--speculative {kind} is not available in this build "
                         f"({module} has no {name})", todo)
    return found
