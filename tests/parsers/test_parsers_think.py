"""<think> reasoning parsers: qwen3, glm4, minimax share one table; deepseek_r1 its own."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import Case, check_case, ids, reasoning_factory

THINK_CASES = [
    Case(
        "basic",
        "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
        reasoning="Let me think.",
        content="The answer is 4.",
    ),
    Case("no-tags", "Just an answer.", content="Just an answer."),
    Case("no-tags-leading-ws", "\n  Answer\n", content="\n  Answer\n"),
    Case("empty", "", content=""),
    Case("whitespace-only", "   ", content="   "),
    Case(
        "opened-by-template",
        "The user wants X.\n</think>\n\nHere is X.",
        reasoning="The user wants X.",
        content="Here is X.",
        think_opened=True,
    ),
    Case(
        "opened-and-repeated",
        "<think>\nr\n</think>\nA",
        reasoning="r",
        content="A",
        think_opened=True,
    ),
    Case("opened-truncated", "still thinking", reasoning="still thinking", think_opened=True),
    Case("opened-whitespace", "  \n", think_opened=True),
    Case(
        "opened-immediate-close",
        "</think>\n\nHi",
        content="Hi",
        think_opened=True,
    ),
    Case("truncated-reasoning", "<think>\npartial thought", reasoning="partial thought"),
    Case("leading-ws-before-tag", "\n\n<think>x</think>y", reasoning="x", content="y"),
    Case("empty-think", "<think>\n\n</think>\n\nHello", content="Hello"),
    Case("close-without-open", "a </think> b", content="a </think> b"),
    Case("open-mid-content", "Hello <think>x</think>", content="Hello <think>x</think>"),
    Case("partial-open-at-end", "<thi", content="<thi"),
    Case("partial-close-at-end", "<think>abc</thi", reasoning="abc</thi"),
    Case(
        "angle-brackets-in-reasoning",
        "<think>a < b and c > d </thinking> e</think>ok",
        reasoning="a < b and c > d </thinking> e",
        content="ok",
    ),
    Case(
        "second-close-is-content",
        "<think>a</think>b</think>c",
        reasoning="a",
        content="b</think>c",
    ),
    Case(
        "content-keeps-trailing-newline",
        "<think>r</think>\nAnswer\n",
        reasoning="r",
        content="Answer\n",
    ),
    # after </think> only the template's line breaks go; other text is kept exactly
    Case("content-keeps-leading-spaces", "<think>r</think>  A ", reasoning="r", content="  A "),
    Case("content-newlines-then-spaces", "<think>r</think>\r\n\n  A", reasoning="r", content="  A"),
    Case(
        "multiline-reasoning",
        "<think>\nStep 1: add.\n\nStep 2: check.\n</think>\n\n**4**",
        reasoning="Step 1: add.\n\nStep 2: check.",
        content="**4**",
    ),
    Case(
        "tool-markup-inside-reasoning",
        "<think>maybe <tool_call>{}</tool_call></think>done",
        reasoning="maybe <tool_call>{}</tool_call>",
        content="done",
    ),
]

# deepseek_r1 starts in reasoning only when the prompt opened the think block (R1's template
# ends with "<think>\n", V3.1 thinking with "<think>", V3.1 non-thinking with "</think>").
R1_CASES = [
    Case(
        "no-opening-tag",
        "Okay, the user asks 2+2.\n</think>\n\n2+2 = 4.",
        reasoning="Okay, the user asks 2+2.",
        content="2+2 = 4.",
        think_opened=True,
    ),
    Case("with-opening-tag", "<think>\nr\n</think>\nA", reasoning="r", content="A"),
    Case("truncated", "Hmm, let me see", reasoning="Hmm, let me see", think_opened=True),
    Case("empty", ""),
    Case("empty-opened", "", think_opened=True),
    Case("only-close", "</think>answer", content="answer", think_opened=True),
    Case("opened-flag", "r</think>c", reasoning="r", content="c", think_opened=True),
    Case("partial-close", "thinking</th", reasoning="thinking</th", think_opened=True),
    Case("partial-open", "<thi", content="<thi"),
    Case("partial-open-opened", "<thi", reasoning="<thi", think_opened=True),
    Case("leading-ws", "\n\n<think>\nx</think>y", reasoning="x", content="y"),
    Case(
        "second-close",
        "a</think>b</think>c",
        reasoning="a",
        content="b</think>c",
        think_opened=True,
    ),
    Case(
        "multiline",
        "First, 3*3=9.\nThen +1.\n</think>\n\nThe result is **10**.\n",
        reasoning="First, 3*3=9.\nThen +1.",
        content="The result is **10**.\n",
        think_opened=True,
    ),
    Case("open-inside", "a <think> b</think>c", reasoning="a <think> b", content="c",
         think_opened=True),
    Case("unicode", "思考中…</think>答案：４", reasoning="思考中…", content="答案：４",
         think_opened=True),
    Case("ws-only", "  \n  ", reasoning="", think_opened=True),
    Case(
        "tool-block-after",
        "plan</think>\n\n<｜tool▁calls▁begin｜>",
        reasoning="plan",
        content="<｜tool▁calls▁begin｜>",
        think_opened=True,
    ),
    Case("empty-think-block", "<think></think>Hi", content="Hi"),
    # not opened: a non-thinking reply (V3.1 non-thinking mode, R1 without think) is content
    Case("not-opened-plain-reply", "Hello! How can I help?", content="Hello! How can I help?"),
    Case("not-opened-stray-close", "a</think>b", content="a</think>b"),
    Case("not-opened-ws", "\n Hi\n", content="\n Hi\n"),
]


@pytest.mark.parametrize("name", ["qwen3", "glm4", "minimax"])
@pytest.mark.parametrize("case", THINK_CASES, ids=ids(THINK_CASES))
def test_think_tags(name: str, case: Case) -> None:
    check_case(reasoning_factory(name, case), case)


@pytest.mark.parametrize("case", R1_CASES, ids=ids(R1_CASES))
def test_deepseek_r1(case: Case) -> None:
    check_case(reasoning_factory("deepseek_r1", case), case)
