"""Parsing time grows linearly with the text (no rescanning of the buffer per delta).

Times are the CPU time of the test's own thread (``time.thread_time``), best of three with the
garbage collector off: other processes on the cores do not count in it, as they do in wall time
(a loaded CI machine made a linear parser look quadratic)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest

from parsers import make_reasoning_parser, make_tool_parser
from parsers.base import ReasoningParser, ToolParser

B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"

# a long call body (the worst case: the parser waits for a closing marker)
BIG: dict[str, Callable[[str], str]] = {
    "hermes": lambda x: '<tool_call>{"name":"f","arguments":{"s":"' + x + '"}}</tool_call>',
    "qwen3_xml": lambda x: (
        "<tool_call>\n<function=f>\n<parameter=s>\n"
        + x
        + "\n</parameter>\n</function>\n</tool_call>"
    ),
    "glm47": lambda x: (
        "<tool_call>f<arg_key>s</arg_key><arg_value>" + x + "</arg_value></tool_call>"
    ),
    "minimax": lambda x: (
        '<minimax:tool_call><invoke name="f"><parameter name="s">'
        + x
        + "</parameter></invoke></minimax:tool_call>"
    ),
    "deepseek": lambda x: B + CB + "f" + SEP + '{"s": "' + x + '"}' + CE + E,
    "harmony": lambda x: '<|channel|>commentary to=functions.f<|message|>{"s":"' + x + '"}<|call|>',
    "llama": lambda x: '[f(s="' + x + '")]',
    "ui_tars": lambda x: "Action: type(content='" + x + "')",
}


def _elapsed(make: Callable[[], ToolParser | ReasoningParser], text: str, step: int = 8) -> float:
    """CPU seconds this thread spends feeding TEXT in STEP-character deltas (best of three)."""
    best = float("inf")
    for _ in range(3):
        parser = make()
        gc.disable()
        try:
            start = time.thread_time()
            for i in range(0, len(text), step):
                parser.feed(text[i : i + step])
            parser.finish()
            best = min(best, time.thread_time() - start)
        finally:
            gc.enable()
    return best


def _assert_linear(
    make: Callable[[], ToolParser | ReasoningParser], build: Callable[[str], str]
) -> None:
    small = _elapsed(make, build("ab " * 10_000))
    large = _elapsed(make, build("ab " * 40_000))
    # 4x the text: about 4x the time when linear, about 16x if every delta rescanned the buffer
    assert large < 10 * small + 0.05, (small, large)


@pytest.mark.parametrize("name", sorted(BIG))
def test_long_call_body_is_linear(name: str) -> None:
    _assert_linear(lambda: make_tool_parser(name), BIG[name])
    parser = make_tool_parser(name)
    text = BIG[name]("xyz " * 5000)
    deltas = [parser.feed(text[i : i + 3]) for i in range(0, len(text), 3)] + [parser.finish()]
    calls = [tc for d in deltas for tc in d.tool_calls]
    assert calls and "xyz xyz" in "".join(tc.arguments for tc in calls)


@pytest.mark.parametrize("name", sorted(BIG))
def test_long_content_is_linear(name: str) -> None:
    _assert_linear(lambda: make_tool_parser(name), lambda x: x.replace("ab", "Hi <to"))


@pytest.mark.parametrize("name", ["qwen3", "deepseek_r1", "harmony"])
def test_long_reasoning_is_linear(name: str) -> None:
    def build(x: str) -> str:
        if name == "harmony":
            return "<|channel|>analysis<|message|>" + x + "<|end|><|channel|>final<|message|>ok"
        return "<think>" + x + "</think>ok"

    _assert_linear(lambda: make_reasoning_parser(name), build)


def test_llama_prose_candidate_is_linear() -> None:
    """A long JSON-looking object after prose (held until decided) is scanned once."""
    _assert_linear(lambda: make_tool_parser("llama"), lambda x: 'Hi {"s": "' + x + '"} end')


def test_call_region_in_reasoning_is_linear() -> None:
    """A long tool-call block inside reasoning (held until decided) is scanned once."""
    from parsers import OutputParser

    _assert_linear(
        lambda: OutputParser("hermes", "qwen3", think_opened=True),  # type: ignore[return-value]
        lambda x: 'r <tool_call>{"name": "f", "arguments": {"s": "' + x + '"}}</tool_call>',
    )
