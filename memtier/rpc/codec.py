"""The RPC wire format of requests, responses, errors and the token: JSON, never pickle.

A message is a JSON object. ``bytes`` values travel as ``{"__bytes__": "<base64>"}``, so a
dict whose only key is ``__bytes__`` is reserved. JSON's own rules apply to everything else:
tuples come back as lists, dict keys must be strings, NaN and infinities are refused.

An error is ``{"error": <class name>, "message": str(exc), "attrs": {...}}``; ``attrs`` holds
the exception's scalar attributes (e.g. :class:`~memtier.errors.CorruptFileError`'s path and
offset). Decoding recreates only :class:`~memtier.errors.MemtierError` subclasses defined in
:mod:`memtier.errors`; any other name becomes :class:`~memtier.errors.RpcError`.

A table sent in one message (a small get's answer, a flush worker's rows) is one Arrow IPC
stream (:func:`table_to_ipc`).

A shared token travels in every call's ``authorization: Bearer <token>`` header.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from memtier import errors
from memtier.errors import InvalidArgumentError, MemtierError, RpcError

__all__ = ["bearer", "dumps", "error_from_wire", "error_to_wire", "loads", "table_from_ipc", "table_to_ipc"]

_BYTES_TAG = "__bytes__"
_SCALARS = (str, int, float, bool, type(None))


def _encode_extra(value: object) -> dict[str, str]:
    if isinstance(value, bytes | bytearray | memoryview):
        return {_BYTES_TAG: base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} is not JSON-serializable: {value!r:.80}")


def _decode_tagged(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and _BYTES_TAG in obj:
        return base64.b64decode(obj[_BYTES_TAG], validate=True)
    return obj


_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_encode_extra
)
_PLAIN_DECODER = json.JSONDecoder()
_TAGGED_DECODER = json.JSONDecoder(object_hook=_decode_tagged)
_BYTES_MARK = f'"{_BYTES_TAG}"'.encode()  # messages without it skip the per-object hook


def dumps(message: Mapping[str, Any]) -> bytes:
    """``message`` as UTF-8 JSON; raises InvalidArgumentError naming a value JSON cannot hold."""
    if not isinstance(message, Mapping):
        raise InvalidArgumentError(f"an RPC message must be a dict, got {type(message).__name__}")
    try:
        return _ENCODER.encode(message).encode()
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"an RPC message must be JSON: {e}") from e


def loads(data: bytes) -> dict[str, Any]:
    """The dict :func:`dumps` encoded; raises InvalidArgumentError if ``data`` is not one."""
    decoder = _TAGGED_DECODER if _BYTES_MARK in data else _PLAIN_DECODER
    try:
        message = decoder.decode(data.decode())
    except (ValueError, binascii.Error) as e:  # JSONDecodeError and UnicodeDecodeError too
        raise InvalidArgumentError(f"malformed RPC message ({len(data)} bytes): {e}") from e
    if not isinstance(message, dict):
        raise InvalidArgumentError(
            f"an RPC message must be a JSON object, got {type(message).__name__}"
        )
    return message


def error_to_wire(exc: MemtierError) -> bytes:
    """The wire form of ``exc``: class name, message and scalar attributes."""
    attrs = {
        name: value
        for name, value in vars(exc).items()
        if _settable(name) and isinstance(value, _SCALARS)
    }
    return dumps({"error": type(exc).__name__, "message": str(exc), "attrs": attrs})


def error_from_wire(payload: bytes) -> MemtierError:
    """The error :func:`error_to_wire` encoded: the same class, message and attributes."""
    try:
        wire = loads(payload)
        name, message, attrs = wire["error"], wire["message"], dict(wire.get("attrs", {}))
    except (InvalidArgumentError, KeyError, TypeError, ValueError) as e:
        return RpcError(f"the server sent a malformed error ({len(payload)} bytes): {e!r}")
    cls = getattr(errors, str(name), None)
    if not (isinstance(cls, type) and issubclass(cls, MemtierError)):
        return RpcError(f"the server raised {name}: {message}")
    exc = cls.__new__(cls)  # not cls(message): some errors take other constructor arguments
    exc.args = (str(message),)
    for attr, value in attrs.items():
        if _settable(attr):
            setattr(exc, attr, value)
    return exc


def table_to_ipc(table: pa.Table) -> pa.Buffer:
    """``table`` as one Arrow IPC stream: how a table crosses in one message."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def table_from_ipc(data: bytes | pa.Buffer) -> pa.Table:
    """The table :func:`table_to_ipc` encoded."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def bearer(token: str) -> bytes:
    """The ``authorization`` header value for ``token``: printable ASCII, no spaces."""
    if not (isinstance(token, str) and token and token.isascii() and token.isprintable()
            and " " not in token):
        raise InvalidArgumentError(
            "a token must be a non-empty string of printable ASCII without spaces"
        )
    return f"Bearer {token}".encode()


def _settable(attr: str) -> bool:
    return not attr.startswith("_") and attr != "args"

