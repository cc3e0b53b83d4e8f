"""Whose request it is, for the per-tenant share of a model's jobs (gateway/plane/tenants.py)."""

from __future__ import annotations

from starlette.requests import Request

from gateway.edge.auth import bearer
from gateway.plane.tenants import address_tenant, key_tenant


def tenant_of(request: Request, keyed: bool) -> str:
    """REQUEST's tenant: its API key's digest when the server has keys (KEYED: the middleware
    checked it), else its client address (a key nobody checks could be made up anew each time)."""
    if keyed:
        return key_tenant(bearer(request.headers))
    client = request.client
    return address_tenant(client.host if client is not None else "")
