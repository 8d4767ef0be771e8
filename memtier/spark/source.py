"""The ``memtier`` Spark data source: batch reads, streaming reads (the change feed),
streaming ingest and batch backfills of one memtier table."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from memtier.client import ReadRequest
from memtier.errors import InvalidArgumentError
from memtier.rpc.tls import ca_pem
from memtier.spark.backfill import Backfill
from memtier.spark.batch import BatchReader, PushdownReader
from memtier.spark.changes import ChangeFeed
from memtier.spark.connection import client_for
from memtier.spark.options import BACKFILL, BATCH_READ, SINK, STREAM_READ, SourceOptions
from memtier.spark.sink import StreamSink
from memtier.spark.types import arrow_schema, spark_schema

__all__ = ["MemtierDataSource", "register"]

FILTER_PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


class MemtierDataSource(DataSource):
    """``format("memtier")``; options: ``table`` (required), ``address``, ``token``, ``tls_ca``, and
    per use ``mode``/``as_of``/``start``/``end`` (batch reads), ``starting`` (streaming
    reads), ``operation`` (backfills)."""

    #: The cluster :func:`register` found in the registering process (Spark runs these
    #: methods in other Python processes, which cannot see it).
    default_address: str | None = None
    default_token: str | None = None
    default_tls_ca: str | None = None  # the PEM text: executors need no file

    @classmethod
    def name(cls) -> str:
        return "memtier"

    def _options(self, allowed: frozenset[str], what: str) -> SourceOptions:
        return SourceOptions.parse(self.options, allowed, what, self.default_address, self.default_token,
                                   self.default_tls_ca)

    def _table_schema(self) -> pa.Schema:
        options = self._options(BATCH_READ | STREAM_READ | SINK | BACKFILL, "use")
        description = client_for(options).describe(options.table)
        return pa.ipc.read_schema(pa.py_buffer(description["schema"]))

    def schema(self) -> StructType:
        return spark_schema(self._table_schema())

    def reader(self, schema: StructType) -> BatchReader:
        """Option ``pushdown`` (default true): hand Spark's filters to memtier."""
        options = self._options(BATCH_READ, "batch read")
        request = ReadRequest(options.table, options.get("mode") or "latest", as_of=options.get("as_of"),
                              start=options.get("start"), end=options.get("end")).check()
        pushdown = (options.get("pushdown") or "true").lower()
        if pushdown not in ("true", "false"):
            raise InvalidArgumentError(f'option "pushdown" is true or false, got {pushdown!r}')
        return (PushdownReader if pushdown == "true" else BatchReader)(options, schema, request)

    def streamReader(self, schema: StructType) -> ChangeFeed:  # noqa: N802 (Spark's names)
        return ChangeFeed(self._options(STREAM_READ, "streaming read"), schema)

    def writer(self, schema: StructType, overwrite: bool) -> Backfill:
        """A backfill; a DataFrame with new columns or wider types evolves the table first
        (unless its ``schema.evolution`` is off: then it is refused), as Hudi's writers
        evolve it (``mergeSchema``)."""
        options = self._options(BACKFILL, "batch write")
        _append_only(overwrite)
        return Backfill(options, arrow_schema(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamSink:  # noqa: N802
        """Streaming ingest; the query's new columns or wider types evolve the table as
        it starts (and each micro-batch's, as any client write does)."""
        options = self._options(SINK, "stream write")
        _append_only(overwrite)
        client_for(options).evolve_for(options.table, arrow_schema(schema).empty_table())
        return StreamSink(options, schema.fieldNames())


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise InvalidArgumentError('memtier writes take mode("append") (with option operation=...), not overwrite')


def register(
    spark: SparkSession, *, address: str | None = None, token: str | None = None, tls_ca: str | None = None,
) -> Any:
    """Register ``format("memtier")`` with the session and turn on filter pushdown for
    Python data sources. The cluster to use by default is ``address``, else the one
    :func:`memtier.start_local` started in this process, else ``$MEMTIER_CLUSTER_ADDRESS``
    (the configuration's ``cluster.address``). ``tls_ca`` (a PEM file, read here: the
    executors get its text) is the CA a ``grpc+tls://`` cluster's certificates are checked
    against (default: the started cluster's)."""
    if address is None:
        from memtier.cluster import running_cluster

        running = running_cluster()
        if running is not None:
            address, token, tls_ca = running.address, token or running.token, tls_ca or running.tls_ca
    source = type(MemtierDataSource.__name__, (MemtierDataSource,), {
        "default_address": address, "default_token": token,
        "default_tls_ca": None if tls_ca is None else ca_pem(tls_ca), "__module__": __name__,
    })
    spark.conf.set(FILTER_PUSHDOWN, "true")
    spark.dataSource.register(source)
    return source
