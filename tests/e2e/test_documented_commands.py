"""Each documented command that serves (tests/docs/documented_commands.py) started for real, with
a user alias file pointing its alias at a local folder where the hub would be needed (a tiny
EmbeddingGemma-structured model, the converted Kokoro-82M, tiny.en in mlx-whisper's layout), and
sent one request; each refused-at-start command exits 78 with its one line."""

from __future__ import annotations

import io
import json
import shlex
import shutil
import wave
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.docs.documented_commands import COMMANDS, Documented
from tests.e2e.harness import ROOT, Server

pytestmark = pytest.mark.slow

GEMMA3_EMBED = {"model_type": "gemma3_text", "hidden_size": 64, "num_hidden_layers": 2,
                "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
                "head_dim": 16, "vocab_size": 4096, "max_position_embeddings": 512,
                "rms_norm_eps": 1e-6, "sliding_window": 64, "sliding_window_pattern": 2,
                "query_pre_attn_scalar": 16, "rope_theta": 10000.0, "rope_local_base_freq": 10000.0}
DEMO = ROOT / "worker" / "model" / "demo" / "weights"


def tiny_embedding_gemma(dst: Path) -> Path:
    """Random weights of mlx-embeddings' Gemma3 embedding class, the demo's tokenizer."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_embeddings.models import gemma3_text as arch

    mx.random.seed(0)
    net = arch.Model(arch.ModelArgs.from_dict(GEMMA3_EMBED))
    dst.mkdir(parents=True)
    mx.save_safetensors(str(dst / "model.safetensors"), dict(tree_flatten(net.parameters())))
    (dst / "config.json").write_text(json.dumps(GEMMA3_EMBED))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEMO / name, dst / name)
    return dst


def local_folder(alias: str, tmp: Path) -> Path | None:
    """A local stand-in for ALIAS's hub repo (None: the alias needs none)."""
    if alias.startswith("embeddinggemma"):
        return tiny_embedding_gemma(tmp / "embeddinggemma-embedding")
    if alias == "kokoro-tts":
        from tests.audio.tts_setup import build_kokoro

        return build_kokoro()
    if alias.startswith("whisper-"):
        from tests.audio.conftest import converted_whisper
        from tests.audio.mlx_whisper_copy import mlx_whisper_copy

        return mlx_whisper_copy(converted_whisper(), tmp / "whisper-mlx")
    return None


def _chat(srv: Server, alias: str) -> None:
    r = httpx.post(f"{srv.url}/chat/completions", timeout=120, json={
        "model": alias, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8})
    assert r.status_code == 200 and r.json()["choices"][0]["message"], r.text


def _embeddings(srv: Server, alias: str) -> None:
    r = httpx.post(f"{srv.url}/embeddings", timeout=120, json={"model": alias, "input": "hello"})
    assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 64, r.text


def _speech_af_heart(srv: Server, alias: str) -> None:
    """The reference page's `"voice": "af_heart"`: spoken where the model has the voice, else a
    400 naming its voices; OpenAI's `alloy` speaks either way."""
    voices = httpx.get(f"{srv.url}/audio/voices").json()["data"][0]["voices"]
    r = httpx.post(f"{srv.url}/audio/speech", timeout=300, json={
        "model": alias, "input": "Hello there.", "voice": "af_heart", "response_format": "wav"})
    if "af_heart" in voices:
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_voice", r.text
    r = httpx.post(f"{srv.url}/audio/speech", timeout=300, json={
        "model": alias, "input": "Hello there.", "voice": "alloy", "response_format": "wav"})
    assert r.status_code == 200, r.text
    with wave.open(io.BytesIO(r.content)) as w:
        assert w.getnframes() / w.getframerate() > 0.3


def _transcription(srv: Server, alias: str) -> None:
    from tests.audio.media import speak

    wav = speak("Good morning to you.", Path(srv.own_data_dir or "/tmp") / "hello.wav")
    with wav.open("rb") as f:
        r = httpx.post(f"{srv.url}/audio/transcriptions", timeout=300,
                       data={"model": alias}, files={"file": ("hello.wav", f, "audio/wav")})
    assert r.status_code == 200 and "morning" in r.json()["text"].lower(), r.text


REQUESTS: dict[str, Callable[[Server, str], None]] = {
    "chat": _chat, "embeddings": _embeddings, "speech_af_heart": _speech_af_heart,
    "transcription": _transcription}


def _args(doc: Documented) -> list[str]:
    words = shlex.split(doc.line)[2:]
    if "--port" in words:  # the harness picks a free port
        i = words.index("--port")
        del words[i:i + 2]
    return words


@pytest.mark.parametrize("doc", [d for d in COMMANDS if d.request], ids=lambda d: d.line)
def test_serving_commands_answer(doc: Documented, tmp_path: Path) -> None:
    args = _args(doc)
    alias = next((w for w in args if not w.startswith("-")), "default")
    folder = local_folder(alias, tmp_path)
    if folder is not None:
        (tmp_path / "aliases.toml").write_text(f'["{alias}"]\nrepo = "{folder}"\n')
        args += ["--aliases", str(tmp_path / "aliases.toml")]
    srv = Server(*args, env={"RAPID_MLX_CACHE": str(tmp_path / "cache")}).wait_ready(300)
    try:
        REQUESTS[doc.request](srv, alias)
    finally:
        srv.stop()


@pytest.mark.parametrize("doc", [d for d in COMMANDS if d.at_start], ids=lambda d: d.line)
def test_refused_at_start_with_one_line(doc: Documented) -> None:
    srv = Server(*_args(doc))
    assert srv.wait_exit() == 78
    errors = [ln for ln in srv.lines if ln.startswith("error:")]
    assert len(errors) == 1 and doc.refused in errors[0], "".join(srv.lines)
