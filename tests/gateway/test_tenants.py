"""A tenant's share of a model's in-flight jobs (gateway/plane/tenants.py), counted live from the
alias's streams and parked jobs."""

from __future__ import annotations

import pytest

from gateway.edge.errors import APIError
from gateway.plane.state import AliasState, Parked, Replica, Stream
from gateway.plane.tenants import TenantLimit, address_tenant, key_tenant, per_key


def _alias(a: int, b: int, parked_a: int = 0) -> AliasState:
    st = AliasState("m", "model")
    r = Replica("boot", "r0")
    st.replicas["boot"] = r
    for i in range(a + b):
        r.streams[f"j{i}"] = Stream(f"j{i}", "m", "boot", tenant=key_tenant("a" if i < a else "b"))
    st.parked = [Parked(Stream(f"p{i}", "m", "", tenant=key_tenant("a")), b"", 0.0)
                 for i in range(parked_a)]
    return st


def test_a_tenant_past_its_share_is_refused_naming_the_limit() -> None:
    limit = TenantLimit(8)
    st = _alias(5, 7, parked_a=1)
    assert limit.held(st, key_tenant("a")) == 6
    limit.check(st, key_tenant("a"), 2)  # 8: at the share
    limit.check(st, key_tenant("b"), 1)
    with pytest.raises(APIError) as err:
        limit.check(st, key_tenant("a"), 3)  # n counts as n
    assert err.value.status == 503 and err.value.code == "tenant_limit"
    assert "--max-requests-per-key" in err.value.message and "API key" in err.value.message
    with pytest.raises(APIError):
        limit.check(st, key_tenant("b"), 2)


def test_no_tenant_or_no_limit_is_never_refused() -> None:
    st = _alias(50, 0)
    TenantLimit(8).check(st, "", 100)
    TenantLimit(0).check(st, key_tenant("a"), 100)


def test_the_default_share_is_half_the_wait_queue() -> None:
    assert per_key(None, 256) == 128 and per_key(None, 1) == 1 and per_key(5, 256) == 5
    assert per_key(None, 256, keyed=False) == 0 and per_key(7, 256, keyed=False) == 7
    assert key_tenant("k") != key_tenant("l") and "secret" not in key_tenant("secret")
    assert address_tenant("10.0.0.1") != key_tenant("10.0.0.1")
