"""The client side of :mod:`memtier.rpc`: control calls, puts and gets over Arrow Flight."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from memtier.errors import AuthenticationError, InvalidArgumentError, MemtierError, RpcError
from memtier.rpc import codec

__all__ = ["RpcClient"]

_FLIGHT_SUFFIX = re.compile(r"\. (?:Detail: |gRPC client debug context)")


class RpcClient:
    """Calls one :class:`~memtier.rpc.RpcServer` at ``location`` (``grpc://host:port``).

    Thread-safe: each call runs on the least busy of ``connections`` Flight connections,
    each opened on first use (one HTTP/2 connection caps concurrent puts well below what
    the server takes; a lone caller stays on one warm connection).
    Picklable: the pickle holds the arguments, and the copy opens its own connections.
    ``timeout`` bounds every call, in seconds (None: no deadline). Errors the server's
    service raised arrive as the same :class:`~memtier.errors.MemtierError` class; transport
    failures as :class:`~memtier.errors.RpcError`; a refused token as
    :class:`~memtier.errors.AuthenticationError`.
    """

    def __init__(
        self, location: str, *, token: str | None = None, timeout: float | None = 30.0,
        connections: int = 4,
    ) -> None:
        try:
            fl.Location(location)
        except (pa.ArrowException, TypeError) as e:
            raise InvalidArgumentError(f"not a Flight location: {location!r}: {e}") from e
        if timeout is not None and timeout <= 0:
            raise InvalidArgumentError(f"timeout must be positive seconds or None, got {timeout}")
        if connections < 1:
            raise InvalidArgumentError(f"connections must be at least 1, got {connections}")
        self._location = location
        self._token = token
        self._timeout = timeout
        headers = [] if token is None else [(b"authorization", codec.bearer(token))]
        self._options = fl.FlightCallOptions(timeout=timeout, headers=headers)
        self._lock = threading.Lock()
        self._flights: list[fl.FlightClient | None] = [None] * connections
        self._busy = [0] * connections  # calls in flight per connection

    @property
    def location(self) -> str:
        return self._location

    def call(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        """Run the control call ``name`` on the server; returns its response."""
        action = fl.Action(name, codec.dumps(request))
        try:
            with self._connection() as flight:
                results = list(flight.do_action(action, self._options))
        except pa.ArrowException as e:
            raise self._error(f"call {name!r}", e) from e
        if len(results) != 1:
            raise RpcError(
                f"call {name!r} to {self._location} returned {len(results)} results, expected 1"
            )
        return self._response(f"call {name!r}", results[0].body.to_pybytes())

    def put(self, request: dict[str, Any], data: pa.Table | pa.RecordBatch) -> dict[str, Any]:
        """Send ``data`` with ``request``; returns the server's acknowledgement."""
        if not isinstance(data, pa.Table | pa.RecordBatch):
            raise InvalidArgumentError(
                f"put sends a pa.Table or pa.RecordBatch, got {type(data).__name__}"
            )
        descriptor = fl.FlightDescriptor.for_command(codec.dumps(request))
        try:
            with self._connection() as flight:
                writer, acks = flight.do_put(descriptor, data.schema, self._options)
                try:
                    writer.write(data)
                    writer.done_writing()
                    ack = acks.read()
                finally:
                    writer.close()  # raises the server's error, if it failed
        except pa.ArrowException as e:
            raise self._error("put", e) from e
        if ack is None:
            raise RpcError(f"put to {self._location} ended without an acknowledgement")
        return self._response("put", ack.to_pybytes())

    def get(self, request: dict[str, Any]) -> pa.Table:
        """Read the result of ``request`` from the server."""
        ticket = fl.Ticket(codec.dumps(request))
        try:
            with self._connection() as flight:
                return flight.do_get(ticket, self._options).read_all()
        except pa.ArrowException as e:
            raise self._error("get", e) from e

    def close(self) -> None:
        """Close the connections; a later call opens new ones. Do not race calls in flight."""
        with self._lock:
            flights, self._flights = self._flights, [None] * len(self._flights)
        for flight in flights:
            if flight is not None:
                flight.close()

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (self._location, self._token, self._timeout, len(self._flights)))

    def __repr__(self) -> str:
        return f"RpcClient({self._location!r})"

    @contextmanager
    def _connection(self) -> Iterator[fl.FlightClient]:
        """The least busy connection (the first of equals), opened if it is not yet."""
        with self._lock:
            slot = min(range(len(self._busy)), key=self._busy.__getitem__)
            flight = self._flights[slot]
            if flight is None:
                flight = self._flights[slot] = fl.FlightClient(self._location)
            self._busy[slot] += 1
        try:
            yield flight
        finally:
            with self._lock:
                self._busy[slot] -= 1

    def _response(self, what: str, body: bytes) -> dict[str, Any]:
        try:
            return codec.loads(body)
        except InvalidArgumentError as e:
            raise RpcError(f"{what} to {self._location}: unreadable response: {e}") from e

    def _error(self, what: str, error: pa.ArrowException) -> MemtierError:
        """The memtier error for a failed Flight call, naming the server."""
        if isinstance(error, fl.FlightUnauthenticatedError):
            return AuthenticationError(f"{self._location} refused {what}: {_detail(error)}")
        if isinstance(error, fl.FlightServerError) and error.extra_info:
            return codec.error_from_wire(error.extra_info)
        if isinstance(error, fl.FlightTimedOutError):
            return RpcError(f"{what} to {self._location} timed out after {self._timeout} s")
        if isinstance(error, fl.FlightUnavailableError):
            return RpcError(f"{self._location} is unreachable ({what}): {_detail(error)}")
        return RpcError(f"{what} to {self._location} failed: {error}")


def _detail(error: fl.FlightError) -> str:
    """Flight's message without the status detail and gRPC debug context it appends."""
    return _FLIGHT_SUFFIX.split(str(error), maxsplit=1)[0]


def _reopen(
    location: str, token: str | None, timeout: float | None, connections: int
) -> RpcClient:
    return RpcClient(location, token=token, timeout=timeout, connections=connections)
