"""Speech pieces without a model: encoders (PyAV), im2col convolutions, G2P pieces, the
ONNX-name mapping of the converter, and request checks."""

from __future__ import annotations

import io
import struct

import av
import numpy as np
import pytest

from protocol import messages as m
from worker.kinds.tts.encode import FORMATS, Encoder
from worker.kinds.tts.requests import BadSpeech, check

RATE = 24000
EXPECTED_RATE = {"opus": 48000}  # Opus runs at 48 kHz; the rest keep the model's rate


def tone(seconds: float, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def encode(fmt: str, samples: np.ndarray, chunk: int) -> list[bytes]:
    enc = Encoder(fmt, RATE)
    return [enc.feed(samples[i:i + chunk]) for i in range(0, samples.size, chunk)] + [enc.finish()]


def decode(data: bytes) -> tuple[str, int, np.ndarray]:
    with av.open(io.BytesIO(data)) as c:
        frames = [f for f in c.decode(audio=0)]
        rate = frames[0].sample_rate
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
        return c.format.name, rate, samples


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "pcm"])
def test_each_format_decodes_at_its_rate_with_the_right_duration(fmt: str) -> None:
    data = b"".join(encode(fmt, tone(2.0), 7000))
    container, rate, samples = decode(data)
    assert rate == EXPECTED_RATE.get(fmt, RATE)
    assert container.split(",")[0] in {"mp3": "mp3", "opus": "ogg", "aac": "aac",
                                       "flac": "flac", "wav": "wav"}[fmt]
    assert 1.95 < samples.size / rate < 2.15  # encoder padding adds a few ms at most


@pytest.mark.parametrize("fmt", FORMATS)
def test_streamed_chunks_are_the_whole_file(fmt: str) -> None:
    """Feeding piece by piece (as the worker streams) gives the same bytes as one feed."""
    samples = tone(1.5)
    assert b"".join(encode(fmt, samples, 5000)) == b"".join(encode(fmt, samples, samples.size))


def test_pcm_is_raw_s16le_and_wav_is_a_streaming_wav() -> None:
    samples = tone(0.5)
    pcm = b"".join(encode("pcm", samples, 1000))
    assert len(pcm) == samples.size * 2
    decoded = np.frombuffer(pcm, "<i2").astype(np.float32) / 32767
    assert np.abs(decoded - samples).max() < 1e-3
    wav = b"".join(encode("wav", samples, 1000))
    assert wav[:4] == b"RIFF" and wav[8:16] == b"WAVEfmt "
    assert struct.unpack("<I", wav[4:8])[0] == 0xFFFFFFFF  # open-ended, as a stream must be
    assert wav[44:] == pcm


def test_tone_survives_lossy_encoding() -> None:
    _, rate, samples = decode(b"".join(encode("mp3", tone(1.0, 440.0), 4000)))
    spectrum = np.abs(np.fft.rfft(samples[: rate // 2]))
    assert abs(np.argmax(spectrum) * rate / (rate // 2) - 440.0) < 10


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="response_format"):
        Encoder("ogg", RATE)


@pytest.mark.parametrize("field,value,param", [
    ("text", "", "input"), ("text", "x" * 4097, "input"), ("speed", 0.2, "speed"),
    ("speed", 4.5, "speed"), ("audio_format", "ogg", "response_format"),
    ("voice", "alloy", "voice")])
def test_bad_requests_name_their_field(field: str, value: object, param: str) -> None:
    job = m.Speak(request_id="r", text="Hello.", voice="af_a")
    setattr(job, field, value)
    with pytest.raises(BadSpeech) as exc:
        check(job, ["af_a", "am_b"])
    assert exc.value.param == param
    if param == "voice":
        assert "af_a, am_b" in str(exc.value)


def test_empty_voice_means_the_default() -> None:
    assert check(m.Speak(request_id="r", text="Hi."), ["af_a", "am_b"]) == "af_a"


def test_onnx_node_paths_map_to_pytorch_modules() -> None:
    from worker.kinds.tts.onnx_weights import _gates, module_path

    assert module_path("/encoder/F0.1/conv1/Conv_quant") == "predictor.F0.1.conv1"
    assert module_path("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant") == "text_encoder.cnn.0.0"
    assert module_path("/encoder/bert_encoder/MatMul_quant") == "bert_encoder"
    assert module_path("/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/"
                       "query_2/MatMul_quant") == (
        "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query")
    assert module_path("/decoder/decoder/generator/ups.1/ConvTranspose") == "decoder.generator.ups.1"
    gates = np.repeat(np.arange(4.0), 2)  # ONNX blocks i, o, f, c
    assert list(_gates(gates)) == [0, 0, 2, 2, 3, 3, 1, 1]  # PyTorch's i, f, g(c), o


def test_speech_request_schema() -> None:
    import msgspec

    from gateway.audio.speech_schemas import SpeechRequest
    from gateway.edge.errors import from_validation

    def decode(body: dict) -> SpeechRequest:
        return msgspec.json.decode(msgspec.json.encode(body), type=SpeechRequest)

    req = decode({"model": "tts", "input": "Hi.", "voice": {"id": "af_a"}})
    assert req.voice_id == "af_a" and req.response_format == "mp3" and req.stream_format is None
    for body, param in [({"speed": 4.01}, "speed"), ({"response_format": "ogg"}, "response_format"),
                        ({"input": "x" * 4097}, "input"), ({"stream_format": "chunks"},
                                                           "stream_format")]:
        with pytest.raises(msgspec.ValidationError) as exc:
            decode({"model": "tts", "input": "Hi.", "voice": "af_a", **body})
        assert from_validation(exc.value).param == param
