"""Flight locations: ``grpc://host:port`` in clear text, ``grpc+tls://host:port`` over TLS."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from memtier.errors import InvalidArgumentError

__all__ = ["PLAIN", "TLS", "host_port", "is_loopback", "is_tls", "location"]

PLAIN = "grpc"
TLS = "grpc+tls"


def location(host: str, port: int, *, tls: bool) -> str:
    """The location of a server at ``host:port`` (an IPv6 address in brackets)."""
    scheme = TLS if tls else PLAIN
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def host_port(location: str) -> tuple[str, int]:
    """``(host, port)`` of a ``grpc://`` or ``grpc+tls://`` location."""
    parts = urlsplit(location)
    try:
        port = parts.port
    except ValueError as e:
        raise InvalidArgumentError(f"not a Flight location: {location!r}: {e}") from e
    if parts.scheme not in (PLAIN, TLS) or not parts.hostname or port is None:
        raise InvalidArgumentError(
            f"not a memtier address: {location!r} (expected grpc://host:port or grpc+tls://host:port)"
        )
    return parts.hostname, port


def is_tls(location: str) -> bool:
    """Whether ``location`` is reached over TLS."""
    return urlsplit(location).scheme == TLS


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback (a name other than localhost may
    resolve to anything, so it is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
