"""Stop strings across arbitrary chunk boundaries."""

from __future__ import annotations

import pytest

from worker.engine.stops import StopMatcher


def _run(chunks: list[str], stops: list[str]) -> tuple[str, bool]:
    m = StopMatcher(stops)
    out = ""
    for c in chunks:
        out += m.feed(c)
        if m.stopped:
            return out, True
    return out + m.flush(), False


@pytest.mark.parametrize(
    "text,stops,expected,stopped",
    [
        ("hello world", ["wor"], "hello ", True),
        ("hello world", ["xyz"], "hello world", False),
        ("a<|end|>b", ["<|end|>"], "a", True),
        ("aaab", ["aab"], "a", True),
        ("abc", [], "abc", False),
        ("one\ntwo", ["\n", "tw"], "one", True),
        ("tail <", ["<stop>"], "tail <", False),
    ],
)
def test_every_split(text: str, stops: list[str], expected: str, stopped: bool) -> None:
    assert _run([text], stops) == (expected, stopped)
    for i in range(len(text) + 1):
        assert _run([text[:i], text[i:]], stops) == (expected, stopped)
    assert _run(list(text), stops) == (expected, stopped)


def test_held_back_prefix_is_not_emitted_early() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("abc ST") == "abc "
    assert m.feed("X") == "STX"


def test_matched_names_the_earliest_stop() -> None:
    m = StopMatcher(["END", "b"])
    assert m.feed("a") == "a" and m.matched is None
    assert m.feed("xEN") == "x" and m.feed("Db") == "" and m.stopped and m.matched == "END"
