"""A self-signed CA and a server certificate for a test or a quick start (``memtier tls-init``).

The CA signs one certificate, which every master and table server serves with (it names
every host they run on and clients reach them by); the CA's private key is not kept, so
nothing else can be signed with it: run it again, with every host, to add one. A real
deployment gets its certificates from its own CA instead.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memtier.errors import InvalidArgumentError, MemtierError

__all__ = ["CertificateFiles", "default_hosts", "make_certificates"]

#: A certificate is valid from this long before it is made (clocks of hosts differ).
_BACKDATE = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class CertificateFiles:
    """What :func:`make_certificates` wrote: the values of the ``cluster.tls.*`` settings."""

    ca: str
    certificate: str
    key: str

    def settings(self) -> dict[str, str]:
        """The ``cluster.tls.*`` settings that use these files."""
        return {"cluster.tls.certificate": self.certificate, "cluster.tls.key": self.key,
                "cluster.tls.ca": self.ca}


def default_hosts() -> list[str]:
    """Names and addresses clients on this machine, or next to it, reach it by: loopback,
    the host name, and the address of the interface on the default route."""
    hosts = ["localhost", "127.0.0.1", "::1", socket.gethostname()]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: picks the outgoing interface, sends nothing
            hosts.append(probe.getsockname()[0])
        except OSError:
            pass
    return list(dict.fromkeys(hosts))


def make_certificates(directory: str, hosts: Iterable[str] = (), *, days: int = 365) -> CertificateFiles:
    """Write ``ca.pem``, ``server.pem`` and ``server.key`` (mode 0600) into ``directory``:
    a new CA and a certificate it signed for ``hosts`` (names or IP addresses) and
    :func:`default_hosts`, valid for ``days``. Existing files are never overwritten."""
    x509, hashes, serialization, ec, oid = _cryptography()
    if days < 1:
        raise InvalidArgumentError(f"days must be at least 1, got {days}")
    names = list(dict.fromkeys([*default_hosts(), *hosts]))
    files = CertificateFiles(*(os.path.join(directory, n) for n in ("ca.pem", "server.pem", "server.key")))
    existing = [path for path in (files.ca, files.certificate, files.key) if os.path.exists(path)]
    if existing:
        raise InvalidArgumentError(f"not overwriting {', '.join(existing)}: choose an empty directory")
    now = datetime.datetime.now(datetime.UTC) - _BACKDATE
    until = now + _BACKDATE + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(oid.NameOID.COMMON_NAME, "memtier test CA")])
    ca = (
        _builder(x509, ca_name, ca_name, ca_key.public_key(), now, until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(x509, sign_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server_name = x509.Name([x509.NameAttribute(oid.NameOID.COMMON_NAME, names[0])])
    certificate = (
        _builder(x509, server_name, ca_name, key.public_key(), now, until)
        .add_extension(x509.SubjectAlternativeName([_general_name(x509, n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(x509, sign_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                              oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    os.makedirs(directory, exist_ok=True)
    _write(files.ca, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(files.certificate, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(files.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()), 0o600)
    return files


def _cryptography() -> tuple[Any, Any, Any, Any, Any]:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509 import oid
    except ImportError as e:  # pragma: no cover - depends on the install
        raise MemtierError("making certificates needs the cryptography package: pip install 'memtier[tls]'") from e
    return x509, hashes, serialization, ec, oid


def _builder(x509: Any, subject: Any, issuer: Any, public_key: Any, start: datetime.datetime,
             end: datetime.datetime) -> Any:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end))


def _key_usage(x509: Any, *, sign_certificates: bool) -> Any:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=sign_certificates, crl_sign=sign_certificates,
        encipher_only=False, decipher_only=False,
    )


def _general_name(x509: Any, host: str) -> Any:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(path: str, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` (never over an existing file) and write ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)

