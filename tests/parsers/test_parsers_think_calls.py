"""Tool calls written before ``</think>``: calls when the output ends in them, else a draft."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import WEATHER_TOOLS, Case, check_case, ids, pipeline_factory

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL2 = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
PARIS = ("get_weather", {"city": "Paris"})
ROME = ("get_weather", {"city": "Rome"})
XML_CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>"
)
DS_CALL = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)

HERMES_CASES = [
    # the Qwen3 failure: template opened <think>, the model never closed it
    Case("opened-call-ends-reasoning", "I need the weather.\n\n" + CALL, reasoning="I need the weather.",
         calls=(PARIS,), think_opened=True),
    Case("opened-two-calls", "Two cities.\n" + CALL + "\n" + CALL2, reasoning="Two cities.",
         calls=(PARIS, ROME), think_opened=True),
    Case("opened-call-only", CALL, calls=(PARIS,), think_opened=True),
    Case("opened-call-trailing-ws", "r\n" + CALL + "\n\n", reasoning="r", calls=(PARIS,),
         think_opened=True),
    Case("model-opened-call-ends-reasoning", "<think>Plan.\n" + CALL, reasoning="Plan.",
         calls=(PARIS,)),
    # the call is the last thing before </think> and nothing follows: still a call
    Case("call-then-close-then-end", "r " + CALL + "\n</think>\n", reasoning="r", calls=(PARIS,),
         think_opened=True),
    # truncated block at the end of the output: the tool parser decides (here: content)
    Case("opened-truncated-call", 'r <tool_call>{"name": "get_w', reasoning="r",
         content='<tool_call>{"name": "get_w', think_opened=True),
    # drafts: reasoning continues, or an answer / another call follows </think>
    Case("draft-then-more-reasoning", "r " + CALL + " hmm, no.</think>Answer.",
         reasoning="r " + CALL + " hmm, no.", content="Answer.", think_opened=True),
    Case("draft-then-answer", "<think>maybe " + CALL + "</think>No call.",
         reasoning="maybe " + CALL, content="No call."),
    Case("draft-then-real-call", "plan " + CALL + "\n</think>\n\n" + CALL2,
         reasoning="plan " + CALL, calls=(ROME,), think_opened=True),
    Case("close-inside-unclosed-block", "a <tool_call> b</think>c", reasoning="a <tool_call> b",
         content="c", think_opened=True),
    Case("draft-then-truncated-reasoning", "a " + CALL + " b", reasoning="a " + CALL + " b",
         think_opened=True),
    Case("not-a-block-opener", "a <tool_callx> b", reasoning="a <tool_callx> b",
         think_opened=True),
    Case("partial-opener-at-end", "a <tool_ca", reasoning="a <tool_ca", think_opened=True),
    Case("normal-close-then-call", "r</think>\n\n" + CALL, reasoning="r", calls=(PARIS,),
         think_opened=True),
]

OTHER_CASES: list[tuple[str, str, Case]] = [
    ("qwen3_coder_xml", "qwen3", Case("xml-opened-call", "Weather.\n\n" + XML_CALL,
                                      reasoning="Weather.", calls=(PARIS,), think_opened=True,
                                      tools=WEATHER_TOOLS)),
    ("glm47", "glm4", Case("glm-opened-call",
                           "Weather.<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                           "<arg_value>Paris</arg_value>\n</tool_call>",
                           reasoning="Weather.", calls=(PARIS,), think_opened=True,
                           tools=WEATHER_TOOLS)),
    ("minimax", "minimax", Case("minimax-opened-call",
                                'Weather.\n<minimax:tool_call>\n<invoke name="get_weather">\n'
                                '<parameter name="city">Paris</parameter>\n</invoke>\n'
                                "</minimax:tool_call>",
                                reasoning="Weather.", calls=(PARIS,), think_opened=True,
                                tools=WEATHER_TOOLS)),
    ("deepseek", "deepseek_r1", Case("deepseek-opened-call", "Weather.\n\n" + DS_CALL,
                                     reasoning="Weather.", calls=(PARIS,), think_opened=True)),
]


@pytest.mark.parametrize("case", HERMES_CASES, ids=ids(HERMES_CASES))
def test_hermes_qwen3(case: Case) -> None:
    check_case(pipeline_factory("hermes", "qwen3")(case), case)


@pytest.mark.parametrize("tool,reasoning,case", OTHER_CASES, ids=ids([c for *_, c in OTHER_CASES]))
def test_other_families(tool: str, reasoning: str, case: Case) -> None:
    check_case(pipeline_factory(tool, reasoning)(case), case)


def test_without_tool_parser_call_stays_reasoning() -> None:
    """No tools in the request (or tool_choice none): the markup is just reasoning text."""
    case = Case("no-tools", "r " + CALL, reasoning="r " + CALL, think_opened=True)
    check_case(pipeline_factory(None, "qwen3")(case), case)
    check_case(pipeline_factory("hermes", "qwen3", parse_tools=False)(case), case)
