"""Every architecture behind a built-in alias serves exactly: a tiny random-weight model of each
model_type (tools/tiny_models, the table in tools/tiny_models/aliases.py) on the real gateway and
worker gives, with full-precision pages, greedy tokens equal to mlx-lm's alone, 8 at a time under
preemption, after a prefix hit, with prompt chunks that cross a window boundary and through its
alias; with K8V4 pages (float32 and 4-bit weights) the same tokens alone and in a batch (MLA
types keep full-precision pages there, their KV plan says why).

One module-scoped pair of servers per model_type: `full` (--kv-cache-turboquant none, a KV pool
of one context: rows get preempted) serves the folder and the type's first alias (a user aliases
file pointing it at the folder); `k8v4` (the default pool: K8V4 working set and dense decode
cache on) serves the float32 and 4-bit folders. Both compute prompts PREFILL tokens per step.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Server
from tools.tiny_models.aliases import aliases_of, text_model_types
from tools.tiny_models.build import cached_build
from worker.kv.setup import MLA_REASON

pytestmark = pytest.mark.slow

# model_types the paged engine cannot serve yet: removing one turns its tests on
NOT_SERVED_YET: frozenset[str] = frozenset()
# model_types whose KV plan declines K8V4 (worker/kv/setup.py): the reason it states
K8V4_DECLINED = {"deepseek_v3": MLA_REASON, "glm4_moe_lite": MLA_REASON}
CACHE = Path("/tmp/rapid-mlx-test-models/tiny-alias")
PREFILL = 7  # prompt tokens per engine step: chunks cross page (16) and window boundaries
TOKENS = 10  # generated per request
PROMPT = 32  # tokens of a short prompt: two pages, so a repeat hits the prefix cache
BATCH = 8
BATCH_TOKENS = 24  # generated per request of a batch: rows decode long enough to share the pool


class Pair:
    """The two servers of one model_type and what they serve."""

    def __init__(self, model_type: str, root: Path, tmp: Path) -> None:
        self.model_type = model_type
        self.path = cached_build(model_type, root)
        self.path4 = cached_build(model_type, root, bits=4)
        self.alias = [a for a in aliases_of(model_type) if a != "default"][0]
        self.window = window_of(json.loads((self.path / "config.json").read_text()))
        self.long = max(3 * PREFILL + 3, 2 * self.window + PREFILL) if self.window else 40
        self.context = -(-max(128, self.long + TOKENS + 16) // 16) * 16
        aliases = tmp / "aliases.toml"
        aliases.write_text(f'["{self.alias}"]\nrepo = "{self.path}"\n')
        common = ("--max-batch", str(BATCH), "--context-length", str(self.context),
                  "--prefill-budget", str(PREFILL))
        self.full = Server(str(self.path), self.alias, "--aliases", str(aliases),
                           "--kv-cache-turboquant", "none", "--kv-cache-memory", "1000", *common)
        # the default pool: room for the K8V4 working set and the dense decode cache
        self.k8v4 = Server(str(self.path), str(self.path4), *common)  # starts meanwhile
        self._ready: set[str] = set()

    def server(self, which: str) -> Server:
        """The `full` or `k8v4` server, once ready; fails at once if it exited (a model the
        engine refuses: exit 78) and again for every later test of the same server."""
        srv: Server = getattr(self, which)
        deadline = time.monotonic() + 180
        while which not in self._ready:
            if any(line.startswith("Ready: ") for line in srv.lines):
                self._ready.add(which)
            elif srv.proc.poll() is not None or time.monotonic() > deadline:
                time.sleep(0.5)  # the rest of its output
                pytest.fail(f"{which} server of {self.model_type} not ready (exit "
                            f"{srv.proc.poll()}):\n" + "".join(srv.lines[-30:]))
            else:
                time.sleep(0.1)
        return srv

    def stop(self) -> None:
        """Stop both servers (at once)."""
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(Server.stop, (self.full, self.k8v4)))


def window_of(config: dict[str, Any]) -> int | None:
    """The smallest sliding window or attention chunk CONFIG (or its text_config) uses."""
    found = []
    for c in (config, config.get("text_config") or {}):
        if c.get("use_sliding_window") is not False and isinstance(c.get("sliding_window"), int):
            found.append(c["sliding_window"])
        if isinstance(c.get("attention_chunk_size"), int):
            found.append(c["attention_chunk_size"])
    found = [w for w in found if w <= 4096]  # a window as long as the context is none
    return min(found) if found else None


@pytest.fixture(scope="module", params=text_model_types())
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Pair]:
    """MODEL_TYPE's servers (skipped for the types in NOT_SERVED_YET)."""
    if request.param in NOT_SERVED_YET:
        pytest.skip("the paged engine does not serve this model_type yet")
    p = Pair(request.param, CACHE, tmp_path_factory.mktemp(request.param))
    try:
        yield p
    finally:
        p.stop()


