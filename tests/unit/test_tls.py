"""TLS on memtier.rpc against real Flight servers on loopback ports: every call kind over
TLS; the connections that must fail (a plaintext client, a CA that did not sign the
server's certificate, a host the certificate does not name, TLS against a plaintext
server) fail at once with a TlsError that says what to change; the token never leaves
loopback in clear text; certificate files and settings checked before anything serves."""

from __future__ import annotations

import os
import pickle
import re
import socket
import ssl
import stat
import urllib.request
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from memtier.certificates import CertificateFiles, make_certificates
from memtier.cli import main
from memtier.config import ClusterConfig, load
from memtier.errors import InvalidArgumentError, TlsError
from memtier.metrics import serve_metrics
from memtier.rpc import RpcClient, RpcServer
from memtier.rpc.tls import ServerIdentity, ca_pem

TOKEN = "tls-test-token"
KINDS = ["call", "put", "get", "small get"]


class Recorder:
    """Answers every call; keeps what was put."""

    def __init__(self) -> None:
        self.puts: list[pa.Table] = []

    def handle_action(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        return {"name": name}

    def handle_put(self, request: dict[str, Any], data: pa.Table) -> dict[str, Any]:
        self.puts.append(data)
        return {"rows": data.num_rows}

    def handle_get(self, request: dict[str, Any]) -> pa.Table:
        return pa.table({"x": [1, 2]})


def do(client: RpcClient, kind: str) -> Any:
    if kind == "call":
        return client.call("echo", {})
    if kind == "put":
        return client.put({}, pa.table({"x": [1, 2, 3]}))
    return client.get({}, small=kind == "small get")


def identity(pki: CertificateFiles) -> ServerIdentity:
    return ServerIdentity(pki.certificate, pki.key)


@pytest.fixture
def service() -> Recorder:
    return Recorder()


@pytest.fixture
def tls_server(service: Recorder, pki: CertificateFiles) -> Iterator[RpcServer]:
    with RpcServer(service, token=TOKEN, tls=identity(pki)) as server:
        yield server


@pytest.mark.parametrize("kind", KINDS)
def test_every_call_kind_works_over_tls(tls_server: RpcServer, pki: CertificateFiles, kind: str) -> None:
    assert tls_server.location == f"grpc+tls://127.0.0.1:{tls_server.port}"
    with RpcClient(tls_server.location, token=TOKEN, tls_ca=pki.ca, timeout=10) as client:
        assert do(client, kind)
        assert do(client, kind)  # again, on the connection (or put stream) kept open


@pytest.mark.parametrize("kind", KINDS)
def test_a_plaintext_client_is_refused_by_a_tls_server(
    tls_server: RpcServer, service: Recorder, kind: str
) -> None:
    plain = tls_server.location.replace("grpc+tls://", "grpc://")
    with RpcClient(plain, token=TOKEN, timeout=10) as client, pytest.raises(TlsError) as refused:
        do(client, kind)
    assert f"{plain} speaks TLS and this client spoke clear text" in str(refused.value)
    assert f"connect to {tls_server.location}" in str(refused.value)
    assert service.puts == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_trusting_another_ca_is_refused(
    tls_server: RpcServer, service: Recorder, other_pki: CertificateFiles, kind: str
) -> None:
    with RpcClient(tls_server.location, token=TOKEN, tls_ca=other_pki.ca, timeout=10) as client:
        with pytest.raises(TlsError, match=r"presented a certificate this client does not trust \(unable to "
                                           r"get local issuer certificate\): it checks servers against the "
                                           r"CA in cluster.tls.ca"):
            do(client, kind)
    assert service.puts == []


def test_a_client_with_no_ca_checks_against_the_system_cas(tls_server: RpcServer) -> None:
    with RpcClient(tls_server.location, token=TOKEN, timeout=10) as client:
        with pytest.raises(TlsError, match=r"against the system's CAs \(cluster.tls.ca is not set\)"):
            client.call("echo", {})


def test_a_tls_client_against_a_plaintext_server_is_refused(service: Recorder, pki: CertificateFiles) -> None:
    with RpcServer(service) as plain:
        tls = plain.location.replace("grpc://", "grpc+tls://")
        with RpcClient(tls, tls_ca=pki.ca, timeout=10) as client:
            with pytest.raises(TlsError, match=re.escape(f"{tls} does not speak TLS") + ".*" + plain.location):
                client.call("echo", {})


def test_a_host_the_certificate_does_not_name_is_refused(service: Recorder, pki: CertificateFiles) -> None:
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    with RpcServer(service, host="127.0.0.2", tls=identity(pki)) as server:
        with RpcClient(server.location, tls_ca=pki.ca, timeout=10) as client:
            with pytest.raises(TlsError, match=r"certificate does not name 127.0.0.2: .*--host 127.0.0.2"):
                client.call("echo", {})


def test_the_token_is_sent_in_clear_text_to_loopback_only() -> None:
    with pytest.raises(InvalidArgumentError, match=r"refusing to send the cluster token in clear text to "
                                                   r"grpc://10.1.2.3:9"):
        RpcClient("grpc://10.1.2.3:9", token=TOKEN)
    RpcClient("grpc+tls://10.1.2.3:9", token=TOKEN)  # constructing connects nowhere
    RpcClient("grpc://10.1.2.3:9")  # no token to leak
    RpcClient("grpc://127.0.0.1:9", token=TOKEN)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "tablehost.example.com"])
