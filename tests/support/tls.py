"""Certificates for TLS tests: a CA and a server certificate from ``memtier tls-init``'s
code, and a second CA that signed nothing the servers serve."""

from __future__ import annotations

import pytest

from memtier.certificates import CertificateFiles, make_certificates


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    """A CA and a certificate it signed for this machine's names and addresses."""
    return make_certificates(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="session")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    """Another CA (and certificate): not the one the servers' certificates come from."""
    return make_certificates(str(tmp_path_factory.mktemp("other-pki")))
