"""memtier.rpc against real Flight servers on loopback ports."""

from __future__ import annotations

import logging
import math
import pickle
import socket
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from memtier.errors import (
    AuthenticationError,
    CorruptFileError,
    InvalidArgumentError,
    InvalidRowError,
    MemtierError,
    NotFoundError,
    RpcError,
    SchemaMismatchError,
    UnknownColumnError,
)
from memtier.rpc import RpcClient, RpcServer, codec

SCHEMA = pa.schema([("key", pa.int64()), ("name", pa.string())])
TOKEN = "s3cret-token"


def rows(n: int, start: int = 0) -> pa.Table:
    keys = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"key": keys, "name": [f"name-{k}" for k in keys]}, schema=SCHEMA)


class Recorder:
    """A test service: echoes calls, keeps what was put, raises what the request names."""

    def __init__(self) -> None:
        self.puts: list[tuple[dict[str, Any], pa.Table]] = []
        self.put_threads: list[int] = []  # the server thread of every put: one per stream
        self.release = threading.Event()
        self._lock = threading.Lock()

    def handle_action(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        self._raise_if_asked(request)
        if name == "block":
            self.release.wait(timeout=30)
        if name == "unsendable":
            return {"value": math.nan}
        return {"name": name, "request": request}

    def handle_put(self, request: dict[str, Any], data: pa.Table) -> dict[str, Any]:
        self.put_threads.append(threading.get_ident())
        self._raise_if_asked(request)
        with self._lock:
            self.puts.append((request, data))
        return {"seq": request.get("seq"), "rows": data.num_rows}

    def handle_get(
        self, request: dict[str, Any]
    ) -> pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch]:
        shape = request["shape"]
        if shape == "fail_midstream":
            return self._fail_after_first(request)
        self._raise_if_asked(request)
        table = rows(request["rows"])
        if shape == "table":
            return table
        if shape == "reader":
            return pa.RecordBatchReader.from_batches(SCHEMA, table.to_batches(max_chunksize=3))
        return iter(table.to_batches(max_chunksize=3))

    def _fail_after_first(self, request: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        yield from rows(2).to_batches()
        self._raise_if_asked(request)

    @staticmethod
    def _raise_if_asked(request: dict[str, Any]) -> None:
        errors: dict[str, BaseException] = {
            "schema": SchemaMismatchError("column 'name': expected string, got int32"),
            "corrupt": CorruptFileError("wal/0001.wal", 4096, "CRC mismatch"),
            "not_found": NotFoundError("memory://t/.hoodie/hoodie.properties does not exist"),
            "unknown_column": UnknownColumnError("no column 'nmae' (did you mean 'name'?)"),
            "value": ValueError("boom in the service"),
        }
        if "raise" in request:
            raise errors[request["raise"]]


@pytest.fixture
def service() -> Recorder:
    return Recorder()


@pytest.fixture
def server(service: Recorder) -> Iterator[RpcServer]:
    server = RpcServer(service).start()
    yield server
    service.release.set()  # stop() waits for calls in flight, a blocked one included
    server.stop()


@pytest.fixture
def client(server: RpcServer) -> Iterator[RpcClient]:
    with RpcClient(server.location, timeout=10) as client:
        yield client


def do(client: RpcClient, kind: str, request: dict[str, Any]) -> Any:
    """One call of ``kind`` (call, put, get) carrying ``request``."""
    if kind == "call":
        return client.call("echo", request)
    if kind == "put":
        return client.put(request, rows(3))
    return client.get({"shape": "table", "rows": 3, **request}, small=kind == "small get")


# --- round trips ------------------------------------------------------------------------


def test_call_round_trips_json_and_bytes(client: RpcClient, server: RpcServer) -> None:
    request = {"table": "t1", "ids": [1, 2, 3], "raw": b"\x00\xff\x01", "nested": {"ü": None}}
    assert client.call("describe", request) == {"name": "describe", "request": request}
    assert server.location == f"grpc://127.0.0.1:{server.port}"


@pytest.mark.parametrize("as_batch", [False, True])
def test_put_delivers_data_and_returns_ack(
    client: RpcClient, service: Recorder, as_batch: bool
) -> None:
    data = rows(10)
    ack = client.put({"seq": 7, "table": "t1"}, data.to_batches()[0] if as_batch else data)
    assert ack == {"seq": 7, "rows": 10}
    [(request, received)] = service.puts
    assert request == {"seq": 7, "table": "t1"}
    assert received.equals(data)


@pytest.mark.parametrize("small", [False, True])
@pytest.mark.parametrize("shape", ["table", "reader", "batches"])
def test_get_returns_every_row(client: RpcClient, shape: str, small: bool) -> None:
    result = client.get({"shape": shape, "rows": 10}, small=small)
    assert result.equals(rows(10)) or result.combine_chunks().equals(rows(10))


@pytest.mark.parametrize("small", [False, True])
@pytest.mark.parametrize("shape", ["table", "reader"])
def test_empty_get_keeps_the_schema(client: RpcClient, shape: str, small: bool) -> None:
    result = client.get({"shape": shape, "rows": 0}, small=small)
    assert result.num_rows == 0
    assert result.schema == SCHEMA


@pytest.mark.parametrize("small", [False, True])
def test_empty_iterable_get_is_refused_with_the_fix(client: RpcClient, small: bool) -> None:
    with pytest.raises(RpcError, match="empty iterable, which has no schema"):
        client.get({"shape": "batches", "rows": 0}, small=small)


def test_small_gets_ride_one_put_stream_shared_with_nothing_else(client: RpcClient, service: Recorder) -> None:
    for n in range(1, 4):
        assert client.get({"shape": "table", "rows": n}, small=True).equals(rows(n))
    with pytest.raises(SchemaMismatchError):
        client.get({"shape": "table", "rows": 1, "raise": "schema"}, small=True)
    assert client.get({"shape": "reader", "rows": 5}, small=True).num_rows == 5  # the stream survived
    assert service.puts == []  # never taken for a write
    client.put({"seq": 1}, rows(1))
    assert len(service.puts) == 1


def test_put_of_a_2mb_batch(client: RpcClient, service: Recorder) -> None:
    data = pa.table({"key": np.arange(1 << 18, dtype=np.int64)})  # 2 MiB of int64
    assert data.nbytes >= 2 << 20
    assert client.put({"seq": 1}, data) == {"seq": 1, "rows": 1 << 18}
    assert service.puts[0][1].equals(data)


@pytest.mark.parametrize("small", [False, True])
def test_get_of_a_2mb_result(client: RpcClient, small: bool) -> None:
    result = client.get({"shape": "table", "rows": 100_000}, small=small)
    assert result.nbytes >= 2 << 20
    assert result.equals(rows(100_000))


def test_concurrent_puts_from_8_threads_are_all_acknowledged(
    client: RpcClient, service: Recorder
) -> None:
    threads, per_thread = 8, 10
    acks: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for i in range(per_thread):
                seq = t * per_thread + i
                acks.append(client.put({"seq": seq}, rows(5, start=seq * 5)))
        except BaseException as e:  # reported below, not lost in the thread
            failures.append(e)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not failures
    expected = set(range(threads * per_thread))
    assert {a["seq"] for a in acks} == expected
    assert {r["seq"] for r, _ in service.puts} == expected
    received = pa.concat_tables([d for _, d in service.puts]).sort_by("key")
    assert received.column("key").to_pylist() == list(range(threads * per_thread * 5))


# --- put streams ------------------------------------------------------------------------


def test_sequential_puts_share_one_stream(client: RpcClient, service: Recorder) -> None:
    for seq in range(5):
        assert client.put({"seq": seq}, rows(2)) == {"seq": seq, "rows": 2}
    assert len(set(service.put_threads)) == 1  # one DoPut handler served them all


def test_a_refused_put_leaves_its_stream_usable(client: RpcClient, service: Recorder) -> None:
    with pytest.raises(SchemaMismatchError, match="column 'name'"):
        client.put({"raise": "schema"}, rows(1))
    assert client.put({"seq": 2}, rows(1)) == {"seq": 2, "rows": 1}
    assert len(set(service.put_threads)) == 1


def test_another_schema_gets_its_own_stream(client: RpcClient, service: Recorder) -> None:
    client.put({"seq": 1}, rows(1))
    client.put({"seq": 2}, pa.table({"other": [1.5]}))
    client.put({"seq": 3}, rows(1))
    first, other, again = service.put_threads
    assert first == again != other


def test_idle_streams_do_not_keep_a_server_from_stopping(service: Recorder) -> None:
    server = RpcServer(service).start()
    with RpcClient(server.location, timeout=10) as client:
        client.put({"seq": 1}, rows(1))  # its stream stays open, idle
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        stopping.join(timeout=5)
        assert not stopping.is_alive()


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["call", "put", "get", "small get"])
def test_memtier_errors_cross_as_the_same_class(client: RpcClient, kind: str) -> None:
    with pytest.raises(SchemaMismatchError) as caught:
        do(client, kind, {"raise": "schema"})
    assert type(caught.value) is SchemaMismatchError
    assert str(caught.value) == "column 'name': expected string, got int32"


