"""Which kind of model each endpoint needs, and the 400 when a request asks the wrong kind."""

from __future__ import annotations

from gateway.edge.errors import APIError, bad_request
from gateway.plane.state import AliasState

NOUN = {"generate": "a text-generation (chat) model", "embed": "an embedding model",
        "transcribe": "a speech-to-text model", "speech": "a text-to-speech model"}
PATHS = {"generate": "/v1/chat/completions, /v1/completions, /v1/responses and /v1/messages",
         "embed": "/v1/embeddings", "transcribe": "/v1/audio/transcriptions and "
         "/v1/audio/translations", "speech": "/v1/audio/speech"}


def require_kind(st: AliasState, kind: str, path: str) -> None:
    """Raise a 400 unless the alias's worker serves KIND (known once it said Ready)."""
    have = st.facts.kind if st.facts is not None else kind
    if have == kind:
        return
    raise wrong_kind(st.alias, have, kind, path)


def wrong_kind(alias: str, have: str, want: str, path: str) -> APIError:
    """The 400 for asking ALIAS (a HAVE model) for what only a WANT model does."""
    return bad_request(
        f"The model '{alias}' is {NOUN.get(have, have)}; {path} needs {NOUN.get(want, want)}. "
        f"'{alias}' serves {PATHS.get(have, 'other endpoints')}; pick a model of the right kind "
        "(GET /v1/models shows each model's kind).", param="model", code="model_wrong_kind")
