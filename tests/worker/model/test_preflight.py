"""Load failures known to be final are one line (what, why, what to do), found before loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.model.fetch import CannotLoad, is_repo_id, resolve
from worker.model.preflight import check_architecture, check_memory, weights_bytes


def test_repo_ids() -> None:
    assert is_repo_id("org/name") and not is_repo_id("/abs/path") and not is_repo_id("a/b/c")
    assert not is_repo_id("./x") and not is_repo_id("name") and not is_repo_id("org/")


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(CannotLoad, match="no such folder, and not an 'org/name'"):
        resolve(str(tmp_path / "a" / "b"))


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(CannotLoad, match="has no config.json") as info:
        resolve(str(tmp_path))
    assert str(info.value).startswith(f"cannot load '{tmp_path}': ")


def test_uncached_repo_offline_is_quick_and_clear(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(CannotLoad) as info:
        resolve("nosuch-org/nosuch-model")
    assert info.value.offline and "HF_HUB_OFFLINE is set" in info.value.why
    assert "rapid-mlx pull nosuch-org/nosuch-model" in info.value.todo


def test_unknown_architecture() -> None:
    with pytest.raises(CannotLoad, match="model type 'no_such_arch' is not supported by mlx-lm"):
        check_architecture("m", {"model_type": "no_such_arch"})
    with pytest.raises(CannotLoad, match="no model_type"):
        check_architecture("m", {})
    check_architecture("m", {"model_type": "llama"})


def test_too_large_for_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.truncate(2**40)  # sparse
    assert weights_bytes(tmp_path) == 2**40
    with pytest.raises(CannotLoad, match=r"weights take 1024\.0 GiB but only .* GiB of memory"):
        check_memory("big", tmp_path)
    monkeypatch.setenv("RAPID_MLX_SKIP_MEMORY_CHECK", "1")
    check_memory("big", tmp_path)
