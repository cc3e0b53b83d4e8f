"""The gateway's view of worker kinds: the wrong-kind 400 and the model card's capabilities."""

from __future__ import annotations

import pytest

from gateway.doors.kinds import require_kind
from gateway.edge.errors import APIError
from gateway.ops.info import capabilities
from gateway.plane.state import AliasState
from protocol.messages import ModelFacts


def _state(kind: str | None) -> AliasState:
    st = AliasState(alias="m", model="x")
    st.facts = ModelFacts(model="x", kind=kind) if kind else None
    return st


@pytest.mark.parametrize(("have", "want", "says"), [
    ("embed", "generate", "is an embedding model; /v1/chat/completions needs a text-generation"),
    ("generate", "embed", "serves /v1/chat/completions"),
    ("transcribe", "speech", "is a speech-to-text model"),
    ("speech", "transcribe", "serves /v1/audio/speech"),
])
def test_wrong_kind_is_a_400_naming_both(have: str, want: str, says: str) -> None:
    path = "/v1/chat/completions" if want == "generate" else "/v1/x"
    with pytest.raises(APIError) as info:
        require_kind(_state(have), want, path)
    err = info.value
    assert err.status == 400 and err.param == "model" and err.code == "model_wrong_kind"
    assert says in err.message


def test_right_kind_and_unknown_kind_pass() -> None:
    require_kind(_state("embed"), "embed", "/v1/embeddings")
    require_kind(_state(None), "generate", "/v1/chat/completions")  # not ready yet: no verdict


def test_capabilities_list_endpoints_then_worker_capabilities() -> None:
    facts = ModelFacts(model="x", kind="embed", capabilities=["dimensions"])
    assert capabilities(facts) == ["embeddings", "dimensions"]
    assert capabilities(ModelFacts(model="y"))[:2] == ["chat", "completions"]
