"""Typed, frozen configuration, parsed once at the edge.

Each setting is declared once, on its config class, with its key, parser and default
(:func:`setting`). :func:`load` builds a config object from string options (the CLI, an
actor's arguments) over the process environment, where the key ``wal.sync-policy`` is the
variable ``MEMTIER_WAL_SYNC_POLICY``. Environment variables are read here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from memtier.errors import InvalidArgumentError
from memtier.placement import CpuSet, parse_cpus

__all__ = [
    "CONFIG_CLASSES",
    "CatalogConfig",
    "ClusterConfig",
    "Evolution",
    "FlushWorker",
    "Setting",
    "ServicesConfig",
    "SyncPolicy",
    "TableOptions",
    "TableServerConfig",
    "WalConfig",
    "check",
    "load",
    "parse_bool",
    "parse_duration",
    "parse_size",
    "setting",
    "settings",
]

T = TypeVar("T")
C = TypeVar("C")


@dataclass(frozen=True)
class Setting:
    """One configuration key: its name, how to parse its string form, and what it means."""

    key: str
    parse: Callable[[str], Any]
    doc: str
    #: Older names of :attr:`env`, still read when it is not set.
    env_aliases: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        """The environment variable that sets this key."""
        return "MEMTIER_" + re.sub(r"[.\-]", "_", self.key).upper()

    def from_environ(self, environ: Mapping[str, str]) -> tuple[str, str] | None:
        """``(variable, value)`` of the first of :attr:`env` and its aliases that is set."""
        return next(((name, environ[name]) for name in (self.env, *self.env_aliases) if name in environ), None)


def setting(key: str, default: T, parse: Callable[[str], T], doc: str, *, env_aliases: tuple[str, ...] = ()) -> T:
    """A dataclass field declared together with its config key and parser (and, for a
    renamed variable, the old names the environment may still use)."""
    return dataclasses.field(
        default=default, metadata={"setting": Setting(key, parse, doc, env_aliases)}
    )


def load(
    cls: type[C],
    options: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> C:
    """Build ``cls`` from ``options``, then environment variables, then defaults.

    Unknown keys under the class's prefix and unparsable values raise
    :class:`InvalidArgumentError` naming the key.
    """
    options = dict(options or {})
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    known = set()
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        spec: Setting | None = field.metadata.get("setting")
        if spec is None:
            continue
        known.add(spec.key)
        variable, raw = spec.env, options.get(spec.key)
        if raw is None:
            variable, raw = spec.from_environ(environ) or (spec.env, None)
        if raw is None:
            continue
        try:
            values[field.name] = spec.parse(raw)
        except (ValueError, KeyError) as e:
            raise InvalidArgumentError(f"config {spec.key} (env {variable}) = {raw!r}: {e}") from e
    prefixes = {key.split(".", 1)[0] + "." for key in known}
    unknown = sorted(k for k in options if k not in known and k.startswith(tuple(prefixes)))
    if unknown:
        raise InvalidArgumentError(f"unknown config key(s) {unknown}; known: {sorted(known)}")
    return cls(**values)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|ms|s|m|h|d)\s*$")
_UNITS = {
    "us": timedelta(microseconds=1),
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}


#: How often a writer outside the tier renews the lease on its instant (cluster.writer-lease).
WRITER_LEASE_RENEWAL = timedelta(seconds=2)


def parse_size(text: str) -> int:
    """``"512MB"``, ``"64KiB"``, ``"1GB"``, ``"1000"`` (bytes) -> bytes."""
    match = re.match(r"^\s*(\d+(?:\.\d*)?)\s*([KMGT]?i?B?)\s*$", text, re.IGNORECASE)
    if match is None:
        raise ValueError("not a size (a number and B, KB, MB, GB, KiB, MiB or GiB)")
    unit = match.group(2).upper().rstrip("B").replace("I", "")
    factor = 1024 ** "KMGT".index(unit) * 1024 if unit else 1
    return int(float(match.group(1)) * factor)


def parse_bool(text: str) -> bool:
    """``"true"``/``"false"`` (also 1/0, yes/no, on/off) -> bool."""
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError("not a boolean (true or false)")


def parse_duration(text: str) -> timedelta:
    """``"250us"``, ``"2ms"``, ``"1.5s"``, ``"10m"``, ``"12h"``, ``"7d"`` -> timedelta."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration (a number and one of {sorted(_UNITS)})")
    return float(match.group(1)) * _UNITS[match.group(2)]


