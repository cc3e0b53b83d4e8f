"""`serve --speculative draft --draft-model demo-draft` through the real server and the openai SDK:
the demo model's answers are unchanged, the trained draft's tokens are accepted, and a draft with
another tokenizer is refused with one clear line."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.e2e.harness import Server, plain_and
from tests.worker.spec.test_draft_model import QUESTIONS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Server, Server]]:
    yield from plain_and("--speculative", "draft", "--draft-model", "demo-draft",
                         "--num-draft-tokens", "4")


def _answers(server: Server) -> list[str | None]:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    return [client.chat.completions.create(
        model="default", max_tokens=48, temperature=0,
        messages=[{"role": "user", "content": q}]).choices[0].message.content for q in QUESTIONS]


def test_same_answers_and_the_draft_is_accepted(servers: tuple[Server, Server]) -> None:
    plain, spec = servers
    assert _answers(spec) == _answers(plain)
    client = openai.OpenAI(base_url=spec.url, api_key="x")
    cards = {m.id: m.model_dump() for m in client.models.list().data}
    assert cards["default"]["supports_spec_decode"] is True
    w = spec.worker("default")
    assert w["speculative"] == "draft"
    assert w["spec_accepted_tokens"] > 0 and 0 < w["spec_acceptance_rate"] <= 1


def test_a_draft_with_another_tokenizer_is_one_clear_line(tmp_path: object) -> None:
    from tests.conftest import shared_model

    other = str(shared_model("stories260K"))
    srv = Server("--speculative", "draft", "--draft-model", other)
    code = srv.wait_exit()
    text = "".join(srv.lines)
    assert code == 78, text
    assert "Traceback" not in text, text
    lines = [ln for ln in srv.lines if "tokenizer differs" in ln]
    assert len(lines) == 1, text