def test_error_attributes_and_special_str_survive(client: RpcClient) -> None:
    with pytest.raises(CorruptFileError) as corrupt:
        client.call("echo", {"raise": "corrupt"})
    assert (corrupt.value.path, corrupt.value.offset, corrupt.value.reason) == (
        "wal/0001.wal", 4096, "CRC mismatch",
    )
    assert str(corrupt.value) == "wal/0001.wal: corrupt at byte 4096: CRC mismatch"
    with pytest.raises(NotFoundError, match=r"^memory://t/\.hoodie/hoodie\.properties does not"):
        client.call("echo", {"raise": "not_found"})
    with pytest.raises(UnknownColumnError) as unknown:
        client.call("echo", {"raise": "unknown_column"})
    assert str(unknown.value) == "no column 'nmae' (did you mean 'name'?)"


@pytest.mark.parametrize("small", [False, True])
def test_error_raised_midstream_of_a_get(client: RpcClient, small: bool) -> None:
    with pytest.raises(SchemaMismatchError, match="column 'name'"):
        client.get({"shape": "fail_midstream", "raise": "schema"}, small=small)


@pytest.mark.parametrize("kind", ["call", "put", "get", "small get"])
def test_other_exceptions_become_rpc_error_and_are_logged(
    client: RpcClient, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="memtier.rpc.server"):
        with pytest.raises(RpcError, match="failed on the server: ValueError: boom in the service"):
            do(client, kind, {"raise": "value"})
    assert any(r.exc_info and r.exc_info[0] is ValueError for r in caplog.records)