# ======================================================================================
# Write-ahead log
# ======================================================================================


class SyncPolicy(enum.Enum):
    """When a WAL append is acknowledged, relative to the sync that makes it durable."""

    #: Every append waits for a sync covering it; concurrent appends share one sync.
    EVERY_APPEND = "every-append"
    #: As EVERY_APPEND, but a sync first waits ``group_window`` so more appends join it.
    GROUP_WINDOW = "group-window"
    #: Appends return once written; a background thread syncs every ``sync_interval``.
    #: An OS crash (local disk) or a process crash (object stores) loses up to one
    #: interval of acknowledged appends.
    INTERVAL = "interval"


@dataclass(frozen=True)
class WalConfig:
    """How WAL appends become durable, and how long flushed WAL files are kept."""

    sync_policy: SyncPolicy = setting(
        "wal.sync-policy",
        SyncPolicy.EVERY_APPEND,
        SyncPolicy,
        "every-append (safe default), group-window or interval",
    )
    group_window: timedelta = setting(
        "wal.group-window",
        timedelta(microseconds=200),
        parse_duration,
        "with group-window: how long a sync waits for more appends to join it",
    )
    sync_interval: timedelta = setting(
        "wal.sync-interval",
        timedelta(milliseconds=10),
        parse_duration,
        "with interval: the period of the background sync",
    )
    retention: timedelta = setting(
        "wal.retention",
        timedelta(days=7),
        parse_duration,
        "how long a WAL segment is kept once every block in it is flushed",
    )
    retention_bytes: int = setting(
        "wal.retention-bytes",
        1 << 30,
        parse_size,
        "... but at most this many bytes of such segments per table on each table server "
        "(the oldest go first; 0 keeps none)",
    )
    reserved_bytes: int = setting(
        "wal.reserved-bytes",
        64 << 20,
        parse_size,
        "free space a table server leaves on the WAL's file system: it refuses writes that "
        "would take it, so that a dead server's WAL can still be fenced and recovered (and "
        "the disk freed) when the WAL fills the disk (local disks; 0 keeps none)",
    )
    segment_bytes: int = setting(
        "wal.segment-bytes",
        64 << 20,
        parse_size,
        "a table server starts a new WAL segment of a table once the current one holds "
        "this many bytes",
    )
    segment_age: timedelta = setting(
        "wal.segment-age",
        timedelta(seconds=60),
        parse_duration,
        "... or is this old (a segment is deleted as a whole, after the retention)",
    )

    def __post_init__(self) -> None:
        for name in ("group_window", "sync_interval", "retention"):
            if getattr(self, name) < timedelta(0):
                raise InvalidArgumentError(f"WalConfig.{name} must not be negative")
        if self.retention_bytes < 0 or self.reserved_bytes < 0:
            raise InvalidArgumentError("WalConfig.retention_bytes and reserved_bytes must not be negative")
        if self.segment_bytes <= 0 or self.segment_age <= timedelta(0):
            raise InvalidArgumentError("WalConfig.segment_bytes and segment_age must be positive")
        if self.sync_policy is SyncPolicy.INTERVAL and self.sync_interval <= timedelta(0):
            raise InvalidArgumentError("WalConfig.sync_interval must be positive with interval")


# ======================================================================================
# Table servers
# ======================================================================================


class FlushWorker(enum.Enum):
    """Where a table server builds, encodes and writes its flushes."""

    PROCESS = "process"
    INLINE = "inline"


