"""Fairness across tenants: one API key (or, without keys, one client address) may hold at most
`most` of a model's in-flight jobs (queued in the gateway, waiting in the worker, or running).

The worker's wait queue (256 by default) is shared: one key sending 20 requests of `n: 16` filled
it, and every other key got 503 "wait queue is full" for as long as the flood lasted. Counting a
request's `n` choices as n jobs, a key past its share gets a 503 `tenant_limit` naming the limit
before any job is sent, and the rest of the queue stays open to the other keys. The count is
taken live from the alias's streams (a few hundred at most), so nothing has to be given back
when a request ends, fails or is aborted.
"""

from __future__ import annotations

import hashlib

from gateway.edge.errors import APIError, unavailable
from gateway.plane.state import AliasState

DEFAULT_MOST = 128  # jobs in flight per tenant and model: half the worker's default wait queue
TENANT_LABEL = b"rapid-mlx tenant\x00"  # keeps the digest apart from other key hashes


def per_key(given: int | None, max_waiting: int, keyed: bool = True) -> int:
    """The share in force: GIVEN (--max-requests-per-key), else half the worker's wait queue
    when API keys are configured; a server without keys (one user, usually) has no per-address
    share unless one is given (0: no limit)."""
    if given is not None:
        return given
    return max(1, max_waiting // 2) if keyed else 0


def key_tenant(key: str) -> str:
    """The tenant of a request sent with API key KEY (a digest: the key is never kept)."""
    return "key:" + hashlib.sha256(TENANT_LABEL + key.encode()).hexdigest()[:24]


def address_tenant(host: str) -> str:
    """The tenant of a request from client address HOST (a server without API keys)."""
    return "addr:" + host


class TenantLimit:
    """At most `most` in-flight jobs per tenant and alias (0: no limit)."""

    def __init__(self, most: int = DEFAULT_MOST) -> None:
        self.most = most

    def held(self, st: AliasState, tenant: str) -> int:
        """The jobs TENANT has in flight on the alias ST (sent, or parked for a replica)."""
        sent = sum(1 for s in st.streams.values() if s.tenant == tenant)
        return sent + sum(1 for p in st.parked if p.stream.tenant == tenant)

    def check(self, st: AliasState, tenant: str, n: int) -> None:
        """Raise the 503 when N more jobs would take TENANT past its share ('' : no tenant)."""
        if not tenant or self.most <= 0:
            return
        held = self.held(st, tenant)
        if held + n > self.most:
            raise refusal(st.alias, tenant, held, n, self.most)


def refusal(alias: str, tenant: str, held: int, n: int, most: int) -> APIError:
    """The 503 of a tenant past its share, naming the limit that was hit."""
    who = "this API key" if tenant.startswith("key:") else "this client address"
    return unavailable(f"Too many requests in flight for {who} on '{alias}': {held} generations "
                       f"running or queued, this request adds {n} (each of `n` counts), at most "
                       f"{most} (--max-requests-per-key). Retry when some have finished.",
                       retry_after=2, code="tenant_limit")
