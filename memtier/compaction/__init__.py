"""The table services: compaction, clustering and cleaning of Hudi tables, executed by a
pool of workers apart from the table servers, planned and committed by the master.

:mod:`~memtier.compaction.compact`, :mod:`~memtier.compaction.cluster` and
:mod:`~memtier.compaction.clean` plan and execute each service on a table;
:mod:`~memtier.compaction.worker` is one worker of the pool. The master's side (policies,
the task queue, leases) is :mod:`memtier.master.services`.
"""

#: The table services.
SERVICES = ("compaction", "clustering", "clean")
#: The Hudi timeline action each one requests, by timeline layout: a clustering is a
#: ``replacecommit`` on layout 1 (table version 6), a ``clustering`` from layout 2 on.
_ACTIONS = {
    1: {"compaction": "compaction", "clustering": "replacecommit", "clean": "clean"},
    2: {"compaction": "compaction", "clustering": "clustering", "clean": "clean"},
}


def service_actions(layout: int) -> dict[str, str]:
    """Table service -> the action its instants request on a timeline of ``layout``."""
    return _ACTIONS[layout]


__all__ = ["SERVICES", "service_actions"]