@dataclass(frozen=True)
class TableServerConfig:
    """Memory, blocks and flushing of one table server."""

    memory_budget: int = setting(
        "tableserver.memory-budget",
        1 << 30,
        parse_size,
        "bytes of record batches a table server keeps in memory, flushes' transient copies "
        "included (in the table server and its flush worker); beyond it, sealed blocks are evicted (they stay in their WAL) and flushes "
        "are hurried",
    )
    block_max_bytes: int = setting(
        "tableserver.block-max-bytes",
        64 << 20,
        parse_size,
        "a table's open blocks on a table server are sealed together (and new ones started) "
        "once they hold this many bytes between them (or a sixteenth of the memory budget, if "
        "less); a flush round takes such generations whole",
    )
    block_max_age: timedelta = setting(
        "tableserver.block-max-age",
        timedelta(seconds=5),
        parse_duration,
        "a block is sealed once it is this old, so data reaches the Hudi table",
    )
    flush_interval: timedelta = setting(
        "tableserver.flush-interval",
        timedelta(seconds=2),
        parse_duration,
        "how often sealed blocks of committed transactions are flushed into Hudi log files",
    )
    max_batch_rows: int = setting(
        "tableserver.max-batch-rows",
        1_000_000,
        int,
        "the largest write batch accepted (bigger ones are refused: split them)",
    )
    flush_worker: FlushWorker = setting(
        "tableserver.flush-worker",
        FlushWorker.PROCESS,
        FlushWorker,
        "process: flushes are built, encoded and written by a worker process the table "
        "server owns, off the interpreter that acknowledges writes; inline: in the table server",
    )
    flush_timeout: timedelta = setting(
        "tableserver.flush-timeout",
        timedelta(minutes=2),
        parse_duration,
        "a flush worker that has not answered a step of a flush (planning it, or writing its "
        "files) within this long is taken for hung: killed and restarted, the flush rolled "
        "back and retried",
    )
    failpoints: bool = setting(
        "tableserver.failpoints",
        False,
        parse_bool,
        "for tests only: take failpoints over RPC (memtier.failpoints), which stop the process "
        "at a named place on the write or flush path",
    )

    def __post_init__(self) -> None:
        for name in ("memory_budget", "block_max_bytes", "max_batch_rows"):
            if getattr(self, name) <= 0:
                raise InvalidArgumentError(f"TableServerConfig.{name} must be positive")
        for name in ("block_max_age", "flush_interval", "flush_timeout"):
            if getattr(self, name) <= timedelta(0):
                raise InvalidArgumentError(f"TableServerConfig.{name} must be positive")


# ======================================================================================
# Cluster
# ======================================================================================


def _file(text: str) -> str:
    """The path of a file that exists."""
    if not os.path.isfile(text):
        raise ValueError("no such file")
    return text


