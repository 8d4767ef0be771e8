"""memtier reads the tables Apache Hudi 1.x writes with its defaults: Hudi 1.0.2 (table
version 8), 1.1.1 and 1.2.0 (version 9) on Spark, merge-on-read and copy-on-write,
partitioned or not, with the simple, complex and time-based key generators, Hudi's
metadata table on (its default), a rollback and an insert overwrite; every read equal to
Hudi's own read of the table (snapshot, read-optimized, time travel) and to a model of
the writes, and to hudi-rs 0.5's.

One Spark session per Hudi version; each table takes a few Spark writes, so histories are
short: inserts, upserts (ordering values only grow, so every engine's merge agrees),
deletes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from memtier.hudi import HudiTable
from tests.support.hudi_spark import HUDI_VERSIONS, HudiSpark, writer_options
from tests.support.hudirs import hudi_rs_read, rows

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SCHEMA = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("version", pa.int64()),
                    ("region", pa.string()), ("day", pa.int64()), ("v", pa.string())])
COLUMNS = SCHEMA.names
DAY_MS = 86_400_000
FIRST_DAY = 1_795_000_000_000  # 2026-11-18


def batch(ids: range | list[int], version: int) -> pa.Table:
    ids = list(ids)
    return pa.table({
        "id": ids,
        "kind": ["a" if i % 2 else "b" for i in ids],
        "version": [version] * len(ids),
        "region": [f"r{i % 3}" for i in ids],
        "day": [FIRST_DAY + (i % 2) * DAY_MS for i in ids],
        "v": [f"v{i}-{version}" for i in ids],
    }, schema=SCHEMA)


@dataclass(frozen=True)
class Layout:
    """How Hudi lays a table out: its type and key generator's options."""

    table_type: str
    record_key: tuple[str, ...] = ("id",)
    partitions: tuple[str, ...] = ("region",)
    extra: Mapping[str, str] = field(default_factory=dict)

    def options(self, name: str, operation: str = "upsert") -> dict[str, str]:
        return writer_options(name, list(self.record_key), "version", list(self.partitions),
                              table_type=self.table_type, operation=operation, **self.extra)


TIMESTAMP_KEYGEN = {
    "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
    "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
    "hoodie.keygen.timebased.output.dateformat": "yyyy-MM-dd",
    "hoodie.keygen.timebased.timezone": "UTC",
}
LAYOUTS = {
    "mor-simple": Layout("MERGE_ON_READ"),
    "cow-simple": Layout("COPY_ON_WRITE"),
    "mor-nonpartitioned": Layout("MERGE_ON_READ", partitions=()),
    "cow-complex": Layout("COPY_ON_WRITE", ("id", "kind"), ("region", "kind")),
    "mor-complex": Layout("MERGE_ON_READ", ("id", "kind"), ("region", "kind")),
    "mor-timestamp": Layout("MERGE_ON_READ", partitions=("day",), extra=TIMESTAMP_KEYGEN),
}


@dataclass
class Written:
    """A table Hudi wrote: its path, the rows a reader must return, its commits."""

    path: str
    layout: Layout
    model: dict[tuple, tuple] = field(default_factory=dict)
    instants: list[str] = field(default_factory=list)
    models: list[dict[tuple, tuple]] = field(default_factory=list)

    def key(self, row: Mapping[str, Any]) -> tuple:
        return tuple(row[k] for k in self.layout.record_key)

    def upsert(self, data: pa.Table) -> None:
        for row in data.to_pylist():
            self.model[self.key(row)] = tuple(row[c] for c in COLUMNS)

    def delete(self, data: pa.Table) -> None:
        for row in data.to_pylist():
            self.model.pop(self.key(row), None)

    def overwrite(self, data: pa.Table) -> None:
        """insert_overwrite: the partitions ``data`` writes hold ``data`` alone."""
        fields = self.layout.partitions
        touched = {tuple(r[f] for f in fields) for r in data.to_pylist()}
        self.model = {k: row for k, row in self.model.items()
                      if tuple(row[COLUMNS.index(f)] for f in fields) not in touched}
        self.upsert(data)

    def expected(self, model: dict[tuple, tuple] | None = None) -> list[tuple]:
        return sorted((model if model is not None else self.model).values(), key=repr)


