"""Cache salts: each API key's prefix-cache namespace, a digest never the key, on every generating door."""

from __future__ import annotations

from starlette.requests import Request

from gateway.doors.salt import CacheSalts
from protocol import messages as m


def _request(key: str, header: str = "authorization") -> Request:
    value = f"Bearer {key}" if header == "authorization" else key
    return Request({"type": "http", "headers": [(header.encode(), value.encode())]})


def test_each_key_gets_its_own_salt_and_never_the_key() -> None:
    salts = CacheSalts(keyed=True)
    one, two = salts.of(_request("key-one")), salts.of(_request("key-two"))
    assert one and two and one != two
    assert "key-one" not in one and len(one) == 32
    assert salts.of(_request("key-one", "x-api-key")) == one  # Anthropic's header: same tenant
    assert salts.of(_request("key-one")) == one  # stable: the tenant's cache persists


def test_one_tenant_or_opted_out_shares_the_cache() -> None:
    assert CacheSalts().of(_request("k")) == ""  # no API keys: one tenant
    assert CacheSalts(keyed=False).of(_request("k")) == ""
    assert CacheSalts(keyed=True, shared=True).of(_request("k")) == ""  # --shared-prefix-cache


def test_generate_carries_the_salt_and_old_frames_mean_shared() -> None:
    job = m.Generate(request_id="r", params=m.SamplingParams(), prompt="p", cache_salt="s")
    back = m.decode_job(m.encode(job))
    assert isinstance(back, m.Generate) and back.cache_salt == "s"
    plain = m.decode_job(m.encode(m.Generate(request_id="r", params=m.SamplingParams(), prompt="p")))
    assert isinstance(plain, m.Generate) and plain.cache_salt == ""
