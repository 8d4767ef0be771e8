"""How Presto reads what memtier syncs: the catalog file of a Presto catalog over the Hive
Metastore memtier keeps current (Presto's own file metastore is not Trino's format, so a
Hive Metastore is the only way in)."""

from __future__ import annotations

from memtier.catalog.metastore import is_hive_metastore
from memtier.errors import InvalidArgumentError

__all__ = ["PRESTO_CONNECTORS", "presto_catalog_properties"]

#: Presto's connectors that read Hudi tables: its Hudi connector, and its Hive connector
#: (through the input formats memtier registers, as Hudi's hive-sync does).
PRESTO_CONNECTORS = ("hudi", "hive-hadoop2")


def presto_catalog_properties(metastore: str, connector: str = "hudi") -> str:
    """The ``etc/catalog/<name>.properties`` of a Presto catalog over the Hive Metastore
    ``metastore`` (``thrift://host:port``). The Hive connector is told to match Parquet
    columns by name: memtier's files, like Hudi's, keep the partition columns, so
    matching by position (its default) would read the wrong column."""
    if not is_hive_metastore(metastore):
        raise InvalidArgumentError(f"Presto reads memtier tables through a Hive Metastore (thrift://HOST:PORT), "
                                   f"not {metastore!r}: its file metastore is not Trino's format")
    if connector not in PRESTO_CONNECTORS:
        raise InvalidArgumentError(f"no Presto connector {connector!r} reads Hudi tables; use one of "
                                   f"{', '.join(PRESTO_CONNECTORS)}")
    lines = [f"connector.name={connector}", f"hive.metastore.uri={metastore}"]
    if connector == "hive-hadoop2":
        lines.append("hive.parquet.use-column-names=true")
    return "\n".join([*lines, ""])
