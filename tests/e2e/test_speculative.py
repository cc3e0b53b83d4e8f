"""`serve --speculative ngram` through the real server and the openai SDK: same greedy answers
as a plain server, speculation visible in /v1/models, /v1/workers and /metrics."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.e2e.harness import Server, plain_and
from tests.worker.spec.spec_helpers import PROMPTS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Server, Server]]:
    yield from plain_and("--speculative", "ngram", "--num-draft-tokens", "5")


def _answers(server: Server, stream: bool) -> list[tuple[str, str | None]]:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    out = []
    for prompt in PROMPTS[:4]:
        kw = dict(model="default", prompt=prompt, max_tokens=40, temperature=0)
        if stream:
            chunks = list(client.completions.create(**kw, stream=True))
            out.append(("".join(c.choices[0].text for c in chunks if c.choices),
                        next(c.choices[0].finish_reason for c in reversed(chunks)
                             if c.choices and c.choices[0].finish_reason)))
        else:
            c = client.completions.create(**kw).choices[0]
            out.append((c.text, c.finish_reason))
    return out


def test_same_greedy_answers_and_visible_speculation(servers: tuple[Server, Server]) -> None:
    plain, spec = servers
    want = _answers(plain, stream=False)
    assert _answers(spec, stream=False) == want
    assert _answers(spec, stream=True) == want
    client = openai.OpenAI(base_url=spec.url, api_key="x")
    chat = client.chat.completions.create(model="default", max_tokens=24, temperature=0,
                                          messages=[{"role": "user", "content": PROMPTS[0]}])
    plain_chat = openai.OpenAI(base_url=plain.url, api_key="x").chat.completions.create(
        model="default", max_tokens=24, temperature=0,
        messages=[{"role": "user", "content": PROMPTS[0]}])
    assert chat.choices[0].message.content == plain_chat.choices[0].message.content

    cards = {m.id: m.model_dump() for m in client.models.list().data}
    assert cards["default"]["supports_spec_decode"] is True
    plain_cards = openai.OpenAI(base_url=plain.url, api_key="x").models.list().data
    assert plain_cards[0].model_dump()["supports_spec_decode"] is False

    w = spec.worker("default")
    assert w["speculative"] == "ngram"
    assert w["spec_accepted_tokens"] > 0 and w["spec_draft_tokens"] >= w["spec_accepted_tokens"]
    assert 0 < w["spec_acceptance_rate"] <= 1
    assert plain.worker("default")["speculative"] is None
    metrics = httpx.get(f"{spec.base}/metrics", timeout=10).text
    line = next(x for x in metrics.splitlines()
                if x.startswith("rapid_mlx_spec_decode_num_accepted_tokens_total{"))
    assert 'drafter="ngram"' in line and float(line.split()[-1]) > 0
