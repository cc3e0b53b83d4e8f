"""Word error rate: word-level edit distance over the reference length, after normalizing."""

from __future__ import annotations

import re

_NUMBERS = {"one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
            "seven": "7", "eight": "8", "nine": "9", "ten": "10"}


def words(text: str) -> list[str]:
    """Lower-case words without punctuation (hyphens split words; number words as digits)."""
    text = re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " "))
    return [_NUMBERS.get(w, w) for w in text.replace("'", "").split()]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance between two word lists."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, start=1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of HYPOTHESIS against REFERENCE."""
    ref = words(reference)
    return edit_distance(ref, words(hypothesis)) / max(1, len(ref))
