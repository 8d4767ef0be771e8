"""memtier: an in-memory, WAL-backed write tier over Apache Hudi tables.

    import memtier
    cluster = memtier.start_local("./memtier-data")   # embedded Ray runtime + cluster
    client = memtier.connect()                         # or connect("grpc://host:port")

Heavy parts (the Hudi layer, the cluster, Ray) are imported on first use, so
``import memtier`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtier.errors import MemtierError

if TYPE_CHECKING:
    from memtier.client import Client
    from memtier.cluster import LocalCluster, connect, start, start_local
    from memtier.hudi import HudiTable

__all__ = ["Client", "HudiTable", "LocalCluster", "MemtierError", "connect", "start", "start_local"]
__version__ = "0.1.0"

_LAZY = {
    "Client": "memtier.client",
    "HudiTable": "memtier.hudi",
    "LocalCluster": "memtier.cluster",
    "connect": "memtier.cluster",
    "start": "memtier.cluster",
    "start_local": "memtier.cluster",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memtier' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
