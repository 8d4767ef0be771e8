"""A Hive Metastore over Thrift (``thrift://host:port``): the metastore that Hive, Spark,
Trino and Presto share. Tables are registered as Apache Hudi's hive-sync registers them;
locations are the Hadoop file-system URIs those engines resolve (``file:/...`` for a local
path, object-store URIs as they are).

The Thrift client is the one the ``pymetastore`` package generates from Hive's IDL
(``pip install 'memtier[hive]'``). One connection is kept and reopened when it breaks (a
metastore that restarted); a metastore that does not answer fails the operation with a
:class:`~memtier.errors.MetastoreError` naming the URI."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from memtier.catalog.tables import PARQUET_OUTPUT, PARQUET_SERDE, HivePartition, HiveTable
from memtier.errors import InvalidArgumentError, MetastoreError

__all__ = ["HiveMetastore", "hive_location"]

T = TypeVar("T")
CONNECT_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 60.0  # adding many partitions at once can take the metastore a while
OWNER = "memtier"


def hive_location(path: str) -> str:
    """``path`` as Hadoop file systems name it: a local path becomes ``file:/...``."""
    parts = urlsplit(path)
    if parts.scheme == "file":
        return "file:" + parts.path
    if parts.scheme:
        return path
    return "file:" + os.path.abspath(path)


def _thrift() -> tuple[Any, Any]:
    """The generated client module and its types (imported late: an optional extra)."""
    try:
        from pymetastore.hive_metastore import ThriftHiveMetastore, ttypes
    except ImportError as e:
        raise MetastoreError(
            "syncing into a Hive Metastore needs the pymetastore package: pip install 'memtier[hive]'"
        ) from e
    return ThriftHiveMetastore, ttypes


class HiveMetastore:
    """The Hive Metastore at ``uri`` (``thrift://host:port``; no SASL/Kerberos)."""

    def __init__(self, uri: str) -> None:
        parts = urlsplit(uri)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "thrift" or not parts.hostname or port is None or parts.path not in ("", "/"):
            raise InvalidArgumentError(f"Hive Metastore URI {uri!r} must be thrift://host:port")
        self.uri = uri
        self._host, self._port = parts.hostname, port
        self._client_module, self._types = _thrift()
        self._lock = threading.Lock()  # one call at a time on the kept connection
        self._transport: Any = None
        self._client: Any = None

    def location(self, path: str) -> str:
        return hive_location(path)

    def _connect(self, action: str) -> Any:
        from thrift.protocol.TBinaryProtocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport

        socket = TSocket.TSocket(self._host, self._port)
        socket.setTimeout(CONNECT_TIMEOUT_S * 1000)
        transport = TTransport.TBufferedTransport(socket)
        try:
            transport.open()
        except TTransport.TTransportException as e:
            raise MetastoreError(f"Hive Metastore {self.uri} is unreachable ({e}) while trying to {action}") from e
        socket.setTimeout(CALL_TIMEOUT_S * 1000)
        self._transport = transport
        return self._client_module.Client(TBinaryProtocol(transport))

    def close(self) -> None:
        """Close the connection (the next operation opens a new one)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._transport = self._client = None

    def _call(self, action: str, operation: Callable[[Any], T]) -> T:
        """``operation(client)`` on the kept connection (opened on first use); any failure
        becomes a MetastoreError naming the URI. A kept connection that broke (the metastore
        restarted) is replaced once; a timed-out one is not retried."""
        from thrift.Thrift import TException
        from thrift.transport.TTransport import TTransportException

        with self._lock:
            while True:
                fresh = self._client is None
                if fresh:
                    self._client = self._connect(action)
                try:
                    return operation(self._client)
                except TTransportException as e:
                    self._close()
                    if fresh or e.type == TTransportException.TIMED_OUT:
                        raise MetastoreError(f"Hive Metastore {self.uri} failed to {action}: {e}") from e
                except TException as e:
                    self._close()  # what is left of the exchange on the wire is not worth reading
                    message = getattr(e, "message", None) or str(e) or type(e).__name__
                    raise MetastoreError(f"Hive Metastore {self.uri} failed to {action}: {message}") from e
                except BaseException:
                    self._close()
                    raise

    def ensure_database(self, database: str) -> None:
        t = self._types

        def ensure(client: Any) -> None:
            try:
                client.get_database(database)
            except t.NoSuchObjectException:
                with contextlib.suppress(t.AlreadyExistsException):  # another writer was first
                    client.create_database(t.Database(
                        name=database, description="memtier tables", parameters={}, ownerName=OWNER,
                        ownerType=t.PrincipalType.USER))

        self._call(f"create database {database}", ensure)

    def _storage(self, table: HiveTable, location: str) -> Any:
        t = self._types
        return t.StorageDescriptor(
            cols=[t.FieldSchema(c.name, c.type, None) for c in table.columns],
            location=location, inputFormat=table.input_format, outputFormat=PARQUET_OUTPUT,
            compressed=False, numBuckets=-1,
            serdeInfo=t.SerDeInfo(serializationLib=PARQUET_SERDE,
                                  parameters={**dict(table.serde_parameters), "path": location}),
            bucketCols=[], sortCols=[], parameters={},
        )

    @staticmethod
    def _definition(table: Any) -> tuple[Any, ...]:
        """What sync decides: what an existing table must match (other parameters are kept)."""
        sd = table.sd
        return (
            table.tableType, [(c.name, c.type) for c in sd.cols], [(c.name, c.type) for c in table.partitionKeys],
            sd.location, sd.inputFormat, sd.outputFormat, sd.serdeInfo.serializationLib,
            sd.serdeInfo.parameters or {},
        )

    def put_table(self, database: str, table: HiveTable) -> bool:
        t = self._types
        wanted = t.Table(
            tableName=table.name, dbName=database, owner=OWNER, tableType="EXTERNAL_TABLE",
            sd=self._storage(table, table.location),
            partitionKeys=[t.FieldSchema(c.name, c.type, None) for c in table.partition_columns],
            parameters=dict(table.parameters),
        )

        def put(client: Any) -> bool:
            try:
                existing = client.get_table_req(t.GetTableRequest(dbName=database, tblName=table.name)).table
            except t.NoSuchObjectException:
                client.create_table(wanted)
                return True
            ours = dict(table.parameters)
            if (self._definition(existing) == self._definition(wanted)
                    and all((existing.parameters or {}).get(k) == v for k, v in ours.items())):
                return False
            wanted.parameters = {**(existing.parameters or {}), **ours}
            # CASCADE: the partitions take the new columns too (as Hudi's hive-sync alters them)
            client.alter_table_with_environment_context(
                database, table.name, wanted, t.EnvironmentContext(properties={"CASCADE": "true"}))
            return True

        return self._call(f"register table {database}.{table.name}", put)

    def partition_names(self, database: str, table: str) -> set[str]:
        t = self._types

        def names(client: Any) -> set[str]:
            try:
                return set(client.get_partition_names(database, table, -1))
            except t.NoSuchObjectException:
                return set()

        return self._call(f"list the partitions of {database}.{table}", names)

    def put_partitions(self, database: str, table: HiveTable, partitions: Sequence[HivePartition]) -> None:
        """One request, which the metastore applies whole or not at all."""
        if not partitions:
            return
        t = self._types
        parts = [
            t.Partition(values=list(p.values), dbName=database, tableName=table.name, parameters={},
                        sd=self._storage(table, f"{table.location.rstrip('/')}/{p.path}"))
            for p in partitions
        ]
        request = t.AddPartitionsRequest(dbName=database, tblName=table.name, parts=parts, ifNotExists=True,
                                          needResult=False)
        self._call(f"add {len(parts)} partitions to {database}.{table.name}",
                   lambda client: client.add_partitions_req(request))

    def drop_table(self, database: str, table: str) -> None:
        t = self._types

        def drop(client: Any) -> None:
            with contextlib.suppress(t.NoSuchObjectException):
                client.drop_table(database, table, False)  # external: the files stay

        self._call(f"drop table {database}.{table}", drop)
