"""Forced tool calls: a ``tool_calls`` GrammarSpec -> the family's call grammar for this
tokenizer (its added tokens, e.g. ``<tool_call>``, written as token references)."""

from __future__ import annotations

import json
import re
from typing import Any

from parsers.callgrammar import OPENERS, call_grammar, lazy_call_grammar
from parsers.grammarterms import quoted
from protocol.messages import GrammarSpec
from worker.grammar.backend import GrammarError


def added_tokens(tokenizer: Any) -> dict[str, int]:
    """Text -> id of the tokenizer's added tokens (the grammar library sees them only as tokens)."""
    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    decoder = getattr(hf, "added_tokens_decoder", None)
    if isinstance(decoder, dict):
        return {str(getattr(t, "content", t)): int(i) for i, t in decoder.items()}
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        return {}
    return {t["content"]: int(t["id"]) for t in json.loads(backend.to_str()).get("added_tokens", [])}


class Literals:
    """Renders literal text as a grammar term: added tokens by id, the rest as strings."""

    def __init__(self, added: dict[str, int]) -> None:
        self.added = added
        names = sorted(added, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, names)) + ")") if names else None

    def __call__(self, text: str) -> str:
        """TEXT as a sequence of string literals and token references."""
        pieces = self._split.split(text) if self._split is not None else [text]
        terms = [f"<[{self.added[p]}]>" if p in self.added else quoted(p) for p in pieces if p]
        return " ".join(terms) if terms else '""'


def tool_calls_lark(spec: GrammarSpec, lit: Literals) -> GrammarSpec | None:
    """The lark GrammarSpec of a ``tool_calls`` SPEC (text: family, tools, multiple, auto).

    With ``auto`` (strict tools, the model may answer in text) the calls are constrained only
    when the family's opening marker is one added token of this tokenizer, so that free text
    cannot write it: None (no constraint) otherwise.
    """
    try:
        data = json.loads(spec.text)
        tools = [(str(name), params) for name, params in data["tools"]]
        family = str(data["family"])
        if data.get("auto"):
            if OPENERS.get(family) not in lit.added:
                return None
            text = lazy_call_grammar(family, tools, lit=lit)
        else:
            text = call_grammar(family, tools, multiple=bool(data.get("multiple")), lit=lit)
    except (ValueError, KeyError, TypeError) as exc:
        raise GrammarError(f"invalid tool_calls grammar: {exc}") from None
    return GrammarSpec(kind="lark", text=text, after_think=spec.after_think)
