"""A stand-in for Hudi's metadata table on a table memtier created (version 8 or 9): the
folder, its properties, a ``files`` partition with Hudi 1.x's one file group and, named in
the table's properties, any further partitions (empty folders). Enough for memtier to keep
or drop it; Hudi's own readers need the real one (the interop tests have Hudi write it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from memtier.hudi.mdt import metadata_table_path
from memtier.hudi.properties import METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT, rewrite_table_config
from memtier.hudi.tablemeta import TableMeta
from memtier.io import FileIO, join


def add_metadata_table(io: FileIO, path: str, partitions: Sequence[str] = ("files",),
                       inflight: Sequence[str] = ()) -> None:
    mdt = metadata_table_path(path)
    io.write_atomic(join(mdt, ".hoodie", "hoodie.properties"), b"hoodie.table.name=t_metadata\n")
    io.makedirs(join(mdt, ".hoodie", "timeline"))
    io.write_atomic(join(mdt, "files", ".files-0000-0_00000000000000000.log.1_0-0-0"), b"#HUDI#")
    for partition in [*partitions, *inflight]:
        if partition != "files":
            io.write_atomic(join(mdt, partition, f".{partition}-0000-0_00000000000000001.log.1_0-0-0"), b"#HUDI#")
    config = TableMeta.load(io, path).config
    raw = {**config.raw, METADATA_PARTITIONS: ",".join(partitions), METADATA_PARTITIONS_INFLIGHT: ",".join(inflight)}
    rewrite_table_config(io, path, dataclasses.replace(config, raw=raw))
