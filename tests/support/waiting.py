"""Waiting on a condition with a deadline (tests never sleep for a fixed time), and on a
call run on a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """``call()`` started on a thread; the thread, and a list that gets its result or
    the exception it raised."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as e:  # noqa: BLE001 - the caller looks at it
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome
