"""Deterministic synthetic conversations for the embedded demo model.

Every sample is a conversation (messages, tools, enable_thinking) plus the final
assistant message the model should produce.  Samples are rendered through the
model's own chat template (the same Jinja template, rendered the same way as
``tokenizer.apply_chat_template``), so that the text seen in training is exactly
the text the server renders at inference time:

* ``prompt``     -- the conversation rendered with ``add_generation_prompt=True``
* ``completion`` -- what follows it in the full rendering, up to and including
                    ``<|im_end|>`` (the loss is computed on these tokens only).

All randomness comes from one seeded ``random.Random``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tools.demo_model.values import (
    CITIES,
    CONDITIONS,
    NAMES,
    TOOL_NAMES,
    WORDS,
    make_tool,
    pseudo_word,
    random_city,
    random_email,
    random_number,
    random_query,
    random_subject,
)

TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")


@lru_cache(maxsize=1)
def chat_template() -> str:
    """The Jinja chat template of the demo model."""
    return TEMPLATE_PATH.read_text(encoding="utf-8")


def render(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    enable_thinking: bool = True,
) -> str:
    """Render messages with the chat template, exactly as transformers' apply_chat_template."""
    from transformers.utils import chat_template_utils

    render_jinja_template: Any = chat_template_utils.render_jinja_template
    rendered, _ = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=chat_template(),
        add_generation_prompt=add_generation_prompt,
        enable_thinking=enable_thinking,
    )
    return str(rendered[0])


# --------------------------------------------------------------------------- requests

REQUESTS = {
    "get_weather": [
        "What's the weather in {city}?", "What is the weather like in {city}?",
        "How is the weather in {city} today?", "Weather in {city}?", "weather in {city}",
        "Is it raining in {city}?", "Tell me the weather for {city}.",
        "Can you check the weather in {city}?", "what's the weather in {city}",
        "How hot is it in {city}?", "Do I need an umbrella in {city}?",
        "What's the weather like in {city} right now?", "Check the weather in {city}, please.",
        "I'm going to {city}. What's the weather there?", "Current weather in {city}?",
        "What is the temperature in {city}?", "Is it cold in {city}?",
    ],
    "get_time": [
        "What time is it in {city}?", "What's the current time in {city}?",
        "Tell me the time in {city}.", "time in {city}?", "What is the local time in {city}?",
        "Can you tell me what time it is in {city}?", "Current time in {city}, please.",
        "what time is it in {city}",
    ],
    "add": [
        "What is {a} plus {b}?", "Add {a} and {b}.", "What's {a} + {b}?", "{a} + {b}",
        "Can you add {a} and {b} for me?", "Calculate {a} + {b}.",
        "What is the sum of {a} and {b}?", "Please add {a} to {b}.", "what is {a} plus {b}",
    ],
    "search": [
        "Search the web for {query}.", "Can you look up {query}?", "Search for {query}",
        "Find information about {query}.", "Look up {query} online.",
        "Please search for {query}.", "Search {query}",
    ],
    "send_email": [
        "Send an email to {to} with the subject {subject}.",
        "Email {to} with the subject {subject}.",
        "Please send {to} an email with the subject {subject}.",
        "Send a mail to {to}, subject: {subject}",
        "Write an email to {to} with subject {subject}.",
    ],
}

GREETINGS: list[tuple[list[str], str, str]] = [
    (["Hello!", "Hello", "hello", "Hello there!", "hello there", "Hi!", "Hi", "hi", "hi!",
      "Hey!", "Hey", "hey", "Hey there!", "Hi there!", "Hiya!", "Greetings!", "Yo!", "HELLO",
      "HI", "Hello, assistant!", "Hi assistant"],
     "Hello! How can I help you today?",
     "The user is greeting me. I should greet them back and offer to help."),
    (["Good morning!", "Good morning", "good morning", "Morning!"],
     "Good morning! How can I help you today?",
     "The user says good morning. I will greet them back and offer to help."),
    (["Good afternoon!", "Good afternoon", "good afternoon"],
     "Good afternoon! How can I help you today?",
     "The user says good afternoon. I will greet them back and offer to help."),
    (["Good evening!", "Good evening", "good evening"],
     "Good evening! How can I help you today?",
     "The user says good evening. I will greet them back and offer to help."),
    (["How are you?", "How are you", "how are you?", "How are you doing?", "How's it going?",
      "Hi, how are you?", "Hello, how are you?", "how are you doing today?"],
     "I'm doing well, thank you for asking! How can I help you today?",
     "The user asks how I am. I will answer politely and offer to help."),
    (["Thanks!", "Thank you!", "thanks", "Thank you", "thank you so much", "Thanks a lot!",
      "Great, thanks!", "thx", "Thanks for your help!"],
     "You're welcome! Let me know if there is anything else I can help with.",
     "The user is thanking me. I will say they are welcome."),
    (["Who are you?", "who are you", "What are you?", "What is your name?", "What's your name?",
      "Who am I talking to?", "Introduce yourself."],
     "I am a tiny demo assistant served by rapid-mlx. I can chat a little and call tools.",
     "The user asks who I am. I will introduce myself briefly."),
    (["What can you do?", "what can you do", "How can you help me?", "What are you able to do?",
      "Help"],
     "I can chat a little and call tools that you give me, like weather, time, math, search or email.",
     "The user asks what I can do. I will describe my abilities briefly."),
    (["Bye!", "Goodbye!", "bye", "See you later!", "Good night!", "Goodbye"],
     "Goodbye! Have a great day!",
     "The user is saying goodbye. I will say goodbye too."),
    (["Tell me a joke.", "Tell me a joke", "tell me a joke", "Say something funny."],
     "Why did the computer go to the doctor? Because it had a virus!",
     "The user wants a joke. I will tell a short one."),
    (["Are you there?", "Anyone there?", "Test", "test", "ping"],
     "Yes, I'm here! How can I help you today?",
     "The user is checking if I am here. I will confirm and offer help."),
]

