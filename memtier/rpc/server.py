"""Serve a plain-Python :class:`Service` over Arrow Flight.

Three call kinds map onto Flight RPCs:

* ``call``: DoAction; action type = name, body = JSON request, one JSON result body;
* ``put``: DoPut streams kept open between puts (:mod:`~memtier.rpc.streams`); each put
  is one message, a record batch with the JSON request as its app metadata, answered by one
  JSON app-metadata message: ``{"ack": ...}``, or the error the service raised (the stream
  stays open);
* ``get``: DoGet; the ticket holds the JSON request, the stream is the result. A small
  get rides a put stream instead: its message holds an empty batch and ``{"__get__":
  request}``, answered by the result as one Arrow IPC stream (or the JSON error).

A :class:`~memtier.errors.MemtierError` raised by the service reaches the client as the
same class with the same message; any other exception is logged here with its traceback
and reaches the client as :class:`~memtier.errors.RpcError`.

The gRPC server serves on its own thread pool from :meth:`RpcServer.start` until
:meth:`RpcServer.stop`, so the service is called from many threads at once and must be
thread-safe.
"""

from __future__ import annotations

import hmac
import itertools
import logging
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.flight as fl

from memtier.errors import InvalidArgumentError, MemtierError, RpcError
from memtier.rpc import addresses, codec
from memtier.rpc.streams import STREAMED_GET
from memtier.rpc.tls import ServerIdentity

__all__ = ["RpcServer", "Service"]

_log = logging.getLogger(__name__)


class Service(Protocol):
    """What an :class:`RpcServer` dispatches to. Must be thread-safe."""

    def handle_action(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        """A control call: JSON-able dicts in and out."""
        ...

    def handle_put(self, request: dict[str, Any], data: pa.Table) -> dict[str, Any]:
        """A write of ``data``; returns the acknowledgement."""
        ...

    def handle_get(
        self, request: dict[str, Any]
    ) -> pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch]:
        """A read. A bare iterable must yield at least one batch (its schema is the first
        batch's); return an empty Table or a RecordBatchReader to answer with no rows."""
        ...


