"""Whisper base (multilingual; see whisper_base.py) behind the real server: German and French
spoken by espeak-ng, transcribed with the language detected or given, and translated into English.

espeak-ng's French and German are robotic and Whisper base is small: faster-whisper on the same
CTranslate2 files hears these clips about as well (measured: the German pair within two words,
the French and German greetings translated as "Good morning ... coffee"; greedy decoding here
gives the same text as faster-whisper's), so the bars are the main words, not a low word error
rate."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.audio.media import speak
from tests.audio.wer import wer
from tests.audio.whisper_base import whisper_base
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow
GERMAN = "Der Hund spielt im Garten mit einem roten Ball. Morgen fahren wir mit dem Zug nach Berlin."
# (text, espeak-ng words per minute): at these the greedy translation is confident enough that
# Whisper's temperature fallback (mean log-probability < -1) does not resample it
GREETINGS = {"de": ("Guten Morgen. Ich trinke jeden Tag eine Tasse Kaffee.", 120),
             "fr": ("Bonjour. Je voudrais une tasse de café, s'il vous plaît.", 150)}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # a 30 s window's encoder pass is one step; on a loaded 2-core CPU it can pass the default 30 s
    srv = Server(str(whisper_base()), "--served-model-name", "whisper-base",
                 "--hang-timeout", "120").wait_ready(timeout=300)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", timeout=900, max_retries=0)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("multilingual")
    out = {"german": speak(GERMAN, folder / "german.wav", "de")}
    for lang, (text, speed) in GREETINGS.items():
        out[lang] = speak(text, folder / f"{lang}.wav", lang, speed)
    return out


def words(text: str) -> set[str]:
    return set(re.sub(r"[^\w' ]", " ", text.lower()).split())


def test_the_converted_model_is_multilingual(server: Server) -> None:
    card = httpx.get(f"{server.url}/models/whisper-base").json()
    assert card["kind"] == "transcribe" and "translation" in card["capabilities"]
    assert json.loads((whisper_base() / "config.json").read_text())["n_vocab"] == 51865
    assert json.loads((whisper_base() / "generation_config.json").read_text())["is_multilingual"]


def test_german_transcribed_with_its_language_detected(client: openai.OpenAI,
                                                       clips: dict[str, Path]) -> None:
    out = client.audio.transcriptions.create(model="whisper-base", file=clips["german"].open("rb"),
                                             response_format="verbose_json")
    error = wer(GERMAN, out.text)
    print(f"\nWER german {error:.3f}: {out.text!r}")
    assert out.language == "german"
    assert {"garten", "ball", "morgen", "zug", "berlin"} <= words(out.text), out.text
    assert error <= 0.35, out.text


def test_french_transcribed_with_its_language_given(client: openai.OpenAI,
                                                    clips: dict[str, Path]) -> None:
    out = client.audio.transcriptions.create(model="whisper-base", file=clips["fr"].open("rb"),
                                             language="fr", response_format="verbose_json")
    print(f"\nfrench: {out.text!r}")
    assert out.language == "french"
    assert {"bonjour", "café"} <= words(out.text), out.text


@pytest.mark.parametrize("lang", ["fr", "de"])
def test_translated_into_english(client: openai.OpenAI, clips: dict[str, Path], lang: str) -> None:
    out = client.audio.translations.create(model="whisper-base", file=clips[lang].open("rb"),
                                           response_format="verbose_json")
    print(f"\n{lang} -> en: {out.text!r}")
    assert {"good", "morning", "coffee"} <= words(out.text), out.text
    assert not words(out.text) & {"bonjour", "guten", "morgen", "café", "kaffee"}, out.text
