"""Heartbeats of pending instants, as Apache Hudi's writers keep them.

A Hudi writer whose failed writes are cleaned lazily (``hoodie.cleaner.policy.failed.writes=LAZY``,
what optimistic concurrency control uses) keeps a file ``<base>/.hoodie/.heartbeat/<instant>``
for each instant it writes, rewritten every ``hoodie.client.heartbeat.interval_in_ms`` (60 s),
deleted when the instant completes (``HoodieHeartbeatClient``). Its content is empty; only
its modification time counts. Hudi's cleaner rolls back a pending write instant whose
heartbeat is missing or older than the interval times ``hoodie.client.heartbeat.tolerable.misses``
(2): ``BaseHoodieTableServiceClient.getInstantsToRollbackForLazyCleanPolicy`` with
``HoodieHeartbeatUtils.isHeartbeatExpired`` (no file reads as a heartbeat at time 0).

:class:`Heartbeats` keeps one for each instant the master begins, so that no Hudi writer
takes a live memtier instant for a failed one, and tells a live Hudi writer's instants
from the master's own (whose heartbeat files say :data:`OWN_HEARTBEAT`).
"""

from __future__ import annotations

from collections.abc import Callable

from memtier.io import FileIO, join

__all__ = ["HUDI_HEARTBEAT_EXPIRY_S", "OWN_HEARTBEAT", "Heartbeats", "heartbeat_path"]

#: When Hudi's writers take an instant's heartbeat for expired, with their defaults
#: (an interval of 60 s, 2 misses tolerated).
HUDI_HEARTBEAT_EXPIRY_S = 120.0
#: The content of the master's heartbeat files (Hudi's are empty and never read).
OWN_HEARTBEAT = b"memtier"


def heartbeat_path(base_path: str, instant: str) -> str:
    """The heartbeat file of ``instant`` of the table at ``base_path``."""
    return join(base_path, ".hoodie", ".heartbeat", instant)


class Heartbeats:
    """The heartbeat files of one table's instants that the master began."""

    def __init__(self, io: FileIO, base_path: str, clock: Callable[[], float], *, every_s: float = 10.0) -> None:
        self._io = io
        self._base = base_path
        self._clock = clock
        self._every_s = every_s
        self._beaten: dict[str, float] = {}

    def start(self, instant: str) -> None:
        """The instant is pending from now on: its heartbeat file written."""
        self._beat(instant)

    def _beat(self, instant: str) -> None:
        self._io.write_marker(heartbeat_path(self._base, instant), OWN_HEARTBEAT)
        self._beaten[instant] = self._clock()

    def stop(self, instant: str) -> None:
        """The instant completed or was rolled back: its heartbeat file deleted."""
        self._beaten.pop(instant, None)
        self._io.delete(heartbeat_path(self._base, instant))

    def renew(self) -> list[str]:
        """Rewrite the heartbeat files not rewritten for ``every_s`` (well within Hudi's
        expiry); the instants renewed."""
        now = self._clock()
        due = [instant for instant, beaten in self._beaten.items() if now - beaten >= self._every_s]
        for instant in due:
            self._beat(instant)
        return due

    def live_foreign(self, instant: str, now: float) -> bool:
        """Whether ``instant`` (not one of the master's) has a heartbeat another writer
        renewed within Hudi's expiry, at wall-clock ``now``."""
        path = heartbeat_path(self._base, instant)
        try:
            info = self._io.info(path)
            if self._io.read_bytes(path) == OWN_HEARTBEAT:
                return False
        except FileNotFoundError:
            return False
        return info.mtime is not None and now - info.mtime <= HUDI_HEARTBEAT_EXPIRY_S
