"""Real Whisper tiny.en (converted by our command) behind the real server, through the openai SDK."""

from __future__ import annotations

import io
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from gateway.ops.openapi import build_openapi
from tests.audio.conftest import SENTENCES
from tests.audio.wer import wer
from tests.e2e.harness import Server
from tests.spec_check import SpecCheck

pytestmark = pytest.mark.slow
MAX_WER = 0.25


@pytest.fixture(scope="module")
def client(stt_server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=stt_server.url, api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def paragraph(speech: list[tuple[str, Path]], tmp_path_factory: pytest.TempPathFactory,
              ) -> tuple[str, Path]:
    """All test sentences in one WAV (about 25 s: one window, several segments)."""
    from tests.audio.media import speak

    text = " ".join(SENTENCES)
    return text, speak(text, tmp_path_factory.mktemp("para") / "all.wav")


def _cue_text(body: str) -> str:
    """The spoken text of an SRT/WebVTT body (cue lines without numbers and timings)."""
    lines = [ln for ln in body.splitlines() if ln.strip() and "-->" not in ln
             and not ln.strip().isdigit() and ln.strip() != "WEBVTT"]
    return " ".join(lines)


def _timings(body: str, sep: str) -> list[float]:
    stamp = r"(\d\d):(\d\d):(\d\d)" + re.escape(sep) + r"(\d\d\d)"
    out = []
    for h, m, s, ms in re.findall(stamp, body):
        out.append(int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000)
    return out


@pytest.mark.parametrize("fmt", ["json", "text", "srt", "vtt", "verbose_json"])
def test_every_response_format(client: openai.OpenAI, paragraph: tuple[str, Path], fmt: str) -> None:
    text, wav = paragraph
    extra = {"timestamp_granularities": ["word", "segment"]} if fmt == "verbose_json" else {}
    with wav.open("rb") as f:
        out = client.audio.transcriptions.create(model="whisper", file=f, response_format=fmt,
                                                 **extra)  # type: ignore[call-overload]
    if fmt == "json":
        got = out.text
        assert out.usage is not None and out.usage.type == "duration" and out.usage.seconds >= 20
    elif fmt == "text":
        got = out
        assert isinstance(out, str)
    elif fmt in ("srt", "vtt"):
        assert isinstance(out, str)
        got = _cue_text(out)
        if fmt == "vtt":
            assert out.startswith("WEBVTT\n\n")
        else:
            assert out.startswith("1\n00:00:00,")
        stamps = _timings(out, "," if fmt == "srt" else ".")
        assert len(stamps) >= 4 and stamps == sorted(stamps) and stamps[-1] <= 31
    else:
        got = out.text
        assert out.language == "english" and 20 < out.duration < 31
        assert len(out.segments) >= 2
        starts = [s.start for s in out.segments]
        assert starts == sorted(starts) and all(s.end > s.start for s in out.segments)
        assert [s.id for s in out.segments] == list(range(len(out.segments)))
        words = out.words or []
        assert len(words) >= 0.75 * len(text.split())
        assert all(0 <= w.start <= w.end <= out.duration + 0.5 for w in words)
        assert [w.start for w in words] == sorted(w.start for w in words)
    print(f"WER {fmt}: {wer(text, got):.3f}")
    assert wer(text, got) <= MAX_WER, (fmt, got)


def test_stream_sends_deltas_then_done(client: openai.OpenAI, paragraph: tuple[str, Path]) -> None:
    text, wav = paragraph
    with wav.open("rb") as f:
        events = list(client.audio.transcriptions.create(model="whisper", file=f, stream=True))
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and kinds.count("transcript.text.done") == 1
    deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
    assert kinds[0] == "transcript.text.delta"
    assert deltas.strip() == events[-1].text
    print(f"WER stream: {wer(text, events[-1].text):.3f}")
    assert wer(text, events[-1].text) <= MAX_WER


def test_upload_formats(client: openai.OpenAI, speech_formats: dict[str, tuple[str, Path]]) -> None:
    refs, hyps = [], []
    for ext, (text, path) in speech_formats.items():
        with path.open("rb") as f:
            got = client.audio.transcriptions.create(model="whisper", file=(path.name, f)).text
        assert wer(text, got) <= 0.4, (ext, got)
        refs.append(text)
        hyps.append(got)
    print(f"WER upload formats: {wer(' '.join(refs), ' '.join(hyps)):.3f}")
    assert wer(" ".join(refs), " ".join(hyps)) <= MAX_WER


def test_piper_voice(client: openai.OpenAI, piper_speech: list[tuple[str, Path]]) -> None:
    """A second, neural voice (Piper en_US-joe-medium): all six sentences, WER <= 25%."""
    refs, hyps = [], []
    for text, wav in piper_speech:
        with wav.open("rb") as f:
            hyps.append(client.audio.transcriptions.create(model="whisper", file=f).text)
        refs.append(text)
    print(f"WER piper: {wer(' '.join(refs), ' '.join(hyps)):.3f}")
    assert wer(" ".join(refs), " ".join(hyps)) <= MAX_WER, hyps


def test_concurrent_requests(client: openai.OpenAI, speech: list[tuple[str, Path]]) -> None:
    def one(item: tuple[str, Path]) -> tuple[str, str]:
        text, wav = item
        return text, client.audio.transcriptions.create(model="whisper", file=wav.read_bytes()).text

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, speech[:4]))
    assert len(results) == 4
    print(f"WER concurrent: {wer(' '.join(r for r, _ in results), ' '.join(h for _, h in results)):.3f}")
    assert wer(" ".join(r for r, _ in results), " ".join(h for _, h in results)) <= MAX_WER
    for ref, hyp in results:
        assert wer(ref, hyp) <= 0.4, (ref, hyp)


