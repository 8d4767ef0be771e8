"""memtier.parallel.Prefetch: a call started on a pool while the caller works, or run in
the caller's thread when it was never started; its error reaches the caller either way."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from memtier.parallel import Prefetch


def test_a_started_prefetch_runs_on_the_pool_while_the_caller_works() -> None:
    released = threading.Event()

    def call() -> str:
        assert released.wait(5)  # the caller goes on meanwhile
        return threading.current_thread().name

    with ThreadPoolExecutor(1, thread_name_prefix="fetcher") as pool:
        fetch = Prefetch(call, pool)
        fetch.start()
        fetch.start()  # once only
        released.set()
        assert fetch.result().startswith("fetcher")


def test_a_prefetch_never_started_runs_in_the_callers_thread() -> None:
    with ThreadPoolExecutor(1) as pool:
        assert Prefetch(lambda: threading.current_thread().name, pool).result() == threading.current_thread().name


@pytest.mark.parametrize("started", [True, False])
def test_the_calls_error_reaches_the_caller(started: bool) -> None:
    def call() -> None:
        raise KeyError("gone")

    with ThreadPoolExecutor(1) as pool:
        fetch = Prefetch(call, pool)
        if started:
            fetch.start()
        with pytest.raises(KeyError, match="gone"):
            fetch.result()
