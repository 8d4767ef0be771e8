"""The lease a writer outside the tier (a Spark backfill's driver) holds on the instant it
began: renewed on a thread until it ends, so the master rolls the instant back only when
the writer is gone (``cluster.writer-lease``)."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from memtier.config import WRITER_LEASE_RENEWAL
from memtier.errors import CommitFailedError, RpcError

__all__ = ["InstantLease"]

log = logging.getLogger(__name__)


class _Renews(Protocol):
    def renew_commit(self, table: str, instant: str) -> None: ...


class InstantLease:
    """Renews ``instant`` of ``table`` every :data:`~memtier.config.WRITER_LEASE_RENEWAL`
    until :meth:`stop`, or until the master says the instant is gone (rolled back: its
    commit then fails naming that)."""

    def __init__(self, master: _Renews, table: str, instant: str) -> None:
        self._master = master
        self.table = table
        self.instant = instant
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"memtier-lease-{instant}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(WRITER_LEASE_RENEWAL.total_seconds()):
            try:
                self._master.renew_commit(self.table, self.instant)
            except CommitFailedError as e:
                log.warning("the lease on %s of %s is lost: %s", self.instant, self.table, e)
                return
            except RpcError as e:  # the master restarts: tried again at the next renewal
                log.info("renewing the lease on %s of %s failed (%s); trying again", self.instant, self.table, e)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
