"""The OpenAI Agents SDK runs an agent with one function tool against the real server (demo
model) through the Responses API; the SDK sends the whole conversation on every turn."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.e2e.harness import Server

agents = pytest.importorskip("agents")
pytestmark = pytest.mark.slow


def test_agent_with_a_function_tool(server: Server) -> None:
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning

    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return json.dumps({"city": city, "temperature_c": 21, "sky": "sunny"})

    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=server.url, api_key="sk-test", max_retries=0)
    agent = agents.Agent(
        name="weather", tools=[get_weather],
        model=agents.OpenAIResponsesModel(model="default", openai_client=client),
        model_settings=agents.ModelSettings(temperature=0, max_tokens=80,
                                            reasoning=Reasoning(effort="none")))
    result: Any = asyncio.run(agents.Runner.run(agent, "What's the weather in Paris?",
                                                max_turns=4))
    assert calls == ["Paris"]
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"], kinds
    assert kinds[-1] == "message_output_item", kinds
    call = result.new_items[0].raw_item
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    last = result.raw_responses[-1]
    text = "".join(p.text for o in last.output if o.type == "message" for p in o.content)
    assert isinstance(result.final_output, str) and result.final_output == text and text
    assert "21" in text or "sunny" in text.lower()
    assert len(result.raw_responses) == 2  # call, then answer: two full-conversation requests
