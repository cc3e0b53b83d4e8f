"""gpt-oss Harmony: as a tool parser and as a reasoning parser."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import Case, check_case, ids, reasoning_factory, tool_factory

AN = "<|channel|>analysis<|message|>User asks for weather. Need to call tool.<|end|>"
CALL_TOKYO = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"location":"Tokyo"}<|call|>'
)
REASON = "User asks for weather. Need to call tool."
TOKYO = ("get_weather", {"location": "Tokyo"})

TOOL_CASES = [
    Case(
        "analysis-final",
        "<|channel|>analysis<|message|>Simple greeting.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>",
        reasoning="Simple greeting.",
        content="Hello! How can I help?",
    ),
    Case("analysis-call", AN + CALL_TOKYO, reasoning=REASON, calls=(TOKYO,)),
    Case(
        "recipient-before-channel",
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Tokyo"}<|call|>',
        calls=(TOKYO,),
    ),
    Case(
        "final-without-return",
        "<|channel|>final<|message|>Just text.",
        content="Just text.",
    ),
    Case("no-markers", "Hello", content="Hello"),
    Case(
        "call-without-call-token",
        AN
        + '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"Tokyo"}',
        reasoning=REASON,
        calls=(TOKYO,),
    ),
    Case(
        "call-invalid-json",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops<|call|>",
        content="<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops<|call|>",
    ),
    Case(
        "preamble",
        "<|channel|>commentary<|message|>Let me check that.<|end|>" + CALL_TOKYO,
        content="Let me check that.",
        calls=(TOKYO,),
    ),
    Case(
        "two-calls",
        CALL_TOKYO
        + '<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"tz": "JST"}<|call|>',
        calls=(TOKYO, ("get_time", {"tz": "JST"})),
    ),
    Case(
        "partial-end-marker",
        "<|channel|>final<|message|>Hi<|ret",
        content="Hi<|ret",
    ),
    Case(
        "analysis-truncated", "<|channel|>analysis<|message|>thinking...", reasoning="thinking..."
    ),
    Case("header-truncated", "<|channel|>analy", content="<|channel|>analy"),
    Case(
        "stray-stop-tokens",
        "<|channel|>final<|message|>ok<|return|><|end|>",
        content="ok",
    ),
    Case(
        "builtin-recipient",
        '<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query": "x"}<|call|>',
        calls=(("browser.search", {"query": "x"}),),
    ),
    Case(
        "empty-args",
        "<|channel|>commentary to=functions.now <|constrain|>json<|message|><|call|>",
        calls=(("now", {}),),
    ),
    Case(
        "special-chars-in-final",
        "<|channel|>final<|message|>a <| b |> c < d",
        content="a <| b |> c < d",
    ),
    Case(
        "two-analysis-messages",
        "<|channel|>analysis<|message|>First.<|end|><|start|>assistant<|channel|>analysis<|message|>Second.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done<|return|>",
        reasoning="First.\n\nSecond.",
        content="Done",
    ),
    Case(
        "missing-end-between-messages",
        "<|channel|>analysis<|message|>think<|start|>assistant<|channel|>final<|message|>answer",
        reasoning="think",
        content="answer",
    ),
]

REASONING_CASES = [
    Case(
        "analysis-final",
        "<|channel|>analysis<|message|>Simple greeting.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
        reasoning="Simple greeting.",
        content="Hello!",
    ),
    Case(
        "tool-call-passes-through",
        AN + CALL_TOKYO,
        reasoning=REASON,
        content=CALL_TOKYO,
    ),
    Case("plain", "no markers at all", content="no markers at all"),
    Case("analysis-only", "<|channel|>analysis<|message|>hmm", reasoning="hmm"),
    Case("final-only", "<|channel|>final<|message|>Answer.<|return|>", content="Answer."),
    Case(
        "preamble-is-content",
        "<|channel|>commentary<|message|>Checking.<|end|>",
        content="Checking.",
    ),
    Case("partial-opener", "<|chan", content="<|chan"),
    Case(
        "truncated-header",
        "<|start|>assistant<|channel|>fin",
        content="<|start|>assistant<|channel|>fin",
    ),
    Case(
        "whitespace-trimmed",
        "<|channel|>analysis<|message|>\n  reason \n<|end|><|start|>assistant<|channel|>final<|message|>\nA\n<|return|>",
        reasoning="reason",
        content="A",
    ),
    Case(
        "call-truncated-passes-through",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a":',
        content='<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a":',
    ),
    Case("empty", ""),
    Case(
        "stray-end",
        "text<|end|>more",
        content="textmore",
    ),
    Case(
        "unicode",
        "<|channel|>analysis<|message|>考虑一下<|end|><|start|>assistant<|channel|>final<|message|>好的",
        reasoning="考虑一下",
        content="好的",
    ),
    Case(
        "malformed-header-end-before-message",
        "<|channel|>final<|end|>x",
        content="<|channel|>finalx",
    ),
    Case(
        "final-then-call",
        "<|channel|>final<|message|>Sure.<|end|>" + CALL_TOKYO,
        content="Sure.\n\n" + CALL_TOKYO,
    ),
]


@pytest.mark.parametrize("case", TOOL_CASES, ids=ids(TOOL_CASES))
def test_harmony_tools(case: Case) -> None:
    check_case(tool_factory("harmony", case), case)


@pytest.mark.parametrize("case", REASONING_CASES, ids=ids(REASONING_CASES))
def test_harmony_reasoning(case: Case) -> None:
    check_case(reasoning_factory("harmony", case), case)
