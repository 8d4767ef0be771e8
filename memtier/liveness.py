"""Noticing that this process did not run for a while: stopped (SIGSTOP, a debugger), starved
of CPU, or on a host that froze. A process that was not running heard nothing meanwhile,
so silence it measured across the gap proves nothing about others (the master must not take
table servers for dead for heartbeats it could not receive)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["PauseWatch"]

log = logging.getLogger(__name__)

#: How often the watching thread looks at the clock.
TICK_S = 0.05


class PauseWatch:
    """Calls ``on_pause(seconds)`` once this process is seen running again after not
    running for more than ``threshold`` seconds (by a thread ticking every :data:`TICK_S`,
    or by whoever calls :meth:`check` first: call it before acting on measured silence)."""

    def __init__(self, threshold: float, on_pause: Callable[[float], None]) -> None:
        self._threshold = threshold
        self._on_pause = on_pause
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memtier-pause-watch", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Compare the clock with the last look; report a gap longer than the threshold."""
        with self._lock:
            now = time.monotonic()
            gap, self._last = now - self._last, now
            if gap > self._threshold:  # reported under the lock: before anyone acts on the gap
                self._on_pause(gap)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.check()
            except Exception:
                log.exception("reporting a pause of this process failed")

    def stop(self) -> None:
        self._stop.set()
