"""Failpoints: named places on the write and flush paths where a test stops a process, or
holds a thread, at the worst moment, to prove what survives it (a long GC pause, a stalled
disk or a frozen VM stops a process anywhere).

:func:`hit` costs one dictionary lookup while nothing is armed. Tests in the same process
:func:`arm` a point with any action (e.g. waiting on an event); a table server whose
``tableserver.failpoints`` setting is on takes :func:`arm` over RPC too, with the action
``stop``: at the point the process sends itself SIGSTOP, and goes on when a SIGCONT comes.
Each arming fires once.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from memtier.errors import InvalidArgumentError

__all__ = [
    "BEFORE_ACK",
    "BEFORE_APPEND",
    "BEFORE_FLUSH_COMMIT",
    "BEFORE_SYNC",
    "MDT_COMPACTION_REQUESTED",
    "MDT_COMPACTION_WRITTEN",
    "POINTS",
    "arm",
    "hit",
    "stop_process",
]

#: A write, validated and routed, before its rows are queued on the WAL.
BEFORE_APPEND = "write.before-append"
#: A group commit, its bytes written, before the sync that makes them durable.
BEFORE_SYNC = "wal.before-sync"
#: A write durable in the WAL and in memory, before its acknowledgement is returned.
BEFORE_ACK = "write.before-ack"
#: A flush, its files written, before the master is asked to complete its deltacommit.
BEFORE_FLUSH_COMMIT = "flush.before-commit"
#: A compaction of Hudi's metadata table, requested with its plan, before it runs.
MDT_COMPACTION_REQUESTED = "mdt-compaction.requested"
#: A compaction of Hudi's metadata table, its base file written, before it completes.
MDT_COMPACTION_WRITTEN = "mdt-compaction.written"
POINTS = (BEFORE_APPEND, BEFORE_SYNC, BEFORE_ACK, BEFORE_FLUSH_COMMIT, MDT_COMPACTION_REQUESTED,
          MDT_COMPACTION_WRITTEN)

log = logging.getLogger(__name__)

_armed: dict[str, Callable[[], None]] = {}


def stop_process() -> None:
    """Stop this process (SIGSTOP) until someone continues it (SIGCONT), here: the signal is
    sent to this thread, which takes it at once and stops the others with it (sent to the
    process, another thread may be picked to take it, and this one runs on meanwhile:
    seen letting a flush commit before the process stopped)."""
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def arm(point: str, action: Callable[[], None] | str) -> None:
    """Run ``action`` the next time ``point`` is hit (``"stop"``: :func:`stop_process`)."""
    if point not in POINTS:
        raise InvalidArgumentError(f"no failpoint {point!r}; there are {list(POINTS)}")
    if isinstance(action, str):
        if action != "stop":
            raise InvalidArgumentError(f"a failpoint's action is 'stop' or a callable, not {action!r}")
        action = stop_process
    _armed[point] = action


def hit(point: str) -> None:
    """Run, once, what is armed at ``point`` (nothing, mostly)."""
    if _armed:
        action = _armed.pop(point, None)
        if action is not None:
            log.warning("failpoint %s fires in thread %s", point, threading.current_thread().name)
            action()
