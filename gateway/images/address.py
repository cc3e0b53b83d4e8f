"""Which addresses an image URL may reach: public unicast only, checked after DNS resolution."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressCheck = Callable[[IPAddress], bool]


def is_public(ip: IPAddress) -> bool:
    """True for a globally routable unicast address: never private, loopback, link-local,
    multicast, reserved, unspecified or shared (CGNAT); IPv4 inside IPv6 is judged as IPv4."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is not None:
            return is_public(inner)
        if ip in _NAT64:  # 64:ff9b::/96 embeds an IPv4 address in its last 32 bits
            return is_public(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return bool(ip.is_global) and not (ip.is_multicast or ip.is_private or ip.is_loopback
                                       or ip.is_link_local or ip.is_reserved
                                       or ip.is_unspecified)


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class AddressRefused(Exception):
    """The host resolves to an address an image URL must not reach (or does not resolve)."""


async def resolve(host: str, port: int, allowed: AddressCheck = is_public) -> str:
    """One address of HOST to connect to, after checking EVERY address it resolves to."""
    try:
        literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        found = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError, ValueError, OverflowError) as exc:
            raise AddressRefused(f"the host does not resolve ({exc})") from None
        found = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not found:
        raise AddressRefused("the host does not resolve")
    for ip in found:
        if not allowed(ip):
            raise AddressRefused(f"the host resolves to {ip}, a private, loopback, link-local, "
                                 "multicast or reserved address")
    return str(found[0])