def test_a_server_off_loopback_needs_tls_and_a_token(service: Recorder, pki: CertificateFiles, host: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"refusing to serve on {host} in clear text.*cluster.tls.certificate"):
        RpcServer(service, host=host, token=TOKEN)
    with pytest.raises(InvalidArgumentError, match=f"refusing to serve on {host} without a shared token"):
        RpcServer(service, host=host, tls=identity(pki))
    RpcServer(service, host=host, token=TOKEN, tls=identity(pki))  # constructing binds nothing


def test_a_client_pickles_with_its_ca(tls_server: RpcServer, pki: CertificateFiles, tmp_path: Any) -> None:
    copy_of_ca = tmp_path / "ca.pem"
    copy_of_ca.write_bytes(open(pki.ca, "rb").read())
    client = RpcClient(tls_server.location, token=TOKEN, tls_ca=str(copy_of_ca), timeout=10)
    copy_of_ca.unlink()  # the copy needs no file: it carries the CA's text
    unpickled = pickle.loads(pickle.dumps(client))
    assert unpickled.call("echo", {}) == {"name": "echo"}
    client.close()
    unpickled.close()


def test_files_that_are_not_a_certificate_and_its_key_are_refused_naming_the_settings(
    service: Recorder, pki: CertificateFiles, other_pki: CertificateFiles
) -> None:
    for certificate, key in ((pki.certificate, other_pki.key), (pki.key, pki.certificate),
                             (pki.certificate, "/no/such/key.pem")):
        with pytest.raises(InvalidArgumentError, match="cluster.tls.certificate .* and cluster.tls.key .* are not "
                                                       "a certificate and its private key"):
            RpcServer(service, tls=ServerIdentity(certificate, key)).start()
    with pytest.raises(InvalidArgumentError, match="cluster.tls.ca '/no/such/ca.pem' cannot be read"):
        ca_pem("/no/such/ca.pem")
    with pytest.raises(InvalidArgumentError, match="holds no usable PEM CA certificate"):
        ca_pem(pki.key)
    assert ca_pem(open(pki.ca).read()) == open(pki.ca).read()  # PEM text as it is


def test_the_settings_are_read_and_checked_at_the_edge(pki: CertificateFiles) -> None:
    config = load(ClusterConfig, {"cluster.tls.certificate": pki.certificate, "cluster.tls.key": pki.key},
                  environ={"MEMTIER_CLUSTER_TLS_CA": pki.ca})
    assert (config.tls_certificate, config.tls_key, config.tls_ca) == (pki.certificate, pki.key, pki.ca)
    with pytest.raises(InvalidArgumentError, match="set both cluster.tls.certificate and cluster.tls.key"):
        load(ClusterConfig, {"cluster.tls.certificate": pki.certificate}, environ={})
    with pytest.raises(InvalidArgumentError, match=r"config cluster.tls.ca \(env MEMTIER_CLUSTER_TLS_CA\) = "
                                                   r"'/no/ca.pem': no such file"):
        load(ClusterConfig, {}, environ={"MEMTIER_CLUSTER_TLS_CA": "/no/ca.pem"})


def test_tls_init_writes_a_ca_and_a_certificate_for_the_hosts(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "tls"
    assert main(["tls-init", str(directory), "--host", "10.29.0.7", "node-b.example"]) == 0
    out = capsys.readouterr().out
    files = CertificateFiles(str(directory / "ca.pem"), str(directory / "server.pem"), str(directory / "server.key"))
    assert f"--config cluster.tls.certificate={files.certificate}" in out
    assert f"export MEMTIER_CLUSTER_TLS_CA={files.ca}" in out
    assert stat.S_IMODE(os.stat(files.key).st_mode) == 0o600
    context = ssl.create_default_context(cafile=files.ca)  # the CA verifies the certificate
    context.load_cert_chain(files.certificate, files.key)
    from cryptography import x509

    names = x509.load_pem_x509_certificate(open(files.certificate, "rb").read()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert {"localhost", "node-b.example"} <= set(names.get_values_for_type(x509.DNSName))
    assert {"127.0.0.1", "10.29.0.7"} <= {str(a) for a in names.get_values_for_type(x509.IPAddress)}
    assert main(["tls-init", str(directory)]) == 2  # nothing overwritten
    assert "not overwriting" in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError, match="not overwriting"):
        make_certificates(str(directory))


def test_metrics_are_served_over_https_with_the_certificate(pki: CertificateFiles) -> None:
    endpoint = serve_metrics(lambda: [], tls=identity(pki))
    try:
        assert endpoint.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=pki.ca)
        with urllib.request.urlopen(endpoint.url, timeout=10, context=context) as response:
            assert response.status == 200
    finally:
        endpoint.close()
