"""Random histories of a table whose schema changes while it is written: upserts (some by
producers that have not heard of the last change), deletes, flushes, compactions, table
server restarts and evictions, and the schema changes themselves (by ``alter_table`` or by
a batch evolving the table), with a model of what every reader must return.

Ordering values only grow, except late rows of keys never deleted (which lose), and a
deleted key is never written again: so the model is one row per key, and flush and
compaction boundaries change nothing a reader sees.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from memtier.client import Client

BASE = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("part", pa.string()), ("n", pa.int32()),
                  ("f", pa.float32()), ("st", pa.struct([("x", pa.int32())]))])


def _with(schema: pa.Schema, name: str, field: pa.Field) -> pa.Schema:
    return schema.set(schema.get_field_index(name), field)


#: The schema changes, in order: (what it does, how it is made: "alter" or "write", the
#: schema after it).
def _steps() -> list[tuple[str, str, pa.Schema]]:
    steps, schema = [], BASE
    for what, how, change in [
        ("add note", "alter", lambda s: s.append(pa.field("note", pa.string()))),
        ("widen n to int64", "write", lambda s: _with(s, "n", pa.field("n", pa.int64()))),
        ("add st.y", "alter", lambda s: _with(s, "st", pa.field("st", pa.struct([("x", pa.int32()),
                                                                                 ("y", pa.string())])))),
        ("widen f to double", "alter", lambda s: _with(s, "f", pa.field("f", pa.float64()))),
        ("add extra", "write", lambda s: s.append(pa.field("extra", pa.int64()))),
        ("widen n to double", "alter", lambda s: _with(s, "n", pa.field("n", pa.float64()))),
    ]:
        schema = change(schema)
        steps.append((what, how, schema))
    return steps


STEPS = _steps()
SCHEMAS = [BASE, *(schema for _, _, schema in STEPS)]
KEYS = 60
PARTS = ("p0", "p1", "p2")


def value(schema: pa.Schema, column: str, key: int, version: int) -> Any:
    """A value of ``column`` as a producer writing ``schema`` sends it."""
    kind = schema.field(column).type
    if column == "n":
        if kind == pa.int32():
            return key * 10 + version % 7
        return (2**40 + key) if kind == pa.int64() else key + 0.5
    if column == "f":
        return key / 4 if kind == pa.float32() else key / 8
    if column == "st":
        return {"x": key, **({"y": f"y{version}"} if "y" in [f.name for f in kind] else {})}
    if column == "note":
        return f"n{key}-{version}" if key % 3 else None
    if column == "extra":
        return key * version
    raise AssertionError(column)


def row(schema: pa.Schema, key: int, ts: int) -> dict[str, Any]:
    data = {"id": key, "ts": ts, "part": PARTS[key % len(PARTS)]}
    return {**data, **{c: value(schema, c, key, ts) for c in schema.names if c not in data}}


def read_as(schema: pa.Schema, written: dict[str, Any]) -> dict[str, Any]:
    """A row written under an older schema as a reader of ``schema`` sees it."""
    out = {}
    for f in schema:
        v = written.get(f.name)
        if v is not None and f.type == pa.float64() and isinstance(v, int):
            v = float(v)
        if v is not None and pa.types.is_struct(f.type):
            v = {c.name: v.get(c.name) for c in f.type}
        out[f.name] = v
    return out


@dataclass
class History:
    """A table written by random operations, and the model of what it holds."""

    client: Client
    rng: random.Random
    flush: Callable[[], None]
    compact: Callable[[], None]
    restart: Callable[[], None]
    name: str = "t"
    step: int = 0  # schema changes made
    version: int = 0  # the last ordering value written
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    retired: set[int] = field(default_factory=set)
    log: list[str] = field(default_factory=list)

    @property
    def schema(self) -> pa.Schema:
        return SCHEMAS[self.step]

    def expected(self) -> list[dict[str, Any]]:
        return [read_as(self.schema, r) for _, r in sorted(self.rows.items())]

    def read(self, **options: Any) -> list[dict[str, Any]]:
        return self.client.read(self.name, **options).select(self.schema.names).sort_by("id").to_pylist()

    def upsert(self) -> None:
        self.version += 1
        producer = self.schema if self.step == 0 or self.rng.random() < 0.7 else SCHEMAS[self.step - 1]
        keys = [k for k in self.rng.sample(range(KEYS), self.rng.randrange(1, 20)) if k not in self.retired]
        late = [k for k in keys if k in self.rows and self.rng.random() < 0.2]
        batch = [row(producer, k, 0 if k in late else self.version) for k in keys]
        if batch:
            self.client.write(self.name, pa.Table.from_pylist(batch, schema=producer))
        for r in batch:
            if r["id"] not in late:
                self.rows[r["id"]] = r
        self.log.append(f"upsert {len(batch)} rows as schema {SCHEMAS.index(producer)}")

    def delete(self) -> None:
        keys = sorted(self.rng.sample(sorted(self.rows), min(len(self.rows), self.rng.randrange(1, 5))))
        if keys:
            self.client.delete(self.name, {"id": keys, "part": [PARTS[k % len(PARTS)] for k in keys]})
        for k in keys:
            del self.rows[k]
            self.retired.add(k)
        self.log.append(f"delete {keys}")

    def change(self) -> None:
        if self.step == len(STEPS):
            return self.upsert()
        what, how, schema = STEPS[self.step]
        if how == "alter":
            old = self.schema
            added = [pa.field(f.name, f.type) for f in schema if f.name not in old.names]
            nested = [pa.field(f"st.{c.name}", c.type) for c in schema.field("st").type
                      if c.name not in [o.name for o in old.field("st").type]]
            widened = {f.name: f.type for f in schema if f.name in old.names and f.type != old.field(f.name).type
                       and not pa.types.is_struct(f.type)}
            self.client.alter_table(self.name, add_columns=added + nested, widen=widened)
            self.step += 1
        else:  # a batch of the new schema evolves the table
            self.step += 1
            self.version += 1
            keys = [k for k in range(KEYS) if k not in self.retired][:5]
            batch = [row(schema, k, self.version) for k in keys]
            self.client.write(self.name, pa.Table.from_pylist(batch, schema=schema))
            self.rows.update({r["id"]: r for r in batch})
        self.log.append(f"{what} by {how}")
        return None

    def run(self, operations: list[str]) -> None:
        """Apply the operations (``upsert``, ``delete``, ``change``, ``flush``, ``compact``,
        ``restart``), reading the table after each: every acknowledged row as the model has it."""
        for operation in operations:
            if operation in ("flush", "compact", "restart"):
                getattr(self, operation)()
                self.log.append(operation)
            else:
                getattr(self, operation)()
            assert self.read() == self.expected(), self.log


OPERATIONS = ("upsert", "upsert", "upsert", "delete", "change", "change", "flush", "compact", "restart")
