"""The shared-prefix workload of the replica tests and bench: 4 long system prompts x user turns."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

_WORDS = ("river stone light garden window market letter silver engine forest morning paper "
          "harbor candle winter bridge meadow signal orchard lantern valley thunder copper "
          "whisper island feather mirror compass ribbon canyon velvet glacier ember").split()


def system_prompts(n: int = 4, words: int = 220, seed: int = 14) -> list[str]:
    """N distinct long system prompts (deterministic)."""
    rng = random.Random(seed)
    return [f"You are assistant {k}. Follow these notes: "
            + " ".join(rng.choice(_WORDS) for _ in range(words)) for k in range(n)]


def rounds(turns: int = 4, systems: int = 4, users: int = 1,
           seed: int = 14) -> list[list[list[dict[str, str]]]]:
    """TURNS rounds; each round has USERS conversations per system prompt (sent together)."""
    prompts = system_prompts(systems, seed=seed)
    return [[[{"role": "system", "content": s},
              {"role": "user", "content": f"Turn {t}, user {u}: what does note {t * 7 + k} "
                                          f"say?"}]
             for k, s in enumerate(prompts) for u in range(users)] for t in range(turns)]


def run(url: str, alias: str, plan: list[list[list[dict[str, str]]]], max_tokens: int = 8,
        concurrency: int = 8) -> dict[str, Any]:
    """Send each round's requests at once, round after round; tokens, seconds and tokens/s."""
    def one(messages: list[dict[str, str]]) -> int:
        r = httpx.post(f"{url}/chat/completions", timeout=300, json={
            "model": alias, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True})
        r.raise_for_status()
        return int(r.json()["usage"]["completion_tokens"])

    started = time.monotonic()
    tokens = 0
    with ThreadPoolExecutor(concurrency) as pool:
        for batch in plan:
            tokens += sum(pool.map(one, batch))
    seconds = time.monotonic() - started
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1)}


def replicas(url: str, alias: str) -> list[dict[str, Any]]:
    """The alias's replicas as /v1/workers/{alias} lists them."""
    return list(httpx.get(f"{url}/workers/{alias}", timeout=30).json()["replicas"])


def computed(url: str, alias: str) -> int:
    """Prompt tokens the alias's workers computed so far (sum over replicas, live status)."""
    return counters(url, alias)["computed"]


def counters(url: str, alias: str) -> dict[str, int]:
    """Prompt tokens computed, prefix-cache queries and hits, summed over the replicas."""
    rows = replicas(url, alias)
    assert all(r["live"] for r in rows), rows
    return {"computed": sum(int(r["prompt_tokens_computed"] or 0) for r in rows),
            "queries": sum(int(r["prefix_cache_queries"] or 0) for r in rows),
            "hits": sum(int(r["prefix_cache_hits"] or 0) for r in rows)}