def test_translation_on_english_only_model(client: openai.OpenAI,
                                           speech: list[tuple[str, Path]]) -> None:
    text, wav = speech[1]
    out = client.audio.translations.create(model="whisper", file=wav.open("rb"),
                                           response_format="verbose_json")
    assert out.language == "english" and wer(text, out.text) <= MAX_WER


def test_prompt_and_temperature_accepted(client: openai.OpenAI,
                                         speech: list[tuple[str, Path]]) -> None:
    text, wav = speech[0]
    out = client.audio.transcriptions.create(model="whisper", file=wav.open("rb"),
                                             prompt="A pangram about a fox.", temperature=0.2,
                                             language="en")
    assert wer(text, out.text) <= 0.4


def test_chat_alias_names_the_kind(client: openai.OpenAI, speech: list[tuple[str, Path]]) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model="chat", file=speech[0][1].open("rb"))
    assert "speech-to-text" in str(err.value) and "text-generation" in str(err.value)
    with pytest.raises(openai.BadRequestError) as err2:
        client.chat.completions.create(model="whisper", messages=[{"role": "user", "content": "hi"}])
    assert "speech-to-text" in str(err2.value)


def test_garbage_and_truncated_files_are_400_and_worker_keeps_serving(
        client: openai.OpenAI, speech: list[tuple[str, Path]]) -> None:
    for name, data in [("noise.wav", b"RIFF\x00\x00not really a wave file" * 50),
                       ("cut.mp3", speech[0][1].with_suffix(".mp3").read_bytes()[:40]
                        if speech[0][1].with_suffix(".mp3").exists() else b"ID3" + b"\xff" * 30),
                       ("random.ogg", bytes(range(256)) * 40)]:
        with pytest.raises(openai.BadRequestError) as err:
            client.audio.transcriptions.create(model="whisper", file=(name, io.BytesIO(data)))
        assert err.value.body["param"] == "file", err.value.body  # type: ignore[index]
    text, wav = speech[2]
    assert wer(text, client.audio.transcriptions.create(model="whisper", file=wav.open("rb")).text) <= 0.4


@pytest.mark.parametrize("path", ["transcriptions", "translations"])
def test_answers_and_events_conform_to_openapi(stt_server: Server, speech: list[tuple[str, Path]],
                                               path: str) -> None:
    url, spec = f"{stt_server.url}/audio/{path}", SpecCheck(build_openapi("test"))
    wav = speech[0][1].read_bytes()
    for fields in ({}, {"response_format": "verbose_json"},
                   {"response_format": "verbose_json", "timestamp_granularities[]": "word"}):
        r = httpx.post(url, data={"model": "whisper", **fields}, files={"file": ("a.wav", wav)},
                       timeout=120)
        assert r.status_code == 200, r.text
        spec.check(f"/v1/audio/{path}", "post", 200, r.json())
        assert ("words" in r.json()) == ("timestamp_granularities[]" in fields)
    with httpx.stream("POST", url, data={"model": "whisper", "stream": "true"},
                      files={"file": ("a.wav", wav)}, timeout=120) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "transcript.text.done"
    for event in events:
        spec.check(f"/v1/audio/{path}", "post", 200, event, media="text/event-stream")


def test_request_errors(stt_server: Server, speech: list[tuple[str, Path]]) -> None:
    url = f"{stt_server.url}/audio/transcriptions"
    wav = speech[0][1].read_bytes()
    r = httpx.post(url, data={"model": "whisper"}, files={"other": ("a.wav", wav)}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "file"
    r = httpx.post(url, data={"model": "whisper", "response_format": "diarized_json"},
                   files={"file": ("a.wav", wav)}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    r = httpx.post(url, data={"model": "whisper", "temperature": "3"},
                   files={"file": ("a.wav", wav)}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    r = httpx.post(url, data={"model": "whisper", "language": "fr"},
                   files={"file": ("a.wav", wav)}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "language"
    assert "English-only" in r.json()["error"]["message"]
    r = httpx.post(url, json={"model": "whisper"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "file"
    r = httpx.post(url, data={"model": "nope"}, files={"file": ("a.wav", wav)}, timeout=60)
    assert r.status_code == 404


def test_over_25_mb_is_413(client: openai.OpenAI, stt_server: Server) -> None:
    big = b"\0" * (25 * 1024 * 1024 + 4096)
    with pytest.raises(openai.APIStatusError) as err:
        client.audio.transcriptions.create(model="whisper", file=("big.wav", big))
    assert err.value.status_code == 413
    # chunked upload (no Content-Length): refused while it arrives, not after buffering it all
    boundary = "xyzzy"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode()

    def body():  # type: ignore[no-untyped-def]
        yield head
        for _ in range(40):
            yield b"\0" * (1024 * 1024)

    r = httpx.post(f"{stt_server.url}/audio/transcriptions", content=body(), timeout=60,
                   headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_models_lists_kind(stt_server: Server) -> None:
    models = {m["id"]: m for m in httpx.get(f"{stt_server.url}/models", timeout=10).json()["data"]}
    assert models["whisper"]["kind"] == "transcribe"
    assert "word_timestamps" in models["whisper"]["capabilities"]
    assert stt_server.proc.poll() is None