def test_unsendable_response_is_an_rpc_error(client: RpcClient) -> None:
    with pytest.raises(RpcError, match="handle_action\\('unsendable'\\) returned a response"):
        client.call("unsendable", {})


def test_malformed_request_on_the_wire_is_named(server: RpcServer) -> None:
    raw = fl.FlightClient(server.location)
    with pytest.raises(fl.FlightServerError) as caught:
        list(raw.do_action(fl.Action("echo", b"not json")))
    error = codec.error_from_wire(caught.value.extra_info)
    assert isinstance(error, InvalidArgumentError)
    assert "malformed RPC message (8 bytes)" in str(error)
    raw.close()


def test_unreachable_location_is_an_rpc_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    location = f"grpc://127.0.0.1:{port}"
    with RpcClient(location, timeout=2) as client, pytest.raises(RpcError, match=location):
        client.call("echo", {})


def test_deadline_is_an_rpc_error(server: RpcServer) -> None:
    with RpcClient(server.location, timeout=0.2) as client:
        with pytest.raises(RpcError, match="timed out after 0.2 s"):
            client.call("block", {})


# --- token ------------------------------------------------------------------------------


@pytest.fixture
def guarded(service: Recorder) -> Iterator[RpcServer]:
    with RpcServer(service, token=TOKEN) as server:
        yield server


@pytest.mark.parametrize("kind", ["call", "put", "get", "small get"])
@pytest.mark.parametrize(
    ("token", "reason"),
    [(None, "no 'authorization' header"), ("wrong-token", "token does not match")],
)
def test_token_is_enforced(
    guarded: RpcServer, service: Recorder, kind: str, token: str | None, reason: str
) -> None:
    with RpcClient(guarded.location, token=token) as client:
        with pytest.raises(AuthenticationError, match=reason):
            do(client, kind, {"seq": 1})
    assert service.puts == []


@pytest.mark.parametrize("kind", ["call", "put", "get", "small get"])
def test_right_token_works(guarded: RpcServer, kind: str) -> None:
    with RpcClient(guarded.location, token=TOKEN) as client:
        assert do(client, kind, {"seq": 1})


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "tablehost.example.com"])
def test_exposed_bind_needs_a_token(service: Recorder, host: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"refusing to serve on {host} without"):
        RpcServer(service, host=host)  # (and TLS: tests/unit/test_tls.py)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_bind_needs_no_token(service: Recorder, host: str) -> None:
    RpcServer(service, host=host)


def test_server_lifecycle_errors(service: Recorder) -> None:
    server = RpcServer(service)
    with pytest.raises(RpcError, match="not started"):
        _ = server.port
    with server, pytest.raises(InvalidArgumentError, match="already started"):
        server.start()
    server.stop()  # idempotent


def test_port_in_use_is_an_rpc_error(server: RpcServer, service: Recorder) -> None:
    with pytest.raises(RpcError, match=f"cannot serve on {server.location}"):
        RpcServer(service, port=server.port).start()


@pytest.mark.parametrize("token", ["", "two words", "naïve", "tab\t"])
def test_tokens_must_be_header_safe(service: Recorder, token: str) -> None:
    with pytest.raises(InvalidArgumentError, match="printable ASCII without spaces"):
        RpcServer(service, token=token)
    with pytest.raises(InvalidArgumentError, match="printable ASCII without spaces"):
        RpcClient("grpc://127.0.0.1:1", token=token)


# --- pickling ---------------------------------------------------------------------------


