"""mlx-community's Whisper folders (mlx-whisper's layout: config.json of dimensions without
model_type, weights.npz, no tokenizer files) served directly: the tokenizer built from Whisper's
vocabularies equals the real one, and a tiny.en copy in that layout, served through the
`whisper-tiny` alias with --audio-mode, transcribes speech exactly as the original folder does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from tokenizers import Tokenizer

from tests.audio.mlx_whisper_copy import mlx_whisper_copy
from tests.audio.wer import wer
from tests.e2e.harness import Server
from worker.kinds.detect import detect_kind
from worker.kinds.stt.whisper_vocab import tokenizer_json

MAX_WER = 0.25


@pytest.fixture(scope="module")
def mlx_whisper_dir(whisper_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny.en rewritten in mlx-whisper's layout."""
    return mlx_whisper_copy(whisper_dir, tmp_path_factory.mktemp("whisper-tiny-mlx"))


def test_built_tokenizer_equals_the_real_one(whisper_dir: Path) -> None:
    real = json.loads((whisper_dir / "tokenizer.json").read_text())
    ours = tokenizer_json(51864)
    assert ours["model"]["vocab"] == real["model"]["vocab"]
    assert ours["model"]["merges"] == real["model"]["merges"]
    # the same ids; two names differ in older HF files (<|iw|>, <|nocaptions|>)
    assert [t["id"] for t in ours["added_tokens"]] == [t["id"] for t in real["added_tokens"]]
    a, b = Tokenizer.from_str(json.dumps(ours)), Tokenizer.from_str(json.dumps(real))
    for text in (" The quick brown fox.", "Héllo wörld 1,234 — 日本語\n\n  x", " it's<|endoftext|>"):
        assert a.encode(text, add_special_tokens=False).ids == \
            b.encode(text, add_special_tokens=False).ids


def test_the_layout_is_detected(mlx_whisper_dir: Path) -> None:
    config = json.loads((mlx_whisper_dir / "config.json").read_text())
    assert detect_kind(mlx_whisper_dir, config) == "transcribe"


@pytest.fixture(scope="module")
def server(mlx_whisper_dir: Path, whisper_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("mlx-whisper-serve")
    aliases = tmp / "aliases.toml"
    aliases.write_text(f'["whisper-tiny"]\nrepo = "{mlx_whisper_dir}"\n')
    srv = Server("whisper-tiny", str(whisper_dir), "--served-model-name", "whisper-tiny",
                 "--served-model-name", "original", "--audio-mode", "--aliases", str(aliases),
                 env={"RAPID_MLX_CACHE": str(tmp / "cache")}).wait_ready(timeout=300)
    yield srv
    srv.stop()


@pytest.mark.slow
def test_served_through_its_alias(server: Server, speech: list[tuple[str, Path]]) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    texts = {}
    for model in ("whisper-tiny", "original"):
        heard = []
        for _, wav in speech:
            with wav.open("rb") as f:
                heard.append(client.audio.transcriptions.create(model=model, file=f).text)
        texts[model] = heard
    assert texts["whisper-tiny"] == texts["original"]  # the same weights, read from either layout
    spoken = " ".join(text for text, _ in speech)
    assert wer(spoken, " ".join(texts["whisper-tiny"])) <= MAX_WER