def _log_level(text: str) -> str:
    """A logging level's name."""
    name = text.strip().upper()
    if name not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError("not one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
    return name


def _pem(text: str) -> str:
    """PEM text, or the path of a file that exists."""
    return text if text.lstrip().startswith("-----BEGIN") else _file(text)


@dataclass(frozen=True)
class ClusterConfig:
    """Where a cluster's endpoints listen and how its processes watch each other."""

    host: str = setting(
        "cluster.host",
        "127.0.0.1",
        str,
        "the address Flight endpoints bind to (0.0.0.0: every interface, each process telling "
        "clients its Ray node's address); anything but loopback requires cluster.token and TLS",
    )
    token: str | None = setting(
        "cluster.token",
        None,
        str,
        "shared secret every call must carry (required when cluster.host is not loopback); clients "
        "send it in clear text only to loopback",
    )
    tls_certificate: str | None = setting(
        "cluster.tls.certificate",
        None,
        _file,
        "a PEM file: the certificate (chain) the master and table servers serve TLS with (their "
        "addresses become grpc+tls://; required when cluster.host is not loopback), with cluster.tls.key",
    )
    tls_key: str | None = setting(
        "cluster.tls.key",
        None,
        _file,
        "a PEM file: the private key of cluster.tls.certificate",
    )
    tls_ca: str | None = setting(
        "cluster.tls.ca",
        None,
        _pem,
        "a PEM file (or its text): the CA certificate(s) clients check the servers' certificates "
        "against, in every process that connects (default: the system's CAs)",
    )
    log_level: str = setting(
        "cluster.log-level",
        "WARNING",
        _log_level,
        "what the master, table servers and table-service actors log (DEBUG, INFO, WARNING, ...), "
        "each line with its time, into their Ray worker logs",
    )
    heartbeat_interval: timedelta = setting(
        "cluster.heartbeat-interval",
        timedelta(milliseconds=500),
        parse_duration,
        "how often a table server reports to the master (and does its periodic work)",
    )
    heartbeat_timeout: timedelta = setting(
        "cluster.heartbeat-timeout",
        timedelta(seconds=5),
        parse_duration,
        "a table server silent this long is dead: its buckets move to the others",
    )
    writer_lease: timedelta = setting(
        "cluster.writer-lease",
        timedelta(seconds=60),
        parse_duration,
        "an instant begun by a writer outside the tier (a Spark backfill) whose writer has not renewed it "
        "this long is rolled back: its writer is gone (a killed driver); at least three renewals "
        f"({WRITER_LEASE_RENEWAL.total_seconds():.0f} s apart)",
    )
    address: str | None = setting(
        "cluster.address",
        None,
        str,
        "the master's address (grpc://host:port, grpc+tls:// with TLS) that memtier.connect(), the memtier command and "
        "Spark's format(\"memtier\") use by default",
        env_aliases=("MEMTIER_ADDRESS",),
    )
    service_cpus: CpuSet = setting(
        "cluster.service-cpus",
        CpuSet("auto"),
        parse_cpus,
        "CPUs (e.g. 1 or 2-3,6) table-service actors and flush workers are pinned to on each "
        "node; auto: the highest-numbered quarter of a node's CPUs, at least one (one core of "
        "two), none on a 1-CPU node; none: no pinning",
    )
    server_cpus: CpuSet = setting(
        "cluster.server-cpus",
        CpuSet("auto"),
        parse_cpus,
        "CPUs table servers are pinned to; auto: every CPU cluster.service-cpus does not "
        "take; none: no pinning",
    )
    wal_path: str | None = setting(
        "cluster.wal-path",
        None,
        str,
        "where table servers keep their WALs (default: <path>/_memtier/wal); a device of its "
        "own keeps WAL syncs, and so acknowledgements, fast while flushes and compactions "
        "write to the tables' one",
    )

    def __post_init__(self) -> None:
        if (self.tls_certificate is None) != (self.tls_key is None):
            raise InvalidArgumentError("set both cluster.tls.certificate and cluster.tls.key, or neither")
        if self.writer_lease < 3 * WRITER_LEASE_RENEWAL:
            raise InvalidArgumentError(f"cluster.writer-lease must be at least {3 * WRITER_LEASE_RENEWAL.total_seconds():.0f}s "
                                       f"(three renewals), got {self.writer_lease.total_seconds():g}s")


# ======================================================================================
# Table services
# ======================================================================================


@dataclass(frozen=True)
class ServicesConfig:
    """The table-service pool and its policies (per table, ``client.set_services``
    overrides the cluster's values)."""

    workers: int = setting(
        "services.workers",
        1,
        int,
        "table-service actors (compaction, clustering, cleaning) start_local and start run",
    )
    cpus: float = setting(
        "services.cpus",
        1.0,
        float,
        "CPUs each table-service actor reserves from Ray (its own, never the table servers')",
    )
    check_interval: timedelta = setting(
        "services.check-interval",
        timedelta(seconds=2),
        parse_duration,
        "how often the master looks for due compactions and cleans (and expired tasks)",
    )
    compaction_log_files: int = setting(
        "services.compaction-log-files",
        4,
        int,
        "a file slice is compacted once it has this many log files",
    )
    compaction_log_fraction: float = setting(
        "services.compaction-log-fraction",
        0.2,
        float,
        "... or once its log files hold this fraction of its base file's bytes",
    )
    compaction_debt_limit: int = setting(
        "services.compaction-debt-limit",
        256 << 20,
        parse_size,
        "log bytes waiting for compaction beyond which a table's compactions go before "
        "any clustering or cleaning",
    )
    clean_retain_versions: int = setting(
        "services.clean-retain-versions",
        3,
        int,
        "file slices a clean keeps in each file group (the latest ones)",
    )
    clean_interval: timedelta = setting(
        "services.clean-interval",
        timedelta(minutes=1),
        parse_duration,
        "how often a table is cleaned (when it has anything to clean)",
    )
    metadata_compact_delta_commits: int = setting(
        "services.metadata-compact-max-delta-commits",
        10,
        int,
        "Hudi's metadata table (its files partition) is compacted once this many deltacommits "
        "completed since its last compaction (Hudi's hoodie.metadata.compact.max.delta.commits)",
    )
    lease_timeout: timedelta = setting(
        "services.lease-timeout",
        timedelta(minutes=10),
        parse_duration,
        "a read's lease on the file slices it reads lasts at most this long",
    )
    task_timeout: timedelta = setting(
        "services.task-timeout",
        timedelta(seconds=20),
        parse_duration,
        "a table-service task whose actor is silent this long is rolled back and run again",
    )

    def __post_init__(self) -> None:
        if self.workers < 0 or self.cpus < 0:
            raise InvalidArgumentError("services.workers and services.cpus cannot be negative")
        if min(self.compaction_log_files, self.clean_retain_versions, self.metadata_compact_delta_commits) < 1:
            raise InvalidArgumentError(
                "services.compaction-log-files, services.clean-retain-versions and "
                "services.metadata-compact-max-delta-commits must be at least 1"
            )
        if self.compaction_log_fraction <= 0:
            raise InvalidArgumentError("services.compaction-log-fraction must be positive")
        for name in ("check_interval", "clean_interval", "lease_timeout", "task_timeout"):
            if getattr(self, name) <= timedelta(0):
                raise InvalidArgumentError(f"ServicesConfig.{name} must be positive")


# ======================================================================================
# Catalog sync
# ======================================================================================


@dataclass(frozen=True)
class CatalogConfig:
    """Where the master registers tables for query engines (``memtier.catalog``)."""

    file_metastore: str | None = setting(
        "catalog.file-metastore",
        None,
        str,
        "a Trino file metastore directory (hive.metastore=file) the master registers every table "
        "and its partitions in, again whenever a commit writes a new partition",
    )
    hive_metastore: str | None = setting(
        "catalog.hive-metastore",
        None,
        str,
        "a Hive Metastore (thrift://host:port) the master registers every table and its partitions "
        "in, as Hudi's hive-sync does, again whenever a commit writes a new partition",
    )
    database: str = setting(
        "catalog.database",
        "default",
        str,
        "the metastore database (Trino schema) tables are registered in",
    )

    def __post_init__(self) -> None:
        if self.file_metastore is not None and self.hive_metastore is not None:
            raise InvalidArgumentError("set catalog.file-metastore or catalog.hive-metastore, not both")
        if self.hive_metastore is not None and not self.hive_metastore.startswith("thrift://"):
            raise InvalidArgumentError(
                f"catalog.hive-metastore {self.hive_metastore!r} must be a thrift://host:port URI")

    @property
    def metastore(self) -> str | None:
        """The metastore to sync into, if any: a directory or a ``thrift://`` URI."""
        return self.file_metastore if self.file_metastore is not None else self.hive_metastore


# ======================================================================================
# Table options
# ======================================================================================


class Evolution(enum.Enum):
    """Whether a write batch with new columns or wider types evolves the table's schema."""

    AUTO = "auto"  # it does (as Hudi's writers evolve a table by default)
    OFF = "off"  # it is refused whole, naming the columns


@dataclass(frozen=True)
class TableOptions:
    """A table's own options (``create_table(options=...)``, ``alter_table(options=...)``),
    kept by the master with the table; no environment variable sets them."""

    schema_evolution: Evolution = setting(
        "schema.evolution",
        Evolution.AUTO,
        Evolution,
        "auto: a write batch with new nullable columns or wider types evolves the table's schema "
        "(as Hudi's writers do); off: such a batch is refused whole, naming the columns",
    )

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> TableOptions:
        """``options`` checked whole: an unknown key or a bad value is refused, naming it."""
        known = {spec.key for spec, _ in settings(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidArgumentError(f"unknown table option(s) {unknown}; known: {sorted(known)}")
        return load(cls, options, environ={})


# ======================================================================================
# All settings
# ======================================================================================

#: Every config class, in the order the documentation lists them.
CONFIG_CLASSES: tuple[type, ...] = (
    ClusterConfig, TableServerConfig, WalConfig, ServicesConfig, CatalogConfig,
)


def settings(cls: type) -> list[tuple[Setting, Any]]:
    """The settings of config class ``cls`` with their defaults, in declaration order."""
    return [
        (field.metadata["setting"], field.default)
        for field in dataclasses.fields(cls)
        if "setting" in field.metadata
    ]


def check(options: Mapping[str, str]) -> None:
    """Refuse ``options`` that no config class knows or that do not parse (the error
    names the key), before they travel to processes that would fail on them later."""
    for cls in CONFIG_CLASSES:
        load(cls, options)
    prefixes = tuple({spec.key.split(".", 1)[0] + "." for cls in CONFIG_CLASSES for spec, _ in settings(cls)})
    unknown = sorted(k for k in options if not k.startswith(prefixes))
    if unknown:
        raise InvalidArgumentError(
            f"unknown config key(s) {unknown}; keys start with {', '.join(sorted(prefixes))}"
        )
