"""Every command the reference product's API page and this README document, with what it does
here: the one table the documentation tests walk (tests/docs/test_documented_commands.py,
tests/e2e/test_documented_commands.py), so that README.md and the tests cannot drift."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Documented:
    """One documented command: it serves a model of KIND, or is REFUSED with that one-line
    reason (at the command line, or at start for a worker-side check: AT_START)."""

    line: str
    source: str  # "reference" (the reference product's page) or "readme"
    kind: str = ""  # generate, embed, speech, transcribe: what it serves
    refused: str = ""  # what the one-line reason says
    at_start: bool = False  # refused by the worker once it sees the model (exit 78)
    request: str = ""  # the request the serving test sends (a key of tests/e2e's REQUESTS)


COMMANDS: list[Documented] = [
    Documented("rapid-mlx serve", "readme", kind="generate", request="chat"),
    Documented("rapid-mlx serve embeddinggemma-300m-6bit --port 8001", "reference", kind="embed",
               request="embeddings"),
    Documented("rapid-mlx serve embeddinggemma-300m", "readme", kind="embed",
               request="embeddings"),
    Documented("rapid-mlx serve kokoro-tts --audio-mode --port 8002", "reference",
               kind="speech", request="speech_af_heart"),
    Documented("rapid-mlx serve whisper-large-v3-turbo", "reference", kind="transcribe",
               request="transcription"),
    Documented("rapid-mlx serve whisper-small --audio-mode", "readme", kind="transcribe",
               request="transcription"),
    Documented("rapid-mlx serve parakeet-tdt-0.6b-v2", "reference", kind="transcribe"),
    Documented("rapid-mlx serve qwen3.5-9b-mtp-4bit", "reference",
               refused="cannot serve 'qwen3.5-9b-mtp-4bit': MTP speculative decoding is not "
                       "supported on hybrid models"),
    Documented("rapid-mlx serve qwen3.5-9b-4bit --enable-dflash", "reference",
               refused="--enable-dflash: DFlash block-diffusion drafting is not built"),
    Documented("rapid-mlx serve default --audio-mode", "readme",
               refused="--audio-mode serves text-to-speech and speech-to-text models, and it is "
                       "a text-generation model", at_start=True),
    Documented("rapid-mlx serve default --speculative ngram", "readme", kind="generate",
               request="chat"),
]

# the install lines the reference page names: each extra exists in pyproject.toml
EXTRAS: list[tuple[str, str]] = [
    ("pip install 'rapid-mlx[embeddings]'", "embeddings"),
    ("pip install 'rapid-mlx[audio]'", "audio"),
    ("pip install 'rapid-mlx[vision]'", "vision"),
    ("pip install 'rapid-mlx[dflash]'", "dflash"),
]
