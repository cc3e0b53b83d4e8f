"""Text -> Kokoro phonemes in bounded pieces (misaki's espeak-ng G2P), one piece per worker step."""

from __future__ import annotations

import re
from typing import Any

# a voice's first letter -> the espeak-ng language of its text (Kokoro's lang codes); Japanese
# and Mandarin need misaki's extras (not installed): their voices read text with en-us rules
LANGUAGES = {"a": "en-us", "b": "en-gb", "e": "es", "f": "fr-fr", "h": "hi", "i": "it",
             "p": "pt-br"}
MAX_PHONEMES = 80  # one piece: ~5 s of speech, well inside the worker's 30 s step bound
_SENTENCE = re.compile(r"(?<=[.!?…;:])\s+|\n+")
_CLAUSE = re.compile(r"(?<=[,—])\s+")


def language_for(voice: str) -> str:
    """The espeak-ng language that reads text for VOICE (by Kokoro's naming: 'af_heart' -> en-us)."""
    return LANGUAGES.get(voice[:1].lower(), "en-us")


class Phonemizer:
    """misaki's espeak-ng G2P per language, mapped to Kokoro's phoneme set."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self._backends: dict[str, Any] = {}

    def _backend(self, language: str) -> Any:
        if language not in self._backends:
            from misaki import espeak

            if language.startswith("en-"):
                self._backends[language] = espeak.EspeakFallback(british=language == "en-gb")
            else:
                self._backends[language] = espeak.EspeakG2P(language=language)
        return self._backends[language]

    def phonemes(self, text: str, language: str) -> str:
        """The phonemes of TEXT, keeping only symbols the model knows."""
        backend = self._backend(language)
        if language.startswith("en-"):
            ps, _ = backend(_Token(text))
        else:
            ps, _ = backend(text)
        return "".join(ch for ch in (ps or "") if ch in self.vocab).strip()

    def pieces(self, text: str, language: str, limit: int = MAX_PHONEMES) -> list[str]:
        """TEXT as phoneme strings of at most LIMIT each, split at sentences, then clauses,
        then words."""
        out: list[str] = []
        for sentence in (s.strip() for s in _SENTENCE.split(text)):
            if not sentence:
                continue
            ps = self.phonemes(sentence, language)
            if len(ps) <= limit:
                out += [ps] if ps else []
                continue
            for clause in (c.strip() for c in _CLAUSE.split(sentence)):
                out += _bounded(self.phonemes(clause, language), limit) if clause else []
        return [p for p in out if p.strip(" .,;:!?—…")]


def _bounded(ps: str, limit: int) -> list[str]:
    """Split a phoneme string at spaces into runs of at most LIMIT."""
    runs: list[str] = []
    current = ""
    for word in ps.split(" "):
        while len(word) > limit:  # one absurdly long word: cut it
            runs += [current] if current else []
            current, runs = "", runs + [word[:limit]]
            word = word[limit:]
        if current and len(current) + 1 + len(word) > limit:
            runs.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    return runs + ([current] if current else [])


class _Token:
    """The one attribute misaki's EspeakFallback reads from a token."""

    def __init__(self, text: str) -> None:
        self.text = text
