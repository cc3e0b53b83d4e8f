"""UI-TARS Thought/Action outputs."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import Case, check_case, ids, tool_factory

THOUGHT = "Thought: I need to click the search button."
CASES = [
    Case(
        "click",
        THOUGHT + "\nAction: click(start_box='(235,512)')",
        content=THOUGHT,
        calls=(("click", {"start_box": [235, 512]}),),
    ),
    Case(
        "box-tokens",
        "Thought: open menu\nAction: click(start_box='<|box_start|>(100,200)<|box_end|>')",
        content="Thought: open menu",
        calls=(("click", {"start_box": [100, 200]}),),
    ),
    Case(
        "drag",
        "Thought: move it\nAction: drag(start_box='(1,2)', end_box='(30,40)')",
        content="Thought: move it",
        calls=(("drag", {"start_box": [1, 2], "end_box": [30, 40]}),),
    ),
    Case(
        "hotkey",
        "Thought: copy\nAction: hotkey(key='ctrl c')",
        content="Thought: copy",
        calls=(("hotkey", {"key": "ctrl c"}),),
    ),
    Case(
        "type-with-escapes",
        "Thought: type query\nAction: type(content='It\\'s here\\n')",
        content="Thought: type query",
        calls=(("type", {"content": "It's here\n"}),),
    ),
    Case(
        "scroll",
        "Thought: more\nAction: scroll(start_box='(10,20)', direction='down')",
        content="Thought: more",
        calls=(("scroll", {"start_box": [10, 20], "direction": "down"}),),
    ),
    Case(
        "wait",
        "Thought: loading\nAction: wait()",
        content="Thought: loading",
        calls=(("wait", {}),),
    ),
    Case(
        "finished",
        "Thought: all done\nAction: finished(content='Task complete.')",
        content="Thought: all done",
        calls=(("finished", {"content": "Task complete."}),),
    ),
    Case(
        "call-user",
        "Thought: stuck\nAction: call_user()",
        content="Thought: stuck",
        calls=(("call_user", {}),),
    ),
    Case(
        "action-only",
        "Action: left_double(start_box='(5,6)')",
        calls=(("left_double", {"start_box": [5, 6]}),),
    ),
    Case(
        "four-coordinates",
        "Action: right_single(start_box='(10,20,30,40)')",
        calls=(("right_single", {"start_box": [10, 20, 30, 40]}),),
    ),
    Case(
        "point-format",
        "Thought: t\nAction: click(point='<point>100 200</point>')",
        content="Thought: t",
        calls=(("click", {"point": [100, 200]}),),
    ),
    Case(
        "not-a-call",
        "Thought: hmm\nAction: click the button",
        content="Thought: hmm\nAction: click the button",
    ),
    Case(
        "truncated-action",
        "Thought: x\nAction: click(start_box='(1,",
        content="Thought: x\nAction: click(start_box='(1,",
    ),
    Case("no-action", "Thought: thinking only", content="Thought: thinking only"),
    Case(
        "two-actions",
        "Thought: two steps\nAction: click(start_box='(1,2)')\n\ntype(content='abc')",
        content="Thought: two steps",
        calls=(("click", {"start_box": [1, 2]}), ("type", {"content": "abc"})),
    ),
    Case(
        "action-word-mid-line",
        "Thought: the Action: word mid-line is text",
        content="Thought: the Action: word mid-line is text",
    ),
    Case(
        "reflection-summary",
        "Reflection: last click failed.\nAction_Summary: retry\nAction: click(start_box='(7,8)')",
        content="Reflection: last click failed.\nAction_Summary: retry",
        calls=(("click", {"start_box": [7, 8]}),),
    ),
    Case(
        "positional-args",
        "Action: click('(1,2)')",
        content="Action: click('(1,2)')",
    ),
    Case(
        "placeholder-box-kept",
        "Action: click(start_box='[x1, y1, x2, y2]')",
        calls=(("click", {"start_box": "[x1, y1, x2, y2]"}),),
    ),
    Case(
        "text-after-action",
        "Action: wait()\nThought: next",
        content="Thought: next",
        calls=(("wait", {}),),
    ),
    Case("partial-action-marker", "Thought: a\nActi", content="Thought: a\nActi"),
    Case(
        "float-coordinates",
        "Action: click(start_box='(0.25,0.5)')",
        calls=(("click", {"start_box": [0.25, 0.5]}),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_ui_tars(case: Case) -> None:
    check_case(tool_factory("ui_tars", case), case)
