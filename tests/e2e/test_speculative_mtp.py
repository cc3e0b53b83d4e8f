"""`serve MODEL --speculative mtp` through the real server and the openai SDK, on a tiny GLM-4.5
(glm4_moe) checkpoint that carries a next-n layer: the answers are unchanged, the layer's drafts
are accepted, /v1/models says which alias can speculate, and a checkpoint without MTP layers is
refused with one clear line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.harness import Server
from tests.mtp_model import glm_mtp_model
from tests.worker.spec.spec_helpers import PROMPTS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    path = str(glm_mtp_model(tmp_path_factory.mktemp("mtp") / "glm-mtp", agree=True))
    plain = Server(path, "--max-batch", "8").wait_ready()
    try:
        spec = Server(path, "--max-batch", "8", "--speculative", "mtp",
                      "--num-draft-tokens", "4").wait_ready()
    except Exception:
        plain.stop()
        raise
    yield plain, spec
    spec.stop()
    plain.stop()


def _answers(server: Server, stream: bool) -> list[str]:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    kw = {"model": "glm-mtp", "max_tokens": 40, "temperature": 0}
    if stream:
        return ["".join(c.choices[0].text for c in client.completions.create(
            prompt=p, stream=True, **kw)) for p in PROMPTS[:4]]
    return [client.completions.create(prompt=p, **kw).choices[0].text for p in PROMPTS[:4]]


def test_same_answers_and_mtp_drafts_are_accepted(servers: tuple[Server, Server]) -> None:
    plain, spec = servers
    for stream in (False, True):
        assert _answers(spec, stream) == _answers(plain, stream)
    cards = {s: {m.id: m.model_dump() for m in openai.OpenAI(
        base_url=s.url, api_key="x").models.list().data} for s in (plain, spec)}
    assert cards[spec]["glm-mtp"]["supports_spec_decode"] is True
    assert cards[plain]["glm-mtp"]["supports_spec_decode"] is False
    w = spec.worker("glm-mtp")
    assert w["speculative"] == "mtp"
    assert w["spec_accepted_tokens"] > 0 and 0 < w["spec_acceptance_rate"] <= 1


def test_a_checkpoint_without_mtp_layers_is_one_clear_line(tmp_path: Path) -> None:
    path = str(glm_mtp_model(tmp_path / "bare", nextn=False))
    srv = Server(path, "--speculative", "mtp")
    code = srv.wait_exit()
    text = "".join(srv.lines)
    assert code == 78, text
    assert "Traceback" not in text, text
    assert len([ln for ln in srv.lines if "multi-token-prediction layers" in ln]) == 1, text
