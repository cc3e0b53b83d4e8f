"""Turn one request's inputs (texts or token ids) into checked token lists for the model."""

from __future__ import annotations

from typing import Any


class InputError(ValueError):
    """One request's input cannot be embedded: a 400 naming the field."""

    def __init__(self, message: str, param: str = "input") -> None:
        super().__init__(message)
        self.param = param


class Encoder:
    """Tokenizes text inputs and checks token-id inputs against the model's limits."""

    def __init__(self, tokenizer: Any, max_length: int, vocab_size: int, prompt: str = "") -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.vocab_size = vocab_size
        self.prompt = prompt

    def encode(self, inputs: list[str | list[int]], truncate: bool) -> list[list[int]]:
        """Token lists for INPUTS, in order; InputError for bad ids or (unless TRUNCATE) an
        input longer than the model's max_length. Token ids are used as given (include the
        model's special tokens, as its tokenizer's encode() returns them)."""
        texts = [(i, self.prompt + x) for i, x in enumerate(inputs) if isinstance(x, str)]
        out: list[list[int]] = [x if isinstance(x, list) else [] for x in inputs]
        if texts:
            kw: dict[str, Any] = {"truncation": True, "max_length": self.max_length} \
                if truncate else {"truncation": False}
            ids = self.tokenizer([t for _, t in texts], add_special_tokens=True, **kw)["input_ids"]
            for (i, _), toks in zip(texts, ids, strict=True):
                out[i] = list(toks)
        for i, toks in enumerate(out):
            self._check(i, toks, isinstance(inputs[i], str), truncate)
            if len(toks) > self.max_length:  # only when truncating: _check refused it otherwise
                out[i] = toks[:self.max_length]
        return out

    def _check(self, i: int, toks: list[int], text: bool, truncate: bool) -> None:
        where = f"input[{i}]"
        if not toks:
            raise InputError(f"{where} is empty; every input needs at least one token.")
        if not text:
            bad = next((t for t in toks if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise InputError(f"{where} has token id {bad}, outside this model's vocabulary "
                                 f"(0..{self.vocab_size - 1}).")
        if len(toks) > self.max_length and not truncate:
            raise InputError(
                f"{where} is {len(toks)} tokens; this model takes at most {self.max_length} "
                "tokens per input. Shorten it, or set \"truncate\": true to cut it to the limit.")
