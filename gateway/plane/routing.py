"""Which replica of an alias takes a request: cache-aware (as SGLang's router), least loaded, or
round robin."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol import messages as m

if TYPE_CHECKING:
    from gateway.plane.state import Replica

POLICIES = ("cache_aware", "least_loaded", "round_robin")
KEY_CHARS = 16384  # route by the first this many characters (the prefix is what matters)


@dataclass
class RoutingConfig:
    """The policy and the cache-aware knobs (SGLang's defaults, in characters instead of tokens)."""

    policy: str = "cache_aware"
    match_threshold: float = 0.5  # route by prefix only when this share of the text matches
    balance_abs: int = 32  # imbalance bound: max load - min load above this ...
    balance_rel: float = 1.5  # ... and max load above this times min load: go least loaded
    tree_chars: int = 1 << 20  # each replica's tree holds at most this many characters


def route_key(job: m.Work) -> str:
    """The text the replica's prefix cache will see first: roles and contents, or the prompt
    (at most KEY_CHARS characters)."""
    return _full_key(job)[:KEY_CHARS]


def route_namespace(job: m.Work) -> str:
    """The prefix-cache namespace the route key lives in: the job's cache salt (a tenant's), so
    routing by prefix never depends on what another tenant sent."""
    return job.cache_salt if isinstance(job, m.Generate) else ""


def _full_key(job: m.Work) -> str:
    if isinstance(job, m.Generate):
        if job.messages is not None:  # stops at KEY_CHARS: a body may hold 100k messages
            parts, size = [], 0
            for msg in job.messages:
                parts.append(f"<{msg.get('role', '')}>{_content(msg.get('content'))}")
                size += len(parts[-1])
                if size >= KEY_CHARS:
                    break
            return "".join(parts)
        if job.prompt_ids is not None:
            # one character per token: the ids past KEY_CHARS are never looked at (a long
            # context's 262k ids cost 62 ms on the event loop, now 2 ms)
            return "".join(chr(0xE000 + (t % 0x10000)) for t in job.prompt_ids[:KEY_CHARS])
        return job.prompt or ""
    if isinstance(job, m.Embed):
        return "".join(x if isinstance(x, str) else "" for x in job.inputs[:1])
    return ""


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class Router:
    """Picks a replica per request and remembers what it sent where."""

    def __init__(self, config: RoutingConfig | None = None) -> None:
        self.config = config or RoutingConfig()
        self._rr = itertools.count()

    def pick(self, replicas: Sequence[Replica], key: str, ns: str = "") -> Replica:
        """The replica for a request with route KEY in namespace NS (REPLICAS: non-empty, all
        routable)."""
        cfg = self.config
        if len(replicas) == 1:
            chosen = replicas[0]
        elif cfg.policy == "round_robin":
            chosen = replicas[next(self._rr) % len(replicas)]
        elif cfg.policy == "least_loaded" or not key:
            chosen = _least_loaded(replicas)
        else:
            chosen = self._cache_aware(replicas, key, ns)
        self.record(chosen, key, ns)
        return chosen

    def _cache_aware(self, replicas: Sequence[Replica], key: str, ns: str) -> Replica:
        cfg = self.config
        loads = [r.load for r in replicas]
        if max(loads) - min(loads) > cfg.balance_abs and max(loads) > cfg.balance_rel * min(loads):
            return _least_loaded(replicas)  # imbalanced: stop feeding the busy one
        matches = [r.tree.match(key, ns) for r in replicas]
        best = max(range(len(replicas)), key=lambda i: (matches[i], -loads[i]))
        if matches[best] / len(key) >= cfg.match_threshold:
            return replicas[best]
        return _least_loaded(replicas)

    def record(self, replica: Replica, key: str, ns: str = "") -> None:
        """Count the request's prefix match on REPLICA and remember its text there (under NS)."""
        if not key:
            return
        replica.routed_chars += len(key)
        replica.matched_chars += replica.tree.match(key, ns)
        replica.tree.insert(key, ns)


def _least_loaded(replicas: Sequence[Replica]) -> Replica:
    return min(replicas, key=lambda r: (r.load, r.routed_chars))
