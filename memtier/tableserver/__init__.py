"""Table servers: blocks of the file groups they own, in memory and in WAL files, flushed
into Hudi log files through the master. Plain Python; :mod:`memtier.cluster` makes a
table server an actor, :mod:`memtier.tableserver.service` serves it over RPC."""

from memtier.tableserver.server import TableServer, WriteAck

__all__ = ["TableServer", "WriteAck"]
