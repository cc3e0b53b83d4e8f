"""What a tenant's key sees of operator data (gateway/ops/redact.py) and who is an operator."""

from __future__ import annotations

from pathlib import Path

from starlette.datastructures import Headers

from gateway.edge.auth import Operators
from gateway.ops.opsctl import table
from gateway.ops.redact import health_view, shown_model, worker_view


def test_local_folders_show_their_name_repositories_stay(tmp_path: Path) -> None:
    assert shown_model(str(tmp_path / "my-model")) == "my-model"
    assert shown_model("~/models/x") == "x"
    assert shown_model("./models/y") == "y"
    assert shown_model("mlx-community/Qwen3-0.6B-4bit") == "mlx-community/Qwen3-0.6B-4bit"
    assert shown_model("embedded://demo") == "embedded://demo"
    assert shown_model(None) is None


def test_views_drop_requests_pids_addresses_and_paths() -> None:
    live = {"requests": [{"id": "resp_x"}], "path": "/m/p", "pid": 7, "facts": {}, "model": "/m/p",
            "running": 1}
    view = {"alias": "a", "model": "/m/p", "path": "/m/p", "pid": 7, "last_exit": "x /m/p",
            "requests": live["requests"], "running": 1, "live": live,
            "replicas": [{"pid": 7, "address": "tcp://10.0.0.1:5555", "model": "/m/p"}]}
    out = worker_view(view)
    assert "/m/p" not in str(out) and "resp_x" not in str(out) and "10.0.0.1" not in str(out)
    assert out["redacted"] is True and out["running"] == 1 and out["live"]["running"] == 1
    assert out["model"] == "p" and out["live"]["model"] == "p"
    assert worker_view({**view, "live": None})["live"] is None
    h = health_view({"model": "/m/p", "pid": 7, "last_exit": "/m/p", "state": "ready"})
    assert h == {"model": "p", "pid": None, "last_exit": None, "state": "ready", "redacted": True}
    assert "hidden" in table([{**out, "state": "ready"}], verbose=True)  # `rapid-mlx status -v` says why


def test_operators() -> None:
    def h(key: str) -> Headers:
        return Headers({"authorization": f"Bearer {key}"})
    assert Operators([], None).sees_all(h(""))  # one tenant: everything
    keyed = Operators(["k"], "adm")
    assert keyed.sees_all(h("adm")) and not keyed.sees_all(h("k"))
    assert not keyed.sees_all(h(""))
    assert not Operators(["k"], None).sees_all(h("k"))  # deny by default
    assert not Operators(["k"], "").sees_all(h(""))
