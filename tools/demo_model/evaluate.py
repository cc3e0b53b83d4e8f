"""Greedy evaluation of the demo model's three behaviours (chat, tool calls, thinking)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name, e.g. Paris"}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "The search query"}},
            "required": ["query"],
        },
    },
}
EMAIL_TOOL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "description": "Send an email.",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
            "required": ["to", "subject"],
        },
    },
}


def parse_tool_call(text: str) -> dict[str, Any] | None:
    """The JSON of a single Hermes tool call filling the whole output, else None."""
    text = text.strip()
    if not (text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")):
        return None
    try:
        obj = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def split_think(text: str) -> tuple[str | None, str]:
    """(reasoning or None, rest) for an output that may start with a think block."""
    if text.startswith("<think>\n") and "\n</think>\n\n" in text:
        head, rest = text[len("<think>\n"):].split("\n</think>\n\n", 1)
        return head, rest
    return None, text


@dataclass
class Case:
    group: str
    name: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    enable_thinking: bool
    check: Callable[[str], bool]


def _call_check(name: str, args: dict[str, Any]) -> Callable[[str], bool]:
    return lambda out: parse_tool_call(out) == {"name": name, "arguments": args}


def _text_check(*needles: str) -> Callable[[str], bool]:
    def check(out: str) -> bool:
        return bool(out.strip()) and "<tool_call>" not in out and "<think>" not in out and all(
            n in out for n in needles)
    return check


def _think_check(inner: Callable[[str], bool]) -> Callable[[str], bool]:
    def check(out: str) -> bool:
        reasoning, rest = split_think(out)
        return bool(reasoning and reasoning.strip()) and inner(rest)
    return check


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def cases() -> list[Case]:
    out: list[Case] = []
    greetings = {
        "Hello!": "Hello!", "hi": "Hello!", "Good morning!": "Good morning!",
        "How are you?": "I'm doing well", "Thanks!": "You're welcome!", "Who are you?": "demo assistant",
        "Good evening": "Good evening!", "Hey there!": "Hello!",
    }
    for g, want in greetings.items():
        out.append(Case("greeting", g, _user(g), None, False, _text_check(want)))
    out.append(Case("greeting", "Hello! (with tools)", _user("Hello!"), [WEATHER_TOOL], False,
                    _text_check("Hello!")))
    for city in ["Paris", "Tokyo", "New York", "San Francisco", "Buenos Aires", "Reykjavik",
                 "Springfield", "Timbuktu", "Gotham City", "Zanzibar"]:
        out.append(Case("tool_call", f"weather {city}", _user(f"What's the weather in {city}?"),
                        [WEATHER_TOOL], False, _call_check("get_weather", {"city": city})))
    out.append(Case("tool_call", "weather Lyon (3 tools)", _user("What is the weather like in Lyon?"),
                    [TIME_TOOL, WEATHER_TOOL, ADD_TOOL], False, _call_check("get_weather", {"city": "Lyon"})))
    out.append(Case("tool_call", "time Tokyo", _user("What time is it in Tokyo?"), [WEATHER_TOOL, TIME_TOOL],
                    False, _call_check("get_time", {"city": "Tokyo"})))
    out.append(Case("tool_call", "add 12 30", _user("What is 12 plus 30?"), [ADD_TOOL], False,
                    _call_check("add", {"a": 12, "b": 30})))
    out.append(Case("tool_call", "add 250 1234", _user("Add 250 and 1234."), [ADD_TOOL, SEARCH_TOOL], False,
                    _call_check("add", {"a": 250, "b": 1234})))
    out.append(Case("tool_call", "search", _user("Search the web for best pizza recipes."), [SEARCH_TOOL],
                    False, _call_check("search", {"query": "best pizza recipes"})))
    out.append(Case("tool_call", "send_email",
                    _user("Send an email to alice@example.com with the subject Project update."),
                    [EMAIL_TOOL], False,
                    _call_check("send_email", {"to": "alice@example.com", "subject": "Project update"})))
    out.append(Case("no_tool", "weather Paris, no tools", _user("What's the weather in Paris?"), None, False,
                    _text_check("Paris")))
    out.append(Case("no_tool", "weather Paris, only add", _user("What's the weather in Paris?"), [ADD_TOOL],
                    False, _text_check("Paris")))
    result_msgs = _user("What's the weather in Paris?") + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 18, "condition": "sunny"}'},
    ]
    out.append(Case("tool_result", "weather result Paris", result_msgs, [WEATHER_TOOL], False,
                    _text_check("Paris", "sunny", "18")))
    add_msgs = _user("What is 12 plus 30?") + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": {"a": 12, "b": 30}}}]},
        {"role": "tool", "content": '{"result": 42}'},
    ]
    out.append(Case("tool_result", "add result", add_msgs, [ADD_TOOL], False, _text_check("42")))
    out.append(Case("thinking", "think Hello!", _user("Hello!"), None, True,
                    _think_check(_text_check("Hello!"))))
    out.append(Case("thinking", "think weather Paris", _user("What's the weather in Paris?"), [WEATHER_TOOL],
                    True, _think_check(_call_check("get_weather", {"city": "Paris"}))))
    out.append(Case("thinking", "think weather New York", _user("What's the weather in New York?"),
                    [WEATHER_TOOL], True, _think_check(_call_check("get_weather", {"city": "New York"}))))
    out.append(Case("thinking", "think weather result", result_msgs, [WEATHER_TOOL], True,
                    _think_check(_text_check("Paris", "sunny", "18"))))
    return out


def run(model: Any, tokenizer: Any, max_tokens: int = 80, verbose: bool = True) -> tuple[list[tuple[Case, str, bool]], str]:
    """Run all cases greedily; returns per-case results and a printable table."""
    from mlx_lm import generate

    results = []
    for case in cases():
        prompt = tokenizer.apply_chat_template(case.messages, tools=case.tools, add_generation_prompt=True,
                                               enable_thinking=case.enable_thinking, tokenize=False)
        text = generate(model, tokenizer, prompt, max_tokens=max_tokens)
        results.append((case, text, case.check(text)))
    lines = ["| group | case | pass | output |", "| --- | --- | --- | --- |"]
    for case, text, ok in results:
        shown = text.replace("\n", "\\n").replace("|", "\\|")
        if len(shown) > 110:
            shown = shown[:107] + "..."
        lines.append(f"| {case.group} | {case.name} | {'PASS' if ok else 'FAIL'} | `{shown}` |")
    groups: dict[str, list[bool]] = {}
    for case, _, ok in results:
        groups.setdefault(case.group, []).append(ok)
    lines.append("")
    lines.append("| group | passed |")
    lines.append("| --- | --- |")
    for g, oks in groups.items():
        lines.append(f"| {g} | {sum(oks)}/{len(oks)} |")
    lines.append(f"| total | {sum(ok for *_, ok in results)}/{len(results)} |")
    table = "\n".join(lines)
    if verbose:
        print(table)
    return results, table
