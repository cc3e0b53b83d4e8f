"""Each tenant's prefix-cache namespace: a digest of its API key, so tenants share no cached prefix."""

from __future__ import annotations

import hashlib

from starlette.requests import Request

from gateway.edge.auth import bearer

SALT_LABEL = b"rapid-mlx prefix-cache namespace\x00"  # keeps the digest apart from other key hashes


class CacheSalts:
    """The cache salt a request's jobs carry: with API keys configured, a truncated SHA-256 of the
    caller's key (never the key), so one tenant cannot learn from `cached_tokens` or the time to
    first token whether another sent the same prompt prefix; without keys (one tenant), or with
    --shared-prefix-cache, '' (one shared cache)."""

    def __init__(self, keyed: bool = False, shared: bool = False) -> None:
        self.keyed = keyed  # the server has API keys
        self.isolated = keyed and not shared

    def of(self, request: Request) -> str:
        """The cache salt of REQUEST's jobs."""
        if not self.isolated:
            return ""
        return hashlib.sha256(SALT_LABEL + bearer(request.headers).encode()).hexdigest()[:32]
