"""A table as the client routes it: its schema and roles, and which table server owns
each bucket (from the master's description)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from memtier.errors import NotOwnerError
from memtier.hudi.evolution import Roles


@dataclass(frozen=True)
class Routing:
    """A table as the client routes it (from the master's description)."""

    name: str
    schema: pa.Schema
    record_key: tuple[str, ...]
    ordering_field: str | None
    partition_fields: tuple[str, ...]
    buckets: int
    routing: Mapping[int, str]  # bucket -> server id
    servers: Mapping[str, str]  # server id -> location
    max_batch_rows: int | None
    conversion: Mapping[str, Any] | None = None  # the clustering converting it into buckets
    schema_version: int = 0

    @classmethod
    def of(cls, description: Mapping[str, Any]) -> Routing:
        return cls(
            description["name"],
            schema_of(description["schema"]),
            tuple(description["record_key"]),
            description.get("ordering_field"),
            tuple(description.get("partition_fields") or ()),
            int(description["buckets"] or 0),
            {int(b): s for b, s in description["routing"].items()},
            dict(description["servers"]),
            description.get("max_batch_rows"),
            description.get("conversion"),
            int(description.get("schema_version", 0)),
        )

    @property
    def roles(self) -> Roles:
        return Roles(self.record_key, self.partition_fields, self.ordering_field)

    def location(self, server_id: str) -> str:
        location = self.servers.get(server_id)
        if location is None:  # e.g. a restarted master the server has not re-registered with
            raise NotOwnerError(f"table server {server_id} of {self.name!r} is not registered (yet)")
        return location

    def server_buckets(self) -> dict[str, list[int]]:
        owned: dict[str, list[int]] = {}
        for bucket, server in sorted(self.routing.items()):
            owned.setdefault(server, []).append(bucket)
        return owned


@functools.lru_cache(maxsize=64)
def schema_of(serialized: bytes) -> pa.Schema:
    """A table's schema from its description (parsed once: every read plan carries it)."""
    return pa.ipc.read_schema(pa.py_buffer(serialized))
