"""The memtier client: create tables, write (auto-commit or in transactions), read the
freshest rows (memory, then WAL, then files, merged per file group), look keys up.

A :class:`Client` talks to a master and to table servers through two small interfaces
(:mod:`memtier.client.api`) that the core objects (in-process) and their RPC proxies (any
process: no Ray needed) both offer, so the same client code runs in tests and against a
cluster. Its calls are split by job: catalog and routes (:mod:`~memtier.client.base`),
writes and transactions (:mod:`~memtier.client.writes`), reads (:mod:`~memtier.client.reads`),
flushes and table services (:mod:`~memtier.client.services`).
"""

from __future__ import annotations

from memtier.client.api import MasterAPI, ServerAPI, WriteResult
from memtier.client.reads import READ_MODES, ReadPlan, ReadRequest, Reads
from memtier.client.services import Services, wait_for_request
from memtier.client.writes import Transaction, Writes

__all__ = ["READ_MODES", "Client", "MasterAPI", "ReadPlan", "ReadRequest", "ServerAPI", "Transaction", "WriteResult",
           "wait_for_request"]


class Client(Writes, Reads, Services):
    """A connection to one memtier cluster; thread-safe."""