def write_history(spark: HudiSpark, path: str, layout: Layout, name: str) -> Written:
    """Three commits (insert, upsert with new keys, delete), then on the simple-key
    merge-on-read table a fourth rolled back with Hudi's ``rollback_to_instant`` and an
    insert overwrite of one partition."""
    written = Written(path, layout)
    steps = [("upsert", batch(range(30), 1)), ("upsert", batch(range(20, 40, 2), 2)),
             ("delete", batch([3, 4, 22], 3))]
    for operation, data in steps:
        spark.write(path, data, layout.options(name, operation))
        written.delete(data) if operation == "delete" else written.upsert(data)
        written.models.append(dict(written.model))
    if name.startswith("mor_simple"):
        spark.write(path, batch(range(5, 15), 4), layout.options(name))
        last = HudiTable.open(path).timeline().completed()[-1].timestamp
        spark.sql(f"CREATE TABLE {name} USING hudi LOCATION '{path}'")
        spark.sql(f"CALL rollback_to_instant(table => '{name}', instant_time => '{last}')")
        overwrite = batch([1, 4, 7, 100], 5)  # region r1
        spark.write(path, overwrite, layout.options(name, "insert_overwrite"))
        written.overwrite(overwrite)
        written.models.append(dict(written.model))
    written.instants = [i.timestamp for i in HudiTable.open(path).timeline().completed()]
    return written


#: The tables each Hudi version writes: every layout with Hudi 1.1.1; with 1.0.2 and 1.2.0
#: the rollback and insert overwrite, complex and time-based keys (each Spark write costs
#: seconds).
TABLES = {
    "1.0.2": ("mor-simple", "cow-complex", "mor-timestamp"),
    "1.1.1": tuple(LAYOUTS),
    "1.2.0": ("mor-simple", "mor-complex", "mor-timestamp"),
}
CASES = [(version, label) for version, labels in TABLES.items() for label in labels]


class Histories:
    """The tables each Hudi version wrote, made on first use with one Hudi on Spark session
    at a time: the cases come in version order, so each version's session starts once
    (pytest would start a module-scoped fixture parametrized case by case once per case)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spark: HudiSpark | None = None
        self.tables: dict[str, Written] = {}

    def of(self, version: str) -> tuple[HudiSpark, dict[str, Written]]:
        if self.spark is None or self.spark.versions["hudi"] != version:
            self.close()
            self.spark = HudiSpark(self.root, version=version)
            root = self.root / f"hudi-{version}"
            self.tables = {label: write_history(self.spark, str(root / label), LAYOUTS[label],
                                                f"{label.replace('-', '_')}_{version.replace('.', '')}")
                           for label in TABLES[version]}
        return self.spark, self.tables

    def close(self) -> None:
        if self.spark is not None:
            self.spark.close()
            self.spark = None


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Histories]:
    written = Histories(tmp_path_factory.mktemp("hudi-1x"))
    yield written
    written.close()


def data(table: pa.Table) -> list[tuple]:
    return sorted(rows(table, COLUMNS), key=repr)


def hudi_data(table: pa.Table, written: Written) -> list[tuple]:
    """Rows of Hudi's read. Its Spark reader types the partition column of a time-based
    key generator as a string (the partition path's type) holding the file's value: pinned
    here, and turned back into the column's type to compare."""
    if written.layout.extra is TIMESTAMP_KEYGEN:
        assert table.schema.field("day").type == pa.string()
        table = table.set_column(table.schema.get_field_index("day"), "day", table["day"].cast(pa.int64()))
    return data(table)


@pytest.mark.parametrize(("version", "label"), CASES)
def test_memtier_reads_what_hudi_wrote_as_hudi_does(histories: Histories, version: str, label: str) -> None:
    """Snapshot and read-optimized, time travel to each commit: memtier's read equals
    Hudi's and the model; hudi-rs 0.5 reads the same snapshot."""
    spark, tables = histories.of(version)
    written = tables[label]
    table = HudiTable.open(written.path)
    assert table.config.version == HUDI_VERSIONS[spark.versions["hudi"]]
    assert "files" in table.config.raw.get("hoodie.table.metadata.partitions", "")
    assert hudi_data(spark.read(written.path), written) == written.expected()
    assert data(table.read()) == written.expected()
    assert data(table.read(mode="read_optimized")) == hudi_data(spark.read(written.path, "read_optimized"), written)
    for instant, model in zip(written.instants, written.models, strict=True):
        assert data(table.read(as_of=instant)) == hudi_data(spark.read(written.path, as_of=instant), written), instant
        assert data(table.read(as_of=instant)) == written.expected(model), instant
    assert data(hudi_rs_read(written.path)) == written.expected()
