"""The table services: compaction, clustering and cleaning of Hudi tables, executed by a
pool of workers apart from the table servers, planned and committed by the master.

:mod:`~memtier.compaction.compact`, :mod:`~memtier.compaction.cluster` and
:mod:`~memtier.compaction.clean` plan and execute each service on a table;
:mod:`~memtier.compaction.worker` is one worker of the pool. The master's side (policies,
the task queue, leases) is :mod:`memtier.master.services`.
"""

#: The table services and the Hudi timeline action each one is.
SERVICE_ACTIONS = {"compaction": "compaction", "clustering": "replacecommit", "clean": "clean"}

__all__ = ["SERVICE_ACTIONS"]
