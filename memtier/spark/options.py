"""The options of ``format("memtier")``: which ones each use takes, checked before
anything runs, and the cluster they name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memtier.config import ClusterConfig, load
from memtier.errors import InvalidArgumentError

__all__ = ["BATCH_READ", "BACKFILL", "SINK", "STREAM_READ", "SourceOptions"]

COMMON = frozenset({"table", "address", "token", "tls_ca"})
BATCH_READ = COMMON | {"mode", "as_of", "start", "end", "pushdown"}
STREAM_READ = COMMON | {"starting"}
SINK = COMMON
BACKFILL = COMMON | {"operation"}
#: Options Spark itself adds to some uses (``save(path)``, ``checkpointLocation``).
_SPARK_OWN = frozenset({"path", "checkpointlocation"})


@dataclass(frozen=True)
class SourceOptions:
    """The options of one use of the source, validated; ``address``/``token``/``tls_ca``
    resolved (the option, else the cluster registered with :func:`memtier.spark.register`,
    else the configuration's ``cluster.address``/``cluster.token``/``cluster.tls.ca``:
    ``$MEMTIER_CLUSTER_ADDRESS``, ``$MEMTIER_CLUSTER_TOKEN``, ``$MEMTIER_CLUSTER_TLS_CA``, the
    last read where the client connects). ``tls_ca`` is a PEM file every executor has, or
    the PEM text itself."""

    table: str
    address: str
    token: str | None
    tls_ca: str | None
    values: Mapping[str, str]

    @classmethod
    def parse(
        cls, options: Mapping[str, str], allowed: frozenset[str], what: str,
        default_address: str | None = None, default_token: str | None = None,
        default_tls_ca: str | None = None,
    ) -> SourceOptions:
        given = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(given) - allowed - _SPARK_OWN)
        if unknown:
            raise InvalidArgumentError(
                f"unknown option(s) {unknown} for a memtier {what}; it takes {sorted(allowed)}"
            )
        table = given.get("table")
        if not table:
            raise InvalidArgumentError(f'a memtier {what} needs the option "table" (the table name)')
        address = given.get("address") or default_address
        registered = address == default_address
        token = given.get("token") or (default_token if registered else None)
        tls_ca = given.get("tls_ca") or (default_tls_ca if registered else None)
        if address is None:
            configured = load(ClusterConfig)
            address, token = configured.address, token or configured.token
        if address is None:
            raise InvalidArgumentError(
                f'a memtier {what} needs a cluster: the option "address" (grpc://host:port), '
                "memtier.spark.register(spark, address=...), or $MEMTIER_CLUSTER_ADDRESS"
            )
        return cls(table, address, token, tls_ca, given)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)
