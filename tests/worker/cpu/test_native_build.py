"""worker/cpu/native/build.py never fails the make: anything missing or broken is one line, None."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from worker.cpu.native import build


def test_other_platforms_are_not_built(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert build._why_not() is not None
    monkeypatch.setattr(build, "target", lambda: Path("/nonexistent/_fma_softmax.so"))
    assert build.build() is None
    assert "not built" in capsys.readouterr().out


def test_without_nanobind_it_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanobind", None)  # import fails
    reason = build._why_not()
    assert reason is not None and "nanobind" in reason


def test_a_compile_error_is_one_line_not_a_failure(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nanobind")
    if build._why_not() is not None:
        pytest.skip("this machine does not build the extension")
    bad = tmp_path / "broken.cpp"
    bad.write_text("this is not C++\n")
    monkeypatch.setattr(build, "SOURCE", bad)
    monkeypatch.setattr(build, "target", lambda: tmp_path / "_fma_softmax.so")
    assert build.build() is None
    assert "build failed" in capsys.readouterr().out
    assert not (tmp_path / "_fma_softmax.so").exists()


def test_the_built_module_names_the_mlx_it_was_built_for() -> None:
    out = build.target()
    if not out.exists():
        pytest.skip("not built here")
    import mlx.core as mx

    assert build._built_for(out) == getattr(mx, "__version__", None)
