"""A JSON number may not run on forever: past MAX_NUMBER_CHARS it ends where the grammar allows.

JSON Schema puts no bound on a number's digits and the grammar follows it, so a model caught in a
digit loop (a random-weight one at temperature 1, a degenerate real one) writes digits until
``max_tokens`` and the answer is not JSON. A double keeps 17 significant digits and an int64 19:
once a number outside a string reaches the cap, the tokens made only of number characters leave
the mask whenever the grammar allows anything else (a comma, a bracket, a longer token that ends
the number). The grammar still decides what may come; strings are never cut.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

NUMBER_CHARS = frozenset(b"0123456789.eE+-")
MAX_NUMBER_CHARS = 40  # "-0.12345678901234567e-308" is 25; room for a few leading zeros more
GUARDED_KINDS = ("json_schema", "json_object")  # output that is JSON text from its first byte


def numeric_tokens(decode: Callable[[int], bytes], n_vocab: int) -> np.ndarray:
    """A uint32 bitmask [ceil(N_VOCAB/32)] of the tokens whose text is only number characters."""
    bits = np.zeros((n_vocab + 31) // 32, dtype=np.uint32)
    for t in range(n_vocab):
        text = decode(t)
        if text and NUMBER_CHARS.issuperset(text):
            bits[t // 32] |= np.uint32(1 << (t % 32))
    return bits


class NumberGuard:
    """One answer's place in its JSON text: in a string or not, and the number being written."""

    __slots__ = ("numeric", "decode", "in_string", "escaped", "run")

    def __init__(self, numeric: np.ndarray, decode: Callable[[int], bytes]) -> None:
        self.numeric = numeric
        self.decode = decode
        self.in_string = False
        self.escaped = False
        self.run = 0  # number characters in a row, outside strings

    def feed(self, token: int) -> None:
        """Move past TOKEN's text."""
        for ch in self.decode(token):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == 0x5C:  # backslash
                    self.escaped = True
                elif ch == 0x22:  # quote
                    self.in_string = False
            elif ch in NUMBER_CHARS:
                self.run += 1
                continue
            elif ch == 0x22:
                self.in_string = True
            self.run = 0

    @property
    def capped(self) -> bool:
        """True when the number being written has reached the cap."""
        return self.run >= MAX_NUMBER_CHARS

    def trim(self, words: np.ndarray) -> None:
        """Take the number-only tokens out of WORDS (one row's uint32 mask) if others remain."""
        n = min(len(words), len(self.numeric))
        rest = words[:n] & ~self.numeric[:n]
        if rest.any():
            words[:n] = rest