UNKNOWN_REQUESTS = [
    "Write a poem about {w}.", "Explain {w} to me.", "What is the meaning of life?",
    "Can you write some code for {w}?", "Translate {w} into French.",
    "What do you think about {w}?", "Summarize the history of {w}.",
    "Tell me a story about {w}.", "Why is the sky blue?", "What is the capital of {c}?",
    "Give me a recipe for {w}.", "Who won the game yesterday?",
]
UNKNOWN_ANSWER = ("I'm only a tiny demo model, so I can't help much with that. "
                  "I can chat a little and call tools that you give me.")
UNKNOWN_THINK = "This request is beyond what a tiny demo model can do. I will explain my limits politely."

SYSTEM_PROMPTS = [
    "You are a helpful assistant.", "You are a friendly assistant.",
    "You are a helpful assistant. Be concise.", "You are the rapid-mlx demo assistant.",
    "You are a helpful assistant that can call tools.", "Answer briefly.",
]


# --------------------------------------------------------------------------- samples


@dataclass
class Sample:
    """One training/eval example: a conversation and the assistant turn to learn."""

    kind: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    enable_thinking: bool
    target: dict[str, Any]  # final assistant message (content, reasoning_content, tool_calls)

    def render(self) -> tuple[str, str]:
        """(prompt, completion); completion ends with <|im_end|>."""
        prompt = render(self.messages, self.tools, add_generation_prompt=True,
                        enable_thinking=self.enable_thinking)
        full = render(self.messages + [self.target], self.tools, add_generation_prompt=False,
                      enable_thinking=self.enable_thinking)
        if not full.startswith(prompt) or not full.endswith("<|im_end|>\n"):
            raise AssertionError(f"template mismatch:\n{prompt!r}\n{full!r}")
        return prompt, full[len(prompt):-1]


def _request_values(rng: random.Random, tool: str) -> dict[str, Any]:
    if tool in ("get_weather", "get_time"):
        return {"city": random_city(rng)}
    if tool == "add":
        return {"a": random_number(rng), "b": random_number(rng)}
    if tool == "search":
        return {"query": random_query(rng)}
    return {"to": random_email(rng), "subject": random_subject(rng)}


def _fmt_num(x: int | float) -> str:
    return json.dumps(x)


def _user_text(rng: random.Random, tool: str, vals: dict[str, Any]) -> str:
    t = rng.choice(REQUESTS[tool])
    fv = {k: (_fmt_num(v) if isinstance(v, (int, float)) else v) for k, v in vals.items()}
    return t.format(**fv)


def _call_think(tool: str, vals: dict[str, Any]) -> str:
    if tool == "get_weather":
        return (f"The user wants the weather in {vals['city']}. "
                f"I have the get_weather tool, so I will call it for {vals['city']}.")
    if tool == "get_time":
        return (f"The user wants the time in {vals['city']}. "
                f"I have the get_time tool, so I will call it for {vals['city']}.")
    if tool == "add":
        return (f"The user wants to add {_fmt_num(vals['a'])} and {_fmt_num(vals['b'])}. "
                "I will call the add tool.")
    if tool == "search":
        return f"The user wants to search for {vals['query']}. I will call the search tool."
    return f"The user wants to email {vals['to']}. I will call the send_email tool."


