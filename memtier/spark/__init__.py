"""memtier for Spark: ``memtier.spark.register(spark)``, then ``format("memtier")`` for
batch reads (memory, then WAL, then files), streaming reads of committed changes,
streaming ingest (one transaction per micro-batch) and batch backfills into files.
Needs PySpark 4.1+ (the Python Data Source API with filter pushdown)."""

from memtier.spark.source import MemtierDataSource, register

__all__ = ["MemtierDataSource", "register"]
