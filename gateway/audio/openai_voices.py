"""OpenAI's voice names for /v1/audio/speech, mapped onto the model's voices.

OpenAI's SDKs and apps send their own voice names (``alloy`` by default). Each maps onto a
Kokoro v1.0 voice of a like kind (Kokoro has voices named after six of them); when the mapped
voice is not one of the served model's voices, the model's default voice speaks.
"""

from __future__ import annotations

OPENAI_VOICES: dict[str, str] = {
    "alloy": "af_alloy",
    "ash": "am_adam",
    "ballad": "bm_george",
    "coral": "af_heart",
    "echo": "am_echo",
    "fable": "bm_fable",
    "nova": "af_nova",
    "onyx": "am_onyx",
    "sage": "af_river",
    "shimmer": "af_bella",
    "verse": "am_michael",
}


def openai_voice(voice: str, voices: list[str]) -> str | None:
    """The model voice that OpenAI's VOICE maps onto (VOICES[0], the default, when the mapped one
    is not installed); None when VOICE is not an OpenAI voice name."""
    mapped = OPENAI_VOICES.get(voice)
    if mapped is None:
        return None
    return mapped if mapped in voices else voices[0]