class RpcServer:
    """A Flight server for one :class:`Service`; a context manager that starts and stops it.

    Given ``tls``, it serves TLS only (``grpc+tls://``). Binding to anything but a loopback
    address requires ``token`` and ``tls``; given a token, every call must carry
    ``authorization: Bearer <token>``. Its :attr:`location` names ``advertise`` (the
    address clients reach it by, when ``host`` is a wildcard such as ``0.0.0.0``), else ``host``.
    """

    def __init__(
        self, service: Service, *, host: str = "127.0.0.1", port: int = 0,
        token: str | None = None, tls: ServerIdentity | None = None, advertise: str | None = None,
    ) -> None:
        if token is None and not addresses.is_loopback(host):
            raise InvalidArgumentError(
                f"refusing to serve on {host} without a shared token: anyone who can reach "
                f"{host}:{port} could read and write tables; pass token=... or bind 127.0.0.1"
            )
        if tls is None and not addresses.is_loopback(host):
            raise InvalidArgumentError(
                f"refusing to serve on {host} in clear text: rows and the token would cross the "
                "network readable to anyone on the path; set cluster.tls.certificate and "
                "cluster.tls.key (memtier tls-init DIR makes a CA and a certificate) or bind 127.0.0.1"
            )
        self._service = service
        self._host = host
        self._advertise = advertise or host
        self._requested_port = port
        self._expected = None if token is None else codec.bearer(token)
        self._tls = tls
        self._flight: _FlightService | None = None

    def start(self) -> RpcServer:
        """Bind and start serving; returns ``self``."""
        if self._flight is not None:
            raise InvalidArgumentError(f"RpcServer at {self.location} is already started")
        middleware = {} if self._expected is None else {"auth": _BearerAuth(self._expected)}
        served = addresses.location(self._host, self._requested_port, tls=self._tls is not None)
        certificates = [] if self._tls is None else [self._tls.pair()]
        try:
            self._flight = _FlightService(self._service, served, middleware, certificates)
        except pa.ArrowException as e:  # gRPC logs the reason (e.g. address in use) to stderr
            raise RpcError(f"cannot serve on {served}: {e}") from e
        return self

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with ``port=0``)."""
        if self._flight is None:
            raise RpcError(f"RpcServer for {self._host} is not started: call start() first")
        return int(self._flight.port)

    @property
    def location(self) -> str:
        """``grpc://host:port`` (``grpc+tls://`` with TLS) with the bound port: what an
        :class:`RpcClient` connects to."""
        return addresses.location(self._advertise, self.port, tls=self._tls is not None)

    def stop(self) -> None:
        """Stop serving, after the calls in progress finish. Idempotent."""
        flight, self._flight = self._flight, None
        if flight is not None:
            flight.shutdown()
            flight.wait()

    def __enter__(self) -> RpcServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _FlightService(fl.FlightServerBase):
    """The Flight side: decodes requests, dispatches to the service, encodes results."""

    def __init__(
        self, service: Service, served: str, middleware: dict[str, fl.ServerMiddlewareFactory],
        certificates: list[fl.CertKeyPair],
    ) -> None:
        super().__init__(served, middleware=middleware, tls_certificates=certificates)  # binds and serves
        self._service = service

    def do_action(self, context: fl.ServerCallContext, action: fl.Action) -> list[bytes]:
        call = f"handle_action({action.type!r})"
        try:
            request = codec.loads(action.body.to_pybytes())
            return [_encode_response(call, self._service.handle_action(action.type, request))]
        except Exception as e:
            raise _flight_error(call, e) from e

    def do_put(
        self, context: fl.ServerCallContext, descriptor: fl.FlightDescriptor,
        reader: fl.MetadataRecordBatchReader, writer: fl.FlightMetadataWriter,
    ) -> None:
        try:
            _command(descriptor)
            for chunk in reader:
                writer.write(pa.py_buffer(self._put(chunk)))
        except Exception as e:
            raise _flight_error("handle_put", e) from e

    def _put(self, chunk: fl.FlightStreamChunk) -> bytes:
        """One put of a put stream: its acknowledgement, or the error the service raised."""
        if chunk.data is None or chunk.app_metadata is None:
            raise InvalidArgumentError("a put stream message must hold a batch and its request")
        request = codec.loads(chunk.app_metadata.to_pybytes())
        if set(request) == {STREAMED_GET}:
            try:
                return _ipc(self._service.handle_get(request[STREAMED_GET]))
            except Exception as e:
                return codec.error_to_wire(_memtier_error("handle_get", e))
        try:
            ack = self._service.handle_put(request, pa.Table.from_batches([chunk.data]))
            return _encode_response("handle_put", {"ack": ack})
        except Exception as e:
            return codec.error_to_wire(_memtier_error("handle_put", e))

    def do_get(self, context: fl.ServerCallContext, ticket: fl.Ticket) -> fl.FlightDataStream:
        try:
            return _stream(self._service.handle_get(codec.loads(ticket.ticket)))
        except Exception as e:
            raise _flight_error("handle_get", e) from e


class _BearerAuth(fl.ServerMiddlewareFactory):
    """Refuses every call that does not carry ``authorization: Bearer <token>``."""

    def __init__(self, expected: bytes) -> None:
        self._expected = expected

    def start_call(
        self, info: fl.CallInfo, headers: dict[str, list[str | bytes]]
    ) -> fl.ServerMiddleware | None:
        values = headers.get("authorization", [])
        if not values:
            raise fl.FlightUnauthenticatedError(
                "this memtier server requires a token: the call has no 'authorization' header"
            )
        given = values[0].encode() if isinstance(values[0], str) else values[0]
        if not hmac.compare_digest(given, self._expected):
            raise fl.FlightUnauthenticatedError(
                "the call's bearer token does not match this memtier server's token"
            )
        return None


def _memtier_error(call: str, exc: Exception) -> MemtierError:
    """``exc`` as the client will see it; logged here unless a MemtierError."""
    if isinstance(exc, MemtierError):
        return exc
    _log.error("%s failed", call, exc_info=exc)
    return RpcError(f"{call} failed on the server: {type(exc).__name__}: {exc}")


def _flight_error(call: str, exc: Exception) -> fl.FlightServerError:
    """The Flight error that carries ``exc`` to the client."""
    error = _memtier_error(call, exc)
    return fl.FlightServerError(str(error), extra_info=codec.error_to_wire(error))


def _stream(
    result: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch],
) -> fl.FlightDataStream:
    if isinstance(result, pa.Table):
        return fl.RecordBatchStream(result)
    if isinstance(result, pa.RecordBatchReader):
        return fl.GeneratorStream(result.schema, _reported(result))
    first, batches = _first_batch(result)
    return fl.GeneratorStream(first.schema, _reported(itertools.chain([first], batches)))


def _ipc(result: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch]) -> bytes:
    """A read's result as one Arrow IPC stream (a streamed get's answer)."""
    if isinstance(result, pa.RecordBatchReader):
        result = result.read_all()
    elif not isinstance(result, pa.Table):
        first, batches = _first_batch(result)
        result = pa.Table.from_batches([first, *batches])
    return codec.table_to_ipc(result).to_pybytes()


def _first_batch(result: Iterable[pa.RecordBatch]) -> tuple[pa.RecordBatch, Iterator[pa.RecordBatch]]:
    """The first batch of a bare iterable (its schema is the result's) and the rest."""
    batches = iter(result)
    first = next(batches, None)
    if first is None:
        raise RpcError(
            "handle_get returned an empty iterable, which has no schema: return an "
            "empty pa.Table or a pa.RecordBatchReader to answer with no rows"
        )
    return first, batches


def _reported(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, with an error raised while producing them carried to the client."""
    try:
        yield from batches
    except Exception as e:
        raise _flight_error("handle_get", e) from e


def _encode_response(call: str, response: dict[str, Any]) -> bytes:
    try:
        return codec.dumps(response)
    except InvalidArgumentError as e:
        raise RpcError(f"{call} returned a response that cannot be sent: {e}") from e


def _command(descriptor: fl.FlightDescriptor) -> bytes:
    if descriptor.descriptor_type != fl.DescriptorType.CMD:
        raise InvalidArgumentError(
            f"a put's descriptor must be a command holding the JSON request, got {descriptor}"
        )
    return descriptor.command
