"""TLS for memtier's Flight connections: a server's certificate and key, the CA a client
checks servers against, and what a failed handshake means in terms of the settings.

A server given a :class:`ServerIdentity` serves ``grpc+tls://`` locations only; a client
reaches a ``grpc+tls://`` location checking the server's certificate (its chain and the
host name) against the CA it is given (``cluster.tls.ca``), else against the system's CAs.
The scheme of a location decides: ``grpc://`` is clear text.
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import pyarrow.flight as fl

from memtier.errors import InvalidArgumentError
from memtier.rpc import addresses

__all__ = ["ServerIdentity", "ca_pem", "explain"]

_UNVERIFIED = re.compile(r"certificate verify failed:? ?([^.]*)")
_PEER_NAME = re.compile(r"Peer name (\S+) is not in peer certificate")
#: How long :func:`explain` waits for a TLS handshake it tries, to tell a TLS server.
_PROBE_SECONDS = 2.0


@dataclass(frozen=True)
class ServerIdentity:
    """A server's certificate (chain) and private key: PEM files (``cluster.tls.certificate``
    and ``cluster.tls.key``)."""

    certificate: str
    key: str

    def pair(self) -> fl.CertKeyPair:
        """The pair Flight serves with; refused, naming the settings, unless the files hold
        a certificate and its private key (gRPC would only say it did not start)."""
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.certificate, self.key)
        except (OSError, ssl.SSLError) as e:
            raise InvalidArgumentError(
                f"cluster.tls.certificate {self.certificate!r} and cluster.tls.key {self.key!r} "
                f"are not a certificate and its private key: {e}"
            ) from e
        return fl.CertKeyPair(cert=Path(self.certificate).read_bytes(), key=Path(self.key).read_bytes())


def ca_pem(ca: str) -> str:
    """The PEM text of the CA certificates ``ca`` holds: the text itself, or the file it names."""
    if ca.lstrip().startswith("-----BEGIN"):
        text, what = ca, "the PEM text given as cluster.tls.ca"
    else:
        what = f"cluster.tls.ca {ca!r}"
        try:
            text = Path(ca).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidArgumentError(f"{what} cannot be read: {e}") from e
    try:
        ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError) as e:
        raise InvalidArgumentError(f"{what} holds no usable PEM CA certificate: {e}") from e
    return text


def explain(target: str, detail: str, ca: str | None) -> str | None:
    """Why a connection to ``target`` failed with Flight's ``detail``, when TLS is the
    reason and trying again cannot help (a client trusting ``ca``, None: the system's
    CAs); None otherwise (a handshake cut short by a server going down is retried)."""
    host, port = addresses.host_port(target)
    unverified = _UNVERIFIED.search(detail)
    if unverified:
        reason = unverified.group(1) or "certificate verify failed"
        trusted = "the CA in cluster.tls.ca" if ca else "the system's CAs (cluster.tls.ca is not set)"
        return (
            f"{target} presented a certificate this client does not trust ({reason}): it checks "
            f"servers against {trusted}; set cluster.tls.ca to the CA that signed the servers' "
            "certificates (memtier tls-init writes it as ca.pem)"
        )
    peer = _PEER_NAME.search(detail)
    if peer:
        return (
            f"{target}'s certificate does not name {peer.group(1)}: clients must reach a server by a "
            f"name or address its certificate lists (memtier tls-init DIR --host {peer.group(1)})"
        )
    if "wrong version number" in detail:
        return (
            f"{target} does not speak TLS (its server has no cluster.tls.certificate): connect to "
            f"{addresses.location(host, port, tls=False)}, or give the servers a certificate"
        )
    if not addresses.is_tls(target) and "Socket closed" in detail and _speaks_tls(host, port):
        return (
            f"{target} speaks TLS and this client spoke clear text to it: connect to "
            f"{addresses.location(host, port, tls=True)}, with cluster.tls.ca naming the CA that signed its certificate"
        )
    return None


def _speaks_tls(host: str, port: int) -> bool:
    """Whether the server at ``host:port`` completes a TLS handshake (checking nothing)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), timeout=_PROBE_SECONDS) as raw, context.wrap_socket(raw):
            return True
    except (OSError, ssl.SSLError):
        return False
