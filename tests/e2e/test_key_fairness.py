"""One API key cannot fill the wait queue (gateway/plane/tenants.py): key A floods with
streams; once A holds its share (half of --max-waiting), its next requests get a 503
tenant_limit naming the limit, and key B is still admitted (a real server, stories260K, a wait
queue of 16 and a batch of 1)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import shared_model
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

A, B = ({"Authorization": f"Bearer {k}"} for k in ("key-a", "key-b"))


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    model = str(shared_model("stories260K"))
    srv = Server(model, "--served-model-name", "m", "--api-key", "key-a", "--api-key", "key-b",
                 "--max-waiting", "16", "--max-batch", "1").wait_ready()
    yield srv
    srv.stop()


class Flood:
    """Key A's streamed requests, held open (reading one chunk) until released."""

    def __init__(self, url: str, count: int) -> None:
        self.url = url
        self.statuses: list[int] = []
        self.errors: list[dict[str, object]] = []
        self.started = threading.Semaphore(0)
        self.release = threading.Event()
        self.threads = [threading.Thread(target=self._one, daemon=True) for _ in range(count)]
        for t in self.threads:
            t.start()

    def _one(self) -> None:
        with httpx.Client(timeout=120) as c, c.stream("POST", f"{self.url}/chat/completions",
                                                       headers=A, json={
                "model": "m", "messages": [{"role": "user", "content": "Hi"}], "n": 1,
                "max_tokens": 400, "ignore_eos": True, "stream": True}) as r:
            self.statuses.append(r.status_code)
            if r.status_code != 200:
                self.errors.append(json.loads(r.read())["error"])
                self.started.release()
                return
            next(r.iter_lines())
            self.started.release()
            self.release.wait(60)  # the choices keep generating (or wait) while held

    def wait_sent(self) -> None:
        """Until every request has been answered or has been sent for a second (its jobs wait
        behind the others': 17 of them take ~7 s to run one by one)."""
        for _ in self.threads:
            self.started.acquire(timeout=1.0)

    def stop(self) -> None:
        self.release.set()
        for t in self.threads:
            t.join(timeout=60)


def test_a_flooding_key_leaves_room_for_another(server: Server) -> None:
    """Old code: A's 20 jobs filled the batch (1) and the wait queue (16), and B got 503
    queue_full; now A holds at most 8 jobs at once (its others get 503 tenant_limit, never
    queue_full) and B is served."""
    flood = Flood(server.url, 20)
    try:
        flood.wait_sent()
        r = httpx.post(f"{server.url}/chat/completions", headers=B, timeout=120, json={
            "model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert r.status_code == 200, r.text
        flood.stop()
        # at most 8 at once (some finish while the flood is still being sent)
        assert 8 <= flood.statuses.count(200) < 20, flood.statuses
        assert flood.errors and all(e["code"] == "tenant_limit" for e in flood.errors)
        assert "--max-requests-per-key" in str(flood.errors[0]["message"])
    finally:
        flood.stop()
