"""Presto and Trino read memtier's tables on a real HDFS through a real Hive Metastore: the
table's files on ``hdfs://`` (written through memtier's HdfsFileIO), registered by
memtier's catalog sync in the Hive Metastore 3.1.3 with their ``hdfs://`` locations (the
metastore takes them with Hadoop's HDFS client, which ``scripts/jvm/fetch_hms.sh``
fetches), read by Presto 0.287 (its Hudi and Hive connectors) and by Trino 476's Hudi
connector (the catalog :func:`memtier.catalog.trino_catalog_properties` gives for a Hive
Metastore: its ``fs.hadoop.enabled`` covers ``hdfs://``).

Presto's catalogs are those :func:`memtier.catalog.presto_catalog_properties` gives plus
one Hadoop setting (:data:`HDFS_SITE`, through ``hive.config.resources``): without it its
Hudi connector fails on the snapshot view (measured: ``readDirect unsupported in
RemoteBlockReader``; its read-optimized view and both views of its Hive connector read
right). Every catalog of a connector that reads the cluster needs it: with a catalog
without it beside, which had read the cluster first, the catalog with it failed the same
way (measured; Hadoop's HDFS clients are cached per file system, not per catalog).

The snapshot (``_rt``: Presto merges the log files) and the base files (``_ro``) equal
memtier's reads, before a compaction and after it. Trino 476's Hudi connector reads base
files only, so it is held to ``_ro``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import presto_catalog_properties, sync_table, trino_catalog_properties
from memtier.compaction.compact import CompactionPolicy, compact, compaction_metadata, plan_compaction
from memtier.hudi import HudiTable
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.timeline import TimelineWriter, new_instant_time
from tests.support.hdfs import HdfsCluster
from tests.support.hms import HiveMetastoreServer
from tests.support.orders import COLUMNS, write_orders
from tests.support.presto import CATALOGS, PrestoServer, run_presto
from tests.support.trino import TrinoServer

pytestmark = [pytest.mark.slow, pytest.mark.hdfs]

DATABASE = "onhdfs"  # this suite's own database in the shared metastore


#: Hadoop configuration for Presto's HDFS client. Presto 0.287's shaded Hadoop 2.7.4
#: (``hadoop-apache2-2.7.4-12.jar``) carries a ``core-site.xml`` that turns on the legacy
#: block reader (``RemoteBlockReader``), which has no ``read(ByteBuffer)``: reading a file on
#: HDFS through it fails with "readDirect unsupported in RemoteBlockReader". Hadoop's own
#: default (``false``: ``RemoteBlockReader2``) reads them.
HDFS_SITE = """<configuration>
  <property><name>dfs.client.use.legacy.blockreader</name><value>false</value></property>
</configuration>
"""


@pytest.fixture(scope="module")
def presto_on_hdfs(hms: HiveMetastoreServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrestoServer]:
    """A Presto of this module's own: the catalogs of :data:`CATALOGS` as
    :func:`presto_catalog_properties` writes them, with ``hive.config.resources`` naming
    :data:`HDFS_SITE` (Presto reads catalog files at start only)."""
    site = Path(tmp_path_factory.mktemp("presto-hadoop")) / "hdfs-site.xml"
    site.write_text(HDFS_SITE)
    catalogs = {name: presto_catalog_properties(hms.uri, connector) + f"hive.config.resources={site}\n"
                for name, connector in CATALOGS.items()}
    with run_presto(catalogs) as server:
        yield server


def _rows(rows: Any) -> list[tuple[Any, ...]]:
    if isinstance(rows, pa.Table):
        rows = rows.select(COLUMNS).to_pylist()
    return sorted(tuple(r[c] for c in COLUMNS) if isinstance(r, dict) else tuple(r) for r in rows)


def _compact(table: HudiTable) -> None:
    """memtier's compaction of every file group: plan, execute, commit (a Hudi ``commit``)."""
    meta = table.meta
    timeline = meta.timeline()
    plan = plan_compaction(FileSystemView.build(meta.io, meta.base_path, timeline), CompactionPolicy(), force=True)
    assert plan is not None
    instant = new_instant_time(timeline.last_timestamp())
    writer = TimelineWriter(meta.io, meta.base_path)
    inflight = writer.inflight(writer.request(instant, "compaction", plan.to_avro()))
    writer.complete(inflight, compaction_metadata(meta, compact(meta, instant, plan, meta.timeline())).to_json())


def _expect(presto: PrestoServer, trino: TrinoServer, trino_catalog: str, table: HudiTable, name: str) -> None:
    snapshot = _rows(table.read())
    read_optimized = _rows(table.read(mode="read_optimized"))
    select = f"SELECT id, ts, city, amount FROM {DATABASE}.{name}"
    for catalog in CATALOGS:
        assert _rows(presto.query(select + "_rt", catalog=catalog)) == snapshot, catalog
        assert _rows(presto.query(select + "_ro", catalog=catalog)) == read_optimized, catalog
    assert _rows(trino.query(select + "_ro", catalog=trino_catalog)) == read_optimized


def test_presto_and_trino_read_a_table_on_hdfs_through_a_hive_metastore(
    presto_on_hdfs: PrestoServer, hms: HiveMetastoreServer, trino: TrinoServer, hdfs: HdfsCluster,
) -> None:
    presto = presto_on_hdfs
    path = hdfs.url("hms", uuid.uuid4().hex, "orders")
    table = write_orders(path, hdfs.storage_options)
    result = sync_table(table.meta, hms.handle(), database=DATABASE, name="orders")
    assert result.partitions == ["city=lima", "city=oslo", "city=rome"]

    snapshot = _rows(table.read())
    assert (1, 2, "oslo", 11.0) in snapshot and len(snapshot) == 5
    assert (1, 1, "oslo", 10.0) in _rows(table.read(mode="read_optimized"))  # the update waits in a log file
    files = presto.query(f'SELECT DISTINCT "$path" FROM {DATABASE}.orders_ro', catalog="hive")
    assert files and all(f.startswith(path + "/city=") for (f,) in files), files  # read from hdfs://
    with trino.catalog("hmshdfs", trino_catalog_properties(hms.uri)) as trino_catalog:
        _expect(presto, trino, trino_catalog, table, "orders")

        _compact(table)
        assert _rows(table.read(mode="read_optimized")) == snapshot
        _expect(presto, trino, trino_catalog, table, "orders")
