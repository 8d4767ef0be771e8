"""The table lock Apache Hudi's writers share under optimistic concurrency control.

Hudi's ``FileSystemBasedLockProvider`` (hudi-client-common, ``client/transaction/lock``)
locks a table by creating the file ``<base>/.hoodie/lock`` (``hoodie.write.lock.filesystem.path``
moves its folder) without overwriting, and unlocks by deleting it; whoever finds it there
waits and retries (``hoodie.write.lock.wait_time_ms``, 60 s by default). Its content (a
``LockInfo``: create time, thread, stack) is read for log messages only. A lock older than
``hoodie.write.lock.filesystem.expire`` minutes is deleted as expired (0, the default: never).
Hudi holds it while it makes an instant time (``SkewAdjustingTimeGenerator``, which sleeps
out the expected clock skew before unlocking) and around a commit's conflict check and
completion (``TransactionManager``).

:class:`TableLock` takes the same lock, so that the master's instant times and
completions are serialized with Hudi writers' of the same table. Its create is exclusive
(and not synced: a lock need not outlive a crash); Hudi's own check-then-create is not
atomic on every file system, a race Hudi's writers have among themselves too.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator

from memtier.errors import AlreadyExistsError, CommitFailedError
from memtier.io import FileIO, join

__all__ = ["LOCK_OWNER_PREFIX", "TableLock", "lock_path"]

#: What the lock file of a memtier master says (its ``lockThreadName``), so that a
#: restarted master knows a lock its dead predecessor left.
LOCK_OWNER_PREFIX = "memtier-master"


def lock_path(base_path: str) -> str:
    """Hudi's default lock file of the table at ``base_path``."""
    return join(base_path, ".hoodie", "lock")


class TableLock:
    """Hudi's file-system lock of one table, taken by ``owner``; reentrant for one thread
    at a time (the master takes it under the table's commit lock)."""

    def __init__(self, io: FileIO, base_path: str, owner: str, *, wait_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self._io = io
        self._path = lock_path(base_path)
        self._owner = f"{LOCK_OWNER_PREFIX} {owner}"
        self._wait_s = wait_s
        self._clock = clock
        self._sleep = sleep
        self._depth = 0

    def _content(self) -> bytes:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        return json.dumps({"lockCreateTime": created, "lockThreadName": self._owner, "lockStacksInfo": []}).encode()

    def holder(self) -> str | None:
        """Who holds the lock (its ``lockThreadName``, or the raw content), None if free."""
        try:
            raw = self._io.read_bytes(self._path).decode(errors="replace")
        except FileNotFoundError:
            return None
        try:
            return str(json.loads(raw).get("lockThreadName", raw))
        except (ValueError, AttributeError):
            return raw or "a Hudi writer"

    def acquire(self) -> None:
        """Take the lock, waiting up to ``wait_s`` for its holder; :class:`CommitFailedError`
        naming the holder when it does not let go."""
        deadline = self._clock() + self._wait_s
        pause = 0.002
        while True:
            try:
                self._io.write_marker(self._path, self._content(), exclusive=True)
                return
            except AlreadyExistsError:
                if self._clock() >= deadline:
                    raise CommitFailedError(
                        f"the table lock {self._path} is held by {self.holder()!r} for over {self._wait_s:.0f}s "
                        "(a Hudi writer's, shared under optimistic concurrency control); if its writer died, "
                        "delete the file"
                    ) from None
                self._sleep(pause)
                pause = min(pause * 2, 0.05)

    def release(self) -> None:
        """Let the lock go (only when this owner still holds it)."""
        if self.holder() == self._owner:
            self._io.delete(self._path)

    def clear_stale(self) -> bool:
        """Delete a lock a memtier master left (one master serves a table, so a lock of a
        master other than this one is a dead one's); True when one was deleted."""
        holder = self.holder()
        if holder is not None and holder.startswith(LOCK_OWNER_PREFIX) and holder != self._owner:
            self._io.delete(self._path)
            return True
        return False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The lock, for the body of a ``with`` (taken once however deep they nest)."""
        if self._depth == 0:
            self.acquire()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.release()
