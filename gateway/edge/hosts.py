"""The Host allow-list that stops DNS-rebinding pages from reading the API."""

from __future__ import annotations

import ipaddress
import socket

LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")


def _bracket(host: str) -> str:
    """An IPv6 literal as it appears in a Host header: in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def split_host(value: str) -> str:
    """The host part of a Host header, lower-cased, without the port (IPv6 keeps its brackets)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class HostPolicy:
    """Which Host headers the server answers: loopback names, the bound host, and the operator's.

    With a wildcard bind (0.0.0.0, ::) clients reach the server by one of the machine's
    addresses, so any IP-literal Host is accepted then, plus this machine's host name: a
    DNS-rebinding page always sends its own DNS name, never an IP literal.
    """

    def __init__(self, bound_host: str, extra: list[str]) -> None:
        self.any = "*" in extra
        self.wildcard_bind = bound_host in WILDCARDS
        names = {*LOCAL_NAMES, *(split_host(_bracket(h)) for h in extra if h != "*")}
        if self.wildcard_bind:
            hostname = socket.gethostname().lower()
            names |= {hostname, f"{hostname}.local", socket.getfqdn().lower()}
        else:
            names.add(split_host(_bracket(bound_host)))
        self.names = frozenset(n for n in names if n)

    def allows(self, header: str | None) -> bool:
        """True when a request with this Host header (None: absent) may be answered."""
        if self.any:
            return True
        if not header:
            return False  # HTTP/1.1 requires Host; a request without one is not from a browser
        host = split_host(header)
        return host in self.names or (self.wildcard_bind and _is_ip_literal(host))
