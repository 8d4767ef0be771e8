"""Small persisted JSON files that name their format and version (the master's state, WAL
fences): decoded here, refused with the file's path when they are not what they say."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from memtier.errors import CorruptFileError, UnknownFormatVersionError

__all__ = ["decode"]


def decode(data: bytes, path: str, fmt: str, versions: Collection[int], what: str) -> dict[str, Any]:
    """The JSON object in ``data`` (read from ``path``), which must say it is ``fmt`` in one
    of ``versions``; :class:`CorruptFileError` or :class:`UnknownFormatVersionError` (naming
    ``what`` it is) otherwise."""
    try:
        body = json.loads(data)
    except ValueError as e:
        raise CorruptFileError(path, 0, f"not JSON: {e}") from e
    if not isinstance(body, dict) or body.get("format") != fmt:
        raise CorruptFileError(path, 0, f"not a {fmt} file")
    if body.get("version") not in versions:
        known = [str(v) for v in sorted(versions)]
        readable = known[0] if len(known) == 1 else f"{', '.join(known[:-1])} and {known[-1]}"
        raise UnknownFormatVersionError(f"{path}: {what} version {body.get('version')!r}; this build reads {readable}")
    return body