def _no_tool_answer(tool: str, vals: dict[str, Any]) -> tuple[str, str]:
    if tool == "get_weather":
        return (f"I'm sorry, I can't check the weather in {vals['city']} because I don't have a weather tool.",
                f"The user wants the weather in {vals['city']}, but I have no weather tool. I will say so.")
    if tool == "get_time":
        return (f"I'm sorry, I can't check the time in {vals['city']} because I don't have a time tool.",
                f"The user wants the time in {vals['city']}, but I have no time tool. I will say so.")
    if tool == "add":
        return ("I'm sorry, I don't have a calculator tool, so I can't add "
                f"{_fmt_num(vals['a'])} and {_fmt_num(vals['b'])} reliably.",
                "The user wants to add numbers, but I have no add tool. I will say so.")
    if tool == "search":
        return (f"I'm sorry, I can't search the web for {vals['query']} because I don't have a search tool.",
                "The user wants a web search, but I have no search tool. I will say so.")
    return (f"I'm sorry, I can't send an email to {vals['to']} because I don't have an email tool.",
            "The user wants to send an email, but I have no email tool. I will say so.")


def _result(rng: random.Random, tool: str, vals: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """(tool result, final answer, reasoning)."""
    if tool == "get_weather":
        temp = rng.randint(-15, 40)
        cond = rng.choice(CONDITIONS)
        city = vals["city"]
        return ({"temperature": temp, "condition": cond},
                f"The weather in {city} is {cond} with {temp} degrees.",
                f"The tool says it is {cond} and {temp} degrees in {city}. I will tell the user.")
    if tool == "get_time":
        tm = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        city = vals["city"]
        return ({"time": tm}, f"The current time in {city} is {tm}.",
                f"The tool says it is {tm} in {city}. I will tell the user.")
    if tool == "add":
        a, b = vals["a"], vals["b"]
        s = a + b
        if isinstance(s, float):
            s = round(s, 2)
        return ({"result": s}, f"{_fmt_num(a)} plus {_fmt_num(b)} is {_fmt_num(s)}.",
                f"The add tool returned {_fmt_num(s)}. I will give the user the answer.")
    if tool == "search":
        r1 = random_query(rng).capitalize()
        return ({"results": [r1]}, f"Here is the top result for {vals['query']}: {r1}.",
                "The search returned a result. I will share it with the user.")
    return ({"status": "sent"}, f"Done! I sent the email to {vals['to']} with the subject {vals['subject']}.",
            "The email was sent. I will confirm it to the user.")


def _tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": args}}


def _history_tool_call(rng: random.Random, name: str, args: dict[str, Any], i: int) -> dict[str, Any]:
    """A previous assistant tool call as a client would send it back (dict or JSON string)."""
    r = rng.random()
    if r < 0.45:
        arguments: Any = args
    elif r < 0.9:
        arguments = json.dumps(args, ensure_ascii=False)
    else:
        arguments = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if rng.random() < 0.7:
        call["id"] = f"call_{i}"
    return call


DRILL_REQUESTS = [
    ("Repeat after me: {x}", "{x}", "The user wants me to repeat: {x}. I will say it back."),
    ("Say {x}.", "{x}", "The user wants me to say {x}. I will say it."),
    ("Please repeat: {x}", "{x}", "The user wants me to repeat: {x}. I will say it back."),
    ("Echo: {x}", "{x}", "The user wants an echo of {x}. I will say it back."),
    ("My name is {n}.", "Nice to meet you, {n}! How can I help you today?",
     "The user says their name is {n}. I will greet them by name."),
    ("I'm {n}.", "Nice to meet you, {n}! How can I help you today?",
     "The user says their name is {n}. I will greet them by name."),
    ("I live in {c}.", "{c} sounds like a nice place! How can I help you today?",
     "The user lives in {c}. I will reply kindly."),
    ("I am from {c}.", "{c} sounds like a nice place! How can I help you today?",
     "The user is from {c}. I will reply kindly."),
]


def _drill_value(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.35:
            parts.append(random_city(rng))
        elif r < 0.6:
            parts.append(rng.choice(WORDS))
        elif r < 0.75:
            parts.append(str(random_number(rng)))
        elif r < 0.85:
            parts.append(random_email(rng))
        else:
            parts.append(pseudo_word(rng))
    return " ".join(parts)


class Generator:
    """Seeded generator of training samples.

    ``drill`` is the share of extra short "copy drill" samples (repeat after me, my name
    is ..., I live in ...): cheap examples that teach copying from the user's message.
    With the default 0 the random stream is the same as without them (the tokenizer
    corpus uses drill=0)."""

    def __init__(self, seed: int = 0, drill: float = 0.0):
        self.rng = random.Random(seed)
        self.drill = drill

    def drill_sample(self) -> Sample:
        rng = self.rng
        think = rng.random() < 0.5
        msgs = self._prefix()
        req, ans, reasoning = rng.choice(DRILL_REQUESTS)
        vals = {"x": _drill_value(rng), "n": pseudo_word(rng) if rng.random() < 0.5
                else rng.choice(NAMES).capitalize(), "c": random_city(rng)}
        tools = self._tools(None, None)[0] if rng.random() < 0.15 else None
        msgs.append({"role": "user", "content": req.format(**vals)})
        return Sample("drill", msgs, tools, think,
                      self._answer(ans.format(**vals), reasoning.format(**vals), think))

    def _tools(self, must: str | None, exclude: str | None) -> tuple[list[dict[str, Any]], dict[str, dict[str, str]]]:
        rng = self.rng
        pool = [t for t in TOOL_NAMES if t != must and t != exclude]
        k = rng.choice([0, 0, 0, 1, 1, 2]) if must else rng.choice([1, 1, 2, 3])
        names = rng.sample(pool, k) + ([must] if must else [])
        rng.shuffle(names)
        tools, keys = [], {}
        for n in names:
            schema, key_map = make_tool(rng, n)
            tools.append(schema)
            keys[n] = key_map
        return tools, keys

    def _prefix(self) -> list[dict[str, Any]]:
        rng = self.rng
        msgs: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        if rng.random() < 0.12:
            variants, answer, _ = rng.choice(GREETINGS)
            msgs.append({"role": "user", "content": rng.choice(variants)})
            msgs.append({"role": "assistant", "content": answer})
        return msgs

    def sample(self) -> Sample:
        rng = self.rng
        if self.drill and rng.random() < self.drill:
            return self.drill_sample()
        think = rng.random() < 0.5
        r = rng.random()
        msgs = self._prefix()
        if r < 0.18:  # greeting / chit-chat, with or without tools
            variants, answer, reasoning = rng.choice(GREETINGS)
            tools = self._tools(None, None)[0] if rng.random() < 0.4 else None
            msgs.append({"role": "user", "content": rng.choice(variants)})
            return Sample("chat", msgs, tools, think, self._answer(answer, reasoning, think))
        if r < 0.22:  # unknown request -> polite limits
            t = rng.choice(UNKNOWN_REQUESTS).format(w=random_query(rng), c=rng.choice(CITIES))
            tools = self._tools(None, None)[0] if rng.random() < 0.4 else None
            msgs.append({"role": "user", "content": t})
            return Sample("unknown", msgs, tools, think, self._answer(UNKNOWN_ANSWER, UNKNOWN_THINK, think))
        tool = rng.choice(TOOL_NAMES + ["get_weather", "get_weather", "get_time"])
        vals = _request_values(rng, tool)
        user = _user_text(rng, tool, vals)
        if r < 0.33:  # request without a matching tool -> text
            tools = self._tools(None, tool)[0] if rng.random() < 0.5 else None
            msgs.append({"role": "user", "content": user})
            answer, reasoning = _no_tool_answer(tool, vals)
            return Sample("no_tool", msgs, tools, think, self._answer(answer, reasoning, think))
        tools, keys = self._tools(tool, None)
        args = {keys[tool][k]: v for k, v in vals.items()}
        msgs.append({"role": "user", "content": user})
        if r < 0.70:  # tool call
            target: dict[str, Any] = {"role": "assistant", "content": "",
                                      "tool_calls": [_tool_call(tool, args)]}
            if think:
                target["reasoning_content"] = _call_think(tool, vals)
            return Sample("tool_call", msgs, tools, think, target)
        # tool result -> text answer using it
        result, answer, reasoning = _result(rng, tool, vals)
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [_history_tool_call(rng, tool, args, rng.randint(0, 999))]})
        msgs.append({"role": "tool", "content": json.dumps(result, ensure_ascii=False)})
        return Sample("tool_result", msgs, tools, think, self._answer(answer, reasoning, think))

    @staticmethod
    def _answer(content: str, reasoning: str, think: bool) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if think:
            msg["reasoning_content"] = reasoning
        return msg

    def samples(self, n: int) -> Iterator[Sample]:
        for _ in range(n):
            yield self.sample()


def generate(seed: int, n: int, drill: float = 0.0) -> list[tuple[str, str, str]]:
    """n rendered samples as (kind, prompt, completion), deterministic in seed."""
    out = []
    for s in Generator(seed, drill).samples(n):
        prompt, completion = s.render()
        out.append((s.kind, prompt, completion))
    return out


def corpus(seed: int, n: int) -> Iterator[str]:
    """Full rendered texts, for tokenizer training."""
    for _kind, prompt, completion in generate(seed, n):
        yield prompt + completion + "\n"


if __name__ == "__main__":
    import sys

    for kind, p, c in generate(int(sys.argv[1]) if len(sys.argv) > 1 else 0, 6):
        print("=" * 20, kind)
        print(p + "\x1b[32m" + c + "\x1b[0m")
