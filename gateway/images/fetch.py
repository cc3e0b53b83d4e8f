"""Download an http(s) image URL: bounded in time, size and redirects, public addresses only.

Each hop's host is resolved once, every address it resolves to is checked, and the connection
goes to that checked address (the Host header and TLS SNI keep the name), so a DNS answer that
changes between the check and the connection (rebinding) cannot reach a private address.
No proxy from the environment is used: it would connect on our behalf, unchecked.
"""

from __future__ import annotations

import asyncio

import httpx

from gateway.edge.errors import APIError
from gateway.images.address import AddressCheck, AddressRefused, is_public, resolve
from gateway.images.dataurl import image_error
from gateway.images.limits import (
    FETCH_CONNECT_S,
    FETCH_READ_S,
    FETCH_TOTAL_S,
    MAX_IMAGE_BYTES,
    MAX_REDIRECTS,
    MAX_URL_CHARS,
    URL_SCHEMES,
)
from gateway.images.refs import shown

REDIRECTS = (301, 302, 303, 307, 308)


def _target(url: str, param: str) -> httpx.URL:
    """URL parsed, with an http(s) scheme and a host, or a 400."""
    if len(url) > MAX_URL_CHARS:
        raise image_error(f"The image URL is longer than {MAX_URL_CHARS} characters.", param)
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise image_error(f"The image URL {shown(url)!r} is not a valid URL.", param) from None
    if u.scheme not in URL_SCHEMES or not u.host:
        raise image_error(f"The image URL {shown(url)!r} must be http:// or https:// with a "
                          "host.", param, "unsupported_image_url")
    if u.port is not None and not 0 < u.port < 65536:
        raise image_error(f"The image URL {shown(url)!r} has an invalid port.", param,
                          "unsupported_image_url")
    if u.userinfo:
        raise image_error("Image URLs with credentials (user:password@) are not allowed.", param,
                          "unsupported_image_url")
    return u


async def fetch(url: str, param: str, allowed: AddressCheck = is_public,
                limit: int = MAX_IMAGE_BYTES, total: float = FETCH_TOTAL_S) -> bytes:
    """The body of URL (following at most MAX_REDIRECTS redirects), or a 400 naming PARAM."""
    timeout = httpx.Timeout(FETCH_READ_S, connect=FETCH_CONNECT_S)
    try:
        async with asyncio.timeout(total), httpx.AsyncClient(
                timeout=timeout, follow_redirects=False, trust_env=False) as client:
            return await _follow(client, url, param, allowed, limit)
    except TimeoutError:
        raise image_error(f"Fetching the image URL {shown(url)!r} took longer than {total:g} s.",
                          param, "image_fetch_failed") from None


async def _follow(client: httpx.AsyncClient, url: str, param: str, allowed: AddressCheck,
                  limit: int) -> bytes:
    current = _target(url, param)
    for hop in range(MAX_REDIRECTS + 1):
        try:
            ip = await resolve(current.host, current.port or _port(current), allowed)
        except AddressRefused as exc:
            raise image_error(f"The image URL {shown(str(current))!r} is refused: {exc}.", param,
                              "image_url_refused") from None
        request = client.build_request(
            "GET", current.copy_with(host=ip),
            headers={"Host": current.netloc.decode("ascii"), "Accept": "image/*",
                     "Accept-Encoding": "identity"},
            extensions={"sni_hostname": current.host})
        try:
            response = await client.send(request, stream=True)
            try:
                if response.status_code in REDIRECTS and "location" in response.headers:
                    if hop == MAX_REDIRECTS:
                        raise image_error(f"The image URL redirects more than {MAX_REDIRECTS} "
                                          "times.", param, "image_fetch_failed")
                    current = _target(str(current.join(response.headers["location"])), param)
                    continue
                if response.status_code != 200:
                    raise image_error(f"Fetching the image URL {shown(str(current))!r} got HTTP "
                                      f"{response.status_code}.", param, "image_fetch_failed")
                return await _body(response, param, limit)
            finally:
                await response.aclose()
        except (httpx.HTTPError, OSError, ValueError) as exc:  # the remote end's failures
            raise image_error(f"Fetching the image URL {shown(str(current))!r} failed: "
                              f"{type(exc).__name__}.", param, "image_fetch_failed") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _port(u: httpx.URL) -> int:
    return 443 if u.scheme == "https" else 80


async def _body(response: httpx.Response, param: str, limit: int) -> bytes:
    """The response body, refused as soon as it passes LIMIT bytes (declared or counted)."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):  # a compressed body could inflate past any bound
        raise image_error(f"The image URL answered with Content-Encoding '{encoding[:20]}'; "
                          "only uncompressed image bodies are accepted.", param,
                          "image_fetch_failed")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit, param)
    chunks, size = [], 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit, param)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int, param: str) -> APIError:
    return image_error(f"The image at the URL is more than {limit} bytes ({size} seen).", param,
                       "image_too_large")
