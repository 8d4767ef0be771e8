"""Every error memtier raises derives from :class:`MemtierError`.

Errors name what is wrong (the column, the file and offset, the config key) so a user can
act on the message alone. Where a commit is involved the class says whether it landed:
:class:`CommitFailedError` (nothing visible, safe to clean up and retry) versus
:class:`CommitStateUnknownError` (never delete anything, re-read the timeline first).
"""

from __future__ import annotations


class MemtierError(Exception):
    """Root of every memtier error."""


class InvalidArgumentError(MemtierError, ValueError):
    """A caller passed a value memtier cannot use (bad option, bad name, bad mode)."""


# --- storage ---------------------------------------------------------------------------


class StorageError(MemtierError, OSError):
    """A filesystem operation failed."""


class AlreadyExistsError(StorageError, FileExistsError):
    """An exclusive create found the file already there."""


class NotFoundError(StorageError, FileNotFoundError):
    """A file or directory that must exist does not."""


class UnsupportedOperationError(MemtierError):
    """The filesystem cannot do this (e.g. append on an object store)."""


class CorruptFileError(MemtierError):
    """A persisted file fails its format checks; names the file and byte offset."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class UnknownFormatVersionError(MemtierError):
    """A persisted file carries a format version this build cannot read."""


# --- write-ahead log -------------------------------------------------------------------


class NotAWalFileError(CorruptFileError):
    """The file does not start with the WAL magic: it is not a memtier WAL file."""


class WalClosedError(MemtierError):
    """An append or seal reached a WAL writer that is already sealed or closed."""


class WalWriteFailedError(StorageError):
    """A WAL write or sync failed. Appends not yet acknowledged may or may not be durable,
    and the writer accepts nothing more: recover the file and continue in a new block."""


# --- tables and data -------------------------------------------------------------------


class NotATableError(MemtierError):
    """The path holds no Hudi table (no readable ``.hoodie/hoodie.properties``)."""


class TableExistsError(MemtierError):
    """Creating a table where one already exists."""


class TableNotFoundError(MemtierError, KeyError):
    """No table of that name in the catalog."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class UnsupportedTableError(MemtierError):
    """A Hudi table version, layout, file format or feature memtier cannot handle."""


class TableConvertingError(MemtierError):
    """A write to a table whose file groups are being converted into buckets (it was
    adopted from Hudi's default index); retry once the conversion completes."""


class SchemaMismatchError(MemtierError):
    """Data does not match the table schema; names the offending columns."""


class SchemaEvolutionError(SchemaMismatchError):
    """A schema change the table cannot take (a drop, a rename, a narrowing, a non-null
    column added), or a batch that would need one; names the columns and why."""


class InvalidRowError(MemtierError):
    """A row breaks a table rule (null ordering value, unusable partition value); names the row."""


class InvalidRecordKeyError(InvalidRowError):
    """A record-key column is missing, null or empty in the data."""


class UnknownColumnError(MemtierError, KeyError):
    """A projection or filter names a column the table does not have."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


# --- commits ---------------------------------------------------------------------------


class MetastoreError(MemtierError):
    """A metastore catalog sync writes into could not be reached or refused a registration;
    names the metastore."""


class CommitFailedError(MemtierError):
    """The commit did not land; nothing became visible. Safe to clean up and retry."""


class CommitStateUnknownError(MemtierError):
    """The commit may or may not have landed. Never delete its files; re-read the timeline."""


class TransactionError(MemtierError):
    """A transaction call that its state does not allow (write to a committed one, ...)."""


class NotOwnerError(MemtierError):
    """A table server got rows of a bucket it does not own: refresh the routing and retry."""


class FencedError(NotOwnerError):
    """A table server lost its buckets to another while it could not hear of it (paused,
    cut off, or replaced by a restart of itself): it acknowledges and commits nothing more
    for them. Writers refresh the routing and retry the same write on the new owner."""


class BatchTooLargeError(MemtierError):
    """A write batch exceeds the configured limit; split it."""


class ConcurrentWriteError(CommitFailedError):
    """Another writer changed the timeline in a way that conflicts with this commit."""


# --- rpc -------------------------------------------------------------------------------


class AuthenticationError(MemtierError):
    """A memtier server refused the call: its shared token is missing or wrong."""


class TlsError(MemtierError):
    """A TLS connection to a memtier server could not be made, and will not be by trying
    again: its certificate is not signed by the CA the client trusts or does not name the
    host, or only one side speaks TLS. The message names the setting to change."""


class RpcError(MemtierError):
    """A remote call failed in transport (server unreachable, timed out, broken stream) or
    the server failed with an error that is not a :class:`MemtierError`."""