def prompts(n: int, length: int = PROMPT, seed: int = 0) -> list[list[int]]:
    """N prompts of LENGTH token ids (ordinary tokens of the demo vocabulary), from SEED."""
    rng = random.Random(seed)
    return [[rng.randrange(100, 4000) for _ in range(length)] for _ in range(n)]


_LOADED: dict[Path, Any] = {}


def reference(path: Path, prompt: list[int], n: int = TOKENS) -> str:
    """mlx-lm's greedy text for PROMPT on the model at PATH: N tokens or up to an end token."""
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    if path not in _LOADED:
        _LOADED[path] = load(str(path))
    model, tok = _LOADED[path]
    detok = tok.detokenizer
    detok.reset()
    for (token, _), _ in zip(generate_step(mx.array(prompt), model, max_tokens=n), range(n),
                             strict=False):
        if int(token) in tok.eos_token_ids:
            break
        detok.add_token(int(token))
    detok.finalize()
    return str(detok.text)


def complete(srv: Server, model: str, prompt: list[int], n: int = TOKENS) -> dict[str, Any]:
    """The server's greedy completion of PROMPT (token ids): its JSON, checked to be a 200."""
    r = httpx.post(f"{srv.url}/completions", timeout=180, json={
        "model": model, "prompt": prompt, "max_tokens": n, "temperature": 0})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def text(out: dict[str, Any]) -> str:
    """The text of a completion's only choice."""
    return str(out["choices"][0]["text"])


def together(srv: Server, model: str, batch: list[list[int]]) -> list[str]:
    """The texts of BATCH sent at once, BATCH_TOKENS each."""
    with ThreadPoolExecutor(len(batch)) as pool:
        return [text(o) for o in pool.map(lambda p: complete(srv, model, p, BATCH_TOKENS),
                                          batch)]


def live(srv: Server, model: str) -> dict[str, Any]:
    """The worker's own status of MODEL (GET /v1/workers/{model}, its `live` part)."""
    view: dict[str, Any] = srv.worker(model)["live"]
    return view


def test_alone_and_after_a_prefix_hit_equal_mlx_lm(pair: Pair) -> None:
    """Full-precision pages: one request, then the same prompt again (a prefix-cache hit)."""
    srv, name = pair.server("full"), pair.path.name
    prompt = prompts(1, seed=1)[0]
    want = reference(pair.path, prompt)
    first = complete(srv, name, prompt)
    again = complete(srv, name, prompt)
    assert text(first) == want
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert text(again) == want


def test_eight_at_a_time_under_preemption_equal_mlx_lm(pair: Pair) -> None:
    """Full-precision pages: 8 prompts at once in a pool of one context; rows are preempted."""
    srv, name = pair.server("full"), pair.path.name
    batch = prompts(BATCH, seed=2)
    before = live(srv, name)["preemptions"]
    got = together(srv, name, batch)
    assert got == [reference(pair.path, p, BATCH_TOKENS) for p in batch]
    assert live(srv, name)["preemptions"] > before


def test_prompt_chunks_crossing_a_window_equal_mlx_lm(pair: Pair) -> None:
    """Full-precision pages: a prompt longer than twice the window (if any), computed PREFILL
    tokens at a time, so chunks straddle page and window boundaries."""
    srv, name = pair.server("full"), pair.path.name
    prompt = prompts(1, length=pair.long, seed=3)[0]
    assert text(complete(srv, name, prompt)) == reference(pair.path, prompt)


def test_served_through_its_alias(pair: Pair) -> None:
    """The real alias name, pointed at the tiny folder by a user aliases file, answers the same
    tokens as mlx-lm."""
    srv = pair.server("full")
    prompt = prompts(1, seed=4)[0]
    assert text(complete(srv, pair.alias, prompt)) == reference(pair.path, prompt)
    assert live(srv, pair.alias)["path"] == str(pair.path)


@pytest.mark.parametrize("weights", ["float32", "4bit"])
def test_k8v4_same_tokens_alone_and_in_a_batch(pair: Pair, weights: str) -> None:
    """K8V4 pages (float32 and 4-bit weights): three prompts alone, then among 8 at once."""
    srv = pair.server("k8v4")
    name = (pair.path if weights == "float32" else pair.path4).name
    batch = prompts(BATCH, seed=5)
    alone = [text(complete(srv, name, p, BATCH_TOKENS)) for p in batch[:3]]
    status = live(srv, name)
    declined = K8V4_DECLINED.get(pair.model_type)
    if declined is None:
        assert status["kv_format"] == "k8v4", status["kv_format_note"]
    else:  # the KV plan keeps full precision and says why
        assert status["kv_format"] == "none" and declined in status["kv_format_note"]
    assert together(srv, name, batch)[:3] == alone
