"""One client per process and cluster: Spark's Python workers are reused across tasks,
so they keep their connection (and its decoded-file cache)."""

from __future__ import annotations

import threading

from memtier.client import Client
from memtier.spark.options import SourceOptions

__all__ = ["client_for"]

_CLIENTS: dict[tuple[str, str | None, str | None], Client] = {}
_LOCK = threading.Lock()


def client_for(options: SourceOptions) -> Client:
    """This process's client of the cluster the options name."""
    from memtier.cluster import connect  # connects over Flight; Ray is never imported here

    key = (options.address, options.token, options.tls_ca)
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = connect(options.address, token=options.token, tls_ca=options.tls_ca)
        return client
