"""Hot swap of an embedding alias under load: in-flight requests finish on the old worker, the
new one (MiniLM converted with --matryoshka-dims) says Ready with its new capabilities."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Server
from tests.embed.conftest import MODELS
from tests.embed.refs import ROOT

pytestmark = pytest.mark.slow
KEY = "admin-secret"


@pytest.fixture(scope="module")
def swap_server(minilm: Path, minilm_src: Path) -> Iterator[tuple[Server, Path]]:
    mrl = MODELS / "minilm-mrl"
    if not (mrl / "model.safetensors").exists():
        subprocess.run([sys.executable, "-m", "gateway", "convert-embeddings", str(minilm_src),
                        str(mrl), "--matryoshka-dims", "384,256,128"], cwd=ROOT, check=True,
                       capture_output=True, timeout=600)
    srv = Server(str(minilm), "--served-model-name", "emb", "--admin-key", KEY,
                 "--swap-allow-path", str(MODELS)).wait_ready(180)
    yield srv, mrl
    srv.stop()


def test_swap_under_load(swap_server: tuple[Server, Path]) -> None:
    srv, mrl = swap_server
    before = srv.worker("emb")["boot_id"]
    statuses: list[int] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=120) as c:
            while not stop.is_set():
                r = c.post(f"{srv.url}/embeddings", json={"model": "emb",
                                                          "input": ["some text"] * 16})
                statuses.append(r.status_code)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(600):  # the load is on before the swap starts
            if len(statuses) >= 4:
                break
            stop.wait(0.1)
        started = len(statuses)
        r = httpx.post(f"{srv.base}/admin/swap/emb", json={"model": str(mrl), "wait": True},
                       headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
        assert r.status_code == 200, r.text
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert started >= 4 and len(statuses) > started, statuses  # requests ran across the swap
    assert set(statuses) <= {200, 503}, statuses  # 503 only while no worker serves
    assert statuses.count(200) >= len(statuses) - 4, statuses
    print(f"{len(statuses)} requests during the swap: {statuses.count(200)} answered 200")
    card = httpx.get(f"{srv.url}/models/emb").json()
    assert card["kind"] == "embed" and "dimensions" in card["capabilities"]
    assert srv.worker("emb")["boot_id"] != before
    got = httpx.post(f"{srv.url}/embeddings", json={"model": "emb", "input": "hello",
                                                    "dimensions": 128}, timeout=60).json()
    assert len(got["data"][0]["embedding"]) == 128
