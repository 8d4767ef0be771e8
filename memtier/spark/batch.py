"""Batch reads: ``spark.read.format("memtier")``. The read is planned once (the client's
read plan: one read point, a lease on the file slices), one Spark task per bucket; each
task merges its buckets' Hudi file slices with their rows in table-server memory and in
WAL files exactly as ``client.read`` does, and hands Spark Arrow batches."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    Not,
)
from pyspark.sql.types import StructType

from memtier.client import ReadPlan, ReadRequest
from memtier.hudi.filters import Filter
from memtier.spark.connection import client_for
from memtier.spark.options import SourceOptions
from memtier.spark.types import spark_batches

__all__ = ["BatchReader", "PlanPart", "PushdownReader", "plan_parts", "read_part", "to_memtier_filter"]

_OPERATORS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<",
              LessThanOrEqual: "<=", In: "in"}


class PlanPart(InputPartition):
    """One part of a read plan: the plan travels with each task (it is small)."""

    def __init__(self, plan: ReadPlan, index: int) -> None:
        super().__init__(index)
        self.plan = plan
        self.index = index


def plan_parts(options: SourceOptions, request: ReadRequest) -> list[PlanPart]:
    """Plan the read once; one Spark input partition per part (bucket)."""
    plan = client_for(options).plan(request)
    return [PlanPart(plan, i) for i in range(len(plan.parts))]


def read_part(options: SourceOptions, partition: InputPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    """One part's rows, as Spark's Arrow batches (in an executor)."""
    assert isinstance(partition, PlanPart)
    table = client_for(options).read_part(partition.plan, partition.index)
    yield from spark_batches(table, schema)


def to_memtier_filter(spark_filter: Any, columns: Sequence[str]) -> Filter | None:
    """A Spark filter as memtier's ``(column, op, value)``, or None where memtier cannot
    apply it exactly (nested columns, string matching, null tests)."""
    negated = isinstance(spark_filter, Not)
    inner = spark_filter.child if negated else spark_filter
    op = _OPERATORS.get(type(inner))
    if op is None or len(inner.attribute) != 1 or inner.attribute[0] not in columns:
        return None
    value = list(inner.value) if op == "in" else inner.value
    if value is None or (op == "in" and any(v is None for v in value)):
        return None  # SQL's null semantics differ from a comparison with None
    if negated:
        if op not in ("=", "in"):
            return None
        op = "!=" if op == "=" else "not in"
    return (inner.attribute[0], op, value)


class BatchReader(DataSourceReader):
    """Plans on the driver side, reads on executors; Spark applies every filter."""

    def __init__(self, options: SourceOptions, schema: StructType, request: ReadRequest) -> None:
        self.options = options
        self.schema = schema
        self.request = request
        self.filters: list[Filter] = []

    def partitions(self) -> list[PlanPart]:
        return plan_parts(self.options, dataclasses.replace(self.request, filters=self.filters or None))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_part(self.options, partition, self.schema)


class PushdownReader(BatchReader):
    """A batch reader that takes Spark's filters (Spark calls it only when
    ``spark.sql.python.filterPushdown.enabled`` is on, as :func:`register` sets it)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:  # noqa: N802 (Spark's name)
        """Filters memtier applies exactly (after the merge; partition columns prune file
        groups, record-key equalities prune buckets); Spark keeps the rest."""
        for spark_filter in filters:
            translated = to_memtier_filter(spark_filter, self.schema.fieldNames())
            if translated is None:
                yield spark_filter
            else:
                self.filters.append(translated)