def test_client_pickles_and_works_after_unpickling(guarded: RpcServer) -> None:
    client = RpcClient(guarded.location, token=TOKEN, timeout=5)
    assert client.call("echo", {"n": 1})["request"] == {"n": 1}  # a live connection
    copy = pickle.loads(pickle.dumps(client))
    assert copy.location == guarded.location
    assert copy.call("echo", {"n": 2})["request"] == {"n": 2}
    assert copy.put({"seq": 3}, rows(2)) == {"seq": 3, "rows": 2}
    assert b"Flight" not in pickle.dumps(client)  # only the address, token and timeout
    client.close()
    copy.close()


def test_closed_client_reconnects_on_next_call(client: RpcClient) -> None:
    assert client.call("echo", {"n": 1})["request"] == {"n": 1}
    client.close()
    assert client.put({"seq": 2}, rows(1)) == {"seq": 2, "rows": 1}


def test_client_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="not a Flight location"):
        RpcClient("not a uri")
    with pytest.raises(InvalidArgumentError, match="timeout must be positive"):
        RpcClient("grpc://127.0.0.1:1", timeout=0)
    with pytest.raises(InvalidArgumentError, match="connections must be at least 1, got 0"):
        RpcClient("grpc://127.0.0.1:1", connections=0)
    with pytest.raises(InvalidArgumentError, match="pa.Table or pa.RecordBatch, got list"):
        RpcClient("grpc://127.0.0.1:1").put({}, [1, 2])  # type: ignore[arg-type]


# --- codec ------------------------------------------------------------------------------


def test_codec_round_trip() -> None:
    message = {"b": b"\x00" * 3, "list": [b"x", 1, 2.5, None, True], "s": "ünï"}
    assert codec.loads(codec.dumps(message)) == message


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ([1, 2], "must be a dict, got list"),
        ({"s": {1, 2}}, "set is not JSON-serializable"),
        ({"x": math.inf}, "JSON"),
    ],
)
def test_codec_refuses_what_json_cannot_hold(message: Any, reason: str) -> None:
    with pytest.raises(InvalidArgumentError, match=reason):
        codec.dumps(message)


@pytest.mark.parametrize("data", [b"[1]", b"\xff\xfe", b'{"b": {"__bytes__": "!!"}}'])
def test_codec_refuses_malformed_messages(data: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        codec.loads(data)


@pytest.mark.parametrize("name", ["NoSuchError", "Exception", "SystemExit", "annotations"])
def test_only_memtier_errors_are_recreated(name: str) -> None:
    error = codec.error_from_wire(codec.dumps({"error": name, "message": "m"}))
    assert type(error) is RpcError
    assert str(error) == f"the server raised {name}: m"


@pytest.mark.parametrize(
    "payload", [b"oops", b'{"message": "m"}', b'{"error": "RpcError", "message": "m", "attrs": 1}']
)
def test_malformed_error_payloads_become_rpc_error(payload: bytes) -> None:
    error = codec.error_from_wire(payload)
    assert type(error) is RpcError
    assert "the server sent a malformed error" in str(error)


def test_error_wire_round_trip_keeps_class_message_and_attributes() -> None:
    original = InvalidRowError("row 3: null ordering value in 'ts'")
    original.row = 3  # type: ignore[attr-defined]
    decoded = codec.error_from_wire(codec.error_to_wire(original))
    assert type(decoded) is InvalidRowError
    assert str(decoded) == str(original)
    assert decoded.row == 3  # type: ignore[attr-defined]
    assert isinstance(decoded, MemtierError)


# --- addresses --------------------------------------------------------------------------


def test_a_server_on_every_interface_names_the_address_it_is_reached_by(service: Recorder, pki: Any) -> None:
    from memtier.rpc.tls import ServerIdentity

    identity = ServerIdentity(pki.certificate, pki.key)
    with RpcServer(service, host="0.0.0.0", token=TOKEN, tls=identity, advertise="127.0.0.1") as server:
        assert server.location == f"grpc+tls://127.0.0.1:{server.port}"
        with RpcClient(server.location, token=TOKEN, tls_ca=pki.ca, timeout=10) as client:
            assert client.call("echo", {})["name"] == "echo"


@pytest.mark.parametrize(("location", "host", "port"), [
    ("grpc://127.0.0.1:9", "127.0.0.1", 9), ("grpc+tls://[::1]:80", "::1", 80), ("grpc+tls://node-a:1", "node-a", 1),
])
def test_locations_parse_into_host_and_port(location: str, host: str, port: int) -> None:
    from memtier.rpc import addresses

    assert addresses.host_port(location) == (host, port)
    assert addresses.location(host, port, tls=location.startswith("grpc+tls")) == location


@pytest.mark.parametrize("location", ["http://127.0.0.1:9", "grpc://127.0.0.1", "grpc+tls://:9"])
def test_a_location_that_is_not_a_memtier_address_is_refused(location: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not a memtier address"):
        RpcClient(location)
