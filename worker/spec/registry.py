"""Build the speculator an alias asked for: ``--speculative ngram|draft|mtp``."""

from __future__ import annotations

from typing import Any

from worker.model.fetch import CannotLoad
from worker.spec.controller import Speculator
from worker.spec.drafter import Drafter
from worker.spec.ngram import NgramDrafter

KINDS = ("none", "ngram", "draft", "mtp")
# most draft tokens per row and step when --num-draft-tokens is not given. n-gram proposals cost
# nothing to make, so only the verify forward's extra positions count against a longer draft:
# on the Qwen3 bench model's edit workload (acceptance 0.96) k = 8 made whole requests 1.98x
# plain against k = 4's 1.70x (measured with bench.probes.spec_interleaved). A draft model pays a forward per
# draft token, so it keeps 4.
DEFAULT_DRAFT_TOKENS = {"ngram": 8}
DRAFT_TOKENS = 4


def default_draft_tokens(kind: str) -> int:
    """Most draft tokens per row and step for drafter KIND when none was asked for."""
    return DEFAULT_DRAFT_TOKENS.get(kind, DRAFT_TOKENS)


def build_speculator(kind: str, loaded: Any, *, num_draft: int | None, draft_model: str | None,
                     max_batch: int, context_length: int,
                     compile_draft: bool = True) -> Speculator | None:
    """The Speculator for KIND over the loaded target (None: speculation off).

    NUM_DRAFT: most draft tokens per row and step (None: ``default_draft_tokens(KIND)``).
    COMPILE_DRAFT: a draft model's decode forwards run compiled (``--compile-decode`` not off).
    Raises CannotLoad (the worker says why and does not restart) when KIND cannot be had.
    """
    if num_draft is None:
        num_draft = default_draft_tokens(kind)
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
                                context_length=context_length, compile=compile_draft)
    elif kind == "mtp":  # the checkpoint's own next-n layer (refused when it has none)
        from worker.spec.mtp_load import mtp_drafter

        drafter = mtp_drafter(loaded, max_batch=max_batch, context_length=context_length)
    else:
        raise CannotLoad(model, f"--speculative {kind!r} is unknown",
                         f"choose one of {', '.join(KINDS)}")
    return Speculator(drafter, num_draft)
