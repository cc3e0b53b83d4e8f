"""Build the speculator an alias asked for: ``--speculative ngram|draft|mtp``."""

from __future__ import annotations

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
        from worker.spec.draft_load import draft_drafter

        drafter = draft_drafter(draft_model, loaded.tokenizer, max_batch=max_batch,
                                context_length=context_length)
    elif kind == "mtp":  # the CLI offers it so that the choice is stable; the drafter is not built
        raise CannotLoad(model, "--speculative mtp is not built yet (no MTP drafter: see the "
                         "README's speculative decoding section)",
                         "serve with --speculative ngram or --speculative draft")
    else:
        raise CannotLoad(model, f"--speculative {kind!r} is unknown",
                         f"choose one of {', '.join(KINDS)}")
    return Speculator(drafter, num_draft)
